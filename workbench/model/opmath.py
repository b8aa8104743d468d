"""How a torch-free declaration names its math (workbench/specs/<op>_math.py, which may import
torch) without importing it: MathRefs, resolved by OpSpec's MathFields on first read.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class MathRef:
    """A function of an op's math module, by name: called, it imports the module and calls it."""
    module: str
    attr: str

    def resolve(self) -> Callable:
        module = importlib.import_module(self.module)
        if not hasattr(module, self.attr):
            raise AttributeError(f"{self.module} has no {self.attr}, which the op's declaration names")
        return getattr(module, self.attr)

    def __call__(self, *args, **kwargs):
        return self.resolve()(*args, **kwargs)


class MathField:
    """An OpSpec field of the op's math (a function, a dict of them, or MathRefs): a read gives the
    function itself, resolved once (the benchmark times it, torch.compile traces it); declared()
    gives the value as declared."""
    _NONE = object()

    def __init__(self, default=_NONE):
        self.default = default

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, spec, owner=None):
        if spec is None:  # the dataclass asks for the field's default: AttributeError for none
            if self.default is MathField._NONE:
                raise AttributeError(self.name)
            return self.default
        resolved = spec.__dict__.setdefault("_math_resolved", {})
        if self.name not in resolved:
            value = spec.__dict__[self.name]
            if isinstance(value, dict):
                value = {k: v.resolve() if isinstance(v, MathRef) else v for k, v in value.items()}
            resolved[self.name] = value.resolve() if isinstance(value, MathRef) else value
        return resolved[self.name]

    def __set__(self, spec, value):  # the dataclass's __init__ (a frozen OpSpec refuses any other set)
        spec.__dict__[self.name] = value


def declared(spec, field: str):
    """A math field of `spec` as its declaration gives it (a MathRef stays one), never imported."""
    return spec.__dict__[field]


class MathModule:
    """An op's math module by name, not imported: MathModule(name).reference is MathRef(name, "reference")."""

    def __init__(self, module: str):
        self.module = module

    def __getattr__(self, attr: str) -> MathRef:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return MathRef(self.module, attr)
