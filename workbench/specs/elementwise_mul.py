"""elementwise_mul: y = a * b, for a and b of the same shape (no broadcasting; math: elementwise_mul_math.py)."""
from ..model.opspec import MathModule, OpSpec, Output, Tensor
from . import COURSE_PREFERENCE

MATH = MathModule(__name__ + "_math")

SPEC = OpSpec(
    name="elementwise_mul",
    doc="y = a * b, for a and b of the same shape",
    inputs=(Tensor("a", "..."), Tensor("b", "...")),
    outputs=(Output("y", "..."),),
    reference=MATH.reference,
    eager=MATH.eager,
    flops=lambda d, direction: {"fwd": 1, "bwd": 2}[direction] * d.product("..."),
    # Odd sizes leave tails of every length below a vector; () is a 0-dim pair; (0,) and (5, 0) empty.
    check_sizes=((), (1,), (7,), (3, 5), (127, 129), (33, 4099), (2, 3, 7), (1, 1031), (0,), (5, 0)),
    preferred=dict(COURSE_PREFERENCE),
)
