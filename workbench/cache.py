"""The content-keyed build cache.

A build's key is a sha256 over its source, every header it includes (found by following quoted
#include lines), its flags and arch list, and the toolchain (torch, torch.version.cuda, nvcc, C++
ABI, Python tag). A build is published by renaming a finished directory into place, so readers see
either nothing or a complete build; a warm hit checks the library's size and sha256 against its
record and loads it without calling ninja. Locks are flock()s: they die with the process that
holds them, so a killed build never leaves a lock that blocks the next one.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import pathlib
import re
import shutil
import sys
import time
import uuid

from . import config
from .errors import LockTimeout

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
_KEY_FORMAT = 1  # bump when what goes into a key changes


def progress(message: str) -> None:
    if not config.quiet():
        print(f"[workbench] {message}", file=sys.stderr, flush=True)


def source_closure(source: pathlib.Path, include_dirs: list[pathlib.Path]) -> list[tuple[str, bytes]]:
    """(name, content) for the source and every quoted header it reaches, in a stable order. The
    source itself is named '<source>' so the same text at another path gives the same key."""
    seen: dict[pathlib.Path, str] = {}
    out: list[tuple[str, bytes]] = []

    def visit(path: pathlib.Path, name: str) -> None:
        path = path.resolve()
        if path in seen:
            return
        seen[path] = name
        data = path.read_bytes()
        out.append((name, data))
        for inc in _INCLUDE.findall(data.decode("utf-8", errors="replace")):
            for d in [path.parent, *include_dirs]:
                cand = d / inc
                if cand.is_file():
                    visit(cand, inc)
                    break
            else:
                out.append((inc, b"<not found>"))

    visit(source, "<source>")
    return out


def content_key(*, kind: str, sources: list[pathlib.Path], include_dirs: list[pathlib.Path],
                flags: list[str], arch_list: str | None, toolchain: dict) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"format": _KEY_FORMAT, "kind": kind, "flags": flags, "arch_list": arch_list,
                         "toolchain": toolchain}, sort_keys=True).encode())
    for src in sources:
        for name, data in source_closure(src, include_dirs):
            h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def closure_digest(source: pathlib.Path, include_dirs: list[pathlib.Path]) -> str:
    """A hash of a header and everything it includes: an op's contract, which its binding and its
    variants must have been built against alike."""
    h = hashlib.sha256()
    for name, data in source_closure(source, include_dirs):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


def _sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def builds_root() -> pathlib.Path:
    return config.cache_dir() / "builds"


def build_dir_for(label: str, key: str) -> pathlib.Path:
    return builds_root() / f"{label.replace('/', '-')}-{key[:20]}"


def lookup(build_dir: pathlib.Path) -> tuple[pathlib.Path | None, dict | None, str | None]:
    """(library, record, problem): the published library if its record vouches for it, else the
    reason it cannot be used (missing, truncated, foreign)."""
    meta_path = build_dir / "meta.json"
    if not meta_path.exists():
        return None, None, None
    try:
        meta = json.loads(meta_path.read_text())
        lib = build_dir / meta["library"]
        st = lib.stat()
    except (OSError, ValueError, KeyError) as e:
        return None, None, f"unreadable build record ({e})"
    if st.st_size != meta.get("size"):
        return None, meta, f"library is {st.st_size} bytes, its record says {meta.get('size')} (truncated?)"
    if _sha256_file(lib) != meta.get("sha256"):
        return None, meta, "library does not match its recorded sha256 (foreign or modified file)"
    return lib, meta, None


@contextlib.contextmanager
def file_lock(path: pathlib.Path, *, what: str, timeout_s: float | None = None):
    """An exclusive flock on `path`, waited for with a message and a timeout that names the lock."""
    timeout_s = config.lock_timeout_s() if timeout_s is None else timeout_s
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        start, told = time.monotonic(), False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if not told:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                progress(f"{what}: waiting for another build (pid {holder}) holding {path}")
                told = True
            if time.monotonic() - start > timeout_s:
                raise LockTimeout(
                    f"{what}: the build lock {path} was held for more than {timeout_s:.0f} s by pid "
                    f"{os.pread(fd, 64, 0).decode(errors='replace').strip() or '?'}. If that process is hung, "
                    f"kill it (the lock is released with it); WORKBENCH_LOCK_TIMEOUT sets this limit.")
            time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def lock_path(key: str) -> pathlib.Path:
    return config.cache_dir() / "locks" / f"{key[:20]}.lock"


def new_staging_dir(label: str, key: str) -> pathlib.Path:
    d = builds_root() / f".staging-{label.replace('/', '-')}-{key[:12]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    return d


def publish(staging: pathlib.Path, final: pathlib.Path, library: pathlib.Path, record: dict) -> pathlib.Path:
    """Write the record and rename the staging directory into place (atomic). A broken build at
    `final` is moved aside first; callers hold the key's lock, so nobody else publishes."""
    record = dict(record, library=library.name, size=library.stat().st_size, sha256=_sha256_file(library))
    tmp = staging / "meta.json.tmp"
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
    os.replace(tmp, staging / "meta.json")
    if final.exists():
        trash = config.cache_dir() / "trash" / f"{final.name}-{uuid.uuid4().hex[:8]}"
        trash.parent.mkdir(parents=True, exist_ok=True)
        os.rename(final, trash)
    os.rename(staging, final)
    return final / library.name


def discard(path: pathlib.Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# Builds in use: each process that loads a library holds a shared flock on the build's `inuse`
# file for its lifetime, so `clean` can tell a build in use from an idle one.
_in_use_fds: dict[pathlib.Path, int] = {}


def mark_in_use(build_dir: pathlib.Path) -> None:
    if build_dir in _in_use_fds or build_dir == config.PREBUILT_DIR:
        return  # a wheel's prebuilt libraries are not the cache's to clean (nor to write beside)
    with contextlib.suppress(OSError):
        fd = os.open(build_dir / "inuse", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.utime(fd)  # the last-use time that clean(older_than_s=...) goes by
        _in_use_fds[build_dir] = fd


def in_use(build_dir: pathlib.Path) -> bool:
    path = build_dir / "inuse"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def dir_size(path: pathlib.Path) -> int:
    total = 0
    for p in path.rglob("*"):
        with contextlib.suppress(OSError):
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
    return total


def clean(*, older_than_s: float | None = None, max_bytes: int | None = None, everything: bool = False) -> dict:
    """Remove builds: all idle ones (`everything`), those not used for `older_than_s`, or the
    least recently used until the cache is under `max_bytes`. A build that some process has loaded
    is never removed. Returns what was removed and kept."""
    root = builds_root()
    removed, kept_in_use, freed = [], [], 0
    if not root.exists():
        return {"removed": removed, "in_use": kept_in_use, "freed_bytes": 0}
    entries = []
    for d in root.iterdir():
        if not d.is_dir():
            continue
        stamp = max((p.stat().st_mtime for p in (d / "meta.json", d / "inuse") if p.exists()), default=d.stat().st_mtime)
        entries.append((stamp, d))
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
    discard(config.cache_dir() / "trash")
    return {"removed": removed, "in_use": kept_in_use, "freed_bytes": freed}
