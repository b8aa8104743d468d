"""How a piece is compiled: each compiler kind turns a Piece into a library in a staging folder.

- "cpp_extension": torch.utils.cpp_extension.load (so flags, include paths and link lines are
  PyTorch's own), in a fresh staging folder nobody else uses (so load()'s own lock file can never
  be stale), its ninja run guarded (guard.py); what the compilers read comes from ninja's deps log.
- "raw": one compiler command with -MD -MF (nvcc and the host compiler alike), for the NumPy front
  end's libraries, which link no torch; what the compiler read comes from its depfile.

Either way the compiler's output (ptxas's register and spill report included) is the build's
build.log, and a failure is a BuildError naming the first compiler error's file and line.
COMPILERS maps Piece.compiler to its function; the third kind, "nvrtc" (nvrtc_tier.py: device code by
NVRTC, the host side by the host compiler, a raw piece), builds pieces of its own, so pipeline.py adds
it with get_or_build at hand.
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import re
import subprocess
import time
import uuid
from dataclasses import dataclass, field

from . import toolchain
from ..errors import BuildError, WorkbenchError
from . import records
from .guard import capture_output, environment, guarded_cpp_extension, run_guarded
from .piece import CPP_EXTENSION, RAW, Piece

# nvcc:  kernels/x.cu(12): error: identifier "foo" is undefined
_NVCC_ERROR = re.compile(r"^(?P<file>[^\s(:][^(:\n]*)\((?P<line>\d+)\): (?:catastrophic )?error:?\s*(?P<msg>.*)$", re.M)
# gcc / clang / ptxas:  path:12:5: error: ...
_GCC_ERROR = re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$", re.M)
_OTHER_ERROR = re.compile(r"^.*(?:undefined reference|ld returned|ptxas (?:fatal|error)|error:).*$", re.M | re.I)


def first_error(log: str, rename: dict[str, str] | None = None) -> tuple[str | None, int | None, str]:
    """(file, line, message with up to three following lines) of the first compiler error in a log."""
    best = None
    for pattern in (_NVCC_ERROR, _GCC_ERROR):
        m = pattern.search(log)
        if m and (best is None or m.start() < best.start()):
            best = m
    if best is None:
        m = _OTHER_ERROR.search(log)
        tail = m.group(0).strip() if m else "\n".join(log.strip().splitlines()[-15:])
        return None, None, tail
    follow = [ln for ln in log[best.end():].splitlines()[1:4] if ln.strip() and not ln.startswith(("[", "ninja"))]
    file = best.group("file").strip()
    for path, label in (rename or {}).items():
        if os.path.basename(file) == os.path.basename(path):
            file = label
    return file, int(best.group("line")), "\n".join([best.group("msg").strip(), *follow])


@dataclass
class Compiled:
    """A library linked in its staging folder, not yet published."""
    library: pathlib.Path
    seconds: float
    deps: list[str]                        # every file the compiler read
    record: dict = field(default_factory=dict)   # what this compiler kind adds to the build record
    unique_name: bool = False              # the library's file name is this build's own already


def _failure(piece: Piece, log_path: pathlib.Path, output: str, rename, last_good) -> BuildError:
    file, line, message = first_error(output, rename)
    return BuildError(piece.label, file, line, message, log_path, last_good)


def compile_cpp_extension(piece: Piece, staging: pathlib.Path, key: str, *, rename: dict | None = None,
                          last_good: str | None = None) -> Compiled:
    """Compile and link the piece through cpp_extension.load (which also loads it into this process,
    unless built_not_loaded() is in effect). Raises BuildError naming the first compiler error."""
    toolchain.cuda_home()  # sets CUDA_HOME before cpp_extension reads it
    log_path = staging / "build.log"
    # A name of this build's own (cpp_extension renames a second build of a name in one process;
    # dlopen would hand back the library already loaded under a path).
    name = f"wb_{piece.label.replace('/', '_')}_{key[:12]}_{uuid.uuid4().hex[:6]}"
    start = time.perf_counter()
    try:
        # nvcc's depfile (-MD) is what the cache's record of this build's dependencies comes from.
        with environment(TORCH_CUDA_ARCH_LIST=piece.arch_list if piece.with_cuda else None,
                         TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES=None), capture_output(log_path):
            from torch.utils import cpp_extension  # its import-time warnings belong in the log

            if piece.with_cuda and cpp_extension.CUDA_HOME is None:
                cpp_extension.CUDA_HOME = toolchain.cuda_home()
            libstdcxx = toolchain.loaded_libstdcxx()
            with guarded_cpp_extension(cpp_extension):
                cpp_extension.load(
                    name=name, sources=[str(s) for s in piece.sources], extra_cflags=list(piece.cflags),
                    extra_cuda_cflags=list(piece.cuda_cflags),
                    extra_ldflags=[*piece.link, *([libstdcxx] if libstdcxx else [])],
                    extra_include_paths=[str(d) for d in piece.include_dirs], build_directory=str(staging),
                    verbose=True, with_cuda=piece.with_cuda, is_python_module=False)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a BuildError with the log
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        raise _failure(piece, log_path, log + "\n" + str(exc), rename, last_good) from None
    seconds = time.perf_counter() - start
    # What the compilers read (ninja's log of their depfiles): a hit whose dependencies changed is
    # stale, whatever way a header was included.
    deps = records.ninja_deps(staging)
    if deps is None:
        raise WorkbenchError(f"{piece.label}: ninja recorded no dependency list for this build (its .ninja_deps "
                             f"is missing), so a later edit of a header could not be seen; is "
                             f"TORCH_EXTENSION_SKIP_NVCC_GEN_DEPENDENCIES set, or ninja older than 1.3?")
    return Compiled(staging / f"{name}.so", seconds, deps + [str(s) for s in piece.sources],
                    {"flags": list(piece.cflags), "cuda_flags": list(piece.cuda_cflags) if piece.with_cuda else []},
                    unique_name=True)


def _version_line(tool: str) -> str:
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60).stdout
    return next((ln.strip() for ln in out.splitlines() if ln.strip()), "unknown")


def compile_raw(piece: Piece, staging: pathlib.Path, key: str, *, rename: dict | None = None,
                last_good: str | None = None) -> Compiled:
    """`command` + `cflags` + -MD -MF + includes + the source + `link`, guarded. Raises BuildError
    naming the first compiler error."""
    (source,) = piece.sources
    out = staging / f"{piece.label.replace('/', '_')}{piece.suffix}"
    # -MD -MF: the compiler lists every file it read (nvcc and the host compiler alike); the record
    # keeps them with their digests, so an edit of any of them makes this build stale.
    depfile = staging / "deps.d"
    cmd = [*piece.command, *piece.cflags, "-MD", "-MF", str(depfile), *[f"-I{d}" for d in piece.include_dirs],
           str(source), "-o", str(out), *piece.link]
    log_path = staging / "build.log"
    cwd = pathlib.Path.cwd()
    start = time.perf_counter()
    proc = run_guarded(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log_path.write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    seconds = time.perf_counter() - start
    if proc.returncode != 0 or not out.exists():
        raise _failure(piece, log_path, proc.stdout + proc.stderr, rename or {str(source): str(source)}, last_good)
    try:
        deps = records.parse_depfile(depfile.read_text(), cwd)
    except OSError as e:
        raise WorkbenchError(f"{piece.label}: the compiler wrote no dependency list ({depfile}: {e.strerror}); "
                             f"the build cannot be cached without it. Does {piece.command[-1]} take -MD -MF?") from None
    return Compiled(out, seconds, deps + [str(source)],
                    {"compiler_version": _version_line(piece.command[-1]), "command": cmd})


COMPILERS = {CPP_EXTENSION: compile_cpp_extension, RAW: compile_raw}


@contextlib.contextmanager
def built_not_loaded():
    """While it lasts, a cpp_extension build links the library and stops there: cpp_extension.load
    ends by loading what it built into the building process (torch.ops.load_library: the library's
    static initializers would run here, and under the build lock); here it returns the path
    instead. Fails closed: if this torch has no such step to replace, nothing is built, and a load
    that happens anyway raises. For a process that builds and never loads (the exercise checker's;
    it builds in one thread)."""
    import torch
    from torch.utils import cpp_extension

    if not callable(getattr(cpp_extension, "_import_module_from_library", None)):
        raise WorkbenchError("cannot build without loading with this torch (no cpp_extension._import_module_from_library "
                             f"in torch {torch.__version__}); refusing to build code this process must not run")

    def path_only(module_name, path, is_python_module):
        if is_python_module:
            raise WorkbenchError("build_source builds libraries, not Python modules")
        return os.path.join(path, f"{module_name}{cpp_extension.LIB_EXT}")

    def refuse(path):
        raise WorkbenchError(f"refused to load {path}: this process builds without loading")

    saved, own = cpp_extension._import_module_from_library, vars(torch.ops).get("load_library")
    cpp_extension._import_module_from_library, torch.ops.load_library = path_only, refuse
    try:
        yield
    finally:
        cpp_extension._import_module_from_library = saved
        if own is None:
            del torch.ops.load_library  # the class's method again
        else:
            torch.ops.load_library = own
