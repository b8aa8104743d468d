"""The build pipeline: what to compile, where a library comes from, and how it is compiled.

Owns every compiled library's way onto disk, for the torch path (harness, bindings, variants,
extension-style sources) and the NumPy front end's torch-free builds. A warm load imports four
modules: this one (get_or_build: prebuilt.py's wheel tier, then the cache's look-up and the checks
a hit passes, else a build under the key's lock), piece.py (Piece, BuildOptions, the content key),
toolchain.py (what a build depends on, the CUDA arch list) and cache.py (the cache's folders, their
privacy, the schemas of the files it reads).

On a miss: records.py (staging, the build lock, a build's record, publication), compilers.py
(cpp_extension and raw), the NVRTC tier (nvrtc_tier.py; nvrtc.py: ctypes on torch's libnvrtc;
nvrtc_split.py: a file's host and device views; nvrtc_kernels.py: each kernel compiled on its
first launch or in the background), guard.py (a build's processes die with it), shared.py (a shared
cache by opt-in). clean.py is `python -m workbench clean`; torch_pch.py precompiles torch's
extension header for extension-style builds.

May import: config, errors (and model.registry, in the tree's functions here alone). Nothing here
loads a library: the loader, byo and the NumPy front end do, with what get_or_build returns.

A hit is checked before its library is loaded: its record against cache.RECORD, the library's size
and sha256, its ELF headers within the file (a truncated library is a SIGBUS when loaded), and
every file the compiler read by size, mtime and sha256. A damaged or stale build is rebuilt.
"""
from __future__ import annotations

import json
import os
import pathlib
import stat
import struct
import time
from typing import Callable, NamedTuple

from .. import config
from ..errors import BuildError
from . import cache, toolchain
from .piece import (CPP_EXTENSION, DEFAULT_OPTIONS, EDIT_LOOP_OPTIONS, NVRTC, BuildOptions, Piece, sha256_file,
                    user_nvcc_flags)
from .toolchain import arch_list, variant_arch_flags

__all__ = ["BuildOptions", "Built", "DEFAULT_OPTIONS", "EDIT_LOOP_OPTIONS", "Piece", "arch_list", "get_or_build",
           "lookup", "user_nvcc_flags"]


class Built(NamedTuple):
    """Where a piece's library is, and how it got there."""
    library: pathlib.Path
    build_dir: pathlib.Path     # its build folder (holds build.log), or the wheel's prebuilt folder
    built: bool                 # compiled by this call (False: a warm hit)
    key: str                    # the content key; key[:10] is a loaded build's id
    record: dict                # the build's record (meta.json), or the wheel manifest's entry


def prebuilt_tier(piece: Piece) -> Built | None:
    """An installed wheel's prebuilt library for the piece (prebuilt.find), None to build it."""
    if piece.compiler != CPP_EXTENSION or not config.INSTALLED:
        return None  # the wheel ships cpp_extension builds only; a checkout has none
    from . import prebuilt

    hit = prebuilt.find(piece)
    if hit is None:
        return None
    return Built(hit[0], config.PREBUILT_DIR, False, hit[1]["key"], hit[1])


# A tier in front of the cache is a function Piece -> Built | None (None: not mine, go on).
TIERS: list[Callable[[Piece], Built | None]] = [prebuilt_tier]


def get_or_build(piece: Piece, *, last_good: str | None = None, rename: dict[str, str] | None = None) -> Built:
    """The piece's library: from the first tier that has it, else a warm hit in the content-keyed
    cache (checked by lookup: no compiler, no lock), else built now.
    last_good: a description of the build still usable, for the BuildError of a failed compile;
    rename: {source path: the label a compile error shows for it} (a notebook cell's source)."""
    for tier in TIERS:
        hit = tier(piece)
        if hit is not None:
            return hit
    tc = piece.toolchain if piece.toolchain is not None else toolchain.current().fields()
    key = piece.key(tc)
    final = cache.build_dir_for(piece.label, key)
    lib, meta, _ = lookup(final)
    if lib is not None:
        return Built(lib, final, False, key, meta)
    return _build(piece, key, tc, final, last_good=last_good, rename=rename)


def _build(piece: Piece, key: str, tc: dict, final: pathlib.Path, *, last_good, rename) -> Built:
    """A miss, under the key's lock: look again (someone may have built it while we waited), import
    it from a shared cache the user vouches for, or compile it in a staging folder and publish it.
    A failed compile keeps its log under the cache's logs/ (the BuildError names it)."""
    from . import records, shared  # the compile machinery: imported on a miss only

    label = piece.label
    with cache.writing(label), records.file_lock(records.lock_path(key), what=label):
        lib, meta, problem = lookup(final)
        if lib is None and shared.import_shared(final, label):
            lib, meta, problem = lookup(final)
        if lib is not None:
            return Built(lib, final, False, key, meta)
        if problem:
            cache.progress(f"{label}: cached build unusable ({problem}); rebuilding")
        staging = records.new_staging_dir(label, key)
        cache.progress(f"{label}: compiling {', '.join(s.name for s in piece.sources)} ({_tool(piece)}) ...")
        try:
            compiled = _compile(piece, staging, key, rename=rename, last_good=last_good)
        except BuildError as e:
            raise _kept_log(e, piece, key, staging) from None
        except BaseException:
            records.discard(staging)
            raise
        record = {"label": label, "key": key, "kind": piece.kind, "toolchain": tc,
                  "arch_list": piece.arch_list if piece.with_cuda else None,
                  "build_seconds": compiled.seconds, "created": time.time(),
                  "sources": [str(s) for s in piece.sources], **compiled.record}
        deps = records.dependency_record(compiled.deps, staging)
        lib = records.publish(staging, final, compiled.library, record, deps, rename=not compiled.unique_name)
        cache.progress(f"{label}: built in {compiled.seconds:.1f} s")
        return Built(lib, final, True, key, json.loads((final / "meta.json").read_text()))


def _compile(piece: Piece, staging: pathlib.Path, key: str, **kwargs):
    """The piece's compiler kind; the NVRTC tier builds pieces of its own (the host library, nvcc's
    fallback), so it is handed get_or_build."""
    if piece.compiler == NVRTC:
        from . import nvrtc_tier

        return nvrtc_tier.compile_nvrtc(piece, staging, key, build=get_or_build, **kwargs)
    from . import compilers

    return compilers.COMPILERS[piece.compiler](piece, staging, key, **kwargs)


def _tool(piece: Piece) -> str:
    if piece.compiler == NVRTC:
        arch = next(o.split("=", 1)[1] for o in piece.command if o.startswith("-arch="))
        return f"{piece.command[0]} {arch}"
    if piece.command:
        return pathlib.Path(piece.command[-1]).name
    if piece.with_cuda and any(s.suffix == ".cu" for s in piece.sources):
        return f"nvcc, arch {piece.arch_list}"
    return "c++"


def _kept_log(e: BuildError, piece: Piece, key: str, staging: pathlib.Path) -> Exception:
    """The failed build's log moved where the message says it is (the cache's logs/), the staging
    folder removed; a full disk said as such (CacheError) rather than as the compiler's words."""
    from . import records

    kept = cache.subdir("logs") / f"{piece.label.replace('/', '-')}-{key[:12]}.log"
    text = ""
    if e.log_path.exists():
        text = e.log_path.read_text(errors="replace")
        e.log_path.replace(kept)
        e.args = (str(e.args[0]).replace(str(e.log_path), str(kept)),)
        e.log_path = kept
    records.discard(staging)
    full = records.full_disk_error(RuntimeError(f"{e}\n{text}"), piece.label, e.log_path)
    return full if full is not None else e


# ---------------------------------------------------------------- the torch-facing pieces of the tree
# (the loader's and setup.py's: a wheel prebuilds the same descriptions, so the keys agree)

# -fno-trapping-math (as PyTorch's own build): a CPU variant's loop that selects between floats
# (a clamp, relu, a saturated GELU gate) is vectorized only where the compiler may evaluate both
# sides; the values computed are the same (kernels/common/wb_cpu.h, WB_CPU_SIMD).
CPU_FLAGS = ("-O3", "-fno-trapping-math")
# -Xptxas=-v puts the register/spill report in each build log. -lineinfo is left out of the edit
# loop (it costs ~3% of the nvcc time); BuildOptions(line_info=True) or WORKBENCH_NVCC_FLAGS adds it.
CUDA_FLAGS = ("-O3", "-Xptxas=-v")


def harness_piece(with_cuda: bool) -> Piece:
    # -fopenmp: at::parallel_for, which lends torch's thread pool to the CPU variants, is inline
    # `#pragma omp parallel` code; compiled without it, every CPU variant would run on one thread.
    return Piece(label="harness", kind="harness", sources=sorted((config.BINDINGS_DIR / "harness").glob("*.cpp")),
                 include_dirs=[config.BINDINGS_DIR / "harness", config.COMMON_DIR], with_cuda=with_cuda,
                 cflags=["-O2", "-fopenmp"] + (["-DWORKBENCH_WITH_CUDA"] if with_cuda else []), link=["-fopenmp"],
                 arch_list=arch_list() if with_cuda else None)


def binding_piece(r) -> Piece:
    """An op's binding (r: the op as registry.resolve gives it)."""
    src = r.sources
    return Piece(label=f"binding/{r.op}", kind="binding", sources=[src.binding],
                 include_dirs=[config.BINDINGS_DIR, config.COMMON_DIR, src.kernel_dir], cflags=CPU_FLAGS)


def cuda_source_piece(*, label: str, kind: str, source: pathlib.Path, include_dirs, options: BuildOptions) -> Piece:
    """A variant's (or an extension's) one source: nvcc (or the NVRTC tier) for a .cu file, the host
    compiler for a .cpp."""
    with_cuda = source.suffix == ".cu"
    if with_cuda and options.compiler == "nvrtc":
        from . import nvrtc_tier

        tiered = nvrtc_tier.piece(label=label, kind=kind, source=source, include_dirs=include_dirs, cflags=CPU_FLAGS,
                                  cuda_cflags=[*CUDA_FLAGS, *options.nvcc_flags()], options=options)
        if tiered is not None:
            return tiered
    archs = arch_list() if with_cuda else None  # asked once: it may ask torch about every device
    return Piece(label=label, kind=kind, sources=[source], include_dirs=include_dirs, with_cuda=with_cuda,
                 cflags=CPU_FLAGS, arch_list=archs,
                 cuda_cflags=[*CUDA_FLAGS, *options.nvcc_flags(), *variant_arch_flags(source, archs)]
                 if with_cuda else [])


def variant_piece(r, name: str, source: pathlib.Path,
                  options: BuildOptions = DEFAULT_OPTIONS) -> Piece:
    return cuda_source_piece(label=f"{r.op}/{name}", kind="variant", source=source,
                             include_dirs=[config.COMMON_DIR, r.sources.kernel_dir], options=options)


def build_variant(op: str, name_or_path: str, options: BuildOptions):
    """(name, Built) of a variant of the tree, or of a file being edited, built with `options` and
    not loaded (the CLI's `build --compiler`; Built is None for a Python variant). The NVRTC tier's
    kernels are all compiled now: nothing will launch them here."""
    from ..model import registry
    from . import nvrtc_kernels

    r, path = registry.resolve(op), pathlib.Path(name_or_path)
    edited = path.suffix in registry.SUFFIXES and path.is_file()
    source, name = (path, path.stem) if edited else (r.variant_source(name_or_path), name_or_path)
    if source.suffix == ".py":
        return name, None
    built = get_or_build(variant_piece(r, name, source, options))
    if built.record.get("nvrtc_unit"):
        nvrtc_kernels.compile_all(built.record["nvrtc_unit"])
    return name, built


def tree_pieces(devices: tuple[str, ...], harness_with_cuda: bool) -> list[Piece]:
    """Every piece a wheel prebuilds (setup.py): the harness, each op's binding, each .cu ("cuda" in
    devices) and .cpp ("cpu") variant of the tree."""
    from ..model import registry

    pieces = [harness_piece(harness_with_cuda)]
    for op in registry.ops():
        r = registry.resolve(op)
        pieces.append(binding_piece(r))
        for name, source in r.variant_files.items():
            if {".cu": "cuda", ".cpp": "cpu"}.get(source.suffix) in devices:
                pieces.append(variant_piece(r, name, source))
    return pieces


# ---------------------------------------------------------------- the checks a hit passes

def lookup(build_dir: pathlib.Path) -> tuple[pathlib.Path | None, dict | None, str | None]:
    """(library, record, problem): the published library if its record vouches for it, else why it
    cannot be used (missing, truncated, foreign, stale): the caller rebuilds it."""
    meta_path = build_dir / "meta.json"
    try:
        dst = os.lstat(build_dir)
        mst = os.lstat(meta_path)
    except FileNotFoundError:
        return None, None, None
    except OSError as e:
        return None, None, f"unreadable build folder ({e})"
    problem = cache.foreign(build_dir, dst, "dir") or cache.foreign(meta_path, mst, "file")
    if problem:
        return None, None, f"not the workbench's own build: {problem}"
    try:
        meta = cache.load_checked(meta_path, cache.RECORD)
    except cache.RecordError as e:
        return None, None, f"damaged build record: {e}"
    lib = build_dir / meta["library"]
    try:
        st = os.lstat(lib)
    except OSError as e:
        return None, None, f"its library {lib} is missing ({e.strerror})"
    problem = cache.foreign(lib, st, "file")
    if problem:
        return None, meta, f"not the workbench's own build: {problem}"
    if st.st_size != meta["size"]:
        return None, meta, f"library is {st.st_size} bytes, its record says {meta['size']} (truncated?)"
    if sha256_file(lib) != meta["sha256"]:
        return None, meta, "library does not match its recorded sha256 (foreign or modified file)"
    problem = elf_problem(lib, st.st_size)
    if problem:
        return None, meta, f"damaged library {lib}: {problem}"
    stale = _stale_dependency(meta["deps"])
    if stale:
        return None, meta, f"stale: {stale}"
    return lib, meta, None


def _stale_dependency(deps: list) -> str | None:
    """The first recorded dependency that changed since the build, else None: a file of the recorded
    size and mtime is taken as unchanged (a warm hit costs a stat), another one is hashed."""
    for path, size, mtime_ns, digest in deps:
        try:
            st = os.stat(path)
        except OSError:
            return f"{path}, which it was compiled from, is gone"
        if st.st_size == size and st.st_mtime_ns == mtime_ns:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size != size or sha256_file(pathlib.Path(path)) != digest:
            return f"{path} changed since it was built"
    return None


_PT_LOAD, _SHT_NOBITS = 1, 8


def elf_problem(path: pathlib.Path, size: int) -> str | None:
    """Why `path` is not a whole 64-bit ELF library, else None: its headers, loadable segments and
    sections must lie within its `size` bytes (dlopen of a truncated file is a SIGBUS that kills the
    process), checked before any library is loaded."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:6] != b"\x7fELF\x02\x01":
                return "not a 64-bit little-endian ELF file (no ELF header)"
            phoff, shoff = struct.unpack_from("<QQ", head, 32)
            phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 54)
            if phnum == 0 or phoff + phnum * phentsize > size:
                return f"its program headers ({phnum} at offset {phoff}) run past its end ({size} bytes)"
            f.seek(phoff)
            ph = f.read(phnum * phentsize)
            for i in range(phnum):
                p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", ph, i * phentsize)
                if p_type == _PT_LOAD and p_offset + p_filesz > size:
                    return (f"a loadable segment ends at byte {p_offset + p_filesz}, past its end ({size} bytes): "
                            f"the file is truncated")
            if shnum and shoff + shnum * shentsize > size:
                return f"its section headers (at offset {shoff}) run past its end ({size} bytes): the file is truncated"
            f.seek(shoff)
            sh = f.read(shnum * shentsize)
            for i in range(shnum):
                sh_type, _, _, sh_offset, sh_size = struct.unpack_from("<IIQQQQ", sh, i * shentsize)[1:6]
                if sh_type != _SHT_NOBITS and sh_offset + sh_size > size:
                    return f"section {i} ends at byte {sh_offset + sh_size}, past its end ({size} bytes): truncated"
    except (OSError, struct.error) as e:
        return f"its ELF headers cannot be read ({e})"
    return None
