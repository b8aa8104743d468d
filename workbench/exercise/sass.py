"""The SASS rules of an exercise: opcodes its kernels must (or must not) contain, read with cuobjdump."""
from __future__ import annotations

import re
import subprocess

from .. import ptxas
from .registration import Exercise, SassRule
from .report import Check


def check_sass(ex: Exercise, kernel) -> Check:
    if not ex.sass:
        return Check("SASS rules", "ok", "none for this exercise")
    if ptxas.cuobjdump() is None:
        return Check("SASS rules", "skipped", "cuobjdump not found (the CUDA toolkit and the triton package carry one)")
    try:
        ops = ptxas.sass_opcodes(ptxas.sass(kernel.library))
    except (subprocess.SubprocessError, OSError) as e:
        return Check("SASS rules", "skipped", f"cuobjdump could not read the built library: {e}")
    if not ops:
        return Check("SASS rules", "skipped", "no device code in the built library")
    archs = sorted({a for a, _ in ops})
    failed, lines = [], []
    for rule in ex.sass:
        evidence, bad_archs = [], []
        for arch in archs:
            kernels = {k: o for (a, k), o in ops.items() if a == arch
                       and (rule.kind == "require_kernel" or not rule.kernels
                            or re.search(rule.kernels, ptxas.kernel_label(k)))}
            if rule.kind == "require_kernel":
                if not any(re.search(rule.pattern, k) for k in kernels):
                    bad_archs.append(arch)
                    evidence = [f"kernels: {', '.join(sorted(ptxas.kernel_label(k) for k in kernels))}"]
            elif rule.kind == "require":
                if not any(re.search(rule.pattern, op) for o in kernels.values() for op in o):
                    bad_archs.append(arch)
                    evidence = [f"{ptxas.kernel_label(k)}: {', '.join(sorted(_memory_ops(o))) or 'no global accesses'}"
                                for k, o in sorted(kernels.items())]
            else:
                hits = {k: sorted(op for op in o if re.search(rule.pattern, op)) for k, o in kernels.items()}
                hits = {k: v for k, v in hits.items() if v}
                if hits:
                    bad_archs.append(arch)
                    evidence = [f"{ptxas.kernel_label(k)}: {', '.join(v)}" for k, v in sorted(hits.items())]
        if bad_archs:
            failed.append(rule.message)
            lines += [f"{rule.message} (SASS for {', '.join(bad_archs)}; {_describe(rule)})",
                      *[f"    {e}" for e in evidence]]
            if rule.hint:
                lines.append(f"    hint: {rule.hint}")
    if failed:
        return Check("SASS rules", "FAIL", "; ".join(failed), lines)
    return Check("SASS rules", "ok", f"{len(ex.sass)} rule{'s hold' if len(ex.sass) != 1 else ' holds'} on {', '.join(archs)}")


def _memory_ops(opcodes: set[str]) -> set[str]:
    return {op for op in opcodes if op.startswith(("LDG", "STG", "RED", "ATOM"))}


def _describe(rule: SassRule) -> str:
    return {"require": f"wanted an instruction matching {rule.pattern}",
            "forbid": f"no instruction may match {rule.pattern}",
            "require_kernel": f"wanted a kernel named like {rule.pattern}"}[rule.kind]
