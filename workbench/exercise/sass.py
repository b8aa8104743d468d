"""The SASS rules of an exercise: opcodes its kernels must (or must not) contain, or must contain
fewer of than the starter's, read with cuobjdump."""
from __future__ import annotations

import functools
import re
import subprocess
from collections import Counter

from .. import ptxas
from ..errors import WorkbenchError
from .registration import Exercise, SassRule
from .report import Check

Listing = dict  # (arch, mangled kernel) -> Counter of opcodes, as ptxas.sass_counts gives it


def check_sass(ex: Exercise, kernel) -> Check:
    if not ex.sass:
        return Check("SASS rules", "ok", "none for this exercise")
    if ptxas.cuobjdump() is None:
        return Check("SASS rules", "skipped", "cuobjdump not found (the CUDA toolkit and the triton package carry one)")
    try:
        counts = _counts(str(kernel.library))
    except (subprocess.SubprocessError, OSError) as e:
        return Check("SASS rules", "skipped", f"cuobjdump could not read the built library: {e}")
    if not counts:
        return Check("SASS rules", "skipped", "no device code in the built library")
    starter: Listing = {}
    if any(rule.kind == "fewer_than_starter" for rule in ex.sass):
        try:
            starter = starter_counts(ex, kernel)
        except (subprocess.SubprocessError, OSError, ValueError, WorkbenchError) as e:
            first = (str(e) or type(e).__name__).splitlines()[0]
            return Check("SASS rules", "skipped", f"the starter, which a rule counts against, could not be built "
                                                  f"and read: {first}")
    archs = sorted({a for a, _ in counts})
    failed, lines = [], []
    for rule in ex.sass:
        evidence, bad_archs = [], []
        for arch in archs:
            found = _failure(rule, _kernels(counts, arch, rule), _kernels(starter, arch, rule))
            if found is not None:
                bad_archs.append(arch)
                evidence = found
        if bad_archs:
            failed.append(rule.message)
            lines += [f"{rule.message} (SASS for {', '.join(bad_archs)}; {_describe(rule)})",
                      *[f"    {e}" for e in evidence]]
            if rule.hint:
                lines.append(f"    hint: {rule.hint}")
    if failed:
        return Check("SASS rules", "FAIL", "; ".join(failed), lines)
    return Check("SASS rules", "ok", f"{len(ex.sass)} rule{'s hold' if len(ex.sass) != 1 else ' holds'} on {', '.join(archs)}")


@functools.lru_cache(maxsize=16)
def _counts(library: str) -> Listing:
    """The opcode counts of a built library (its path is content-keyed: the same path, the same code)."""
    return ptxas.sass_counts(ptxas.sass(library))


def starter_counts(ex: Exercise, kernel) -> Listing:
    """The opcode counts of the exercise's starter, built as a variant of its op (a cached build:
    the starter's own check, or any earlier count, built it already)."""
    from .. import loader
    from . import variant_name

    if kernel.source.resolve() == ex.starter.resolve():
        return _counts(str(kernel.library))
    name = variant_name(ex, ex.starter)
    name = name + "_baseline" if name == kernel.name else name  # a student's file named starter.cu
    return _counts(str(loader.load_source(ex.op, ex.starter, name=name, python=False).library))


def _kernels(counts: Listing, arch: str, rule: SassRule) -> dict[str, Counter]:
    """The kernels of one architecture a rule looks at: all, or those its `kernels` regex selects."""
    return {k: c for (a, k), c in counts.items() if a == arch
            and (rule.kind == "require_kernel" or not rule.kernels or re.search(rule.kernels, ptxas.kernel_label(k)))}


def _failure(rule: SassRule, kernels: dict[str, Counter], starter: dict[str, Counter]) -> list[str] | None:
    """None where the rule holds on these kernels (one architecture's); else the evidence lines."""
    if rule.kind == "require_kernel":
        if any(re.search(rule.pattern, k) for k in kernels):
            return None
        return [f"kernels: {', '.join(sorted(ptxas.kernel_label(k) for k in kernels))}"]
    hits = {k: Counter({op: n for op, n in c.items() if re.search(rule.pattern, op)}) for k, c in kernels.items()}
    if rule.kind == "require":
        if any(hits.values()):
            return None
        return [f"{ptxas.kernel_label(k)}: {', '.join(sorted(_memory_ops(c))) or 'no global accesses'}"
                for k, c in sorted(kernels.items())]
    if rule.kind == "forbid":
        if not any(hits.values()):
            return None
        return [f"{ptxas.kernel_label(k)}: {', '.join(sorted(c))}" for k, c in sorted(hits.items()) if c]
    mine = sum(sum(c.values()) for c in hits.values())
    theirs = sum(n for c in starter.values() for op, n in c.items() if re.search(rule.pattern, op))
    if not starter or mine < theirs:
        return None
    per_label: dict[str, list[int]] = {}
    for k, c in sorted(hits.items()):
        per_label.setdefault(ptxas.kernel_label(k), []).append(sum(c.values()))
    return [f"{mine} in your kernels, {theirs} in the starter's",
            *[f"{label}: {', '.join(map(str, ns))}" for label, ns in sorted(per_label.items()) if any(ns)]]


def _memory_ops(opcodes) -> set[str]:
    return {op for op in opcodes if op.startswith(("LDG", "STG", "RED", "ATOM"))}


def _describe(rule: SassRule) -> str:
    return {"require": f"wanted an instruction matching {rule.pattern}",
            "forbid": f"no instruction may match {rule.pattern}",
            "require_kernel": f"wanted a kernel named like {rule.pattern}",
            "fewer_than_starter": f"wanted fewer instructions matching {rule.pattern} than the starter's kernels "
                                  f"hold, counted in the machine code"}[rule.kind]
