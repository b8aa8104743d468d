"""What an op's Python spec provides to check, gradcheck and bench."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence


@dataclass(frozen=True)
class OpSpec:
    name: str
    # float64 reference: (*inputs) -> output, and (grad_output, *inputs) -> grads of the differentiable inputs
    reference: Callable
    reference_backward: Callable
    # PyTorch eager implementation of the same math (the baseline bench compares against)
    eager: Callable
    # (shape, dtype, device, generator) -> inputs; the shape is the main input's
    make_inputs: Callable
    # Fake (meta) implementations and autograd formula for torch.ops.workbench.<name>
    register_python: Callable[[], None]
    # Shapes the correctness matrix runs: odd sizes, empty tensors, ranks 1-3
    check_shapes: Sequence[tuple[int, ...]]
    # Bytes the op must move and flops it must do, for GB/s: (shape, dtype, direction) -> int
    bytes_moved: Callable[[tuple, object, str], int]
    flops: Callable[[tuple, str], int]
    # Names of the differentiable inputs, in order (case labels: "backward dx", "grad bias", ...)
    input_names: Sequence[str] = ("x",)
    # How many terms each gradient sums per element, (shape) -> tuple (1 for element-wise): a float
    # sum of n terms carries ~sqrt(n) times the rounding error of one, so its atol scales with it
    grad_terms: Callable[[tuple], tuple] = lambda shape: ()
    # Sizes a benchmark sweeps by default: device type -> shapes
    bench_shapes: dict = field(default_factory=dict)
    # Which variant to use by default for (device type, dtype): names in order of preference
    preferred: dict = field(default_factory=dict)
