"""nn.Modules over the workbench ops, one per op whose spec declares a layer (wb.nn.BiasGELU, ...).

A layer's input is the op's first input; the op's other inputs are its learnable parameters,
sized by the constructor arguments the spec's Layer names; the op's attributes are keyword
arguments. The variant is resolved (and loaded) when the layer is built or moved (.to, .cuda,
.half), never inside forward, so forward compiles with torch.compile(fullgraph=True).
"""
from __future__ import annotations

import torch

from . import loader
from ..model import registry


def default_variant(op: str, device: torch.device, dtype: torch.dtype) -> str:
    """The op's preferred variant for this device and dtype among those present in kernels/<op>/."""
    r = registry.resolve(op)
    spec, present = r.spec, r.variant_files
    dname = str(dtype).replace("torch.", "")
    choices = spec.preferred.get((device.type, dname)) or spec.preferred.get((device.type, None)) or []
    for name in choices:
        if name in present:
            return name
    raise ValueError(f"{op}: no variant for {device.type} tensors of dtype {dname}; variants: {list(present)}")


class OpLayer(torch.nn.Module):
    """Base of the generated layers; `op` is set on each subclass."""
    op: str = ""

    def __init__(self, *sizes, variant: str | None = None, device=None, dtype=None, **attrs):
        super().__init__()
        spec = registry.spec(self.op)
        layer = spec.layer
        args = list(layer.size_args)
        if len(sizes) > len(args):
            raise TypeError(f"{type(self).__name__} takes {len(args)} size argument(s) ({', '.join(args)}); "
                            f"got {len(sizes)}")
        given = dict(zip(args, sizes))
        for a in args[len(sizes):]:
            if a not in attrs:
                raise TypeError(f"{type(self).__name__}: missing size argument {a}")
            given[a] = attrs.pop(a)
        for a, v in given.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{type(self).__name__}: {a} must be a positive int; got {v!r}")
        _, values = spec.call_args((None,) * len(spec.inputs), attrs)
        self.attrs = spec.attr_dict(values)
        self.sizes = given
        self.variant = variant
        dims = {layer.size_args[a]: v for a, v in given.items()}
        # Everything forward needs, resolved now (the op in _resolve): forward must trace to nothing
        # but the op call.
        self._params = tuple(t.name for t in spec.inputs[1:])
        self._attr_values = tuple(self.attrs.values())
        for t in spec.inputs[1:]:
            shape = tuple(dims[n] for n in t.pattern.tokens)
            self.register_parameter(t.name, torch.nn.Parameter(torch.empty(shape, device=device, dtype=dtype)))
        self.reset_parameters()
        self._resolve()

    def reset_parameters(self) -> None:
        layer = registry.spec(self.op).layer
        with torch.no_grad():
            params = dict(self.named_parameters())
            if layer.init is not None:
                layer.init(params)
            else:
                for p in params.values():
                    torch.nn.init.normal_(p, std=0.1)

    def _resolve(self) -> None:
        p = next(self.parameters())
        self._variant = self.variant or default_variant(self.op, p.device, p.dtype)
        kernel = loader.get(self.op, self._variant)
        # A C++ variant is called through the harness's op by name (its newest build serves); a
        # Python variant has no harness entry: its Kernel, the build current now, is called.
        python = isinstance(kernel, loader.PythonKernel)
        self._kernel = kernel if python else None
        self._op = None if python else getattr(torch.ops.workbench, self.op)

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        self._resolve()
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = [getattr(self, name) for name in self._params]
        if self._kernel is not None:
            return self._kernel(x, *params, *self._attr_values)
        return self._op(x, *params, *self._attr_values, self._variant)

    def extra_repr(self) -> str:
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        attrs = "".join(f", {k}={v}" for k, v in self.attrs.items())
        return f"{sizes}{attrs}, variant={self.variant or 'auto: ' + self._variant}"


_layers: dict[str, type] = {}


def layers() -> dict[str, str]:
    """Layer class name -> op, for every op whose spec declares one."""
    out = {}
    for op in registry.ops():
        layer = registry.spec(op).layer
        if layer is not None:
            out[layer.cls] = op
    return out


def __getattr__(name: str):
    op = layers().get(name)
    if op is None:
        raise AttributeError(f"module 'workbench.run.nn' has no attribute {name!r}; layers: {sorted(layers())}")
    if name not in _layers:
        doc = f"{registry.spec(op).doc}, as a layer (torch.ops.workbench.{op})."
        _layers[name] = type(name, (OpLayer,), {"op": op, "__doc__": doc, "__module__": __name__})
    return _layers[name]


def __dir__():
    return sorted([*globals(), *layers()])
