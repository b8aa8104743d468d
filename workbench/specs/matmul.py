"""matmul: y = a @ b for 2-D a [m, k] and b [k, n]; the float32 GEMM ladder on CUDA cores, from one
thread per output to warp tiling (after siboehm/SGEMM_CUDA), then tensor cores for fp16/bf16: mma.sync,
then Hopper's own path (sm_90a: TMA, wgmma, warp specialisation, a persistent grid). Math: matmul_math.py."""
from ..model.opspec import ErrorCase, MathModule, OpSpec, Output, Tensor

MATH = MathModule(__name__ + "_math")

# The rungs in teaching order; each file opens with what it changes over the one before and the
# speedup siboehm/SGEMM_CUDA measured for that step on an A6000 (percent of cuBLAS at 4096^3); the
# Hopper rungs after tensor_core cite pranjalssh/fast.cu's steps on an H100 instead. Those three are
# built for sm_90a and run on compute capability 9.0 only: elsewhere their launchers decline by name
# and the benchmark skips them (workbench/build/toolchain.py unmet_arch), so `preferred` keeps tensor_core.
LADDER = ("naive", "coalesced", "smem_tiling", "blocktile_1d", "blocktile_2d", "vectorized", "warptile",
          "tensor_core", "wgmma_tma", "warp_specialized", "persistent")


SPEC = OpSpec(
    name="matmul",
    doc="y = a @ b for a [m, k], b [k, n]; da = dy @ b^T, db = a^T @ dy (the same GEMM, operands transposed in place)",
    inputs=(Tensor("a", "m k", grad_terms="n"),     # da[i, p] sums dy[i, j] b[p, j] over n
            Tensor("b", "k n", grad_terms="m")),    # db[p, j] sums a[i, p] dy[i, j] over m
    outputs=(Output("y", "m n", terms="k"),),
    size="m k n",                                   # (127, 3, 1000): a [127, 3] @ b [3, 1000]
    reference=MATH.reference,
    eager=MATH.eager,
    # a multiply and an add per term; the backward is two GEMMs of the forward's size
    flops=lambda d, direction: {"fwd": 2, "bwd": 4}[direction] * d.product("m k n"),
    # 1, 3, 127, 1000 and 4095-long dims in each position (tails of every tile and vector width),
    # k = 1 (an outer product), and an empty m, k (zeros: a sum over nothing) and n. The first
    # three non-empty sizes stay tiny: gradcheck's finite differences run one forward per input
    # element. Every size is under 2e8 flops forward, for the CPU's check matrix.
    check_sizes=((1, 1, 1), (3, 5, 7), (127, 129, 131), (6, 1, 9), (64, 1000, 33), (1000, 3, 127), (257, 4095, 65),
                 (4095, 33, 17), (0, 5, 7), (5, 0, 7), (5, 7, 0)),
    bench_sizes={"cuda": [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
                          (8192, 8192, 8192), (16384, 4096, 4096), (16384, 4096, 11008)],
                 "cpu": [(128, 128, 128), (256, 512, 256), (512, 512, 512)]},
    error_cases=(ErrorCase("a with 3 dims", MATH.rank3_a, ValueError, "a must have 2 dimensions"),
                 ErrorCase("b 1-D", MATH.vector_b, ValueError, "b must have shape [7, n]")),
    preferred={("cuda", "float32"): ["warptile", "vectorized", "blocktile_2d", "naive"],
               ("cuda", "float64"): ["naive"],
               ("cuda", "float16"): ["tensor_core"],
               ("cuda", "bfloat16"): ["tensor_core"],
               ("cpu", None): ["cpu"]},
    ladder=LADDER,
    # FLOPs decide: TFLOP/s against cuBLAS's rate per dtype, TF32 off (benchmark.py)
    compute_bound=True,
    # The GPU script times the forward: the backward is two GEMMs of the same kernels (the naive
    # rung alone would spend minutes on it at 8192^3); the notebook times fwd+bwd where it wants to.
    bench_directions=("fwd",),
)
