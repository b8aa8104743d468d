"""The provider of an NVRTC tier library's kernels: the loader hands one to each such library it loads,
and the library asks it for a kernel's cubin the first time it launches it, by an offset in the
kernel's code (kernels/common/wb_nvrtc_route.h). It answers from build/nvrtc_kernels.py: a compiled
kernel at once, any other compiled now, in the launching thread (ctypes takes the GIL for the call;
NVRTC runs without it).
"""
from __future__ import annotations

import ctypes
import pathlib

# (an offset in a kernel's code, cubin path out, its size, NVRTC's name out, its size) -> 0; 1 with the
# reason in the path's buffer; 2: in no kernel of this library
_PROVIDER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                             ctypes.c_size_t)
_attached: dict[str, tuple] = {}  # library path -> (its handle, the provider): kept alive with the library


def _put(text: str, buffer: int, size: int) -> None:
    data = text.encode()[:size - 1] + b"\0"
    ctypes.memmove(buffer, data, len(data))


def _provider(unit_key: str, kernels: list[tuple[int, int, str]]):
    from ..build import nvrtc_kernels

    def provide(offset, path_out, path_size, lowered_out, lowered_size):
        name = next((symbol for start, size, symbol in kernels if start <= offset < start + size), None)
        if name is None:
            return 2
        try:
            cubin, lowered = nvrtc_kernels.provide(unit_key, name)
            _put(str(cubin), path_out, path_size)
            _put(lowered, lowered_out, lowered_size)
            return 0
        except Exception as e:  # noqa: BLE001 - an exception cannot cross into C: the launch reports it
            _put(f"{type(e).__name__}: {e}", path_out, path_size)
            return 1

    return _PROVIDER(provide)


def unit_of(library: pathlib.Path) -> str | None:
    """The key of an NVRTC tier library's kernels' unit, from its build's record (None: not one)."""
    from ..build import nvrtc_kernels

    return nvrtc_kernels.unit_named_by(library.parent)


def attach(library: pathlib.Path, unit_key: str | None) -> bool:
    """Give a loaded NVRTC tier library (its build record's nvrtc_unit: `unit_key`) its provider, which
    knows its kernels by where their code lies (its symbol table). False: not such a library."""
    key = str(library)
    if key in _attached:
        return True
    if unit_key is None:
        return False
    from ..build import nvrtc_kernels, nvrtc_tier  # imported for an NVRTC tier library alone

    names = nvrtc_kernels.unit(unit_key).kernels
    kernels = [function for function in nvrtc_tier.functions(library) if function[2] in names]
    handle = ctypes.CDLL(key)  # the handle the harness's dlopen already holds
    provider = _provider(unit_key, kernels)
    handle.wb_nvrtc_set_provider(provider)
    _attached[key] = (handle, provider)
    return True
