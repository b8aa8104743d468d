"""The NVRTC tier (issue 27): a CUDA variant whose device code changed is rebuilt by NVRTC alone.

A piece with compiler "nvrtc" (tree.variant_piece, BuildOptions(compiler="nvrtc")) is compiled here,
into the content-keyed cache like any other (pipeline.cached_build: its lock, staging, publish):

1. The file and its headers are split into a host view and a device view (nvrtc_split.py). The host
   view's hash is the host key.
2. The host library: nvcc builds the host view (kernels empty) with -DWB_NVRTC_ROUTED, a piece of
   its own in the cache (kind variant-host). While the host key is unchanged it is a warm hit; when
   the launchers changed, nvcc rebuilds it and one line says so.
3. The kernels the launchers instantiate are read from that build's ptxas report. NVRTC's front end
   checks the device view with each of them instantiated (tens of ms); their optimizer and ptxas
   run per kernel, one program each, on the kernel's first launch or before it in the background
   (nvrtc_kernels.py), for this device's exact arch.
4. The build folder holds a copy of the host library (its own path: dlopen gives each build its own
   routing state); its record names its kernels' unit (nvrtc_unit); the library's runtime calls route
   its launches to the kernels' modules, which the loader's provider hands it
   (kernels/common/wb_nvrtc_route.h, run/nvrtc_routes.py).

An NVRTC error inside a device function is the user's: a BuildError naming file:line, as nvcc's
are. One anywhere else (host code or a header NVRTC cannot take) falls back to nvcc's build of the
whole file, with one line saying why.
"""
from __future__ import annotations

import ctypes
import functools
import os
import pathlib
import re
import shutil
import time
import uuid

from . import nvrtc, nvrtc_kernels, nvrtc_split, store
from .arch import arch_list, entries, variant_arch_flags
from .compilers import Compiled, first_error
from .piece import CPP_EXTENSION, NVRTC, BuildOptions, Piece
from ..errors import BuildError

ROUTED_FLAG = "-DWB_NVRTC_ROUTED"
SYNTAX_ONLY = "-fdevice-syntax-only"
TIER_FORMAT = 10  # bump when the split, the routing or the files a build holds change (it is in the key)
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")


def exact_arch(options: BuildOptions) -> str:
    """The one arch NVRTC compiles for: options.arch; else the current GPU's (sm_90a on an H100:
    the arch-specific target, as exact as a cubin is); else the newest entry of the arch list."""
    if options.arch:
        return options.arch
    from . import toolchain

    if toolchain.gpu_available():
        import torch

        major, minor = torch.cuda.get_device_capability()
    else:
        major, minor = max((a, b) for a, b, _, _ in entries(arch_list()))
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


def nvrtc_arch(p: Piece) -> str:
    """The arch an NVRTC tier piece compiles for (its -arch option)."""
    return next(o.split("=", 1)[1] for o in p.command if o.startswith("-arch="))


def arch_list_entry(arch: str) -> str:
    """TORCH_CUDA_ARCH_LIST's spelling of an arch: sm_90a -> 9.0a, sm_120 -> 12.0."""
    m = re.fullmatch(r"sm_(\d+)(\d)([a-z]?)", arch)
    if not m:
        raise ValueError(f"arch must look like sm_90a or sm_80; got {arch!r}")
    return f"{m.group(1)}.{m.group(2)}{m.group(3)}"


def nvrtc_options(arch: str, cuda_cflags) -> list[str]:
    """NVRTC's options: the arch, the C++ standard of torch's nvcc builds, the
    ptxas report (the build log's registers and spills, as nvcc's), the user's -D, -I-free flags."""
    own = [f"-arch={arch}", "-std=c++20", "--ptxas-options=-v"]
    passed = [f for f in cuda_cflags if f.startswith(("-D", "-U")) or f == "-lineinfo"]
    return own + passed


def piece(*, label: str, source: pathlib.Path, include_dirs, cflags, cuda_cflags,
          options: BuildOptions) -> Piece | None:
    """The NVRTC tier's piece for a .cu variant; its key covers NVRTC's version, options and arch.
    None where no NVRTC library is found (nvcc builds it, and one line says why)."""
    if not nvrtc.available():
        store.progress(f"{label}: nvcc builds it: no NVRTC library here (torch's CUDA wheels bring libnvrtc)")
        return None
    arch = exact_arch(options)
    return Piece(label=label, kind="variant", sources=[source], include_dirs=include_dirs, with_cuda=True,
                 cflags=cflags, cuda_cflags=cuda_cflags, compiler=NVRTC, arch_list=arch_list_entry(arch),
                 command=[f"nvrtc-{nvrtc.version()}", f"tier-{TIER_FORMAT}-{nvrtc.headers_digest()}",
                          *nvrtc_options(arch, cuda_cflags)])


def host_piece(p: Piece, views: nvrtc_split.Views, main_name: str) -> Piece:
    """nvcc's piece for the host view, its files written once per host key (content-named folder)."""
    folder = store.subdir("nvrtc-host") / f"{p.label.replace('/', '-')}-{views.host_key[:20]}"
    if not folder.is_dir():
        tmp = folder.with_name(f".{folder.name}-{uuid.uuid4().hex[:8]}")
        for name, text in views.host.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process wrote the same views first
            shutil.rmtree(tmp, ignore_errors=True)
    arch = nvrtc_arch(p)
    num = arch[3:]
    return Piece(label=f"{p.label}@host", kind="variant-host", sources=[folder / main_name], include_dirs=[folder],
                 with_cuda=True, cflags=p.cflags, compiler=CPP_EXTENSION, arch_list=p.arch_list,
                 cuda_cflags=[*p.cuda_cflags, ROUTED_FLAG, f"-gencode=arch=compute_{num},code=sm_{num}"])


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
        depth = 0
        for k in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[k], 0)
            if depth == 0:
                text = text[:k]
                break
    return "&" + re.sub(r"^void\s+", "", text.strip())


_ANON = re.compile(r"(\d+)_GLOBAL__N_")


def canonical_name(name: str) -> str:
    """A mangled name with its anonymous namespace spelled as GCC does (12_GLOBAL__N_1): nvcc's ptxas
    report and its library name one after the file and a hash that differ (wb_nvrtc_route.h keys
    the routes table the same way)."""
    out, at = [], 0
    for m in _ANON.finditer(name):
        if m.start() < at:
            continue
        out.append(name[at:m.start()] + "12_GLOBAL__N_1")
        at = m.start(1) + len(m.group(1)) + int(m.group(1))
    return "".join(out) + name[at:]


def kernel_names(build_log: str) -> list[str]:
    """The entry functions the host build's ptxas report lists (nvcc's mangled names), once each."""
    return sorted(set(_ENTRY.findall(build_log)))


def device_spans(views_text: str, macros) -> list[tuple[int, int]]:
    """(first line, last line) of each device (or host-and-device) function of a file."""
    spans = []
    for f in nvrtc_split.functions(views_text, macros):
        if f.space in ("device", "both"):
            spans.append((views_text.count("\n", 0, f.head_start) + 1, views_text.count("\n", 0, f.body_close) + 1))
    return spans


def _last_host_path(label: str) -> pathlib.Path:
    return store.subdir("nvrtc-host") / f"{label.replace('/', '-')}.last"


def host_change_reason(label: str, host_key: str) -> str | None:
    """Why the host library must be built now (None: the last one built for this label is current)."""
    path = _last_host_path(label)
    last = path.read_text().strip() if path.exists() else None
    if last == host_key:
        return None
    return "its host side changed (a launcher, a host declaration)" if last else "first build of its host side"


def compile_nvrtc(p: Piece, staging: pathlib.Path, key: str, *, rename: dict | None = None,
                  last_good: str | None = None, build) -> Compiled:
    """The piece compiled into `staging` (see the module's docstring); `build` is pipeline.get_or_build,
    for the host library and the fallback, pieces of their own."""
    start = time.perf_counter()
    (source,) = p.sources
    closure = nvrtc_split.closure(source, p.include_dirs)
    views = nvrtc_split.split(closure)
    main_name = closure.files[0][0]
    if any(pathlib.PurePath(n).is_absolute() or ".." in pathlib.PurePath(n).parts for n in views.host):
        # The host view's files are written under their include names, inside one folder.
        return _fallback(p, staging, key, "a header is included by an absolute path or through '..'",
                         rename, last_good, start, closure, build)
    reason = host_change_reason(p.label, views.host_key)
    try:
        host = build(host_piece(p, views, main_name), rename=rename, last_good=last_good)
    except BuildError as e:
        return _fallback(p, staging, key, f"nvcc could not build the host side alone ({e.file}:{e.line})",
                         rename, last_good, start, closure, build)
    reason = (reason or "its host side changed") if host.built else None  # a warm hit: nothing to say
    if reason:
        store.progress(f"{p.label}: nvcc rebuilt the host side ({reason}); NVRTC compiles the device code")
    _last_host_path(p.label).write_text(views.host_key)
    kernels = {canonical_name(n): name_expression(demangle(n)) for n in kernel_names(
        (host.build_dir / "build.log").read_text(errors="replace"))}
    device_texts = dict(views.device)
    device_texts[str(source)] = device_texts.pop(main_name)
    options = list(p.command[2:])
    log_path = staging / "build.log"
    unit = nvrtc_kernels.make_unit(p.label, str(source), device_texts, options, kernels)
    nvrtc_kernels.prefetch(unit)  # what this label's last build launched first starts compiling now
    try:  # the front end alone, every kernel instantiated: a device error is found now (nvrtc_kernels.py)
        nvrtc.compile_program(str(source), device_texts, [*options, SYNTAX_ONLY], sorted(set(kernels.values())))
    except nvrtc.NvrtcError as e:
        log = e.args[0]
        log_path.write_text(f"NVRTC {nvrtc.version()} {' '.join(options)}\n{log}")
        headers = {name: str(path) for name, path in closure.files}
        file, line, message = first_error(log, {**headers, **(rename or {})})
        # In the variant's own device code: the user's error, at once. In a header's device code (code nvcc
        # built before) it may be NVRTC's limit: nvcc decides, and raises its own BuildError if it agrees.
        if file is not None and _in_own_device_code(closure, file, line, rename):
            raise BuildError(p.label, file, line, message, log_path, last_good) from None
        first = (message.splitlines() or ["?"])[0]
        return _fallback(p, staging, key, f"NVRTC cannot compile {file or 'it'}:{line or '?'} ({first})",
                         rename, last_good, start, closure, build)
    nvrtc_kernels.save(unit)
    stem = f"{p.label.replace('/', '_')}-{key[:12]}-{uuid.uuid4().hex[:6]}"
    library = staging / f"{stem}.so"
    shutil.copyfile(host.library, library)
    log_path.write_text(f"NVRTC {nvrtc.version()} {' '.join(options)}\n"
                        f"front end: {len(kernels)} kernels checked; each compiles on its first launch, the rest "
                        f"in the background after the first, its ptxas report in nvrtc-kernels/<kernel key>.log "
                        f"(unit {unit.key})\nhost library: {host.library} (nvcc, host key {views.host_key[:16]})\n")
    deps = [str(path) for _, path in closure.files]
    return Compiled(library, time.perf_counter() - start, deps,
                    {"device_compiler": "nvrtc", "nvrtc_version": nvrtc.version(), "nvrtc_options": options,
                     "host_key": views.host_key, "host_build": host.key, "host_rebuilt": reason,
                     "kernels": len(kernels), "nvrtc_unit": unit.key},
                    unique_name=True)


def _in_own_device_code(closure, file: str, line: int | None, rename) -> bool:
    """Whether an NVRTC error's file:line lies in a device function of the variant's own source."""
    labels = {v: k for k, v in (rename or {}).items()}
    path = pathlib.Path(labels.get(file, file))
    name, real = closure.files[0]
    if not ((real == path.resolve()) if path.is_absolute() else name == file) or line is None:
        return False
    macros = nvrtc_split.space_macros(p.read_text(errors="replace") for _, p in closure.files)
    return any(a <= line <= b for a, b in device_spans(real.read_text(errors="replace"), macros))


def nvcc_piece(p: Piece) -> Piece:
    """nvcc's piece for the same variant, as tree.variant_piece makes it with the nvcc tier (the same
    key: its cache entry is shared)."""
    (source,) = p.sources
    archs = arch_list()
    return Piece(label=p.label, kind=p.kind, sources=p.sources, include_dirs=p.include_dirs, with_cuda=True,
                 cflags=p.cflags, arch_list=archs, cuda_cflags=[*p.cuda_cflags, *variant_arch_flags(source, archs)])


def _fallback(p: Piece, staging: pathlib.Path, key: str, why: str, rename, last_good, start: float,
              closure: nvrtc_split.Closure, build) -> Compiled:
    """nvcc's build of the whole file (nvcc_piece, cached as usual), under this key too."""
    store.progress(f"{p.label}: nvcc builds it: {why}")
    built = build(nvcc_piece(p), rename=rename, last_good=last_good)
    library = staging / f"{p.label.replace('/', '_')}-{key[:12]}-{uuid.uuid4().hex[:6]}.so"
    shutil.copyfile(built.library, library)
    shutil.copyfile(built.build_dir / "build.log", staging / "build.log")
    return Compiled(library, time.perf_counter() - start, [str(path) for _, path in closure.files],
                    {"device_compiler": "nvcc", "nvrtc_fallback": why, "nvcc_build": built.key}, unique_name=True)
