"""get_or_build: the one way a piece becomes a library on disk, for the torch path and NumPy's alike.

A piece is looked up in the tiers in front of the cache, in order (TIERS: today an installed wheel's
prebuilt libraries), then in the content-keyed cache: a warm hit (checked by records.lookup: no
compiler, no lock), else under the key's flock a second look (someone may have built it while we
waited), a build the user's shared cache vouches for, or a compile in a fresh staging folder (the
piece's compiler kind, compilers.COMPILERS) published by renaming the finished folder into place.
A failed compile keeps its log under the cache's logs/ (the BuildError names it) and leaves no
staging folder behind.

The seam for NVRTC (issue 27): a tier in front of the cache is a function Piece -> Built | None
appended to TIERS (None: not mine, go on); a new way to compile into the cache is a Piece.compiler
value with its function in compilers.COMPILERS. The NVRTC tier is such a kind, added below with
get_or_build at hand (it builds the host library and its fallback as pieces of their own).
"""
from __future__ import annotations

import functools
import json
import pathlib
import time
from typing import Callable, NamedTuple

from .. import config
from . import toolchain
from ..errors import BuildError
from . import locks, nvrtc_tier, prebuilt, records, shared, store
from .compilers import COMPILERS
from .piece import CPP_EXTENSION, NVRTC, Piece


class Built(NamedTuple):
    """Where a piece's library is, and how it got there."""
    library: pathlib.Path
    build_dir: pathlib.Path     # its build folder (holds build.log), or the wheel's prebuilt folder
    built: bool                 # compiled by this call (False: a warm hit)
    key: str                    # the content key; key[:10] is a loaded build's id
    record: dict                # the build's record (meta.json), or the wheel manifest's entry


def prebuilt_tier(piece: Piece) -> Built | None:
    """An installed wheel's prebuilt library for a torch-facing piece, checked before anything runs
    nvcc (prebuilt.find: None to build it as usual; a WorkbenchError where it can be neither)."""
    if piece.compiler != CPP_EXTENSION:
        return None  # the wheel ships cpp_extension builds only
    hit = prebuilt.find(piece)
    if hit is None:
        return None
    return Built(hit[0], config.PREBUILT_DIR, False, hit[1]["key"], hit[1])


TIERS: list[Callable[[Piece], Built | None]] = [prebuilt_tier]


def get_or_build(piece: Piece, *, last_good: str | None = None, rename: dict[str, str] | None = None) -> Built:
    """The piece's library: from the first tier that has it, else from the cache or built now.
    last_good: a description of the build still usable, for the BuildError of a failed compile;
    rename: {source path: the label a compile error shows for it} (a notebook cell's source)."""
    for tier in TIERS:
        hit = tier(piece)
        if hit is not None:
            return hit
    return cached_build(piece, last_good=last_good, rename=rename)


def cached_build(piece: Piece, *, last_good: str | None = None, rename: dict[str, str] | None = None) -> Built:
    """The content-keyed cache's tier: look-up, lock, shared import, staging, compile, publish."""
    label = piece.label
    tc = piece.toolchain if piece.toolchain is not None else toolchain.current().fields()
    key = piece.key(tc)
    final = store.build_dir_for(label, key)
    lib, meta, problem = records.lookup(final)
    if lib is not None:
        return Built(lib, final, False, key, meta)
    with store.writing(label), locks.file_lock(locks.lock_path(key), what=label):
        lib, meta, problem = records.lookup(final)  # someone may have built it while we waited
        if lib is not None:
            return Built(lib, final, False, key, meta)
        if shared.import_shared(final, label):  # a shared cache the user opted into, checked by its manifest
            lib, meta, problem = records.lookup(final)
            if lib is not None:
                return Built(lib, final, False, key, meta)
        if problem:
            store.progress(f"{label}: cached build unusable ({problem}); rebuilding")
        staging = store.new_staging_dir(label, key)
        store.progress(f"{label}: compiling {piece.file_names} ({_tool(piece)}) ...")
        try:
            compiled = _COMPILERS[piece.compiler](piece, staging, key, rename=rename, last_good=last_good)
        except BuildError as e:
            raise _kept_log(e, piece, key, staging) from None
        except BaseException:
            store.discard(staging)
            raise
        record = {"label": label, "key": key, "kind": piece.kind, "arch_list": piece.arch_list if piece.with_cuda
                  else None, "toolchain": tc, "build_seconds": compiled.seconds, "created": time.time(),
                  "sources": [str(s) for s in piece.sources], **compiled.record}
        lib = records.publish(staging, final, compiled.library, record,
                              records.dependency_record(compiled.deps, staging), rename=not compiled.unique_name)
        store.progress(f"{label}: built in {compiled.seconds:.1f} s")
        return Built(lib, final, True, key, json.loads((final / "meta.json").read_text()))


_COMPILERS = {**COMPILERS, NVRTC: functools.partial(nvrtc_tier.compile_nvrtc, build=get_or_build)}


def _tool(piece: Piece) -> str:
    if piece.compiler == NVRTC:
        return f"{piece.command[0]} {nvrtc_tier.nvrtc_arch(piece)}"
    if piece.command:
        return pathlib.Path(piece.command[-1]).name
    if piece.with_cuda and any(s.suffix == ".cu" for s in piece.sources):
        return f"nvcc, arch {piece.arch_list}"
    return "c++"


def _kept_log(e: BuildError, piece: Piece, key: str, staging: pathlib.Path) -> Exception:
    """The failed build's log moved where the message says it is (the cache's logs/), the staging
    folder removed; a full disk said as such (CacheError) rather than as the compiler's words."""
    kept = store.subdir("logs") / f"{piece.label.replace('/', '-')}-{key[:12]}.log"
    text = ""
    if e.log_path.exists():
        text = e.log_path.read_text(errors="replace")
        e.log_path.replace(kept)
        e.args = (str(e.args[0]).replace(str(e.log_path), str(kept)),)
        e.log_path = kept
    store.discard(staging)
    full = store.full_disk_error(RuntimeError(f"{e}\n{text}"), piece.label, e.log_path)
    return full if full is not None else e
