"""Memory the caller owns and lends to a runner: one allocation per arena, shared whole.

A CUDA arena is its own driver allocation (cuMemAlloc, never torch's caching allocator, whose
segments hold other tensors of the caller's: a runner that maps a segment could write them), shared
by a legacy CUDA IPC handle, which crosses PID and user namespaces (measured on the H100 machine
under bubblewrap). A host arena is a memfd, mapped here and passed to the runner with the message
that names it. The caller sees an arena as a torch uint8 tensor and takes typed views of it; the
runner sees the same bytes and nothing else of the caller's.
"""
from __future__ import annotations

import ctypes
import functools
import math
import mmap
import os

import torch

from ..errors import WorkbenchError

ALIGN = 256   # every tensor placed in an arena starts at a multiple of this (cudaMalloc's alignment)


@functools.lru_cache(maxsize=1)
def _driver():
    """libcuda, the driver API: one per machine, so its handles are what every runtime sees."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise WorkbenchError(f"the CUDA driver (libcuda.so.1) cannot be loaded: {e}") from None
    for name in ("cuMemAlloc_v2", "cuMemFree_v2", "cuIpcGetMemHandle", "cuGetErrorString"):
        getattr(lib, name).restype = ctypes.c_int
    return lib


def _check(status: int, what: str) -> None:
    if status:
        text = ctypes.c_char_p()
        _driver().cuGetErrorString(status, ctypes.byref(text))
        raise WorkbenchError(f"{what} failed: {(text.value or b'?').decode()} (CUresult {status})")


class _IpcMemHandle(ctypes.Structure):
    """CUipcMemHandle: 64 opaque bytes that cuIpcOpenMemHandle takes by value (a bare ctypes array
    would be passed as a pointer to them, which the driver refuses as an invalid argument)."""
    _fields_ = [("reserved", ctypes.c_char * 64)]


class _DeviceArray:
    """A device allocation as torch reads it (__cuda_array_interface__), without a copy."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}


class Arena:
    """`nbytes` of memory on `device` ("cuda" or "cpu") that runners may be lent. `data` is the
    caller's view of it (torch.uint8); view() gives typed tensors inside it; place() hands out
    aligned offsets, reset() starts over."""

    def __init__(self, device: str, nbytes: int):
        self.device, self.nbytes, self._next = device, -(-max(int(nbytes), 1) // ALIGN) * ALIGN, 0
        self._ptr = self._fd = self._map = None
        if device == "cuda":
            torch.cuda.init()
            torch.zeros(1, device="cuda")  # the primary context, current on this thread
            ptr = ctypes.c_uint64()
            _check(_driver().cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(self.nbytes)), "cuMemAlloc")
            self._ptr = ptr.value
            self.data = torch.as_tensor(_DeviceArray(self._ptr, self.nbytes), device="cuda")
        elif device == "cpu":
            self._fd = os.memfd_create("workbench-arena", os.MFD_CLOEXEC)
            os.ftruncate(self._fd, self.nbytes)
            self._map = mmap.mmap(self._fd, self.nbytes)
            self.data = torch.frombuffer(self._map, dtype=torch.uint8)
        else:
            raise ValueError(f"device must be 'cuda' or 'cpu'; got {device!r}")

    def place(self, nbytes: int, misalign: int = 0) -> int:
        """The offset of `nbytes` more bytes (`misalign` bytes past an aligned start); raises
        MemoryError where the arena is full."""
        offset = -(-self._next // ALIGN) * ALIGN + misalign
        if offset + nbytes > self.nbytes:
            raise MemoryError(f"arena of {self.nbytes} bytes is full")
        self._next = offset + nbytes
        return offset

    def reset(self) -> None:
        self._next = 0

    def view(self, offset: int, shape, dtype: torch.dtype) -> torch.Tensor:
        size = math.prod(int(s) for s in shape) * dtype.itemsize
        return self.data[offset:offset + size].view(dtype).view(tuple(shape))

    def lend(self, arena_id: int) -> tuple[str, int | None]:
        """(the runner's "arena" message, the descriptor to send with it or None)."""
        if self.device == "cuda":
            handle = _IpcMemHandle()
            _check(_driver().cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(self._ptr)), "cuIpcGetMemHandle")
            return f"arena {arena_id} cuda {bytes(handle).hex()} {self.nbytes}", None
        return f"arena {arena_id} host {self.nbytes}", self._fd

    def close(self) -> None:
        self.data = None
        if self._ptr is not None:
            torch.cuda.synchronize()
            _driver().cuMemFree_v2(ctypes.c_uint64(self._ptr))
            self._ptr = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view of it is still alive somewhere: the OS frees it with the process
                pass
            os.close(self._fd)
            self._map = self._fd = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone
            pass
