"""softmax over the last dimension, forward and backward: the row family's first op (math:
softmax_math.py)."""
from ..model.opspec import MathModule, OpSpec, Output, Tensor
from . import COURSE_PREFERENCE

MATH = MathModule(__name__ + "_math")

SPEC = OpSpec(
    name="softmax",
    doc="y = exp(x - max) / sum(exp(x - max)) over the last dimension; dx = y * (dy - sum(dy * y))",
    inputs=(Tensor("x", "... n", grad_terms="n"),),   # each dx sums dy * y over its row
    outputs=(Output("y", "... n", terms="n"),),        # each y divides by a sum over its row
    reference=MATH.reference,
    eager=MATH.eager,
    # forward: subtract, exp, add, exp, scale (the write recomputes exp); backward: max, exp, two sums, exp, 3
    flops=lambda d, direction: {"fwd": 5, "bwd": 9}[direction] * d.product("... n"),
    # n = 1, 5, 127, 4097 (odd: 1 element per access), warp rows (512), block rows (1000, 16384),
    # rows past the registers (33000: re-read), 3-D and 1-D x, empty sizes.
    check_sizes=((1, 1), (3, 5), (4, 127), (2, 3, 8), (33, 512), (16, 1000), (3, 4097), (2, 16384), (2, 33000),
                 (257,), (0, 16), (6, 0)),
    bench_directions=("fwd", "bwd", "fwd+bwd"),
    preferred=dict(COURSE_PREFERENCE),
)
