"""bias_gelu: y = GELU_tanh(x + bias), bias broadcast over the last dimension (math: bias_gelu_math.py)."""
from ..model.opspec import Layer, MathModule, OpSpec, Output, Tensor
from . import COURSE_PREFERENCE

MATH = MathModule(__name__ + "_math")

SPEC = OpSpec(
    name="bias_gelu",
    doc="y = GELU_tanh(x + bias), bias broadcast over the last dimension",
    inputs=(Tensor("x", "... n", scale=2.0),           # spread over where GELU bends, and beyond
            Tensor("bias", "n", grad_terms="...", scale=0.5)),  # dbias sums every row
    outputs=(Output("y", "... n"),),
    reference=MATH.reference,
    eager=MATH.eager,
    flops=lambda d, direction: {"fwd": 12, "bwd": 22}[direction] * d.product("... n"),
    double_backward=MATH.double_backward,
    check_sizes=((1, 1), (3, 5), (127, 129), (64, 1000), (33, 4099), (2, 3, 7), (257,), (4, 8), (0, 16), (6, 0)),
    preferred=dict(COURSE_PREFERENCE),
    layer=Layer("BiasGELU", size_args={"features": "n"}, init=MATH.layer_init),  # wb.nn.BiasGELU(features)
)
