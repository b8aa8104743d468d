"""Builds for the NumPy front end, without torch: the host compiler for CPU variants, bindings and
the pybind11 extension module, nvcc for CUDA variants.

The same content-keyed cache as the torch path (cache.py: keys over the source and every header it
reaches, flock'd builds published by renaming a finished directory, warm hits checked by size and
sha256), with a toolchain of its own in the key: no torch, but the host compiler (its resolved
path, size and mtime), nvcc's version line, the Python tag, pybind11's version (for the module)
and the exact flags. Libraries
built here link no torch library, so they are separate cache entries from the harness's builds of
the same sources.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time

from . import cache, config, toolchain
from .build import first_error, run_guarded
from .errors import BuildError, WorkbenchError

MODULE_NAME = "wb_ndarray_ext"   # PYBIND11_MODULE's name in bindings/ndarray/ndarray_module.cpp
MODULE_SOURCE = config.BINDINGS_DIR / "ndarray" / "ndarray_module.cpp"
CPU_FLAGS = ["-O3", "-std=c++17", "-fPIC", "-shared"]
CUDA_FLAGS = ["-O3", "-Xptxas=-v", "-std=c++17", "-Xcompiler", "-fPIC", "-shared", "-cudart", "shared"]
MODULE_FLAGS = ["-O2", "-std=c++17", "-fPIC", "-shared", "-fvisibility=hidden"]
DEFAULT_ARCH_LIST = "8.0;9.0"   # as the torch path without a GPU to ask (toolchain.default_arch_list)


def host_compiler() -> list[str]:
    """$CXX (a command: "ccache g++" is two words), else c++ on PATH."""
    cxx = shlex.split(os.environ.get("CXX") or "") or [shutil.which("c++") or shutil.which("g++") or ""]
    if not shutil.which(cxx[0]):
        raise WorkbenchError(f"no C++ compiler found ({cxx[0] or 'c++'}): set CXX or put c++ on PATH")
    return cxx


def _identity(tool: str) -> str:
    """The compiler's resolved path, size and mtime: a changed compiler changes the key, and a warm
    load runs no subprocess (its --version line goes into the build record, at build time)."""
    path = os.path.realpath(shutil.which(tool) or tool)
    st = os.stat(path)
    return f"{path}|{st.st_size}|{st.st_mtime_ns}"


def _version_line(tool: str) -> str:
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60).stdout
    return next((ln.strip() for ln in out.splitlines() if ln.strip()), "unknown")


def cuda_lib_dir() -> pathlib.Path | None:
    home = toolchain.cuda_home()
    if not home:
        return None
    for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
        d = pathlib.Path(home) / sub
        if (d / "libcudart.so").exists():
            return d
    return None


def can_build_cuda() -> bool:
    """nvcc and the CUDA runtime library are installed (a GPU is not needed to build)."""
    return toolchain.nvcc_path() is not None and cuda_lib_dir() is not None


@functools.lru_cache(maxsize=None)
def _toolchain(with_cuda: bool, module: bool) -> dict:
    tc = {"front_end": "ndarray", "cxx": _identity(host_compiler()[-1]), "python": sys.implementation.cache_tag,
          "platform": sys.platform}
    if with_cuda:
        tc["nvcc"] = toolchain.nvcc_version()
    if module:
        import pybind11

        tc["pybind11"] = pybind11.__version__
    return tc


def gencode_flags(arch_list: str) -> list[str]:
    """nvcc -gencode flags for a TORCH_CUDA_ARCH_LIST-style list: "8.0;9.0+PTX", "9.0a" ..."""
    flags = []
    for entry in re.split(r"[;\s,]+", arch_list.strip()):
        if not entry:
            continue
        m = re.fullmatch(r"(\d+)\.(\d+)([a-z]?)(\+PTX)?", entry)
        if not m:
            raise ValueError(f"arch list entries must look like 8.0, 9.0a or 9.0+PTX; got {entry!r} in {arch_list!r}")
        num = f"{m.group(1)}{m.group(2)}{m.group(3)}"
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if m.group(4):
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    if not flags:
        raise ValueError(f"the arch list is empty: {arch_list!r}")
    return flags


def build(*, label: str, kind: str, source: pathlib.Path, include_dirs: list[pathlib.Path], compiler: list[str],
          flags: list[str], link: list[str] = (), toolchain_fields: dict, arch_list: str | None = None,
          suffix: str = ".so") -> tuple[pathlib.Path, pathlib.Path, bool, str]:
    """(library, build dir, built now, key): the cached build of one source, or a fresh one made
    under the key's lock and published. `compiler` + `flags` + includes + source + `link` is the
    command; everything but paths goes into the key."""
    key = cache.content_key(kind=kind, sources=[source], include_dirs=include_dirs,
                            flags=list(compiler[1:]) + flags + list(link), arch_list=arch_list,
                            toolchain=toolchain_fields)
    final = cache.build_dir_for(label, key)
    lib, _, problem = cache.lookup(final)
    if lib is not None:
        return lib, final, False, key
    with cache.writing(label), cache.file_lock(cache.lock_path(key), what=label):
        lib, _, problem = cache.lookup(final)
        if lib is not None:
            return lib, final, False, key
        if cache.import_shared(final, label):  # a shared cache the user opted into, checked by its manifest
            lib, _, problem = cache.lookup(final)
            if lib is not None:
                return lib, final, False, key
        if problem:
            cache.progress(f"{label}: cached build unusable ({problem}); rebuilding")
        staging = cache.new_staging_dir(label, key)
        out = staging / f"{label.replace('/', '_')}{suffix}"
        # -MD -MF: the compiler lists every file it read (nvcc and the host compiler alike); the record
        # keeps them with their digests, so an edit of any of them makes this build stale.
        depfile = staging / "deps.d"
        cmd = [*compiler, *flags, "-MD", "-MF", str(depfile), *[f"-I{d}" for d in include_dirs], str(source),
               "-o", str(out), *link]
        cache.progress(f"{label}: compiling {source.name} ({pathlib.Path(compiler[-1]).name}) ...")
        start = time.perf_counter()
        log_path = staging / "build.log"
        cwd = pathlib.Path.cwd()
        proc = run_guarded(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        log_path.write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
        seconds = time.perf_counter() - start
        if proc.returncode != 0 or not out.exists():
            kept = cache.subdir("logs") / f"{label.replace('/', '-')}-{key[:12]}.log"
            log_path.replace(kept)
            cache.discard(staging)
            file, line, message = first_error(proc.stdout + proc.stderr, {str(source): str(source)})
            full = cache.full_disk_error(RuntimeError(proc.stdout + proc.stderr), label, kept)
            if full is not None:
                raise full from None
            raise BuildError(label, file, line, message, kept)
        record = {"label": label, "key": key, "kind": kind, "arch_list": arch_list, "toolchain": toolchain_fields,
                  "compiler_version": _version_line(compiler[-1]),
                  "command": cmd, "build_seconds": seconds, "created": time.time(), "sources": [str(source)]}
        try:
            deps = cache.parse_depfile(depfile.read_text(), cwd)
        except OSError as e:
            cache.discard(staging)
            raise WorkbenchError(f"{label}: the compiler wrote no dependency list ({depfile}: {e.strerror}); "
                                 f"the build cannot be cached without it. Does {compiler[-1]} take -MD -MF?") from None
        lib = cache.publish(staging, final, out, record, cache.dependency_record(deps + [str(source)], staging))
        cache.progress(f"{label}: built in {seconds:.1f} s")
        return lib, final, True, key


def build_module() -> tuple[pathlib.Path, pathlib.Path, bool]:
    """The pybind11 extension module, with CUDA (staging, events, device queries) where the CUDA
    runtime is installed, else host-only."""
    import pybind11

    with_cuda = can_build_cuda()
    includes = [pathlib.Path(pybind11.get_include()), pathlib.Path(sysconfig.get_paths()["include"]), config.COMMON_DIR]
    flags, link = list(MODULE_FLAGS), []
    if with_cuda:
        lib_dir = cuda_lib_dir()
        includes.append(pathlib.Path(toolchain.cuda_home()) / "include")
        flags.append("-DWB_NDARRAY_WITH_CUDA")
        link = [f"-L{lib_dir}", "-lcudart", f"-Wl,-rpath,{lib_dir}"]
    lib, bdir, built, _ = build(label="ndarray-module", kind="ndarray-module", source=MODULE_SOURCE,
                                include_dirs=includes, compiler=host_compiler(), flags=flags, link=link + ["-ldl"],
                                toolchain_fields=_toolchain(with_cuda, True),
                                suffix=sysconfig.get_config_var("EXT_SUFFIX") or ".so")
    return lib, bdir, built


def import_module(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_host_library(label: str, kind: str, source: pathlib.Path, include_dirs: list[pathlib.Path]):
    """A CPU variant or an op's binding: the host compiler, no torch, no CUDA."""
    return build(label=label, kind=kind, source=source, include_dirs=include_dirs, compiler=host_compiler(),
                 flags=CPU_FLAGS, toolchain_fields=_toolchain(False, False))


def build_cuda_library(label: str, source: pathlib.Path, include_dirs: list[pathlib.Path], arch_list: str):
    """A CUDA variant: nvcc, the shared CUDA runtime (one runtime in the process: the module's),
    found at run time through an rpath to the toolkit's."""
    if not can_build_cuda():
        raise WorkbenchError(f"{label} is a CUDA variant, and this machine cannot build CUDA code "
                             f"({'no nvcc found (CUDA_HOME / PATH)' if not toolchain.nvcc_path() else 'no libcudart.so'})")
    flags = CUDA_FLAGS + gencode_flags(arch_list) + os.environ.get("WORKBENCH_NVCC_FLAGS", "").split()
    return build(label=label, kind="ndarray-variant", source=source, include_dirs=include_dirs,
                 compiler=[toolchain.nvcc_path()], flags=flags, link=["-Xlinker", f"-rpath={cuda_lib_dir()}"],
                 toolchain_fields=_toolchain(True, False), arch_list=arch_list)
