"""The checks of an exercise, each returning a Check: build, load, declared dtypes, correctness,
gradcheck, speed (the SASS rules are in sass.py). The student's library is built here and never
loaded here: compiling is safe, loading runs its code (static initializers). "load" loads it in a
child process first, on every machine, and compares what the library exports with what its source
declares; correctness, gradcheck and speed run in a child too (a kernel that faults or hangs cannot
take the checker down), and the child says which case it was running, so a crash names its case.
A child that ends without handing its result over (an exit with any status, 0 included, a signal,
a timeout) is a FAIL: only what this process receives and judges can pass."""
from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess

from .. import dtypes as dtypes_
from ..explain import ptxas
from ..model import registry
from ..build import toolchain
from . import child
from .registration import Exercise
from .report import LAYOUTS, Check

def count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def shown(path) -> str:
    """A path as the student would type it: relative to the working directory when inside it."""
    p = pathlib.Path(path)
    try:
        return str(p.resolve().relative_to(pathlib.Path.cwd()))
    except (ValueError, OSError):
        return str(p)


def _resources(kernel) -> str:
    """Registers and spills of the build, from ptxas's report in its build log."""
    log = kernel.library.parent / "build.log"
    found = ptxas.parse_resources(log.read_text(errors="replace")) if log.is_file() else []
    if not found:
        return "no ptxas report in the build log"
    names = {k.name for k in found}
    text = f"{len(names)} kernel{'s' if len(names) != 1 else ''}, at most {max(k.registers for k in found)} registers"
    spilled = [k for k in found if k.spill_store_bytes + k.spill_load_bytes]
    if not spilled:
        return text + ", no spills"
    worst = max(spilled, key=lambda k: k.spill_store_bytes + k.spill_load_bytes)
    return (text + f"; SPILLS: {worst.spill_store_bytes + worst.spill_load_bytes} bytes in "
            f"{ptxas.kernel_label(worst.name)} ({worst.arch}) - registers went to local memory, which costs bandwidth")


def build(ex: Exercise, source: pathlib.Path, name: str):
    """(the built variant or None, the build check). The library is built (or found in the
    cache) and not loaded: loader.BuiltVariant, its declaration read from the source's text."""
    from ..run import loader
    from ..errors import BuildError, WorkbenchError

    if source.suffix == ".cu" and not toolchain.can_build_cuda():
        why = "torch has no CUDA" if not toolchain.torch_has_cuda() else "no nvcc found (set CUDA_HOME)"
        return None, Check("build", "skipped", f"this machine cannot build CUDA code: {why}")
    from ..run.extension import build_extension, is_extension_source

    extension = is_extension_source(source.read_text(errors="replace"))
    try:
        # Built only: loading it would run its code (static initializers) in this process, the
        # checker's. The child loads it ("load") and runs its checks.
        kernel = build_extension(ex.op, source, name=name) if extension else loader.build_source(ex.op, source, name=name)
    except BuildError as e:
        where = f"{shown(e.file)}:{e.line}" if e.file and e.line else shown(e.file) if e.file else "build"
        first, *rest = (e.first_error or "failed").splitlines() or ["failed"]
        return None, Check("build", "FAIL", f"{where}: {first}",
                           [f"{where}: error: {first}", *[f"    {ln}" for ln in rest], f"full compiler log: {e.log_path}"])
    except (ValueError, WorkbenchError) as e:
        first, *rest = (str(e) or type(e).__name__).splitlines()
        return None, Check("build", "FAIL", first, [first, *rest])
    how = f"built in {kernel.seconds:.1f} s" if kernel.built else "unchanged, cached build"
    if extension:
        how += (" as a torch extension (cpp_extension compiles the torch headers: tens of seconds cold; the "
                "workbench's variant ABI builds in a few)")
        return kernel, Check("build", "ok", f"{how}; {_resources(kernel)}" if kernel.device == "cuda" else how)
    return kernel, Check("build", "ok", f"{how}; {_resources(kernel)}")


_LOAD_HINT = ("code in your file that runs when its library is loaded - constructors of global objects, "
              "__attribute__((constructor)) functions, initializers of globals that call functions - runs in "
              "the checker's child process, never in the checker; it must return, and must not end the process")


def load(ex: Exercise, kernel, worker=None) -> Check:
    """Load the built library in a child (its first code to run anywhere), read the descriptor
    it exports (workbench_variant_info, whose ABI version and op the harness checks) and compare
    it with what the source declares, which the checks here went by. Any way the child ends
    without reporting is a FAIL naming it."""
    from ..errors import IsolatedRunError

    timeout = child.load_timeout_s()
    try:
        out = child.load_in_child(ex, kernel, worker, timeout)
    except IsolatedRunError as e:
        return load_failed(e, timeout)
    info = out.get("info") or {}
    if getattr(kernel, "style", "") == "extension":
        return _extension_loaded(ex, kernel, out, info)
    declared = f"{kernel.device}; {', '.join(kernel.dtypes) or 'no dtypes'}"
    exported = f"{info.get('device')}; {', '.join(info.get('dtypes') or []) or 'no dtypes'}"
    problems = []
    if info.get("op") != ex.op:
        problems.append(f"op: it exports a variant of {info.get('op')!r}, the exercise's op is {ex.op!r}")
    if info.get("device") != kernel.device:
        problems.append(f"device: the source declares {kernel.device}, the library exports {info.get('device')}")
    if sorted(info.get("dtypes") or []) != sorted(kernel.dtypes):
        problems.append(f"dtypes: the source declares {', '.join(kernel.dtypes) or 'none the checker can read'}; "
                        f"the library exports {', '.join(info.get('dtypes') or []) or 'none'}")
    if out.get("build_id") != kernel.build_id:
        problems.append(f"build: the child loaded build {out.get('build_id')}, not the one built here "
                        f"({kernel.build_id}); the checks here would not be about the code that runs")
    where = f"loaded in a child process (pid {out.get('pid')}), not in the checker's ({os.getpid()})"
    if problems:
        lines = [where, "the library's exported descriptor (workbench_variant_info) does not match "
                        "WB_EXPORT_VARIANT(...) as written in the source:", *[f"  {p}" for p in problems]]
        if any(p.startswith(("device", "dtypes")) for p in problems):
            lines.append("write the device and the dtype mask literally in WB_EXPORT_VARIANT(op, WB_DEVICE_CUDA, "
                         "WB_F32 | WB_F16, ...): the checker reads them from the text, before anything runs")
        return Check("load", "FAIL", f"the library exports {exported}; its source declares {declared}", lines)
    return Check("load", "ok", f"in a child process; it exports what its source declares ({declared})", [where])


def _extension_loaded(ex: Exercise, kernel, out: dict, info: dict) -> Check:
    """The load check of a torch extension: its source declares no dtypes, so what the child's probe
    found (the dtypes its forward ran on tiny inputs and returned the declared outputs for) is what
    the checks go by; the build must be the one built here."""
    where = f"loaded in a child process (pid {out.get('pid')}), not in the checker's ({os.getpid()})"
    probe = info.get("probe") or ""
    if out.get("build_id") != kernel.build_id:
        return Check("load", "FAIL", f"the child loaded build {out.get('build_id')}, not the one built here "
                                     f"({kernel.build_id})", [where])
    kernel.dtypes = tuple(info.get("dtypes") or ())
    kernel.probed = not probe.startswith("not probed")
    steps = info.get("steps") or ()
    lines = [where, f"the probe: {probe}" if probe else "not probed"]
    if "backward" not in steps:
        lines.append("no usable backward: export backward(grad_out, input, bias) returning the gradients of the "
                     "differentiable inputs ({grad_input, grad_bias}), as a variant's backward step does")
    if not kernel.probed:
        return Check("load", "ok", "in a child process; a torch extension, not probed (its dtypes are found by "
                                   "running it, on a GPU)", lines)
    return Check("load", "ok", f"in a child process; a torch extension, dtypes probed there: "
                               f"{', '.join(kernel.dtypes) or 'none ran'}", lines)


def load_failed(err, timeout_s: float) -> Check:
    """The load check of a child that ended without reporting: how it ended, and its last words."""
    out = [ln for ln in (err.output or "").splitlines() if ln.strip()]
    said = ["its last lines:", *[f"    {ln}" for ln in out[-12:]]] if out else ["it printed nothing"]
    if isinstance(err, subprocess.TimeoutExpired):
        if getattr(err, "starting", False):
            return Check("load", "FAIL", f"the child process that loads your library did not start within "
                                         f"{err.timeout_s:g} s (before your code ran: the machine, not your file)",
                         [str(err).splitlines()[0], *said])
        return Check("load", "FAIL", f"hung: loading your library did not finish within {timeout_s:g} s "
                                     f"(the child was killed)", [str(err).splitlines()[0], _LOAD_HINT, *said])
    code = err.returncode
    if code < 0:
        try:
            how = signal.Signals(-code).name
        except ValueError:
            how = f"signal {-code}"
        detail = f"the child process loading your library was killed by {how} before reporting"
    else:
        raised = re.findall(r"^\w*(?:Error|Exception)\w*: (.+)$", err.full_output or "", flags=re.MULTILINE)
        if code == 1 and raised and "Traceback (most recent call last)" in (err.full_output or ""):
            detail = f"loading your library failed: {raised[-1].strip()}"
        else:
            detail = f"the child process loading your library exited with status {code} before reporting"
    return Check("load", "FAIL", detail, [str(err).splitlines()[0], _LOAD_HINT, *said])


def declared_dtypes(ex: Exercise, kernel) -> Check:
    if getattr(kernel, "style", "") == "extension" and not kernel.probed:
        return Check("declared dtypes", "skipped", "a torch extension declares none; they are probed by running it "
                                                   "(on a GPU for a .cu)")
    missing = [d for d in ex.dtypes if d not in kernel.dtypes]
    if not missing:
        extra = [d for d in kernel.dtypes if d not in ex.dtypes]
        return Check("declared dtypes", "ok", ", ".join(ex.dtypes) + (f" (also {', '.join(extra)})" if extra else ""))
    mask = " | ".join(dtypes_.MASKS[d] for d in dtypes_.NAMES if d in ex.dtypes or d in kernel.dtypes)
    return Check("declared dtypes", "FAIL", f"missing {', '.join(missing)}", [
        f"this exercise needs: {', '.join(ex.dtypes)}",
        f"your variant declares: {', '.join(kernel.dtypes) or 'nothing'}",
        f"declare them in the dtype mask, the third argument of WB_EXPORT_VARIANT(...): {mask}",
        "and make the launchers accept them: wb_dispatch_dtype<that mask>(dtype, ...) (kernels/common/wb_cuda.h)"])


def inputs_text(op: str) -> str:
    """"x [..., n]; bias [n]": the op's inputs and their dims, for failure reports."""
    return "; ".join(f"{t.name} {t.pattern.display()}" for t in registry.spec(op).inputs)


def case_lines(c, op: str) -> list[str]:
    rel_limit = dtypes_.tolerance(c.dtype)[0]
    shape = "x".join(map(str, c.shape)) or "scalar"
    lines = [f"first failing case: {c.what}",
             f"  shape   {shape} ({inputs_text(op)})",
             f"  dtype   {c.dtype}",
             f"  layout  {c.layout}: {LAYOUTS.get(c.layout, c.layout)}"]
    if c.what == "determinism":
        lines.append("  error   two runs on the same inputs gave different bits")
    else:
        where = f" at index {list(c.where)}" if c.where is not None else ""
        lines.append(f"  error   relative {c.rel_err:.2e} (allowed {rel_limit:g}), largest |difference| "
                     f"{c.max_abs_err:.2e}{where}")
    if c.note:
        lines.append(f"  note    {c.note}")
    return lines


def correctness(ex: Exercise, kernel, shapes, seed: int, sanitize: str, worker=None):
    """Starts the check matrix in the worker (where there is one) and returns a function that
    waits for it and gives the Check: the checker reads the SASS meanwhile."""
    from ..run import isolate
    from ..measure.correctness import Report

    dtypes = [d for d in ex.dtypes if d in kernel.dtypes]
    if not dtypes:
        return lambda: Check("correctness", "skipped", "the variant declares none of the required dtypes")
    kwargs = dict(dtypes=dtypes, shapes=[list(s) for s in shapes], layouts=list(child.EXERCISE_LAYOUTS), seed=seed,
                  backward=True, announce=True)
    if worker is not None:
        job = worker.submit("check", isolate.variant_address(ex.op, kernel), kwargs)
        run = lambda: Report.from_dict(worker.wait(job, timeout_s=child.CHILD_TIMEOUT_S))  # noqa: E731
    else:
        run = lambda: child.in_child("check", ex, kernel, **kwargs)  # noqa: E731
    if getattr(kernel, "style", "") == "extension":
        return lambda: _as_extension(_correctness_check(ex, run, shapes, dtypes, sanitize))
    return lambda: _correctness_check(ex, run, shapes, dtypes, sanitize)


_HANDS_COPIES = "; the harness hands your kernel contiguous copies of them"


def _as_extension(check: Check) -> Check:
    """A torch extension's functions get the tensors as they are (no harness makes them contiguous):
    the layout's words say so."""
    check.lines = [ln.replace(_HANDS_COPIES, "; a torch extension gets them as they are: making them contiguous "
                                              "(or refusing them with TORCH_CHECK) is its own job")
                   for ln in (check.lines or [])]
    return check


def _correctness_check(ex: Exercise, run, shapes, dtypes, sanitize: str) -> Check:
    from ..errors import IsolatedRunError

    try:
        rep = run()
    except (IsolatedRunError, subprocess.TimeoutExpired) as e:
        return child.stopped("correctness", e, sanitize)
    n, bad = len(rep.cases), rep.failures
    scope = f"{len(shapes)} shapes x {count(len(dtypes), 'dtype')} x {len(child.EXERCISE_LAYOUTS)} layouts"
    if not bad:
        return Check("correctness", "ok", f"{count(n, 'case')}: {scope}; forward, backward, determinism")
    first = bad[0]
    by_what: dict[str, int] = {}
    for c in bad:
        by_what[c.what] = by_what.get(c.what, 0) + 1
    lines = case_lines(first, ex.op)
    lines.append(f"failing: {len(bad)} of {n} cases (" + ", ".join(f"{w} {k}" for w, k in by_what.items()) + ")")
    lines += ["more failing cases:", *[f"  {c.line()}" for c in bad[1:6]]] if len(bad) > 1 else []
    shape = "x".join(map(str, first.shape))
    return Check("correctness", "FAIL", f"{first.what}, {shape} {first.dtype} {first.layout}; "
                 f"{len(bad)} of {n} cases failed", lines)


def gradcheck(ex: Exercise, kernel, seed: int, sanitize: str, worker=None) -> Check:
    from ..errors import IsolatedRunError

    try:
        rep = child.in_child("gradcheck", ex, kernel, worker=worker, seed=seed)
    except (IsolatedRunError, subprocess.TimeoutExpired) as e:
        return child.stopped("gradcheck", e, sanitize)
    if rep.ok:
        return Check("gradcheck", "ok", f"{rep.method}; {count(len(rep.cases), 'case')}")
    if not rep.cases:
        return Check("gradcheck", "FAIL", "; ".join(rep.skipped) or "no case ran")
    first = rep.failures[0]
    lines = [f"method: {rep.method}"] + case_lines(first, ex.op) + [c.line() for c in rep.failures[1:6]]
    return Check("gradcheck", "FAIL", f"{first.what}, {'x'.join(map(str, first.shape))} {first.dtype}"
                 + (f": {first.note}" if first.note else ""), lines)
