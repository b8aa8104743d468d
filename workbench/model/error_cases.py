"""Bad input and what it must raise: ErrorCase, and the cases every op is held to, derived from its
declaration (OpSpec.all_error_cases): a 0-dim tensor where dims are required, a dtype or a dim that
disagrees with the first input, extra leading dims, int tensors, attributes out of range or not
finite, a tensor on another device."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .shapes import ELLIPSIS


@dataclass(frozen=True)
class ErrorCase:
    """Bad input and what it must raise. `build(device, generator)` -> (tensors, attrs)."""
    what: str
    build: Callable
    error: type
    match: str
    decl: bool = True        # the declaration alone decides it: the fake implementation agrees


def derived_error_cases(spec, device: str = "cpu") -> list[ErrorCase]:
    """The cases for `spec` (an OpSpec), inputs built on `device`."""
    import torch

    size = spec.sample_size()
    sample_attrs = spec.sample_attrs()[0]

    def base(dev, gen):
        return list(spec.new_inputs(size, torch.float32, dev, gen)), dict(sample_attrs)

    def replaced(i: int, make: Callable) -> Callable:
        """A case's builder: the base inputs with input i replaced by make(it, device, generator)."""
        def build(dev, gen):
            ts, at = base(dev, gen)
            ts[i] = make(ts[i], dev, gen)
            return ts, at
        return build

    def wrong_dim(i: int, pos: int) -> Callable:
        def make(t, dev, gen):
            p = spec.inputs[i].pattern  # the dim of token `pos`, counted from the end after a "..."
            d = pos if p.ellipsis < 0 or pos < p.ellipsis else t.dim() - (len(p.tokens) - pos)
            shape = list(t.shape)
            shape[d] += 1
            return torch.randn(shape, generator=gen, device=dev)
        return make

    cases: list[ErrorCase] = []
    first = spec.inputs[0].name
    for i, t in enumerate(spec.inputs):
        if t.pattern.fixed:  # a pattern of "..." alone takes a 0-dim tensor (the check matrix runs one)
            cases.append(ErrorCase(f"{t.name} is 0-dim", replaced(i, lambda x, dev, gen: torch.tensor(1.5, device=dev)),
                                   ValueError, f"{t.name} must have"))
        if i == 0:
            continue
        cases.append(ErrorCase(f"{t.name} float64, {first} float32", replaced(i, lambda x, dev, gen: x.double()),
                               TypeError, f"{t.name} must have the dtype of {first} (float32); got float64"))
        earlier = {n for u in spec.inputs[:i] for n in u.pattern.names}
        for pos, tok in enumerate(t.pattern.tokens):
            if tok != ELLIPSIS and not tok.isdigit() and tok in earlier:
                cases.append(ErrorCase(f"{t.name} with a wrong {tok}", replaced(i, wrong_dim(i, pos)), ValueError,
                                       f"{t.name} must have shape"))
        if ELLIPSIS in t.pattern.tokens and ELLIPSIS in {n for u in spec.inputs[:i] for n in u.pattern.tokens}:
            lead = replaced(i, lambda x, dev, gen: torch.randn((2, *x.shape), generator=gen, device=dev))
            cases.append(ErrorCase(f"{t.name} with extra leading dims", lead, ValueError, f"{t.name} must have shape"))

    def ints(dev, gen):
        ts, at = base(dev, gen)
        return [t.to(torch.int32) for t in ts], at
    cases.append(ErrorCase("int32 tensors", ints, TypeError, f"{first} must be float32, float64, float16 or bfloat16"))

    for a in spec.attrs:
        bad = []
        if a.kind is float and a.finite:
            bad.append((math.nan, "must be a finite number"))
        if a.min is not None:
            bad.append(((a.min - 1.0) if a.kind is float else int(a.min) - 1, f"must be >= {a.min:g}"))
        if a.max is not None:
            bad.append(((a.max + 1.0) if a.kind is float else int(a.max) + 1, f"must be <= {a.max:g}"))
        for value, match in bad:
            def attr_case(dev, gen, a=a, value=value):
                ts, at = base(dev, gen)
                at[a.name] = value
                return ts, at
            cases.append(ErrorCase(f"{a.name} = {value}", attr_case, ValueError, f"{a.name} {match}"))

    if device == "cuda" and len(spec.inputs) > 1:
        cases.append(ErrorCase(f"{spec.inputs[1].name} on the CPU", replaced(1, lambda x, dev, gen: x.cpu()), RuntimeError,
                               f"{spec.inputs[1].name} must be on the same device as {first}"))
    return cases
