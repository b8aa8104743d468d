"""rmsnorm: y = x / sqrt(mean(x^2 over the last dim) + eps) * weight, three ways: the PyTorch formula,
a fused Triton kernel and CUDA C++ (a scalar rung and a vectorized one), beside F.rms_norm and
torch.compile. Math: rmsnorm_math.py."""
from ..model.opspec import Attr, Layer, MathModule, OpSpec, Output, Tensor

MATH = MathModule(__name__ + "_math")

# The three ways in the lab's order, then the CUDA C++ rungs.
LADDER = ("pytorch", "triton", "scalar", "vectorized")

# The lab's shape first; then a sweep over h at the same 2^27 elements (256 MiB of bf16 x).
_SWEEP = [(1 << 27 >> k, 1 << k) for k in (9, 10, 11, 13, 14)]

SPEC = OpSpec(
    name="rmsnorm",
    doc="y = x / sqrt(mean(x^2 over the last dim) + eps) * weight; dx and dweight (a sum over every row)",
    inputs=(Tensor("x", "... h"),
            Tensor("weight", "h", grad_terms="...")),   # dweight sums every row
    outputs=(Output("y", "... h", terms="h"),),          # each y depends on a sum over its row
    attrs=(Attr("eps", float, 1e-6, min=0.0, samples=(1e-6, 1e-2),
                doc="added to the mean of squares; >= 0 (0 gives NaN for a row of zeros)"),),
    reference=MATH.reference,
    eager=MATH.eager,
    baselines={"F.rms_norm": MATH.f_rms_norm},
    # forward: square, add, scale, scale per element; backward about twice that
    flops=lambda d, direction: {"fwd": 4, "bwd": 8}[direction] * d.product("... h"),
    # h = 1, 3, 127, 4097 (odd: no 16-byte vectors), short rows for the warp-per-row path, long
    # ones past what a block keeps in registers (a row of 2^20), 3-D x, 1-D x, empty sizes.
    check_sizes=((1, 1), (4, 3), (5, 127), (3, 4097), (2, 3, 8), (64, 1000), (33, 512), (257,), (9, 2048),
                 (1, 1 << 20), (0, 16), (6, 0)),
    bench_sizes={"cuda": [(8, 4096, 4096), *_SWEEP], "cpu": [(64, 1024), (256, 4096)]},
    bench_directions=("fwd", "bwd", "fwd+bwd"),
    preferred={("cuda", d): ["vectorized", "scalar"] for d in ("float32", "float16", "bfloat16")}
    | {("cuda", "float64"): ["scalar"], ("cpu", None): ["cpu"]},
    ladder=LADDER,
    layer=Layer("RMSNorm", size_args={"features": "h"}, init=MATH.layer_init),
)
