"""nn.Modules over the workbench ops."""
from __future__ import annotations

import torch

from . import loader, registry


def default_variant(op: str, device: torch.device, dtype: torch.dtype) -> str:
    """The op's preferred variant for this device and dtype among those present in kernels/<op>/."""
    spec = registry.spec(op)
    present = registry.variant_sources(op)
    choices = spec.preferred.get((device.type, dtype)) or spec.preferred.get((device.type, None)) or []
    for name in choices:
        if name in present:
            return name
    raise ValueError(f"{op}: no variant for {device.type} tensors of dtype {dtype}; variants: {list(present)}")


class BiasGELU(torch.nn.Module):
    """y = GELU_tanh(x + bias) with a learnable bias of `features` elements, through
    torch.ops.workbench.bias_gelu. `variant=None` picks one for the parameter's device and dtype
    (cpu on CPU; vec4, half or scalar on CUDA). The variant is loaded when the module is built or
    moved (.to / .cuda / .half), never inside forward, so forward compiles with fullgraph=True."""

    def __init__(self, features: int, *, variant: str | None = None, device=None, dtype=None):
        super().__init__()
        if isinstance(features, bool) or not isinstance(features, int) or features < 1:
            raise ValueError(f"BiasGELU: features must be a positive int; got {features!r}")
        self.features = features
        self.variant = variant
        self.bias = torch.nn.Parameter(torch.empty(features, device=device, dtype=dtype))
        self.reset_parameters()
        self._resolve()

    def reset_parameters(self) -> None:
        # Small random values rather than zeros, so a fresh module already exercises the bias path.
        torch.nn.init.uniform_(self.bias, -0.1, 0.1)

    def _resolve(self) -> None:
        self._variant = self.variant or default_variant("bias_gelu", self.bias.device, self.bias.dtype)
        if ("bias_gelu", self._variant) not in loader._current:
            loader.load("bias_gelu", self._variant)

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        self._resolve()
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.workbench.bias_gelu(x, self.bias, self._variant)

    def extra_repr(self) -> str:
        return f"features={self.features}, variant={self.variant or 'auto: ' + self._variant}"
