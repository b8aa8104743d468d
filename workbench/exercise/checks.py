"""The checks of an exercise that run the student's library, each returning a Check: load, declared
dtypes, correctness, gradcheck (the build is in submission.py, the SASS rules in sass.py, the speed
in speedcheck.py). Every call is made by the student's sandboxed runner on memory this process
owns, and every output is read back and judged here (the package's docstring says how)."""
from __future__ import annotations

import signal

from .. import dtypes as dtypes_
from ..errors import IsolatedRunError
from ..judge import sandbox as sandbox_
from ..judge.remote import CallRefused
from ..model import registry
from .registration import Exercise
from .report import LAYOUTS, Check
from .submission import Built, Submission, load_timeout_s

# The layouts an exercise checks: a transposed view reaches the kernel as a contiguous copy, as a
# strided one does, so it would test the harness, not the student's kernel.
EXERCISE_LAYOUTS = ("contiguous", "strided", "offset")


def count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


_LOAD_HINT = ("code in your file that runs when its library is loaded - constructors of global objects, "
              "__attribute__((constructor)) functions, initializers of globals that call functions - runs in "
              "the checker's sandboxed runner, never in the checker; it must return, and must not end the process")


def load(ex: Exercise, sub: Submission) -> Check:
    """Start the student's runner: it loads the judge's copy of the library (its first code to run
    anywhere) and says what the library exports, which must be what the source declares: the
    checks here go by the source. The runner's words can only make this fail."""
    built = sub.built
    where = (f"loaded in a sandboxed runner (bubblewrap: its own PID and network namespaces, read-only views), "
             f"from the checker's copy (sha256 {sub.digest[:16]})" if sub.sandbox is not None else
             f"loaded in a runner process (NOT sandboxed: {sandbox_.missing()}), from the checker's copy "
             f"(sha256 {sub.digest[:16]})")
    try:
        sub.runner()
    except (IsolatedRunError, CallRefused) as e:
        return _load_failed(e)
    sub.reported = info = sub.remote.reported
    if built.style == "extension":
        built.dtypes = tuple(info.get("dtypes") or ())
        steps = info.get("steps") or ()
        lines = [where, f"the runner ran it on tiny inputs in {', '.join(built.dtypes) or 'no dtype'}"]
        if "backward" not in steps:
            lines.append("no usable backward: export backward(grad_out, input, bias) returning the gradients of the "
                         "differentiable inputs ({grad_input, grad_bias}), as a variant's backward step does")
        return Check("load", "ok", f"a torch extension; dtypes it ran in: {', '.join(built.dtypes) or 'none'}", lines)
    declared = f"{built.device}; {', '.join(built.dtypes) or 'no dtypes'}"
    exported = f"{info.get('device')}; {', '.join(info.get('dtypes') or []) or 'no dtypes'}"
    problems = []
    if info.get("op") != ex.op:
        problems.append(f"op: it exports a variant of {info.get('op')!r}, the exercise's op is {ex.op!r}")
    if info.get("device") != built.device:
        problems.append(f"device: the source declares {built.device}, the library exports {info.get('device')}")
    if sorted(info.get("dtypes") or []) != sorted(built.dtypes):
        problems.append(f"dtypes: the source declares {', '.join(built.dtypes) or 'none the checker can read'}; "
                        f"the library exports {', '.join(info.get('dtypes') or []) or 'none'}")
    if problems:
        lines = [where, "the library's exported descriptor (workbench_variant_info) does not match "
                        "WB_EXPORT_VARIANT(...) as written in the source:", *[f"  {p}" for p in problems]]
        if any(p.startswith(("device", "dtypes")) for p in problems):
            lines.append("write the device and the dtype mask literally in WB_EXPORT_VARIANT(op, WB_DEVICE_CUDA, "
                         "WB_F32 | WB_F16, ...): the checker reads them from the text, before anything runs")
        return Check("load", "FAIL", f"the library exports {exported}; its source declares {declared}", lines)
    return Check("load", "ok", f"in a {'sandboxed ' if sub.sandbox else ''}runner; it exports what its source "
                               f"declares ({declared})", [where])


def _load_failed(err) -> Check:
    out = [ln for ln in (getattr(err, "output", "") or "").splitlines() if ln.strip()]
    said = ["its last lines:", *[f"    {ln}" for ln in out[-12:]]] if out else ["it printed nothing"]
    if isinstance(err, CallRefused):
        return Check("load", "FAIL", f"loading your library failed: {str(err).splitlines()[0]}", [str(err), *said])
    if getattr(err, "timed_out", False):
        return Check("load", "FAIL", f"hung: loading your library did not finish within {load_timeout_s():g} s "
                                     f"(the runner was killed)", [str(err).splitlines()[0], _LOAD_HINT, *said])
    code = err.returncode
    signum = -code if code < 0 else code - 128 if 128 < code < 160 else 0  # the sandbox says 128 + N
    if signum:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        detail = f"the runner loading your library was killed by {name} before answering"
    else:
        detail = f"the runner loading your library exited with status {code} before answering"
    return Check("load", "FAIL", detail, [str(err).splitlines()[0], _LOAD_HINT, *said])


def declared_dtypes(ex: Exercise, built: Built) -> Check:
    missing = [d for d in ex.dtypes if d not in built.dtypes]
    if not missing:
        extra = [d for d in built.dtypes if d not in ex.dtypes]
        return Check("declared dtypes", "ok", ", ".join(ex.dtypes) + (f" (also {', '.join(extra)})" if extra else ""))
    if built.style == "extension":
        return Check("declared dtypes", "FAIL", f"it did not run in {', '.join(missing)}",
                     [f"this exercise needs: {', '.join(ex.dtypes)}",
                      f"your extension ran in: {', '.join(built.dtypes) or 'nothing'}",
                      "dispatch on the input's dtype (AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, ...))"])
    mask = " | ".join(dtypes_.MASKS[d] for d in dtypes_.NAMES if d in ex.dtypes or d in built.dtypes)
    return Check("declared dtypes", "FAIL", f"missing {', '.join(missing)}", [
        f"this exercise needs: {', '.join(ex.dtypes)}",
        f"your variant declares: {', '.join(built.dtypes) or 'nothing'}",
        f"declare them in the dtype mask, the third argument of WB_EXPORT_VARIANT(...): {mask}",
        "and make the launchers accept them: wb_dispatch_dtype<that mask>(dtype, ...) (kernels/common/wb_cuda.h)"])


def inputs_text(op: str) -> str:
    """"x [..., n]; bias [n]": the op's inputs and their dims, for failure reports."""
    return "; ".join(f"{t.name} {t.pattern.display()}" for t in registry.spec(op).inputs)


def case_lines(c, op: str) -> list[str]:
    rel_limit = dtypes_.tolerance(c.dtype)[0]
    shape = c.shape_text
    lines = [f"first failing case: {c.what}",
             f"  shape   {shape} ({inputs_text(op)})",
             f"  dtype   {c.dtype}",
             f"  layout  {c.layout}: {LAYOUTS.get(c.layout, c.layout)}"]
    if c.what == "determinism":
        lines.append("  error   two runs on the same inputs gave different bits")
    elif c.measured:
        where = f" at index {list(c.where)}" if c.where is not None else ""
        lines.append(f"  error   relative {c.rel_err:.2e} (allowed {rel_limit:g}), largest |difference| "
                     f"{c.max_abs_err:.2e}{where}")
    if c.note:
        lines.append(f"  note    {c.note}")
    return lines


_HANDS_COPIES = "; the harness hands your kernel contiguous copies of them"


def correctness(ex: Exercise, sub: Submission, shapes, seed: int, sanitize: str) -> Check:
    """The check matrix, run here over the student's runner: fresh inputs, poisoned outputs, every
    output read back and compared by this process."""
    from ..measure import correctness as matrix

    dtypes = [d for d in ex.dtypes if d in sub.built.dtypes]
    if not dtypes:
        return Check("correctness", "skipped", "the variant declares none of the required dtypes")
    rep = matrix.check(ex.op, sub.kernel(sub.built.dtypes), dtypes=dtypes, shapes=[tuple(s) for s in shapes],
                       layouts=EXERCISE_LAYOUTS, seed=seed, backward=True)
    n, bad = len(rep.cases), rep.failures
    scope = f"{len(shapes)} shapes x {count(len(dtypes), 'dtype')} x {len(EXERCISE_LAYOUTS)} layouts"
    if not bad:
        return Check("correctness", "ok", f"{count(n, 'case')}: {scope}; forward, backward, determinism")
    first = bad[0]
    by_what: dict[str, int] = {}
    for c in bad:
        by_what[c.what] = by_what.get(c.what, 0) + 1
    lines = case_lines(first, ex.op)
    if sub.built.style == "extension":
        lines = [ln.replace(_HANDS_COPIES, "; a torch extension gets them as they are: making them contiguous "
                                           "(or refusing them with TORCH_CHECK) is its own job") for ln in lines]
    lines.append(f"failing: {len(bad)} of {n} cases (" + ", ".join(f"{w} {k}" for w, k in by_what.items()) + ")")
    lines += ["more failing cases:", *[f"  {c.line()}" for c in bad[1:6]]] if len(bad) > 1 else []
    crashed = [c for c in bad if "DeviceLost" in c.note or "IsolatedRunError" in c.note]
    if crashed:
        lines.append(f"to find the faulting access (compute-sanitizer): {sanitize}")
    shape = "x".join(map(str, first.shape))
    what = "crashed" if first in crashed else f"{len(bad)} of {n} cases failed"
    return Check("correctness", "FAIL", f"{first.what}, {shape} {first.dtype} {first.layout}; {what}", lines)


def gradcheck(ex: Exercise, sub: Submission, seed: int) -> Check:
    """gradcheck here, every evaluation a call made by the student's runner."""
    from ..measure import gradients

    rep = gradients.gradcheck(ex.op, sub.kernel(sub.built.dtypes), seed=seed)
    if rep.ok:
        return Check("gradcheck", "ok", f"{rep.method}; {count(len(rep.cases), 'case')}")
    if not rep.cases:
        return Check("gradcheck", "FAIL", "; ".join(rep.skipped) or "no case ran")
    first = rep.failures[0]
    lines = [f"method: {rep.method}"] + case_lines(first, ex.op) + [c.line() for c in rep.failures[1:6]]
    return Check("gradcheck", "FAIL", f"{first.what}, {'x'.join(map(str, first.shape))} {first.dtype}"
                 + (f": {first.note}" if first.note else ""), lines)


