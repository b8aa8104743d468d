"""The toolchain a build depends on: torch, its CUDA, nvcc, the C++ ABI (the arch list: build/arch.py).

Everything here feeds the content key, so an upgrade of any part gives a fresh build instead of an
`undefined symbol` at load time. Queries are cached per process; the nvcc version is also cached on
disk keyed by the binary's path, size and mtime, so a warm load never runs a subprocess.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass

from .. import config
from . import schema, store


def _find_cuda_home() -> str | None:
    """CUDA_HOME if set; else the toolkit that the `nvcc` on PATH belongs to. `nvcc` may be a
    wrapper script, so look for the toolkit layout rather than trusting dirname(dirname(nvcc))."""
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env and (pathlib.Path(env) / "bin" / "nvcc").exists():
        return env
    candidates = []
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = pathlib.Path(nvcc).resolve()
        candidates.append(real.parent.parent)
        try:  # a shell wrapper that execs the real nvcc: take the path it names
            text = real.read_text(errors="ignore")[:4096] if real.stat().st_size < 4096 else ""
            for m in re.finditer(r"(/\S+)/bin/nvcc", text):
                candidates.insert(0, pathlib.Path(m.group(1)))
        except OSError:
            pass
    candidates.append(pathlib.Path("/usr/local/cuda"))
    for c in candidates:
        if (c / "bin" / "nvcc").exists() and (c / "include" / "cuda_runtime.h").exists():
            return str(c)
    return None


@functools.lru_cache(maxsize=None)
def cuda_home() -> str | None:
    home = _find_cuda_home()
    if home and not os.environ.get("CUDA_HOME"):
        # torch.utils.cpp_extension reads CUDA_HOME once, at its import.
        os.environ["CUDA_HOME"] = home
    return home


def nvcc_path() -> str | None:
    home = cuda_home()
    return str(pathlib.Path(home) / "bin" / "nvcc") if home else None


def nvcc_version() -> str | None:
    """`nvcc --version`'s build line, e.g. 'cuda_13.0.r13.0/compiler.36424714_0'."""
    nvcc = nvcc_path()
    if not nvcc:
        return None
    st = os.stat(nvcc)
    stamp = f"{nvcc}|{st.st_size}|{st.st_mtime_ns}"
    memo = None
    with contextlib.suppress(store.CacheError, OSError):  # only in a cache accepted as private, never via a link
        memo = store.subdir("toolchain") / "nvcc.json"
    with contextlib.suppress(schema.RecordError):
        data = schema.load(memo, schema.MEMO) if memo else {}
        if data.get("stamp") == stamp:
            return data["version"]
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"Build (\S+)", out) or re.search(r"release (\S+)", out)
    version = m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"
    if memo is not None:
        with contextlib.suppress(OSError):
            store.write_text(memo, json.dumps({"stamp": stamp, "version": version}))
    return version


def nvcc_release(version: str | None) -> tuple[int, int] | None:
    m = re.search(r"cuda_(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def torch_has_cuda() -> bool:
    import torch
    return torch.version.cuda is not None


@functools.lru_cache(maxsize=None)
def gpu_available() -> bool:
    import torch
    return torch_has_cuda() and torch.cuda.is_available()


# A CUDA variant whose source names this marker issues Hopper's arch-specific instructions (wgmma,
# setmaxnreg: the sm_90a target; kernels/matmul/hopper.cuh) and runs on compute capability 9.0 only.
SM90A_MARKER = "WB_NEEDS_SM90A"


def needs_sm90a(source) -> bool:
    try:
        return SM90A_MARKER in pathlib.Path(source).read_text(errors="replace")
    except (OSError, TypeError):
        return False


def unmet_arch(source, device) -> str | None:
    """Why a variant cannot run on this torch device (its sm_90a code needs compute capability 9.0),
    or None where it can."""
    if getattr(device, "type", device) != "cuda" or not needs_sm90a(source):
        return None
    import torch
    cap = torch.cuda.get_device_capability(device)
    return None if tuple(cap) == (9, 0) else f"needs an sm_90a GPU (Hopper); this one is sm_{cap[0]}{cap[1]}"


@dataclass(frozen=True)
class Toolchain:
    torch: str
    torch_cuda: str | None
    nvcc: str | None
    cxx11_abi: bool
    python: str
    platform: str
    libstdcxx: str | None  # linked explicitly into every build (see loaded_libstdcxx)

    def fields(self) -> dict:
        return asdict(self)


def abi() -> dict:
    """What a library built against torch must agree with to load (no `undefined symbol`), known
    without running anything: an installed wheel checks its prebuilt libraries against this where
    no nvcc may exist (prebuilt.py). Attribute reads, so not cached: current() caches its copy."""
    import torch
    return {"torch": str(torch.__version__), "torch_cuda": torch.version.cuda,
            "cxx11_abi": torch.compiled_with_cxx11_abi(), "python": sys.implementation.cache_tag,
            "platform": sys.platform}


@functools.lru_cache(maxsize=None)
def current() -> Toolchain:
    fields = abi()
    return Toolchain(**fields, nvcc=nvcc_version() if fields["torch_cuda"] else None,
                     libstdcxx=loaded_libstdcxx())


@functools.lru_cache(maxsize=None)
def loaded_libstdcxx() -> str | None:
    """Path of the libstdc++ this process has loaded (torch brings it in), from /proc/self/maps.

    Every library the workbench builds links against exactly this one. A compiler whose default
    link pulls a static libstdc++ (seen: a wrapped g++ with only libstdc++.a on its search path)
    otherwise puts a second, never-initialised copy inside the extension, and the first
    std::ostream use there (every TORCH_CHECK message) crashes the process."""
    import torch  # noqa: F401  - make sure it is loaded

    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if re.search(r"/libstdc\+\+\.so(\.\d+)*$", path):
                    return path
    except OSError:
        pass
    return None


def can_build_cuda() -> bool:
    """CUDA code can be compiled and linked here: torch has CUDA and nvcc is installed."""
    return torch_has_cuda() and nvcc_path() is not None


def can_build_cpp() -> bool:
    """A C++ compiler ($CXX, else c++) and ninja are on PATH: what a JIT build of a CPU library
    needs (cpp_extension.load). Looked up, never run."""
    cxx = shlex.split(os.environ.get("CXX") or "c++") or ["c++"]
    return shutil.which(cxx[0]) is not None and shutil.which("ninja") is not None
