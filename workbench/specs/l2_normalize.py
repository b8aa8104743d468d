"""l2_normalize: each row of the last dimension divided by its L2 norm (F.normalize(x, dim=-1)), a
row family op (math: l2_normalize_math.py)."""
from ..model.opspec import Attr, MathModule, OpSpec, Output, Tensor
from . import COURSE_PREFERENCE

MATH = MathModule(__name__ + "_math")

SPEC = OpSpec(
    name="l2_normalize",
    doc="y = x / max(|x|_2, eps) over the last dimension; dx = dy / r - x * sum(dy * x) / r^3 (dy / eps if clamped)",
    inputs=(Tensor("x", "... n", grad_terms="n"),),   # each dx sums dy * x over its row
    # 4.0 clamps the short rows (a row's norm is about sqrt(n)): the check runs both branches
    attrs=(Attr("eps", float, 1e-12, min=0.0, samples=(1e-12, 4.0), doc="the smallest norm divided by; >= 0"),),
    outputs=(Output("y", "... n", terms="n"),),
    reference=MATH.reference,
    eager=MATH.eager,
    flops=lambda d, direction: {"fwd": 3, "bwd": 7}[direction] * d.product("... n"),
    # softmax's routes: odd n, warp rows, block rows, rows past the registers, 3-D and 1-D x, empty sizes
    check_sizes=((1, 1), (3, 5), (4, 127), (2, 3, 8), (33, 512), (16, 1000), (3, 4097), (2, 33000), (257,),
                 (0, 16), (6, 0)),
    bench_directions=("fwd", "bwd", "fwd+bwd"),
    preferred=dict(COURSE_PREFERENCE),
)
