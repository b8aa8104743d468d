"""`python -m workbench clean`: remove builds, only ever the workbench's own and never one in use."""
from __future__ import annotations

import contextlib
import math
import os
import pathlib
import stat
import time

from .. import config
from . import nvrtc_kernels
from .cache import RECORD, RecordError, builds_root, check_root_location, in_use, load_checked
from .records import MARKER, discard


def dir_size(path: pathlib.Path) -> int:
    """Bytes of the regular files under `path` (links are not followed)."""
    total = 0
    for dirpath, _, files in os.walk(path, followlinks=False):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


def workbench_build(d: pathlib.Path) -> str | None:
    """Why `d` is not a build folder the workbench wrote: a real folder of this user's, with the
    workbench's marker or build record (None: it is)."""
    try:
        st = os.lstat(d)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link (never followed)"
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by you"
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.lstat(d / MARKER).st_mode):
            return None
    try:
        load_checked(d / "meta.json", RECORD)
        return None
    except RecordError:
        return "carries no workbench build record"


def clean(*, older_than_s: float | None = None, max_bytes: int | None = None, everything: bool = False) -> dict:
    """Remove builds: all idle ones (`everything`), those unused for `older_than_s`, or the least
    recently used until the cache is under `max_bytes`; only the workbench's own (workbench_build),
    never one in use. Returns what was removed, kept in use, and left alone (with why)."""
    for name, value in (("older_than_s", older_than_s), ("max_bytes", max_bytes)):
        if value is not None and not 0 <= value < math.inf:
            raise ValueError(f"clean: {name} must be a finite number >= 0; got {value!r}")
    check_root_location(config.cache_dir(), all_users=True)
    removed, kept_in_use, skipped, freed = [], [], [], 0
    if not config.cache_dir().exists():
        return {"removed": removed, "in_use": kept_in_use, "skipped": skipped, "freed_bytes": 0}
    root = builds_root()
    entries = []
    for d in sorted(root.iterdir()):
        why = workbench_build(d)
        if why:
            skipped.append((str(d), why))
            continue
        stamps = []  # the last use (inuse) or publication (meta.json); a staging folder's own time
        for p in (d / "meta.json", d / "inuse"):
            with contextlib.suppress(OSError):
                stamps.append(os.lstat(p).st_mtime)
        entries.append((max(stamps, default=os.lstat(d).st_mtime), d))
    entries.sort()  # oldest first
    total = sum(dir_size(d) for _, d in entries)
    now = time.time()
    for stamp, d in entries:
        staging = d.name.startswith(".staging-")
        want = everything or staging and now - stamp > 3600 \
            or (older_than_s is not None and now - stamp > older_than_s) \
            or (max_bytes is not None and total > max_bytes)
        if not want:
            continue
        if in_use(d) or (staging and now - stamp <= 3600):
            kept_in_use.append(str(d))
            continue
        size = dir_size(d)
        discard(d)
        total -= size
        freed += size
        removed.append(str(d))
    freed += _unnamed_nvrtc_units(root, now, removed)
    trash = config.cache_dir() / "trash"
    if os.path.isdir(trash) and not os.path.islink(trash):
        for d in sorted(trash.iterdir()):
            why = workbench_build(d)
            if why:
                skipped.append((str(d), why))
                continue
            if in_use(d):
                kept_in_use.append(str(d))
                continue
            freed += dir_size(d)
            discard(d)
            removed.append(str(d))
    return {"removed": removed, "in_use": kept_in_use, "skipped": skipped, "freed_bytes": freed}


def _unnamed_nvrtc_units(root: pathlib.Path, now: float, removed: list) -> int:
    """Remove the NVRTC units no build names, an hour old at least (a build saves its unit before it
    publishes), and the kernels they name (nvrtc_kernels.unit_files); bytes freed."""
    folder = config.cache_dir() / "nvrtc-kernels"
    if not folder.is_dir() or folder.is_symlink():
        return 0
    named = {nvrtc_kernels.unit_named_by(meta.parent) for meta in root.glob("*/meta.json")}
    freed = 0
    for unit in sorted(folder.glob("*.json")):
        if unit.stem in named or unit.is_symlink() or now - os.lstat(unit).st_mtime <= 3600:
            continue
        for path in nvrtc_kernels.unit_files(unit.stem):
            with contextlib.suppress(FileNotFoundError):
                freed += os.lstat(path).st_size
                path.unlink()
                removed.append(str(path))
    return freed
