"""One build: a library compiled and linked by torch.utils.cpp_extension.load, its log captured.

Every build goes through `load()` (so flags, include paths and link lines are PyTorch's own), in a
fresh staging directory that nobody else uses (so load()'s own lock file can never be stale), with
the compiler's output (including ptxas's register and spill report) captured into build.log.
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import re
import sys
import time

from . import toolchain
from .errors import BuildError

# nvcc:  kernels/x.cu(12): error: identifier "foo" is undefined
_NVCC_ERROR = re.compile(r"^(?P<file>[^\s(:][^(:\n]*)\((?P<line>\d+)\): (?:catastrophic )?error:?\s*(?P<msg>.*)$", re.M)
# gcc / clang / ptxas:  path:12:5: error: ...
_GCC_ERROR = re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$", re.M)
_OTHER_ERROR = re.compile(r"^.*(?:undefined reference|ld returned|ptxas (?:fatal|error)|error:).*$", re.M | re.I)


@contextlib.contextmanager
def _capture_output(log_path: pathlib.Path):
    """Send everything the build prints, from Python or from child processes (ninja writes to
    file descriptor 1 when verbose), to `log_path`; restore the streams afterwards."""
    sys.stdout.flush()
    sys.stderr.flush()
    with open(log_path, "ab", buffering=0) as log:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            with open(log.fileno(), "w", closefd=False) as text, \
                    contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
                yield
                text.flush()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


@contextlib.contextmanager
def _env(**values: str | None):
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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


def build_library(*, label: str, name: str, sources: list[pathlib.Path], include_dirs: list[pathlib.Path],
                  cflags: list[str], cuda_cflags: list[str], with_cuda: bool, arch_list: str | None,
                  build_dir: pathlib.Path, rename: dict[str, str] | None = None,
                  last_good: str | None = None) -> tuple[pathlib.Path, float]:
    """Compile and link `sources` into build_dir/<name>.so through cpp_extension.load (which also
    loads it into this process). Returns (library path, seconds). Raises BuildError naming the
    first compiler error on failure."""
    toolchain.cuda_home()  # sets CUDA_HOME before cpp_extension reads it
    log_path = build_dir / "build.log"
    start = time.perf_counter()
    try:
        with _env(TORCH_CUDA_ARCH_LIST=arch_list if with_cuda else None), _capture_output(log_path):
            from torch.utils import cpp_extension  # its import-time warnings belong in the log

            if with_cuda and cpp_extension.CUDA_HOME is None:
                cpp_extension.CUDA_HOME = toolchain.cuda_home()
            libstdcxx = toolchain.loaded_libstdcxx()
            cpp_extension.load(
                name=name,
                sources=[str(s) for s in sources],
                extra_cflags=cflags,
                extra_cuda_cflags=cuda_cflags,
                extra_ldflags=[libstdcxx] if libstdcxx else [],
                extra_include_paths=[str(d) for d in include_dirs],
                build_directory=str(build_dir),
                verbose=True,
                with_cuda=with_cuda,
                is_python_module=False,
            )
    except Exception as exc:  # noqa: BLE001 - every failure becomes a BuildError with the log
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        file, line, message = first_error(log + "\n" + str(exc), rename)
        raise BuildError(label, file, line, message, log_path, last_good) from None
    return build_dir / f"{name}.so", time.perf_counter() - start
