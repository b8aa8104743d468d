"""The SASS rules of an exercise: opcodes its kernels must (or must not) contain, or contain fewer of
than the starter's.

On a GPU they judge what RAN: the kernels the student's runner launched during the checked calls
(one call per speed row, at the speed shape), observed by Nsight Compute started by the checker
(workbench/judge/ncu_watch.py), with the times each instruction executed. A kernel that is never
launched counts for nothing; a counting rule counts executed instructions (a rolled loop runs its
barrier as often as the unrolled one); a rule with `bytes_share` counts the bytes the matching
accesses moved, as a share of all the accesses of their kind. The machine code is the checker's
own copy of the library, hashed before the runner started.

Where nothing can be observed (no GPU, no ncu) the rules read the copy's machine code as written
(cuobjdump), and the verdict says so. For a source that needs sm_90a (the WB_NEEDS_SM90A marker:
wgmma, TMA) only its sm_90a code counts, since no other runs."""
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


def check_sass(ex: Exercise, sub, observed=None, starter_observed=None, static_why: str = "") -> Check:
    """The rules on what ran (`observed`: judge.ncu_watch.Observation of the student's runner;
    `starter_observed`: the starter's, for a counting rule), else on the machine code as written
    (static_why says why nothing was observed)."""
    if not ex.sass:
        return Check("SASS rules", "ok", "none for this exercise")
    if sub.built.device == "cpu":  # a CPU torch extension (byo.py): no device code to read
        return Check("SASS rules", "skipped", "a CPU library has no device code; the SASS rules apply to a .cu's build")
    if ptxas.cuobjdump() is None:
        return Check("SASS rules", "skipped", "cuobjdump not found (the CUDA toolkit and the triton package carry one)")
    try:
        code = _code(str(sub.library))
    except (subprocess.SubprocessError, OSError) as e:
        return Check("SASS rules", "skipped", f"cuobjdump could not read the built library: {e}")
    if not code:
        return Check("SASS rules", "skipped", "no device code in the built library")
    if not sub.unchanged():
        return Check("SASS rules", "FAIL", "the checker's copy of your library changed while it ran",
                     [f"its sha256 was {sub.digest} when the runner started; nothing may write it"])
    if observed is not None:
        return _check_observed(ex, sub, code, observed, starter_observed)
    starter: Code = {}
    if any(rule.kind == "fewer_than_starter" for rule in ex.sass):
        try:
            starter = starter_code(ex, sub)
        except (subprocess.SubprocessError, OSError, ValueError, WorkbenchError) as e:
            first = (str(e) or type(e).__name__).splitlines()[0]
            return Check("SASS rules", "skipped", f"the starter, which a rule counts against, could not be built "
                                                  f"and read: {first}")
    archs = sorted({a for a, _ in code})
    if toolchain.needs_sm90a(sub.built.source):
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
            lines += _broken(rule, f"SASS for {', '.join(bad_archs)}; {_describe(rule)}", evidence)
    how = f"the machine code as built, not what ran ({static_why})" if static_why else "the machine code as built"
    if failed:
        return Check("SASS rules", "FAIL", "; ".join(failed), lines + [f"judged on {how}"])
    return Check("SASS rules", "ok", f"{_holds(len(ex.sass))} on {', '.join(archs)}: {how}")


def _broken(rule: SassRule, where: str, evidence: list[str]) -> list[str]:
    hint = [f"    hint: {rule.hint}"] if rule.hint else []
    return [f"{rule.message} ({where})", *[f"    {e}" for e in evidence], *hint]


def _holds(n: int) -> str:
    return f"{n} rule{'s hold' if n != 1 else ' holds'}"


RAN = "ran"   # the "arch" of an observed kernel's counts: executed, whatever it was built for


def ran_counts(observed, scope: str = "kernel") -> Listing:
    """Each kernel that ran during the checked calls: how many times each opcode executed (warp
    level), all of them or those in its innermost loops, summed over its launches."""
    out: dict = {}
    for k in observed.kernels:
        spans = k.inner_loops() if scope == "inner_loop" else None
        c = out.setdefault((RAN, k.name), Counter())
        for i in k.code:
            if i.warps and (spans is None or any(a <= i.address <= b for a, b in spans)):
                c[i.opcode] += i.warps
    return out


def _check_observed(ex: Exercise, sub, code: Code, observed, starter_observed) -> Check:
    from ..judge.ncu_watch import MARKER

    calls = len(ex.speed.directions) * len(ex.speed.dtypes) + (1 if ex.global_loads else 0)
    own = [ptxas.kernel_label(k) for (_, k) in code if MARKER in k]
    if own or (observed.markers and observed.markers != calls):
        return Check("SASS rules", "FAIL", "the checker's marker kernel ran other than when the checker launched it",
                     [f"your library defines {own[0]}" if own else
                      f"it ran {observed.markers} times; the checker launched it {calls} times",
                      f"kernels seen: {', '.join(ptxas.kernel_label(k.name) for k in observed.kernels)}"])
    failed, lines = [], []
    for rule in ex.sass:
        counts = ran_counts(observed, rule.scope)
        theirs = ran_counts(starter_observed, rule.scope) if starter_observed is not None else {}
        found = _failure(rule, _kernels(counts, RAN, rule), _kernels(theirs, RAN, rule))
        if found is None and rule.bytes_share:
            found = _bytes_share(rule, observed)
        if found is not None:
            failed.append(rule.message)
            lines += _broken(rule, f"{_describe(rule)}, counted as the kernels ran", found)
    ran = sorted({ptxas.kernel_label(k.name) for k in observed.kernels})
    note = (f"judged on what ran during the {calls} checked calls (Nsight Compute, started by the checker): "
            f"{', '.join(ran) or 'no kernel'}" + (f"; {observed.at_load} kernel(s) launched while the library loaded "
                                                  f"were not counted" if observed.at_load else ""))
    if failed:
        return Check("SASS rules", "FAIL", "; ".join(failed), lines + [note])
    return Check("SASS rules", "ok", f"{_holds(len(ex.sass))} on the kernels that ran", [note])


def _bytes_share(rule: SassRule, observed) -> list[str] | None:
    """None where the accesses matching the rule moved at least rule.bytes_share of the bytes that
    every executed access of their kind (space and operation) moved; else the evidence."""
    matching = [i for k in observed.kernels for i in k.code
                if re.search(rule.pattern, i.opcode) and i.space and _selected(rule, k.name)]
    kinds = {(i.space, i.access) for i in matching}
    if not kinds:
        return None
    total = sum(i.bytes for k in observed.kernels for i in k.code if (i.space, i.access) in kinds and _selected(rule, k.name))
    moved = sum(i.bytes for i in matching)
    share = moved / total if total else 1.0
    if share >= rule.bytes_share:
        return None
    what = " and ".join(f"{s.lower()} {a.lower()}s" for s, a in sorted(kinds))
    return [f"{100 * share:.1f}% of the bytes of the executed {what} went through instructions matching "
            f"{rule.pattern} ({moved / 1e6:.1f} of {total / 1e6:.1f} MB); at least {100 * rule.bytes_share:.0f}% "
            f"must"]


def _selected(rule: SassRule, name: str) -> bool:
    return not rule.kernels or bool(re.search(rule.kernels, ptxas.kernel_label(name)))


@functools.lru_cache(maxsize=16)
def _code(library: str) -> Code:
    """The machine code of a built library (the checker's hashed copy: nothing writes it)."""
    return ptxas.sass_instructions(ptxas.sass(library))


def starter_code(ex: Exercise, sub) -> Code:
    """The machine code of the exercise's starter, built torch-free as the student's file is (a
    cached build: the starter's own check, or any earlier count, built it already)."""
    from . import variant_name
    from .submission import _build_variant

    if sub.built.source.resolve() == ex.starter.resolve():
        return _code(str(sub.library))
    name = variant_name(ex, ex.starter)
    name = name + "_baseline" if name == sub.built.name else name  # a student's file named starter.cu
    return _code(str(_build_variant(ex.op, ex.starter, name).library))  # built, not loaded


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
                                  f"kernels"}[rule.kind]
