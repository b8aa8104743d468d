"""The provider of an NVRTC tier library's kernels (issue 27): the loader hands one to each such
library it loads, and the library's routed launches ask it for a kernel's module
(kernels/common/wb_nvrtc_route.h). It answers from build/nvrtc_kernels.py: a compiled kernel at
once, any other compiled now, in the launching thread (ctypes takes the GIL for the call; NVRTC
runs without it).
"""
from __future__ import annotations

import ctypes
import pathlib

from ..build import nvrtc_kernels

# (name, cubin path out, its size, NVRTC's name out, its size) -> 0, or nonzero with the reason in the path's buffer
_PROVIDER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                             ctypes.c_size_t)
_attached: dict[str, tuple] = {}  # library path -> (its handle, the provider): kept alive with the library


def _put(text: str, buffer: int, size: int) -> None:
    data = text.encode()[:size - 1] + b"\0"
    ctypes.memmove(buffer, data, len(data))


def _provider(unit_key: str):
    def provide(name, path_out, path_size, lowered_out, lowered_size):
        try:
            cubin, lowered = nvrtc_kernels.provide(unit_key, name.decode())
            _put(str(cubin), path_out, path_size)
            _put(lowered, lowered_out, lowered_size)
            return 0
        except Exception as e:  # noqa: BLE001 - an exception cannot cross into C: the launch reports it
            _put(f"{type(e).__name__}: {e}", path_out, path_size)
            return 1

    return _PROVIDER(provide)


def unit_of(library: pathlib.Path) -> str | None:
    """The key of an NVRTC tier library's kernels' unit, from its build's record (None: not one)."""
    return nvrtc_kernels.unit_named_by(library.parent)


def attach(library: pathlib.Path, unit_key: str | None) -> bool:
    """Give a loaded NVRTC tier library (its build record's nvrtc_unit: `unit_key`) its provider (its
    first launch queues the kernels not yet compiled, build/nvrtc_kernels.py). False: not such a
    library (unit_key None)."""
    key = str(library)
    if key in _attached:
        return True
    if unit_key is None:
        return False
    handle = ctypes.CDLL(key)  # the handle the harness's dlopen already holds
    provider = _provider(unit_key)
    handle.wb_nvrtc_set_provider(provider)
    _attached[key] = (handle, provider)
    return True
