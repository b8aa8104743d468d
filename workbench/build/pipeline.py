"""A miss: a piece that no tier and no warm hit has, built into the cache.

get_or_build (build/__init__.py) comes here when its look-up found nothing usable. Under the key's
flock it looks again (someone may have built it while we waited), imports a build the user's shared
cache vouches for (shared.py), or compiles in a fresh staging folder (the piece's compiler kind:
compilers.COMPILERS, or the NVRTC tier, nvrtc_tier.py) and publishes it by renaming the finished
folder into place (records.py). A failed compile keeps its log under the cache's logs/ (the
BuildError names it) and leaves no staging folder behind.
"""
from __future__ import annotations

import json
import pathlib
import time

from ..errors import BuildError
from . import Built, cache, compilers, get_or_build, lookup, nvrtc_tier, records, shared
from .piece import NVRTC, Piece


def build(piece: Piece, key: str, tc: dict, final: pathlib.Path, *, last_good: str | None = None,
          rename: dict[str, str] | None = None) -> Built:
    """The piece built under `key` (its toolchain fields `tc`) into the build folder `final`."""
    label = piece.label
    with cache.writing(label), records.file_lock(records.lock_path(key), what=label):
        lib, meta, problem = lookup(final)  # someone may have built it while we waited
        if lib is not None:
            return Built(lib, final, False, key, meta)
        if shared.import_shared(final, label):  # a shared cache the user opted into, checked by its manifest
            lib, meta, problem = lookup(final)
            if lib is not None:
                return Built(lib, final, False, key, meta)
        if problem:
            cache.progress(f"{label}: cached build unusable ({problem}); rebuilding")
        staging = records.new_staging_dir(label, key)
        cache.progress(f"{label}: compiling {piece.file_names} ({_tool(piece)}) ...")
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


def _compile(piece: Piece, staging: pathlib.Path, key: str, **kwargs) -> compilers.Compiled:
    """The piece's compiler kind, looked up now; the NVRTC tier builds pieces of its own (the host
    library, nvcc's fallback), so it is handed get_or_build."""
    if piece.compiler == NVRTC:
        return nvrtc_tier.compile_nvrtc(piece, staging, key, build=get_or_build, **kwargs)
    return compilers.COMPILERS[piece.compiler](piece, staging, key, **kwargs)


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
