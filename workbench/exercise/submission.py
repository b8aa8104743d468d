"""The student's file built and held: build (the first check; the file compiled here, never loaded
here), Built (what the checker knows of it from its text and files), Submission (the hashed copy of
the library in the judge's own folder, the sandbox, the student's runner), and the reference
variant's runner the speed check times against.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import tempfile
from dataclasses import dataclass

from ..build import toolchain
from ..explain import ptxas
from ..judge import sandbox as sandbox_
from ..judge.remote import Remote, kernel as remote_kernel
from ..judge.start import binding_library, build_library, isolated, runner_executable, start_cxx, start_python
from ..model import registry
from .registration import Exercise
from .report import Check

# Loading the student's library in the runner (its static initializers run then), and each reply.
LOAD_TIMEOUT_S = 60

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
        network: sharing a profiler's network namespace (judge/ncu_watch.py), as the checker's user."""
        sb = self.sandbox
        if sb is not None and network:
            sb = sandbox_.Sandbox(**{**sb.__dict__, "network": True, "drop": False, "clear": False,
                                     "scratch": self.folder / "scratch-observed"})
            sb.prepare()
        if self.built.style == "extension":
            address = {"op": self.ex.op, "name": self.built.name, "style": "extension", "source": str(self.source),
                       "library": str(self.library)}
            return start_python(address, self.built.name, sandbox=sb, prefix=prefix, timeout_s=load_timeout_s())
        runner = self._copy_once(runner_executable(), "wb_runner", executable=True)
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


def reference(ex: Exercise, python: bool = False) -> Remote:
    """The exercise's reference variant in a runner of the student's runner's kind (python: the
    Python runner, as an extension's): in-tree code, the same protocol, no sandbox needed."""
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
    from ..run.byo import build_extension, is_extension_source

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


def _build_variant(op: str, source: pathlib.Path, name: str) -> Built:
    info = registry.static_variant(op, source, name)
    lib, bdir, built, key = build_library(op, source, name, "exercise")
    return Built(op, name, source, lib, bdir / "build.log", built, 0.0, key, info.device, info.dtypes)
