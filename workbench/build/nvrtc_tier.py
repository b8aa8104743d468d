"""The NVRTC tier: a CUDA variant built as two halves, each compiled again only when it changed.

A piece with compiler "nvrtc" (load_inline's default) is keyed by its tokens. nvrtc_split.py splits
the file: its host view is built by the host compiler alone, wb_nvrtc_route.h read first (a piece
of its own, variant-host, whose symbol table names the kernels the launchers launch); NVRTC's front
end checks its device view once, and each kernel is compiled on its first launch or in the
background (nvrtc_kernels.py). The build folder holds a copy of the host library, its record names
the kernels' unit (run/nvrtc_routes.py hands them to it). What the host compiler or NVRTC cannot
build is nvcc's build of the whole file, with one line that says why.
"""
from __future__ import annotations

import ctypes
import functools
import os
import pathlib
import re
import shlex
import shutil
import struct
import time
import uuid

from .. import config
from . import cache, nvrtc, nvrtc_kernels, nvrtc_split, toolchain
from .toolchain import arch_list, entries, variant_arch_flags
from .compilers import Compiled, first_error
from .piece import NVRTC, RAW, BuildOptions, Piece
from ..errors import BuildError

SYNTAX_ONLY = "-fdevice-syntax-only"
TIER_FORMAT = 11  # bump when the split, the routing or the files a build holds change (it is in the key)
ROUTE_HEADER = config.COMMON_DIR / "wb_nvrtc_route.h"
HOST_FLAGS = ("-O2", "-std=c++20", "-fPIC", "-shared", "-fvisibility=hidden", "-w")
# libcu++ (and what includes it): 2.6 s of NVRTC front end per program on the 2-core machine.
_SLOW_HEADER = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<((?:cuda/|cub/|thrust/|cooperative_groups)[^>]*)>", re.M)


def exact_arch(options: BuildOptions) -> str:
    """options.arch; else the current GPU's (sm_90a on an H100); else the arch list's newest."""
    if options.arch:
        return options.arch
    if toolchain.gpu_available():
        import torch

        major, minor = torch.cuda.get_device_capability()
    else:
        major, minor = max((a, b) for a, b, _, _ in entries(arch_list()))
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


def arch_list_entry(arch: str) -> str:
    """TORCH_CUDA_ARCH_LIST's spelling of an arch: sm_90a -> 9.0a, sm_120 -> 12.0."""
    m = re.fullmatch(r"sm_(\d+)(\d)([a-z]?)", arch)
    if not m:
        raise ValueError(f"arch must look like sm_90a or sm_80; got {arch!r}")
    return f"{m.group(1)}.{m.group(2)}{m.group(3)}"


def _toolkit_includes() -> list[str]:
    home = pathlib.Path(toolchain.cuda_home() or "/nonexistent") / "include"
    return [f"-I{d}" for d in (home, home / "cccl") if d.is_dir()]


def nvrtc_options(arch: str, cuda_cflags) -> list[str]:
    """The arch, torch's C++ standard, the ptxas report, what nvcc gives every .cu file, the
    toolkit's headers, and the user's -D, -U and -lineinfo."""
    own = [f"-arch={arch}", "-std=c++20", "--ptxas-options=-v", nvrtc.PRE_INCLUDE, *_toolkit_includes()]
    return own + [f for f in cuda_cflags if f.startswith(("-D", "-U")) or f == "-lineinfo"]


def piece(*, label: str, kind: str, source: pathlib.Path, include_dirs, cflags, cuda_cflags,
          options: BuildOptions) -> Piece | None:
    """The NVRTC tier's piece for a .cu variant (its key covers NVRTC's version, options and arch);
    None, said in one line, where nvcc builds it."""
    why = ("a torch extension is compiled with torch's headers, which NVRTC does not take" if kind != "variant" else
           None if nvrtc.available() else "no NVRTC library here (torch's CUDA wheels bring libnvrtc)")
    if why:
        cache.progress(f"{label}: nvcc builds it: {why}")
        return None
    arch = exact_arch(options)
    return Piece(label=label, kind="variant", sources=[source], include_dirs=include_dirs, with_cuda=True,
                 cflags=cflags, cuda_cflags=cuda_cflags, compiler=NVRTC, arch_list=arch_list_entry(arch),
                 command=[f"nvrtc-{nvrtc.version()}", f"tier-{TIER_FORMAT}-{nvrtc.headers_digest()}",
                          *nvrtc_options(arch, cuda_cflags)])


def host_piece(p: Piece, views: nvrtc_split.Views) -> Piece:
    """The host compiler's piece for the host view, its files written once per host key."""
    folder = cache.subdir("nvrtc-host") / views.host_key[:24]
    if not folder.is_dir():
        tmp = folder.with_name(f".{folder.name}-{uuid.uuid4().hex[:8]}")
        for name, text in views.host.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process wrote the same views first
            shutil.rmtree(tmp, ignore_errors=True)
    from torch.utils.cpp_extension import library_paths

    defines = [f for f in p.cuda_cflags if f.startswith(("-D", "-U"))]
    libstdcxx = toolchain.loaded_libstdcxx()
    return Piece(label=f"{p.label}@host", kind="variant-host", sources=[folder / nvrtc_split.HOST_MAIN],
                 include_dirs=[folder], compiler=RAW, command=shlex.split(os.environ.get("CXX") or "c++"),
                 cflags=[*HOST_FLAGS, *defines, *_toolkit_includes(), "-include", str(ROUTE_HEADER)],
                 link=[*(f"-L{d}" for d in library_paths("cuda")), "-lcudart", *([libstdcxx] if libstdcxx else [])])


def functions(library: pathlib.Path) -> list[tuple[int, int, str]]:
    """(offset, size, symbol) of every function in an ELF64 library's symbol table, local ones too
    (a kernel in an anonymous namespace)."""
    data = library.read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    entsize, count = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * entsize) for k in range(count)]
    found = []
    for _, kind, _, _, offset, size, link, _, _, symsize in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, symsize):
            name, info, _, _, value, length = struct.unpack_from("<IBBHQQ", data, at)
            if info & 0xF == 2 and value:  # STT_FUNC, defined here
                found.append((value, length, data[strings + name:data.index(b"\0", strings + name)].decode()))
    return found


@functools.lru_cache(maxsize=1)
def _demangler():
    lib = ctypes.CDLL("libstdc++.so.6")
    fn = lib.__cxa_demangle
    fn.restype = ctypes.c_void_p
    return fn, ctypes.CDLL(None).free


def demangle(name: str) -> str:
    fn, free = _demangler()
    status = ctypes.c_int()
    ptr = fn(name.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        return name  # an extern "C" kernel is its own name
    try:
        return ctypes.string_at(ptr).decode()
    finally:
        free(ctypes.c_void_p(ptr))


def name_expression(demangled: str) -> str:
    """`&ns::kernel<args>` from `void ns::kernel<args>(params)`: what NVRTC instantiates and names.
    An anonymous namespace is left out (the expression is read at the end of the same file)."""
    text = demangled.replace("(anonymous namespace)::", "")
    if text.endswith(")"):
        text = text[:nvrtc_split.matching(text, len(text) - 1)]
    return "&" + re.sub(r"^void\s+", "", text.strip())


def launched_kernels(library: pathlib.Path, names) -> dict[str, str]:
    """{symbol: name expression} of the host library's functions named as a __global__ one (`names`)."""
    found = {}
    for _, _, symbol in functions(library):
        expression = bare = name_expression(demangle(symbol))
        while (shorter := re.sub(r"<[^<>]*>", "", bare)) != bare:  # template arguments left out
            bare = shorter
        if bare.rsplit("::", 1)[-1].lstrip("&") in names:
            found[symbol] = expression
    return found


def compile_nvrtc(p: Piece, staging: pathlib.Path, key: str, *, rename: dict | None = None,
                  last_good: str | None = None, build) -> Compiled:
    """The piece compiled into `staging`; `build` is get_or_build, for the host library and nvcc's."""
    start = time.perf_counter()
    (source,) = p.sources
    closure = nvrtc_split.closure(source, p.include_dirs)
    views = nvrtc_split.split(closure)
    fallback = functools.partial(_fallback, p, staging, key, rename, last_good, start, closure, build)
    if any(pathlib.PurePath(n).is_absolute() or ".." in pathlib.PurePath(n).parts for n in views.host):
        return fallback("a header is included by an absolute path or through '..'")
    if views.variables:  # a cubin per kernel would give each kernel its own, and the host none
        return fallback(f"it declares device variables ({views.variables[0]}), which nvcc's one module keeps one")
    if slow := next((m.group(1) for t in views.device.values() for m in [_SLOW_HEADER.search(t)] if m), None):
        return fallback(f"it includes <{slow}>: libcu++ costs NVRTC seconds per kernel, more than nvcc's whole build")
    try:  # an error in the host view's main file is named as the variant's (line numbers are its own)
        host = build(host_piece(p, views), rename={nvrtc_split.HOST_MAIN: (rename or {}).get(str(source), str(source))})
    except BuildError as e:
        return fallback(f"the host compiler cannot build its host side ({e.file}:{e.line}: "
                        f"{(e.first_error.splitlines() or ['?'])[0]})")
    if host.built:
        cache.progress(f"{p.label}: its host side changed; the host compiler rebuilt it in "
                       f"{host.record['build_seconds']:.2f} s")
    kernels = launched_kernels(host.library, views.kernels)
    device_texts = dict(views.device)
    device_texts[str(source)] = device_texts.pop(closure[0][0])
    options = list(p.command[2:])
    unit = nvrtc_kernels.make_unit(p.label, str(source), device_texts, options, kernels)
    if not nvrtc_kernels.saved(unit):  # a device view checked once is not checked again
        nvrtc_kernels.prefetch(unit)  # what this label's last build launched first starts compiling now
        try:  # the front end alone, every kernel instantiated (nvrtc_kernels.py)
            nvrtc.compile_program(str(source), device_texts, [*options, SYNTAX_ONLY], sorted(set(kernels.values())))
        except nvrtc.NvrtcError as e:
            headers = {name: str(path) for name, path in closure}
            file, line, message = first_error(e.args[0], {**headers, **(rename or {})})
            return fallback(f"NVRTC cannot compile {file or 'it'}:{line or '?'} ({(message.splitlines() or ['?'])[0]})")
        nvrtc_kernels.save(unit)
    library = _copy_in(host.library, p, staging, key)
    (staging / "build.log").write_text(
        f"NVRTC {nvrtc.version()} {' '.join(options)}\nfront end: {len(kernels)} kernels checked; each compiles on "
        f"its first launch, the rest in the background after it, its ptxas report in nvrtc-kernels/<kernel key>.log "
        f"(unit {unit.key})\nhost library: {host.library} (the host compiler, host key {views.host_key[:16]})\n")
    # The sources are in the key by their tokens; the host library by what its compiler read.
    deps = [d[0] for d in host.record.get("deps", [])]
    return Compiled(library, time.perf_counter() - start, deps,
                    {"device_compiler": "nvrtc", "nvrtc_version": nvrtc.version(), "nvrtc_options": options,
                     "host_key": views.host_key, "host_build": host.key, "host_rebuilt": host.built,
                     "kernels": len(kernels), "nvrtc_unit": unit.key},
                    unique_name=True)


def nvcc_piece(p: Piece) -> Piece:
    """nvcc's piece for the same variant, as variant_piece makes it (the same key and cache entry)."""
    (source,) = p.sources
    archs = arch_list()
    return Piece(label=p.label, kind=p.kind, sources=p.sources, include_dirs=p.include_dirs, with_cuda=True,
                 cflags=p.cflags, arch_list=archs, cuda_cflags=[*p.cuda_cflags, *variant_arch_flags(source, archs)])


def _fallback(p: Piece, staging: pathlib.Path, key: str, rename, last_good, start: float, closure, build,
              why: str) -> Compiled:
    """nvcc's build of the whole file (nvcc_piece, cached as usual), under this key too."""
    cache.progress(f"{p.label}: nvcc builds it: {why}")
    built = build(nvcc_piece(p), rename=rename, last_good=last_good)
    library = _copy_in(built.library, p, staging, key)
    shutil.copyfile(built.build_dir / "build.log", staging / "build.log")
    return Compiled(library, time.perf_counter() - start, [str(path) for _, path in closure],
                    {"device_compiler": "nvcc", "nvrtc_fallback": why, "nvcc_build": built.key}, unique_name=True)


def _copy_in(library: pathlib.Path, p: Piece, staging: pathlib.Path, key: str) -> pathlib.Path:
    """A copy of a built library in `staging`, under a name of this build's own."""
    copy = staging / f"{p.label.replace('/', '_')}-{key[:12]}-{uuid.uuid4().hex[:6]}.so"
    shutil.copyfile(library, copy)
    return copy
