"""NVRTC, the CUDA toolkit's runtime compiler, through ctypes: the library torch's CUDA wheels carry
(nvidia/cu13/lib/libnvrtc.so.13 and its builtins), else CUDA_HOME's. Nothing is installed for it.

compile_program takes every file as text (NVRTC's in-memory headers): the device views of a
variant's closure (nvrtc_split.py) and a few C and C++ library headers of our own below, since NVRTC
has none and refuses host functions, even declared ones. They carry what device code uses, and what
nvcc's implicit cuda_runtime.h gives every .cu file (<stdint.h>, <math.h>'s INFINITY and M_PI,
std::sqrt ..., <limits.h>): PRE_INCLUDE, read before every program. The CUDA toolkit's own headers
(cuda_fp16.h, mma.h) NVRTC reads from the toolkit (nvrtc_tier.py's -I); libcu++'s would cost it
seconds per program, more than the stand-ins below.
"""
from __future__ import annotations

import ctypes
import functools
import os
import pathlib
import sys

from ..errors import WorkbenchError

def _header(*lines: str, **defines: str) -> str:
    """A header's text: its lines, then `#define NAME VALUE` for each define."""
    return "\n".join(["#pragma once", *lines, *(f"#define {k} {v}" for k, v in defines.items())]) + "\n"


_STDINT = _header(
    "typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long int64_t;",
    "typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;",
    "typedef unsigned long uint64_t; typedef long intptr_t; typedef unsigned long uintptr_t;",
    "namespace std { using ::int8_t; using ::int16_t; using ::int32_t; using ::int64_t; using ::uint8_t;",
    "  using ::uint16_t; using ::uint32_t; using ::uint64_t; using ::intptr_t; using ::uintptr_t; }",
    INT8_MIN="(-128)", INT8_MAX="127", INT16_MIN="(-32767-1)", INT16_MAX="32767", INT32_MIN="(-2147483647-1)",
    INT32_MAX="2147483647", INT64_MIN="(-9223372036854775807L-1)", INT64_MAX="9223372036854775807L", UINT8_MAX="255",
    UINT16_MAX="65535", UINT32_MAX="4294967295u", UINT64_MAX="18446744073709551615ul", SIZE_MAX="UINT64_MAX")
_LIMITS = _header(
    CHAR_BIT="8", SCHAR_MIN="(-128)", SCHAR_MAX="127", UCHAR_MAX="255", SHRT_MIN="(-32767-1)", SHRT_MAX="32767",
    USHRT_MAX="65535", INT_MIN="(-2147483647-1)", INT_MAX="2147483647", UINT_MAX="4294967295u",
    LONG_MIN="(-9223372036854775807L-1)", LONG_MAX="9223372036854775807L", ULONG_MAX="18446744073709551615ul",
    LLONG_MIN="(-9223372036854775807LL-1)", LLONG_MAX="9223372036854775807LL", ULLONG_MAX="18446744073709551615ull")
_FLOAT = _header(FLT_MAX="3.402823466e+38f", FLT_MIN="1.175494351e-38f", FLT_EPSILON="1.192092896e-07f",
                 DBL_MAX="1.7976931348623158e+308", DBL_MIN="2.2250738585072014e-308", DBL_EPSILON="2.2204460492503131e-16")
# NVRTC declares the math functions (float and double overloads) in the global namespace; <cmath>
# puts them in std, and <math.h> has the constants.
_MATH = _header(
    "namespace std { " + " ".join(f"using ::{f};" for f in (
        "abs fabs sqrt cbrt exp exp2 expm1 log log2 log10 log1p pow sin cos tan asin acos atan atan2 sinh cosh tanh "
        "asinh acosh atanh erf erfc tgamma lgamma floor ceil round trunc rint nearbyint lround llround fmod remainder "
        "fmin fmax fma fdim hypot ldexp frexp modf copysign nextafter isinf isnan isfinite signbit scalbn ilogb "
        "logb").split()) + " }",
    INFINITY="__builtin_bit_cast(float, 0x7f800000u)", NAN="__builtin_bit_cast(float, 0x7fc00000u)",
    HUGE_VALF="INFINITY", HUGE_VAL="__builtin_bit_cast(double, 0x7ff0000000000000ul)", M_E="2.7182818284590452354",
    M_LOG2E="1.4426950408889634074", M_LOG10E="0.43429448190325182765", M_LN2="0.69314718055994530942",
    M_LN10="2.30258509299404568402", M_PI="3.14159265358979323846", M_PI_2="1.57079632679489661923",
    M_PI_4="0.78539816339744830962", M_1_PI="0.31830988618379067154", M_2_PI="0.63661977236758134308",
    M_2_SQRTPI="1.12837916709551257390", M_SQRT2="1.41421356237309504880", M_SQRT1_2="0.70710678118654752440")
_ALGORITHM = """#pragma once
namespace std {  // what device code takes from <algorithm> (constexpr: nvcc's relaxed constexpr lets it)
template <class T> __host__ __device__ constexpr const T& min(const T& a, const T& b) { return b < a ? b : a; }
template <class T> __host__ __device__ constexpr const T& max(const T& a, const T& b) { return a < b ? b : a; }
}
"""
_STDDEF = _header("typedef unsigned long size_t; typedef long ptrdiff_t;", "#ifndef NULL", "#define NULL 0", "#endif",
                  "#define offsetof(t, m) __builtin_offsetof(t, m)")
_TYPE_TRAITS = """#pragma once
namespace std {
template <class T, T v> struct integral_constant { static constexpr T value = v; typedef T value_type;
  __host__ __device__ constexpr operator T() const { return v; } };
template <bool b> using bool_constant = integral_constant<bool, b>;
typedef bool_constant<true> true_type; typedef bool_constant<false> false_type;
template <class A, class B> struct is_same : false_type {};
template <class A> struct is_same<A, A> : true_type {};
template <class A, class B> constexpr bool is_same_v = is_same<A, B>::value;
template <bool c, class A, class B> struct conditional { typedef A type; };
template <class A, class B> struct conditional<false, A, B> { typedef B type; };
template <bool c, class A, class B> using conditional_t = typename conditional<c, A, B>::type;
template <bool c, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <bool c, class T = void> using enable_if_t = typename enable_if<c, T>::type;
template <class T, class... A> constexpr bool is_constructible_v = __is_constructible(T, A...);
template <class T> struct remove_cv { typedef T type; };
template <class T> struct remove_cv<const T> { typedef T type; };
template <class T> struct remove_cv<volatile T> { typedef T type; };
template <class T> struct remove_cv<const volatile T> { typedef T type; };
template <class T> using remove_cv_t = typename remove_cv<T>::type;
template <class T> struct remove_reference { typedef T type; };
template <class T> struct remove_reference<T&> { typedef T type; };
template <class T> struct remove_reference<T&&> { typedef T type; };
template <class T> using remove_reference_t = typename remove_reference<T>::type;
template <class T> using decay_t = remove_cv_t<remove_reference_t<T>>;
}
"""
_CUDA_H = """#pragma once
// The driver API's types that device code takes (a TMA descriptor); its functions are host code.
typedef unsigned int cuuint32_t; typedef unsigned long cuuint64_t;
typedef struct CUtensorMap_st { alignas(64) cuuint64_t opaque[16]; } CUtensorMap;
typedef int CUresult; typedef int CUtensorMapDataType; typedef int CUtensorMapInterleave;
typedef int CUtensorMapSwizzle; typedef int CUtensorMapL2promotion; typedef int CUtensorMapFloatOOBfill;
"""
_EMPTY = "#pragma once\n"
SYSTEM_HEADERS = {"stdint.h": _STDINT, "cstdint": _STDINT, "stddef.h": _STDDEF, "cstddef": _STDDEF,
                  "limits.h": _LIMITS, "climits": _LIMITS, "float.h": _FLOAT, "cfloat": _FLOAT, "math.h": _MATH,
                  "cmath": _MATH, "type_traits": _TYPE_TRAITS, "atomic": _EMPTY, "algorithm": _ALGORITHM,
                  "string.h": _EMPTY, "cstring": _EMPTY, "initializer_list": _EMPTY, "cuda_runtime.h": _EMPTY,
                  "stdio.h": _EMPTY, "cstdio": _EMPTY, "assert.h": _EMPTY, "cassert": _EMPTY,  # NVRTC's own printf, assert
                  "cuda.h": _CUDA_H,
                  # What nvcc's implicit cuda_runtime.h brings into every .cu file.
                  "wb_nvcc_implicit.h": "#pragma once\n#include <stdint.h>\n#include <stddef.h>\n#include <math.h>\n"
                                        "#include <limits.h>\n"}
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
    """libnvrtc, its builtins library loaded first (NVRTC opens it by name, and the wheel's folder is
    on no search path)."""
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


def _check(status: int, what: str) -> None:
    if status != _NVRTC_SUCCESS:
        lib = library()
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise WorkbenchError(f"NVRTC {what} failed: {lib.nvrtcGetErrorString(status).decode()}")


def _strings(values) -> ctypes.Array:
    return (ctypes.c_char_p * len(values))(*[v.encode() for v in values])


def compile_program(main_name: str, texts: dict[str, str], options: list[str],
                    name_expressions: list[str], *, ptx: bool = False) -> tuple[bytes, dict[str, str], str]:
    """(cubin, {name expression: lowered name}, log) for texts[main_name] with every other text as a
    header by its include name (and SYSTEM_HEADERS); with ptx, the PTX instead (options name a
    virtual arch, compute_XX: no ptxas runs). Raises NvrtcError(log) when it does not compile."""
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
                lib.nvrtcGetErrorString.restype = ctypes.c_char_p
                log += (f"\nerror: NVRTC failed with {lib.nvrtcGetErrorString(status).decode()} and no error in its "
                        f"log: past ptxas, a limit of the arch (shared memory, registers, parameter size)?")
            raise NvrtcError(log)
        lowered = {}
        for expr in name_expressions:
            name = ctypes.c_char_p()
            _check(lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(name)), f"nvrtcGetLoweredName({expr})")
            lowered[expr] = name.value.decode()
        if ptx:
            lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
            text = ctypes.create_string_buffer(size.value)
            _check(lib.nvrtcGetPTX(prog, text), "nvrtcGetPTX")
            return text.raw, lowered, log
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        if size.value == 0:
            raise NvrtcError(f"{log}\nNVRTC made no cubin (is the arch a real one, sm_XX, not compute_XX?)")
        cubin = ctypes.create_string_buffer(size.value)
        _check(lib.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin.raw, lowered, log
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
