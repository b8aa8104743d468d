"""vector_add: c = a + b for 1-D a and b of the same length (the CUDA extension guide's first op;
math: vector_add_math.py)."""
from ..model.opspec import MathModule, OpSpec, Output, Tensor
from . import COURSE_PREFERENCE

MATH = MathModule(__name__ + "_math")

SPEC = OpSpec(
    name="vector_add",
    doc="c = a + b for 1-D a and b of the same length; da = db = dc",
    # The backward needs only the shapes: da = db = dc, whatever a and b hold.
    inputs=(Tensor("a", "n", read_by_backward=False), Tensor("b", "n", read_by_backward=False)),
    outputs=(Output("c", "n"),),
    reference=MATH.reference,
    eager=MATH.eager,
    flops=lambda d, direction: d.product("n") if direction == "fwd" else 0,
    # Tails of every length below a float4 (1, 7, 1031, 4099 % 4 = 3), one whole vector, and empty.
    check_sizes=((1,), (7,), (4,), (1031,), (4099,), (0,)),
    bench_sizes={"cuda": [(1 << 20,), (1 << 24,), (1 << 26,), (1 << 28,)], "cpu": [(1 << 16,), (1 << 20,)]},
    # torch's backward of a + b hands dc to both inputs as it is (no kernel, no bytes): a timed bwd
    # would compare our two copies with nothing. The backward is checked and gradchecked, not benchmarked.
    bench_directions=("fwd",),
    preferred=dict(COURSE_PREFERENCE),
)
