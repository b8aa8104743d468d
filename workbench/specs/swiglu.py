"""swiglu: y = silu(a) * b, for a and b of the same shape (a SwiGLU MLP's gate)."""
from __future__ import annotations

import torch.nn.functional as F

from ..opspec import OpSpec, Output, Tensor

SPEC = OpSpec(
    name="swiglu",
    doc="y = silu(a) * b = a * sigmoid(a) * b, for a and b of the same shape",
    inputs=(Tensor("a", "..."), Tensor("b", "...")),
    outputs=(Output("y", "..."),),
    reference=lambda a, b: F.silu(a.double()) * b.double(),
    eager=lambda a, b: F.silu(a) * b,
    flops=lambda d, direction: {"fwd": 5, "bwd": 10}[direction] * d.product("..."),  # exp, rcp: 1 each
    # Tails of every length below a vector of 8, a 0-dim pair, empty tensors.
    check_sizes=((), (1,), (7,), (3, 5), (127, 129), (33, 4099), (2, 3, 7), (0,), (5, 0)),
)
