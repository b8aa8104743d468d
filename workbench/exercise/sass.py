"""The SASS rules of an exercise: opcodes its kernels must (or must not) contain, or must contain
fewer of than the starter's, read with cuobjdump; anywhere in a kernel, or (scope "inner_loop")
in its innermost loops only, found from the backward branches of its machine code. The rules hold
per GPU architecture the library was built for; for a source that needs sm_90a (the
WB_NEEDS_SM90A marker: wgmma, TMA), on its sm_90a code alone, since its code for any other
architecture never runs (its launcher declines off compute capability 9.0)."""
from __future__ import annotations

import functools
import re
import subprocess
from collections import Counter

from ..explain import ptxas
from ..build import toolchain
from ..errors import WorkbenchError
from .registration import Exercise, SassRule
from .report import Check

Listing = dict  # (arch, mangled kernel) -> Counter of opcodes, as ptxas.sass_counts gives it
Code = dict     # (arch, mangled kernel) -> its instructions in order, as ptxas.sass_instructions gives them


def check_sass(ex: Exercise, kernel) -> Check:
    if not ex.sass:
        return Check("SASS rules", "ok", "none for this exercise")
    if getattr(kernel, "device", "cuda") == "cpu":  # a CPU torch extension (byo.py): no device code to read
        return Check("SASS rules", "skipped", "a CPU library has no device code; the SASS rules apply to a .cu's build")
    if ptxas.cuobjdump() is None:
        return Check("SASS rules", "skipped", "cuobjdump not found (the CUDA toolkit and the triton package carry one)")
    try:
        code = _code(str(kernel.library))
    except (subprocess.SubprocessError, OSError) as e:
        return Check("SASS rules", "skipped", f"cuobjdump could not read the built library: {e}")
    if not code:
        return Check("SASS rules", "skipped", "no device code in the built library")
    starter: Code = {}
    if any(rule.kind == "fewer_than_starter" for rule in ex.sass):
        try:
            starter = starter_code(ex, kernel)
        except (subprocess.SubprocessError, OSError, ValueError, WorkbenchError) as e:
            first = (str(e) or type(e).__name__).splitlines()[0]
            return Check("SASS rules", "skipped", f"the starter, which a rule counts against, could not be built "
                                                  f"and read: {first}")
    archs = sorted({a for a, _ in code})
    if toolchain.needs_sm90a(getattr(kernel, "source", None)):
        built = archs
        archs = [a for a in archs if a.startswith("sm_90a")]
        if not archs:
            return Check("SASS rules", "skipped", f"no sm_90a code in this build (built for {', '.join(built)}); "
                                                  f"the rules are about the sm_90a code: build with 9.0 in "
                                                  f"TORCH_CUDA_ARCH_LIST")
    failed, lines = [], []
    for rule in ex.sass:
        evidence, bad_archs = [], []
        counts, theirs = scoped(code, rule.scope), scoped(starter, rule.scope)
        spans = {k: ptxas.inner_loops(c) for k, c in code.items()} if rule.scope == "inner_loop" else None
        for arch in archs:
            found = _failure(rule, _kernels(counts, arch, rule), _kernels(theirs, arch, rule),
                             None if spans is None else {k: s for (a, k), s in spans.items() if a == arch})
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
def _code(library: str) -> Code:
    """The machine code of a built library (its path is content-keyed: the same path, the same code)."""
    return ptxas.sass_instructions(ptxas.sass(library))


def starter_code(ex: Exercise, kernel) -> Code:
    """The machine code of the exercise's starter, built as a variant of its op (a cached build:
    the starter's own check, or any earlier count, built it already)."""
    from ..run import loader
    from . import variant_name

    if kernel.source.resolve() == ex.starter.resolve():
        return _code(str(kernel.library))
    name = variant_name(ex, ex.starter)
    name = name + "_baseline" if name == kernel.name else name  # a student's file named starter.cu
    return _code(str(loader.build_source(ex.op, ex.starter, name=name).library))  # built, not loaded


def scoped(code: Code, scope: str = "kernel") -> Listing:
    """The opcode counts of each kernel: of all its instructions (scope "kernel"), or of those in
    its innermost loops ("inner_loop"; ptxas.inner_loops)."""
    if scope == "kernel":
        return {key: Counter(i.opcode for i in c) for key, c in code.items()}
    spans = {key: ptxas.inner_loops(c) for key, c in code.items()}
    return {key: Counter(i.opcode for i in c if any(a <= i.address <= b for a, b in spans[key]))
            for key, c in code.items()}


def _kernels(counts: Listing, arch: str, rule: SassRule) -> dict[str, Counter]:
    """The kernels of one architecture a rule looks at: all, or those its `kernels` regex selects."""
    return {k: c for (a, k), c in counts.items() if a == arch
            and (rule.kind == "require_kernel" or not rule.kernels or re.search(rule.kernels, ptxas.kernel_label(k)))}


def _failure(rule: SassRule, kernels: dict[str, Counter], starter: dict[str, Counter],
             loops: dict[str, list] | None = None) -> list[str] | None:
    """None where the rule holds on these kernels (one architecture's); else the evidence lines.
    loops: for a rule scoped to inner loops, each kernel's innermost loops (ptxas.inner_loops)."""
    if rule.kind == "require_kernel":
        if any(re.search(rule.pattern, k) for k in kernels):
            return None
        return [f"kernels: {', '.join(sorted(ptxas.kernel_label(k) for k in kernels))}"]
    hits = {k: Counter({op: n for op, n in c.items() if re.search(rule.pattern, op)}) for k, c in kernels.items()}
    if rule.kind == "require":
        if any(hits.values()):
            return None
        if loops is not None:  # what the kernels' inner loops access instead
            return [f"{ptxas.kernel_label(k)}: " + (f"{', '.join(sorted(_memory_ops(c, True))) or 'no memory accesses'}"
                                                    f" in {_spans(loops[k])}" if loops.get(k) else "no loop")
                    for k, c in sorted(kernels.items())]
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


def _memory_ops(opcodes, shared: bool = False) -> set[str]:
    return {op for op in opcodes if op.startswith(("LDG", "STG", "RED", "ATOM") + (("LDS", "STS") if shared else ()))}


def _spans(spans: list[tuple[int, int]]) -> str:
    return f"its inner loop{'s' if len(spans) != 1 else ''} ({', '.join(f'{a:#06x}-{b:#06x}' for a, b in spans)})"


def _describe(rule: SassRule) -> str:
    where = " in an innermost loop (the code between a backward branch and its target)" \
        if rule.scope == "inner_loop" else ""
    return {"require": f"wanted an instruction matching {rule.pattern}{where}",
            "forbid": f"no instruction may match {rule.pattern}{where}",
            "require_kernel": f"wanted a kernel named like {rule.pattern}",
            "fewer_than_starter": f"wanted fewer instructions matching {rule.pattern}{where} than the starter's "
                                  f"kernels hold, counted in the machine code"}[rule.kind]
