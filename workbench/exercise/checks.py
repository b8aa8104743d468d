"""The checks of an exercise, each returning a Check: build, load, declared dtypes, correctness,
gradcheck (the SASS rules are in sass.py, the speed in speedcheck.py).

The student's code never runs in the checker's process, and nothing its process says becomes a
verdict. The file is built here (torch-free, as the NumPy front end builds; compiling is safe), and
the library is copied into the judge's own folder and hashed before anything runs it (Submission).
A runner (workbench/judge) loads that copy in a sandbox and makes the calls the checker asks for,
on memory the checker owns: the matrix of cases, gradcheck and the timed batches all run HERE, on
outputs this process reads back itself. A runner that dies, hangs or refuses makes its own check
fail; it never makes one pass.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import signal
import tempfile
from dataclasses import dataclass

from .. import config, dtypes as dtypes_
from ..build import toolchain
from ..errors import IsolatedRunError
from ..explain import ptxas
from ..judge import sandbox as sandbox_
from ..judge.runner import CallRefused, Remote, kernel as remote_kernel, start_cxx, start_python
from ..model import registry
from .registration import Exercise
from .report import LAYOUTS, Check

# Loading the student's library in the runner (its static initializers run then), and each reply.
LOAD_TIMEOUT_S = 60
# The layouts an exercise checks: a transposed view reaches the kernel as a contiguous copy, as a
# strided one does, so it would test the harness, not the student's kernel.
EXERCISE_LAYOUTS = ("contiguous", "strided", "offset")


def count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def shown(path) -> str:
    """A path as the student would type it: relative to the working directory when inside it."""
    p = pathlib.Path(path)
    try:
        return str(p.resolve().relative_to(pathlib.Path.cwd()))
    except (ValueError, OSError):
        return str(p)


def load_timeout_s() -> float:
    return float(os.environ.get("WORKBENCH_LOAD_TIMEOUT_S") or LOAD_TIMEOUT_S)


@dataclass
class Built:
    """The student's file built, not loaded: what the checker knows of it from its text and files."""
    op: str
    name: str
    source: pathlib.Path
    library: pathlib.Path
    build_log: pathlib.Path
    built: bool
    seconds: float
    key: str
    device: str
    dtypes: tuple[str, ...]
    style: str = "variant"          # or "extension" (torch/extension.h, the course's way)

    @property
    def build_id(self) -> str:
        return self.key[:10]


class Submission:
    """What the judge holds of one submission: its own folder (read-only to the sandbox) with the
    hashed copy of the library and what the runner needs, the sandbox, and the student's runner."""

    def __init__(self, ex: Exercise, built: Built, sandboxed: bool):
        self.ex, self.built = ex, built
        self.folder = pathlib.Path(tempfile.mkdtemp(prefix="wb-judge-"))
        os.chmod(self.folder, 0o755)  # the sandbox may run as nobody: it reads, never writes, here
        self.library = self._copy(built.library, "student" + built.library.suffix)
        self.digest = _sha256(self.library)
        self.source = self._copy(built.source, "source" + built.source.suffix)
        self.sandbox = sandbox_.Sandbox(scratch=self.folder / "scratch", readable=(self.folder,),
                                        gpu=toolchain.gpu_available()) if sandboxed else None
        if self.sandbox is not None:
            self.sandbox.prepare()
        self.remote: Remote | None = None
        self._kernel = None
        self.reported: dict = {}

    def _copy(self, path: pathlib.Path, name: str) -> pathlib.Path:
        dest = self.folder / name
        shutil.copyfile(path, dest)
        os.chmod(dest, 0o444)
        return dest

    def unchanged(self) -> bool:
        """The copy the rules read and the runner loaded is still the one hashed before it ran."""
        return _sha256(self.library) == self.digest

    def start(self, *, prefix=(), network: bool = False):
        """A runner holding the student's library, in the sandbox: (runner, what it read of it).
        network: sharing a profiler's network namespace (judge/observe.py), as the checker's user."""
        sb = self.sandbox
        if sb is not None and network:
            sb = sandbox_.Sandbox(**{**sb.__dict__, "network": True, "drop": False, "clear": False,
                                     "scratch": self.folder / "scratch-observed"})
            sb.prepare()
        if self.built.style == "extension":
            address = {"op": self.ex.op, "name": self.built.name, "style": "extension", "source": str(self.source),
                       "library": str(self.library)}
            return start_python(address, self.built.name, sandbox=sb, prefix=prefix, timeout_s=load_timeout_s())
        runner = self._copy_once(runner_exe(), "wb_runner", executable=True)
        binding = self._copy_once(binding_library(self.ex.op), "binding.so")
        return start_cxx(self.ex.op, self.library, binding, self.built.name, executable=runner, sandbox=sb,
                         prefix=prefix, timeout_s=load_timeout_s())

    def _copy_once(self, path: pathlib.Path, name: str, executable: bool = False) -> pathlib.Path:
        dest = self.folder / name
        if not dest.exists():
            self._copy(path, name)
            os.chmod(dest, 0o555 if executable else 0o444)
        return dest

    def runner(self):
        """The student's runner (started on first use, again after one was lost)."""
        if self.remote is None:
            self.remote = Remote(self.ex.op, self.built.device, lambda: self.start())
        return self.remote.ensure()

    def kernel(self, dtypes):
        """The Kernel the checks call: every call made by the student's runner, on this process's memory."""
        if self.remote is None:
            self.remote = Remote(self.ex.op, self.built.device, lambda: self.start())
        if self._kernel is None or self._kernel.dtypes != tuple(dtypes):
            self._kernel = remote_kernel(self.remote, self.built.name, dtypes, source=self.built.source)
        return self._kernel

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def runner_exe() -> pathlib.Path:
    from ..judge.runner import runner_executable

    return runner_executable()


def binding_library(op: str) -> pathlib.Path:
    from ..ship import ndarray_build

    src = registry.sources(op)
    return ndarray_build.build_host_library(f"ndarray-binding/{op}", "ndarray-binding", src.binding,
                                            [config.BINDINGS_DIR, config.COMMON_DIR, src.kernel_dir])[0]


def reference(ex: Exercise, python: bool = False) -> Remote:
    """The exercise's reference variant in a runner of the student's runner's kind (python: the
    Python runner, as an extension's): in-tree code, the same protocol, no sandbox needed."""
    from ..judge.runner import isolated

    if python:
        device = registry.static_variant(ex.op, registry.variant_sources(ex.op)[ex.reference]).device
        address = {"op": ex.op, "name": ex.reference}
        return Remote(ex.op, device, lambda: start_python(address, ex.reference))
    return isolated(ex.op, ex.reference).module


def _resources(log: pathlib.Path) -> str:
    """Registers and spills of the build, from ptxas's report in its build log."""
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
    """(Built or None, the build check): the student's file compiled (or found in the cache), never
    loaded here. A variant of the workbench's ABI is built torch-free (the runner's kind of
    library); an extension written the course's way by torch's cpp_extension."""
    import time

    from ..errors import BuildError, WorkbenchError
    from ..run.extension import build_extension, is_extension_source

    if source.suffix == ".cu" and not toolchain.can_build_cuda():
        why = "torch has no CUDA" if not toolchain.torch_has_cuda() else "no nvcc found (set CUDA_HOME)"
        return None, Check("build", "skipped", f"this machine cannot build CUDA code: {why}")
    extension = is_extension_source(source.read_text(errors="replace"))
    start = time.perf_counter()
    try:
        if extension:
            b = build_extension(ex.op, source, name=name)
            built = Built(ex.op, name, source, b.library, b.build_dir / "build.log", b.built, b.seconds, b.key,
                          b.device, (), "extension")
        else:
            built = _build_variant(ex.op, source, name)
            built.seconds = time.perf_counter() - start
    except BuildError as e:
        where = f"{shown(e.file)}:{e.line}" if e.file and e.line else shown(e.file) if e.file else "build"
        first, *rest = (e.first_error or "failed").splitlines() or ["failed"]
        return None, Check("build", "FAIL", f"{where}: {first}",
                           [f"{where}: error: {first}", *[f"    {ln}" for ln in rest], f"full compiler log: {e.log_path}"])
    except (ValueError, WorkbenchError) as e:
        first, *rest = (str(e) or type(e).__name__).splitlines()
        return None, Check("build", "FAIL", first, [first, *rest])
    how = f"built in {built.seconds:.1f} s" if built.built else "unchanged, cached build"
    if extension:
        how += (" as a torch extension (cpp_extension compiles the torch headers: tens of seconds cold; the "
                "workbench's variant ABI builds in a few)")
        return built, Check("build", "ok", f"{how}; {_resources(built.build_log)}" if built.device == "cuda" else how)
    return built, Check("build", "ok", f"{how}; {_resources(built.build_log)}" if built.device == "cuda" else how)


def _build_variant(op: str, source: pathlib.Path, name: str) -> Built:
    from ..build.arch import arch_list
    from ..ship import ndarray_build

    info = registry.static_variant(op, source, name)
    include = [config.COMMON_DIR, registry.sources(op).kernel_dir, source.parent]
    if source.suffix == ".cu":
        lib, bdir, built, key = ndarray_build.build_cuda_library(f"exercise-{op}/{name}", source, include, arch_list())
    else:
        lib, bdir, built, key = ndarray_build.build_host_library(f"exercise-{op}/{name}", "ndarray-variant", source,
                                                                 include)
    return Built(op, name, source, lib, bdir / "build.log", built, 0.0, key, info.device, info.dtypes)


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
    shape = "x".join(map(str, c.shape)) or "scalar"
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


