"""NVRTC through ctypes: the libnvrtc torch's CUDA wheels carry, else CUDA_HOME's."""
from __future__ import annotations

import ctypes
import functools
import os
import pathlib
import sys

from ..errors import WorkbenchError

# NVRTC's stand-ins for the C and C++ library headers device code uses (nvrtc_headers/: NVRTC has
# none, refuses host functions even declared, and libcu++'s would cost seconds): the math functions NVRTC declares globally, put
# into std as <cmath> does; <algorithm>'s min and max; <type_traits>' basics; the driver API's types
# (a TMA descriptor); empty ones where NVRTC has its own (printf, assert). wb_nvcc_implicit.h is
# what nvcc's implicit cuda_runtime.h brings into every .cu file.
_HEADER_FILES = {"stdint.h": ("stdint.h", "cstdint"), "stddef.h": ("stddef.h", "cstddef"),
                 "limits.h": ("limits.h", "climits"), "float.h": ("float.h", "cfloat"), "math.h": ("math.h", "cmath"),
                 "type_traits": ("type_traits",), "algorithm": ("algorithm",), "cuda.h": ("cuda.h",),
                 "wb_nvcc_implicit.h": ("wb_nvcc_implicit.h",),
                 "empty.h": ("atomic", "string.h", "cstring", "initializer_list", "cuda_runtime.h", "stdio.h", "cstdio",
                             "assert.h", "cassert")}
_HEADERS_DIR = pathlib.Path(__file__).with_name("nvrtc_headers")
SYSTEM_HEADERS = {name: (_HEADERS_DIR / file).read_text() for file, names in _HEADER_FILES.items() for name in names}
PRE_INCLUDE = "--pre-include=wb_nvcc_implicit.h"

_NVRTC_SUCCESS = 0


def headers_digest() -> str:
    """A hash of SYSTEM_HEADERS: they are part of every program, so of its key."""
    import hashlib

    return hashlib.sha256(repr(sorted(SYSTEM_HEADERS.items())).encode()).hexdigest()[:16]


class NvrtcError(Exception):
    """NVRTC refused the program; args[0] is its log."""


def _candidates() -> list[pathlib.Path]:
    found = []
    for entry in sys.path:
        base = pathlib.Path(entry or ".") / "nvidia"
        if base.is_dir():
            found += sorted(base.glob("cu*/lib/libnvrtc.so.*")) + sorted(base.glob("cuda_nvrtc/lib/libnvrtc.so.*"))
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            found += sorted(pathlib.Path(os.environ[env]).glob("lib*/libnvrtc.so*"))
    return [p for p in found if ".alt." not in p.name and "builtins" not in p.name]


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """libnvrtc, its builtins loaded first (NVRTC opens them by name; the wheel's folder is on no path)."""
    for path in _candidates():
        for builtins in sorted(path.parent.glob("libnvrtc-builtins.so.*")):
            if ".alt." not in builtins.name:
                ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
                break
        try:
            return ctypes.CDLL(str(path))
        except OSError:
            continue
    raise WorkbenchError("NVRTC not found: no libnvrtc.so under site-packages/nvidia/*/lib (torch's CUDA "
                         "wheels bring it) or $CUDA_HOME/lib64")


def available() -> bool:
    try:
        library()
        return True
    except WorkbenchError:
        return False


@functools.lru_cache(maxsize=1)
def version() -> str:
    major, minor = ctypes.c_int(), ctypes.c_int()
    library().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def _error_string(status: int) -> str:
    lib = library()
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib.nvrtcGetErrorString(status).decode()


def _check(status: int, what: str) -> None:
    if status != _NVRTC_SUCCESS:
        raise WorkbenchError(f"NVRTC {what} failed: {_error_string(status)}")


def _strings(values) -> ctypes.Array:
    return (ctypes.c_char_p * len(values))(*[v.encode() for v in values])


def compile_program(main_name: str, texts: dict[str, str], options: list[str],
                    name_expressions: list[str], *, ptx: bool = False) -> tuple[bytes, dict[str, str], str]:
    """(cubin, {name expression: lowered name}, log) of texts[main_name], the other texts its headers;
    with ptx, the PTX instead (for a compute_XX arch). NvrtcError(log) where it does not compile."""
    lib = library()
    headers = {**SYSTEM_HEADERS, **{k: v for k, v in texts.items() if k != main_name}}
    prog = ctypes.c_void_p()
    _check(lib.nvrtcCreateProgram(ctypes.byref(prog), texts[main_name].encode(), main_name.encode(), len(headers),
                                  _strings(list(headers.values())), _strings(list(headers))), "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            _check(lib.nvrtcAddNameExpression(prog, expr.encode()), f"nvrtcAddNameExpression({expr})")
        status = lib.nvrtcCompileProgram(prog, len(options), _strings(options))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if status != _NVRTC_SUCCESS:
            if "error" not in log.lower():  # a limit past ptxas (4 MiB of shared memory) logs no error line
                log += (f"\nerror: NVRTC failed with {_error_string(status)} and no error in its "
                        f"log: past ptxas, a limit of the arch (shared memory, registers, parameter size)?")
            raise NvrtcError(log)
        lowered = {}
        for expr in name_expressions:
            name = ctypes.c_char_p()
            _check(lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(name)), f"nvrtcGetLoweredName({expr})")
            lowered[expr] = name.value.decode()
        what = "PTX" if ptx else "CUBIN"
        getattr(lib, f"nvrtcGet{what}Size")(prog, ctypes.byref(size))
        if size.value == 0 and not ptx:
            raise NvrtcError(f"{log}\nNVRTC made no cubin (is the arch a real one, sm_XX, not compute_XX?)")
        out = ctypes.create_string_buffer(size.value)
        _check(getattr(lib, f"nvrtcGet{what}")(prog, out), f"nvrtcGet{what}")
        return out.raw, lowered, log
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
