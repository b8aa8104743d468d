"""How a declaration names its math without importing it: an op's declaration (workbench/specs/<op>.py)
is torch-free data, and its math (workbench/specs/<op>_math.py) may import torch. The declaration
holds MathRefs (MathModule("workbench.specs.<op>_math").reference), and OpSpec's math fields
(MathField) resolve them to the functions on first read, so a process that never reads them (the NumPy
front end, export) never imports the math.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class MathRef:
    """A function of an op's math module, by name: called, it imports the module (which may import
    torch) and calls the function. A declaration holds these instead of the functions, so reading
    it imports nothing but this model."""
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
    """An OpSpec field of the op's math: it holds a function (or a dict of them), or a MathRef; a
    read gives the function, importing a MathRef's module on the first read (then kept apart from
    the declared value, which declared() returns), so the benchmark times and torch.compile traces
    the function itself, not the reference to it."""
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
