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

    cases: list[ErrorCase] = []
    first = spec.inputs[0].name
    for i, t in enumerate(spec.inputs):
        def rank0(dev, gen, i=i):
            ts, at = base(dev, gen)
            ts[i] = torch.tensor(1.5, device=dev)
            return ts, at
        if t.pattern.fixed:  # a pattern of "..." alone takes a 0-dim tensor (the check matrix runs one)
            cases.append(ErrorCase(f"{t.name} is 0-dim", rank0, ValueError, f"{t.name} must have"))
        if i == 0:
            continue

        def wrong_dtype(dev, gen, i=i):
            ts, at = base(dev, gen)
            ts[i] = ts[i].double()
            return ts, at
        cases.append(ErrorCase(f"{t.name} float64, {first} float32", wrong_dtype, TypeError,
                               f"{t.name} must have the dtype of {first} (float32); got float64"))
        earlier = {n for u in spec.inputs[:i] for n in u.pattern.names}
        for pos, tok in enumerate(t.pattern.tokens):
            if tok == ELLIPSIS or tok.isdigit() or tok not in earlier:
                continue
            def mismatch(dev, gen, i=i, pos=pos):
                ts, at = base(dev, gen)
                shape = list(ts[i].shape)
                p = spec.inputs[i].pattern  # the dim of token `pos`, counted from the end after a "..."
                d = pos if p.ellipsis < 0 or pos < p.ellipsis else ts[i].dim() - (len(p.tokens) - pos)
                shape[d] += 1
                ts[i] = torch.randn(shape, generator=gen, device=dev)
                return ts, at
            cases.append(ErrorCase(f"{t.name} with a wrong {tok}", mismatch, ValueError,
                                   f"{t.name} must have shape"))
        if ELLIPSIS in t.pattern.tokens and ELLIPSIS in {n for u in spec.inputs[:i] for n in u.pattern.tokens}:
            def lead(dev, gen, i=i):
                ts, at = base(dev, gen)
                ts[i] = torch.randn((2, *ts[i].shape), generator=gen, device=dev)
                return ts, at
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
        def other_device(dev, gen):
            ts, at = base(dev, gen)
            ts[1] = ts[1].cpu()
            return ts, at
        cases.append(ErrorCase(f"{spec.inputs[1].name} on the CPU", other_device, RuntimeError,
                               f"{spec.inputs[1].name} must be on the same device as {first}"))
    return cases
