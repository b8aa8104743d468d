"""How a piece is compiled into a library in a staging folder, one function per compiler kind.

"cpp_extension": a torch extension, compiled as torch.utils.cpp_extension.load would, by a
build.ninja of our own (what the compilers read: ninja's deps log). "raw": one compiler command
with -MD -MF, for the NumPy front end's libraries, which link no torch. Either way the compiler's
output is the build's build.log, and a failure is a BuildError naming the first error's file and
line. The third kind, "nvrtc", is nvrtc_tier.py.
"""
from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sysconfig
import time
import uuid
from dataclasses import dataclass, field

from ..errors import BuildError, WorkbenchError
from . import toolchain
from .guard import run_guarded
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


def _ninja_path(path) -> str:
    """A path as a ninja build line needs it (space, colon and $ escaped)."""
    return str(path).replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _ninja_file(piece: Piece, name: str) -> str:
    """A build.ninja that builds the piece as cpp_extension.load would, from its public functions."""
    from torch.utils import cpp_extension

    cuda_home = toolchain.cuda_home() if piece.with_cuda else None
    system = [*cpp_extension.include_paths("cpu"), sysconfig.get_paths()["include"]]
    lib_dirs = cpp_extension.library_paths("cpu")
    if cuda_home:
        system.append(os.path.join(cuda_home, "include"))
        lib_dirs.append(os.path.join(cuda_home, "lib64"))
    common = [f"-DTORCH_EXTENSION_NAME={name}", "-DTORCH_API_INCLUDE_EXTENSION_H",
              *[f"-I{shlex.quote(str(d))}" for d in piece.include_dirs],
              *[f"-isystem {shlex.quote(d)}" for d in system]]
    cflags = [*common, "-fPIC", "-std=c++20", *piece.cflags]
    libs = ["-lc10", "-lc10_cuda", "-ltorch_cpu", "-ltorch_cuda"] if piece.with_cuda else ["-lc10", "-ltorch_cpu"]
    libs += ["-ltorch", "-ltorch_python"] + (["-lcudart"] if piece.with_cuda else [])
    libstdcxx = toolchain.loaded_libstdcxx()
    ldflags = ["-shared", *piece.link, *([libstdcxx] if libstdcxx else []), *[f"-L{d}" for d in lib_dirs], *libs]
    lines = ["ninja_required_version = 1.3", f"cxx = {cpp_extension.get_cxx_compiler()}",
             f"cflags = {' '.join(cflags)}", f"ldflags = {' '.join(ldflags)}",
             "rule compile", "  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out", "  depfile = $out.d",
             "  deps = gcc",
             "rule link", "  command = $cxx $in $ldflags -o $out"]
    if piece.with_cuda:
        # The arch flags from the piece's arch list, unless its flags name an arch already (as torch does).
        archs = [] if any("arch" in f for f in piece.cuda_cflags) else toolchain.gencode_flags(piece.arch_list)
        cuda_flags = [*common, *cpp_extension.COMMON_NVCC_FLAGS, *archs, "--compiler-options", "'-fPIC'",
                      *piece.cuda_cflags]
        if not any(f.startswith("-std=") for f in cuda_flags):
            cuda_flags.append("-std=c++20")
        if os.environ.get("CC"):
            cuda_flags = ["-ccbin", os.environ["CC"], *cuda_flags]
        lines += [f"nvcc = {toolchain.nvcc_path()}", f"cuda_cflags = {' '.join(cuda_flags)}",
                  "rule cuda_compile", "  command = $nvcc -MD -MF $out.d $cuda_cflags -c $in -o $out",
                  "  depfile = $out.d", "  deps = gcc"]
    objects = []
    for source in piece.sources:
        cuda = piece.with_cuda and source.suffix == ".cu"
        obj = f"{source.stem}.cuda.o" if cuda else f"{source.stem}.o"
        objects.append(obj)
        lines.append(f"build {obj}: {'cuda_compile' if cuda else 'compile'} {_ninja_path(source.resolve())}")
    lines += [f"build {name}.so: link {' '.join(objects)}", f"default {name}.so"]
    return "\n".join(lines) + "\n"


def parse_depfile(text: str, cwd: pathlib.Path) -> list[str]:
    """The prerequisites of a make-style depfile (gcc -MD, nvcc -MD), as absolute paths."""
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    out: list[str] = []
    for line in text.splitlines():
        if ":" not in line:
            continue
        # the rule's target ends at the first ': '; a path's spaces are escaped as '\ '
        _, _, rest = line.partition(": ") if ": " in line else line.partition(":")
        out += [re.sub(r"\\(.)", r"\1", token) for token in re.findall(r"(?:\\.|\S)+", rest)]
    return [os.path.normpath(p if os.path.isabs(p) else cwd / p) for p in out]


def ninja_deps(build_dir: pathlib.Path) -> list[str] | None:
    """The files ninja recorded from the compilers' depfiles (`deps = gcc`); None without a deps log."""
    ninja = shutil.which("ninja")
    if ninja is None or not (build_dir / ".ninja_deps").exists():
        return None
    proc = subprocess.run([ninja, "-C", str(build_dir), "-t", "deps"], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return None
    paths = [ln.strip() for ln in proc.stdout.splitlines() if ln.startswith("    ") and ln.strip()]
    return [os.path.normpath(p if os.path.isabs(p) else build_dir / p) for p in paths]


def compile_cpp_extension(piece: Piece, staging: pathlib.Path, key: str, *, rename: dict | None = None,
                          last_good: str | None = None) -> Compiled:
    """ninja run guarded in the staging folder; nothing is loaded into this process."""
    if shutil.which("ninja") is None:
        raise WorkbenchError(f"{piece.label}: ninja is not on PATH; a torch extension's build needs it "
                             f"(pip install ninja)")
    log_path = staging / "build.log"
    # A name of this build's own: TORCH_EXTENSION_NAME (a PYBIND11_MODULE's name) and the library's.
    name = f"wb_{piece.label.replace('/', '_')}_{key[:12]}_{uuid.uuid4().hex[:6]}"
    (staging / "build.ninja").write_text(_ninja_file(piece, name))
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = run_guarded(["ninja", "-v"], cwd=staging, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise _failure(piece, log_path, log_path.read_text(errors="replace"), rename, last_good)
    deps = ninja_deps(staging)
    if deps is None:
        raise WorkbenchError(f"{piece.label}: ninja recorded no dependency list for this build (its .ninja_deps "
                             f"is missing), so a later edit of a header could not be seen; is ninja older than 1.3?")
    return Compiled(staging / f"{name}.so", seconds, deps + [str(s) for s in piece.sources],
                    {"flags": list(piece.cflags), "cuda_flags": list(piece.cuda_cflags) if piece.with_cuda else []},
                    unique_name=True)


def _version_line(tool: str) -> str:
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60).stdout
    return next((ln.strip() for ln in out.splitlines() if ln.strip()), "unknown")


def compile_raw(piece: Piece, staging: pathlib.Path, key: str, *, rename: dict | None = None,
                last_good: str | None = None) -> Compiled:
    """`command` + `cflags` + -MD -MF + includes + the source + `link`, guarded."""
    (source,) = piece.sources
    out = staging / f"{piece.label.replace('/', '_')}{piece.suffix}"
    # -MD -MF: every file it read, recorded with its digest: an edit of any makes this build stale.
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
        deps = parse_depfile(depfile.read_text(), cwd)
    except OSError as e:
        raise WorkbenchError(f"{piece.label}: the compiler wrote no dependency list ({depfile}: {e.strerror}); "
                             f"the build cannot be cached without it. Does {piece.command[-1]} take -MD -MF?") from None
    return Compiled(out, seconds, deps + [str(source)],
                    {"compiler_version": _version_line(piece.command[-1]), "command": cmd})


COMPILERS = {CPP_EXTENSION: compile_cpp_extension, RAW: compile_raw}
