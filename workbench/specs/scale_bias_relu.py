"""scale_bias_relu: y = relu(x * scale + bias), bias over the last dimension, scale a float attribute
(math: scale_bias_relu_math.py)."""
from ..model.opspec import Attr, Layer, MathModule, OpSpec, Output, Tensor
from . import COURSE_PREFERENCE

MATH = MathModule(__name__ + "_math")

SPEC = OpSpec(
    name="scale_bias_relu",
    doc="y = relu(x * scale + bias), bias over the last dimension, scale a float attribute",
    inputs=(Tensor("x", "... n"), Tensor("bias", "n", grad_terms="...", scale=0.5)),  # dbias sums every row
    attrs=(Attr("scale", float, samples=(2.0, -0.75, 0.5), doc="multiplies x before the bias; not differentiable"),),
    outputs=(Output("y", "... n"),),
    reference=MATH.reference,
    eager=MATH.eager,
    flops=lambda d, direction: {"fwd": 3, "bwd": 4}[direction] * d.product("... n"),
    check_sizes=((1, 1), (3, 5), (127, 129), (64, 1000), (33, 4099), (2, 3, 7), (257,), (4, 8), (0, 16), (6, 0)),
    preferred=dict(COURSE_PREFERENCE),
    layer=Layer("ScaleBiasReLU", size_args={"features": "n"}),
)
