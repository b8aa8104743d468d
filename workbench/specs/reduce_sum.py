"""reduce_sum: y = x summed over its last dimension (a 1-D x gives its 0-dim total); the reduction
ladder, from the textbook's first kernel to the read-bandwidth ceiling (math: reduce_sum_math.py)."""
from ..model.opspec import MathModule, OpSpec, Output, Tensor

MATH = MathModule(__name__ + "_math")

# Every rung (and the cpu variant) is deterministic; from vec_grid_stride on, the order of the
# additions depends on n alone, whatever grid the launcher picks.
LADDER = ("interleaved_divergent", "interleaved_conflicts", "sequential", "first_add", "warp_shuffle",
          "vec_grid_stride", "fast")

SPEC = OpSpec(
    name="reduce_sum",
    doc="y = x summed over its last dimension; dx = dy broadcast over it",
    inputs=(Tensor("x", "... n", read_by_backward=False),),  # the backward needs only x's shape
    outputs=(Output("y", "...", terms="n"),),
    reference=MATH.reference,
    eager=MATH.eager,
    flops=lambda d, direction: d.product("... n") if direction == "fwd" else 0,
    # Rows shorter and longer than one block's 256/512 values, than a warp's 1024 floats, than a
    # 64 KiB chunk (two and three passes for the textbook rungs); odd n for unaligned tails; 1-D
    # totals; an empty last dim (zeros) and empty leading dims.
    check_sizes=((1,), (7,), (3, 5), (127, 129), (64, 1000), (33, 4099), (2, 3, 7), (3, 40001), (70001,),
                 (513,), (0,), (0, 16), (6, 0)),
    bench_sizes={"cuda": [(1 << 28,), (16384, 16384), (65536, 1024), (4096, 4096), (1 << 20,)],
                 "cpu": [(1 << 20,), (256, 4096)]},
    preferred={("cuda", d): ["fast", "vec_grid_stride"] for d in ("float32", "float16", "bfloat16", "float64")}
    | {("cpu", None): ["cpu"]},
    ladder=LADDER,
    # torch.sum's backward is dy.expand(...): a view, no kernel and no bytes, so a timed bwd would
    # compare our dx write with nothing. The backward is checked and gradchecked, not benchmarked.
    bench_directions=("fwd",),
)
