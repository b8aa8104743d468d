"""Builds without torch, for the NumPy front end and the runner: the host compiler for CPU variants,
bindings and the pybind11 module, nvcc for CUDA variants. The torch path's pipeline
(build.get_or_build over a "raw" Piece), with a toolchain of its own in the key: the host
compiler, nvcc's version, the Python tag and pybind11's version instead of torch's.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import pathlib
import shlex
import shutil
import sys
import sysconfig

from .. import config
from ..build import toolchain
from ..build import Piece, get_or_build, user_nvcc_flags
from ..build.toolchain import gencode_flags
from ..build.piece import RAW
from ..errors import WorkbenchError

MODULE_NAME = "wb_ndarray_ext"   # PYBIND11_MODULE's name in bindings/ndarray/ndarray_module.cpp
MODULE_SOURCE = config.BINDINGS_DIR / "ndarray" / "ndarray_module.cpp"
CPU_FLAGS = ["-O3", "-fno-trapping-math", "-std=c++17", "-fPIC", "-shared"]  # as build/__init__.py's
CUDA_FLAGS = ["-O3", "-Xptxas=-v", "-std=c++17", "-Xcompiler", "-fPIC", "-shared", "-cudart", "shared"]
# --exclude-libs: a compiler that links its C++ runtime statically (the H100 machine's CXX does) would
# otherwise export it, and the module's own throws could bind to another library's runtime (one
# loaded before it, globally: the torch harness): its ValueError crashed pytest there.
MODULE_FLAGS = ["-O2", "-std=c++17", "-fPIC", "-shared", "-fvisibility=hidden", "-Wl,--exclude-libs,ALL"]


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


def _get_or_build(piece: Piece) -> tuple[pathlib.Path, pathlib.Path, bool, str]:
    """(library, build dir, built now, key) of a raw piece."""
    return get_or_build(piece)[:4]


def build_module() -> tuple[pathlib.Path, pathlib.Path, bool]:
    """The pybind11 module, with CUDA where the CUDA runtime is installed; it compiles in
    bindings/harness's torch-free call contract (call_contract.h, op_decl.cpp)."""
    import pybind11

    with_cuda = can_build_cuda()
    includes = [pathlib.Path(pybind11.get_include()), pathlib.Path(sysconfig.get_paths()["include"]), config.COMMON_DIR,
                config.BINDINGS_DIR / "harness"]
    flags, link = list(MODULE_FLAGS), []
    if with_cuda:
        lib_dir = cuda_lib_dir()
        includes.append(pathlib.Path(toolchain.cuda_home()) / "include")
        flags.append("-DWB_NDARRAY_WITH_CUDA")
        link = [f"-L{lib_dir}", "-lcudart", f"-Wl,-rpath,{lib_dir}"]
    lib, bdir, built, _ = _get_or_build(Piece(
        label="ndarray-module", kind="ndarray-module", sources=[MODULE_SOURCE], include_dirs=includes, compiler=RAW,
        command=host_compiler(), cflags=flags, link=[*link, "-ldl"], toolchain=_toolchain(with_cuda, True),
        suffix=sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    return lib, bdir, built


def import_module(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_host_library(label: str, kind: str, source: pathlib.Path, include_dirs: list[pathlib.Path]):
    """A CPU variant or an op's binding: the host compiler, no torch, no CUDA."""
    return _get_or_build(Piece(label=label, kind=kind, sources=[source], include_dirs=include_dirs, compiler=RAW,
                               command=host_compiler(), cflags=CPU_FLAGS, toolchain=_toolchain(False, False)))


def build_variant(label: str, source: pathlib.Path, include_dirs: list[pathlib.Path], arch_list, extra_flags=()):
    """A variant library: the host compiler for a .cpp; nvcc for a .cu (arch_list() is asked only
    then), with the shared CUDA runtime (the module's), found through an rpath to the toolkit's."""
    if pathlib.Path(source).suffix != ".cu":
        return build_host_library(label, "ndarray-variant", source, include_dirs)
    if not can_build_cuda():
        raise WorkbenchError(f"{label} is a CUDA variant, and this machine cannot build CUDA code "
                             f"({'no nvcc found (CUDA_HOME / PATH)' if not toolchain.nvcc_path() else 'no libcudart.so'})")
    arch = arch_list()
    cflags = [*CUDA_FLAGS, *gencode_flags(arch, sm90a=toolchain.needs_sm90a(source)), *user_nvcc_flags(), *extra_flags]
    return _get_or_build(Piece(
        label=label, kind="ndarray-variant", sources=[source], include_dirs=include_dirs, with_cuda=True, compiler=RAW,
        command=[toolchain.nvcc_path()], cflags=cflags, link=["-Xlinker", f"-rpath={cuda_lib_dir()}"],
        toolchain=_toolchain(True, False), arch_list=arch))


def build_binding(op: str):
    """An op's binding (bindings/<op>.cpp): what the NumPy front end and the C++ runner open."""
    from ..model import registry

    src = registry.sources(op)
    return build_host_library(f"ndarray-binding/{op}", "ndarray-binding", src.binding,
                              [config.BINDINGS_DIR, config.COMMON_DIR, src.kernel_dir])


RUNNER_SOURCE = config.BINDINGS_DIR / "runner" / "wb_runner.cu"


def build_runner(arch_list: str) -> tuple[pathlib.Path, pathlib.Path, bool, str]:
    """The runner (bindings/runner/wb_runner.cu), an executable: nvcc with the shared CUDA runtime
    where CUDA can be built, else the host compiler alone (CPU variants)."""
    includes = [config.COMMON_DIR, config.BINDINGS_DIR / "harness"]
    if can_build_cuda():
        return _get_or_build(Piece(
            label="runner", kind="runner", sources=[RUNNER_SOURCE], include_dirs=includes, with_cuda=True,
            compiler=RAW, command=[toolchain.nvcc_path()], arch_list=arch_list, suffix="",
            cflags=["-O2", "-std=c++17", "-DWB_RUNNER_WITH_CUDA", "-cudart", "shared", *gencode_flags(arch_list)],
            link=["-ldl", "-Xlinker", f"-rpath={cuda_lib_dir()}"], toolchain=_toolchain(True, False)))
    return _get_or_build(Piece(
        label="runner", kind="runner", sources=[RUNNER_SOURCE], include_dirs=includes, compiler=RAW,
        command=host_compiler(), cflags=["-O2", "-std=c++17", "-x", "c++"], link=["-x", "none", "-ldl", "-pthread"],
        toolchain=_toolchain(False, False), suffix=""))
