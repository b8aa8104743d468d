"""Dims patterns, the shape rule and the call check: the Python twin of bindings/harness/op_decl.cpp
and bindings/harness/call_check.h.

A pattern names each dimension of a tensor: "... n" is any number of leading dims, then n; "m k" is
exactly two. A name bound by one tensor must match wherever it appears again, and "..." is one
group of dims shared by every tensor that uses it. check_call is the whole check of a call (devices,
dtypes, shapes, attributes) for any array type: the fake implementations (torch tensors, symbolic
sizes under torch.compile), the NumPy front end and an exported package's __init__ (which carries a
copy of this file) run it. The C++ harness checks real calls with the same rule and the same words
(a test holds the two equal). Imports nothing but the standard library.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

ELLIPSIS = "..."


@dataclass(frozen=True)
class DimPattern:
    text: str
    tokens: tuple[str, ...]

    @staticmethod
    def parse(text: str) -> "DimPattern":
        if not isinstance(text, str):
            raise TypeError(f"a dims pattern is a string such as '... n'; got {text!r}")
        tokens = tuple(text.split())
        if tokens.count(ELLIPSIS) > 1:
            raise ValueError(f"dims pattern {text!r} has two '...'")
        for t in tokens:
            if t != ELLIPSIS and not t.isdigit() and not t.isidentifier():
                raise ValueError(f"dims pattern {text!r}: {t!r} is neither a name, a number nor '...'")
        return DimPattern(text, tokens)

    @property
    def ellipsis(self) -> int:
        return self.tokens.index(ELLIPSIS) if ELLIPSIS in self.tokens else -1

    @property
    def fixed(self) -> int:
        return len(self.tokens) - (1 if ELLIPSIS in self.tokens else 0)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t for t in self.tokens if not t.isdigit())

    def display(self) -> str:
        return "[" + ", ".join(self.tokens) + "]"


def shape_text(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


@dataclass
class ShapeBinder:
    """Binds tensor shapes to patterns, one tensor after another (inputs first)."""
    values: dict = field(default_factory=dict)   # "n" -> (7,), "..." -> (4, 7)
    origin: dict = field(default_factory=dict)   # "n" -> "x"

    def bind(self, arg: str, pattern: DimPattern, shape) -> str:
        """"" if `shape` fits `pattern` (its new names are then bound), else the message."""
        shape = tuple(shape)
        nd, fixed = len(shape), pattern.fixed
        known = any(t.isdigit() or t in self.values for t in pattern.tokens)
        got = "a 0-dim tensor" if nd == 0 else "shape " + shape_text(shape)

        def shape_error() -> str:
            expected, origins, listed = [], [], set()
            for t in pattern.tokens:
                if t.isdigit() or t not in self.values:
                    expected.append(t)
                    continue
                expected += [str(v) for v in self.values[t]]
                if t not in listed:
                    listed.add(t)
                    value = shape_text(self.values[t]) if t == ELLIPSIS else str(self.values[t][0])
                    origins.append(f"{t} = {value} from {self.origin[t]}")
            with_ = f" with {', '.join(origins)}" if origins else ""
            return f"{arg} must have shape [{', '.join(expected)}] ({pattern.display()}{with_}); got {got}"

        has_ellipsis = ELLIPSIS in pattern.tokens
        if not (nd >= fixed if has_ellipsis else nd == fixed):
            if known:
                return shape_error()
            return (f"{arg} must have {'at least ' if has_ellipsis else ''}{fixed} dimension"
                    f"{'' if fixed == 1 else 's'} ({pattern.display()}); got {got}")
        fresh, d = {}, 0
        for t in pattern.tokens:
            if t == ELLIPSIS:
                n = nd - fixed
                v, d = shape[d:d + n], d + n
            else:
                v, d = (shape[d],), d + 1
            if t.isdigit():
                if v[0] != int(t):
                    return shape_error()
                continue
            if t in self.values:
                if tuple(self.values[t]) != v:
                    return shape_error()
                continue
            if t in fresh and fresh[t] != v:
                return shape_error()
            fresh[t] = v
        for t, v in fresh.items():
            self.values[t] = v
            self.origin[t] = arg
        return ""

    def shape_of(self, pattern: DimPattern) -> tuple:
        out: list = []
        for t in pattern.tokens:
            if t.isdigit():
                out.append(int(t))
            elif t not in self.values:
                raise KeyError(f"dim {t!r} of {pattern.text!r} is bound by no input")
            else:
                out += list(self.values[t])
        return tuple(out)

    def product(self, expression: str) -> int:
        """The product of the named dims in `expression` ("n", "... n", "" for 1)."""
        total = 1
        for t in expression.split():
            total *= int(t) if t.isdigit() else math.prod(self.values[t])
        return total


MAX_DIMS = 8            # WB_MAX_DIMS: a tensor of more dims is refused


def attr_problem(name: str, kind: str, v, lo, hi, finite: bool) -> str:
    """The harness's complaint about an attribute value of the right kind ("" if none). kind is
    "float", "int" or "bool"; lo/hi None for no bound."""
    if kind == "float" and finite and not math.isfinite(v):
        return f"{name} must be a finite number; got {v:g}"
    shown = f"{v:g}" if kind == "float" else str(int(v))
    if lo is not None and v < lo:
        return f"{name} must be >= {lo:g}; got {shown}"
    if hi is not None and v > hi:
        return f"{name} must be <= {hi:g}; got {shown}"
    return ""


def check_call(prefix: str, names, patterns, tensors, first: int, attrs, values, *, device_of, dtype_of,
               float_dtypes) -> ShapeBinder:
    """The call check, in the harness's order and words: every tensor given, on the device of
    tensors[first] (the op's first input), of its dtype, that dtype a float the kernels take, at
    most MAX_DIMS dims, shapes fitting their patterns (inputs bind the dims before the gradients
    that come first in a backward call), then each attribute in `attrs` ((name, kind, min, max,
    finite) per value in `values`). device_of(t) None skips the device check (NumPy arrays);
    dtype_of(t) is a dtype's name, float_dtypes those the kernels take (dtypes.NAMES). Raises ValueError, RuntimeError (device) or TypeError (dtype);
    returns the binder, which gives the outputs' shapes."""
    ref, x = names[first], tensors[first]
    for n, t in zip(names, tensors):
        if t is None:
            raise ValueError(f"{prefix}{n} must be a tensor; got None")
    device = device_of(x)
    for n, t in zip(names, tensors):
        if device_of(t) != device:
            raise RuntimeError(f"{prefix}{n} must be on the same device as {ref} ({device}); got {n} on {device_of(t)}")
    dtype = dtype_of(x)
    for n, t in zip(names, tensors):
        if dtype_of(t) != dtype:
            raise TypeError(f"{prefix}{n} must have the dtype of {ref} ({dtype}); got {dtype_of(t)}")
    if dtype not in float_dtypes:
        raise TypeError(f"{prefix}{ref} must be {', '.join(float_dtypes[:-1])} or {float_dtypes[-1]}; got {dtype}")
    binder = ShapeBinder()
    for i in [*range(first, len(names)), *range(first)]:
        shape = tuple(tensors[i].shape)
        if len(shape) > MAX_DIMS:
            raise ValueError(f"{prefix}{names[i]} has {len(shape)} dimensions; at most {MAX_DIMS} are supported")
        err = binder.bind(names[i], patterns[i], shape)
        if err:
            raise ValueError(prefix + err)
    for (name, kind, lo, hi, finite), v in zip(attrs, values):
        problem = attr_problem(name, kind, v, lo, hi, finite)
        if problem:
            raise ValueError(prefix + problem)
    return binder
