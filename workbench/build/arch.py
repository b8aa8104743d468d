"""The CUDA arch list: written once, here, for every build that compiles CUDA code.

`arch_list()` is what a JIT build on this machine compiles for: TORCH_CUDA_ARCH_LIST where set,
else the visible GPUs' capabilities, else sm_80 and sm_90 (what CI compiles for with no GPU to ask).
`arch_list(shipped=True)` is for code built to run on other machines (a wheel's prebuilt libraries,
an exported package): TORCH_CUDA_ARCH_LIST where set, else sm_80 and sm_90 plus PTX, which newer
GPUs compile at load. The list's spelling is TORCH_CUDA_ARCH_LIST's: "8.0;9.0+PTX", "9.0a" ...
"""
from __future__ import annotations

import os
import re
from typing import Callable, Iterable

JIT_FALLBACK = "8.0;9.0"        # a JIT build with no GPU to ask (its key carries the list: keep it stable)
SHIPPED = "8.0;9.0+PTX"         # code that leaves this machine: a wheel, an exported package

_ENTRY = re.compile(r"(\d+)\.(\d+)([a-z]?)(\+PTX)?")


def arch_list(*, shipped: bool = False,
              capabilities: Callable[[], Iterable[tuple[int, int]]] | None = None) -> str:
    """TORCH_CUDA_ARCH_LIST if set; else, for a build used here, the visible GPUs' capabilities
    (`capabilities`: a caller without torch says how to ask, e.g. the NumPy front end's module;
    otherwise torch is asked); else JIT_FALLBACK, or SHIPPED for code that is `shipped`."""
    env = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if env:
        return env
    if shipped:
        return SHIPPED
    caps = sorted({tuple(c) for c in (capabilities or _torch_capabilities)()})
    return ";".join(f"{major}.{minor}" for major, minor in caps) or JIT_FALLBACK


def _torch_capabilities() -> list[tuple[int, int]]:
    from . import toolchain

    if not toolchain.gpu_available():
        return []
    import torch

    return [tuple(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())]


def gencode_flags(arch_list: str, *, sm90a: bool = False, strict: bool = True) -> list[str]:
    """nvcc -gencode flags for a TORCH_CUDA_ARCH_LIST-style list. sm90a: 9.0 is built as 9.0a
    (Hopper's arch-specific instructions: wgmma, setmaxnreg). strict: an entry that is not of the
    form 8.0, 9.0a or 9.0+PTX is an error (ValueError); otherwise it is left out."""
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
    """Explicit -gencode flags for a CUDA variant that needs sm_90a: the arch list `listed` (default:
    the build's, arch_list()) with 9.0 built as 9.0a (a plain sm_90 pass rejects wgmma and
    setmaxnreg), every other entry as listed. [] for any other source: cpp_extension derives the flags
    from TORCH_CUDA_ARCH_LIST as before (it adds none of its own where the flags already name an arch)."""
    from . import toolchain

    if not toolchain.needs_sm90a(source):
        return []
    return gencode_flags(listed or arch_list(), sm90a=True, strict=False)
