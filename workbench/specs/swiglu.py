"""swiglu: y = silu(a) * b, for a and b of the same shape (a SwiGLU MLP's gate; math: swiglu_math.py)."""
from ..model.opspec import MathModule, OpSpec, Output, Tensor

MATH = MathModule(__name__ + "_math")

SPEC = OpSpec(
    name="swiglu",
    doc="y = silu(a) * b = a * sigmoid(a) * b, for a and b of the same shape",
    inputs=(Tensor("a", "..."), Tensor("b", "...")),
    outputs=(Output("y", "..."),),
    reference=MATH.reference,
    eager=MATH.eager,
    flops=lambda d, direction: {"fwd": 5, "bwd": 10}[direction] * d.product("..."),  # exp, rcp: 1 each
    # Tails of every length below a vector of 8, a 0-dim pair, empty tensors.
    check_sizes=((), (1,), (7,), (3, 5), (127, 129), (33, 4099), (2, 3, 7), (0,), (5, 0)),
)
