"""What a build depends on and targets: torch, its CUDA, nvcc, the C++ ABI, and the CUDA arch list.

All of it feeds the content key, so an upgrade gives a fresh build, not an `undefined symbol` at
load time. Queries are cached per process, nvcc's version also on disk by the binary's stat, so a
warm load runs no subprocess. The arch list (TORCH_CUDA_ARCH_LIST's spelling) is written once here.
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
from typing import Callable, Iterable

from . import cache


def _find_cuda_home() -> str | None:
    """CUDA_HOME if set; else the toolkit of the `nvcc` on PATH (which may be a wrapper script)."""
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


def cuda_tool(name: str, env: str | None = None, *more: str) -> str | None:
    """A CUDA toolkit program: $env where set (None if that is not a file), else PATH, CUDA_HOME's
    bin/, /usr/local/cuda/bin/, then the `more` places given."""
    if env and os.environ.get(env):
        return os.environ[env] if pathlib.Path(os.environ[env]).is_file() else None
    home = cuda_home()
    places = (shutil.which(name), home and str(pathlib.Path(home) / "bin" / name), f"/usr/local/cuda/bin/{name}", *more)
    return next((c for c in places if c and pathlib.Path(c).is_file()), None)


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
    with contextlib.suppress(cache.CacheError, OSError):  # only in a cache accepted as private, never via a link
        memo = cache.subdir("toolchain") / "nvcc.json"
    with contextlib.suppress(cache.RecordError):
        data = cache.load_checked(memo, cache.MEMO) if memo else {}
        if data.get("stamp") == stamp:
            return data["version"]
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"Build (\S+)", out) or re.search(r"release (\S+)", out)
    version = m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"
    if memo is not None:
        with contextlib.suppress(OSError):
            cache.write_text(memo, json.dumps({"stamp": stamp, "version": version}))
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
    """What a library built against torch must agree with to load, known without running anything
    (prebuilt.py checks a wheel's libraries by it where no nvcc may exist)."""
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
    """The libstdc++ this process has loaded (torch's), which every build links explicitly: a
    compiler that links a static one (a wrapped g++ with only libstdc++.a) would put a second,
    never-initialised copy in the library, and its first TORCH_CHECK message would crash."""
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
    """A C++ compiler ($CXX, else c++) and ninja are on PATH (looked up, never run)."""
    cxx = shlex.split(os.environ.get("CXX") or "c++") or ["c++"]
    return shutil.which(cxx[0]) is not None and shutil.which("ninja") is not None


# ---------------------------------------------------------------- the CUDA arch list

JIT_FALLBACK = "8.0;9.0"        # a JIT build with no GPU to ask (its key carries the list: keep it stable)
SHIPPED = "8.0;9.0+PTX"         # code that leaves this machine: a wheel, an exported package

_ENTRY = re.compile(r"(\d+)\.(\d+)([a-z]?)(\+PTX)?")


def arch_list(*, shipped: bool = False,
              capabilities: Callable[[], Iterable[tuple[int, int]]] | None = None) -> str:
    """TORCH_CUDA_ARCH_LIST if set; else SHIPPED for code that leaves this machine; else the visible
    GPUs' capabilities (`capabilities`: how a caller without torch asks), else JIT_FALLBACK."""
    env = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if env:
        return env
    if shipped:
        return SHIPPED
    caps = sorted({tuple(c) for c in (capabilities or _torch_capabilities)()})
    return ";".join(f"{major}.{minor}" for major, minor in caps) or JIT_FALLBACK


def _torch_capabilities() -> list[tuple[int, int]]:
    if not gpu_available():
        return []
    import torch

    return [tuple(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())]


def gencode_flags(arch_list: str, *, sm90a: bool = False, strict: bool = True) -> list[str]:
    """nvcc -gencode flags for a TORCH_CUDA_ARCH_LIST-style list; sm90a: 9.0 built as 9.0a; strict:
    an entry not like 8.0, 9.0a or 9.0+PTX is a ValueError (else it is left out)."""
    flags = []
    for entry in re.split(r"[;\s,]+", arch_list.strip()):
        if not entry:
            continue
        m = _ENTRY.fullmatch(entry)
        if not m:
            if strict:
                raise ValueError(f"arch list entries must look like 8.0, 9.0a or 9.0+PTX; got {entry!r} in "
                                 f"{arch_list!r}")
            continue
        num = f"{m.group(1)}{m.group(2)}"
        num += m.group(3) or ("a" if sm90a and num == "90" else "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if m.group(4):
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    if strict and not flags:
        raise ValueError(f"the arch list is empty: {arch_list!r}")
    return flags


def entries(arch_list: str) -> list[tuple[int, int, str, bool]]:
    """(major, minor, suffix, +PTX) of each well-formed entry of the list."""
    return [(int(a), int(b), s, bool(p)) for a, b, s, p in _ENTRY.findall(arch_list)]


def variant_arch_flags(source, listed: str | None = None) -> list[str]:
    """-gencode flags for a variant that needs sm_90a: `listed` (default arch_list()) with 9.0 built
    as 9.0a (a plain sm_90 pass rejects wgmma); [] for any other (cpp_extension derives its own)."""
    if not needs_sm90a(source):
        return []
    return gencode_flags(listed or arch_list(), sm90a=True, strict=False)
