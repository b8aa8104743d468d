"""A build's way into the cache: its staging folder, the key's lock, its record, publication.

The lock is a flock (it dies with its holder: a killed build blocks no one). The record keeps every
file the compiler read (its depfile, or ninja's deps log) with its size, mtime and sha256, so a hit
whose dependencies changed is stale however a header was found. A finished folder is renamed into
place: readers see nothing or a complete build.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pathlib
import shutil
import stat
import time
import uuid

from .. import config
from ..errors import LockTimeout
from . import cache, elf_problem
from .cache import KEY_FORMAT
from .piece import sha256_file

MARKER = ".workbench-build"  # in every folder the workbench builds in: what `clean` may remove


def new_staging_dir(label: str, key: str) -> pathlib.Path:
    """A fresh folder (0700) to build in, carrying the workbench's marker from the start."""
    d = cache.builds_root() / f".staging-{label.replace('/', '-')}-{key[:12]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with cache.writing(f"building {label}"):
        os.mkdir(d, 0o700)
        try:
            (d / MARKER).write_text(f"{label}\n{key}\n")
        except BaseException:  # a full disk: no folder is left without its marker
            discard(d)
            raise
    return d


def discard(path: pathlib.Path) -> None:
    """Remove a folder the workbench made (never following a link inside it)."""
    if os.path.islink(path):
        return
    shutil.rmtree(path, ignore_errors=True)


def full_disk_error(e: Exception, what: str, log: pathlib.Path | None = None) -> cache.CacheError | None:
    """A CacheError for a build that failed because a disk filled up (the compiler says so), else None."""
    text = str(e)
    if "No space left on device" not in text and "Disk quota exceeded" not in text:
        return None
    import tempfile

    return cache.CacheError(
        f"{what}: the build ran out of disk space: the build cache {config.cache_dir()} (or the compiler's "
        f"temporary folder, {tempfile.gettempdir()}) is full. Free space there (`python -m workbench clean "
        f"--older-than 7` removes builds unused for a week), or point WORKBENCH_CACHE (or TMPDIR) at a folder on "
        f"another disk" + (f"; the compiler's words are in {log}" if log else ""))


# ---------------------------------------------------------------- the build lock

def _open_nofollow(path: pathlib.Path, what: str, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """A file of the cache's own (a lock), opened without following a link; CacheError where it is
    a link or not a regular file of this user's."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise cache.CacheError(f"{what}: {path} is a symbolic link (to {os.readlink(path)!r}); the workbench's own "
                             f"files are never links, and it does not write through one. Remove the link "
                             f"(rm {path}); something other than the workbench made it") from None
        err = cache.storage_error(e, what)
        if err is not None:
            raise err from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise cache.CacheError(f"{what}: {path} is not a regular file of yours (owner uid {st.st_uid}); remove it, and "
                         f"the workbench makes a fresh one")
    return fd


@contextlib.contextmanager
def file_lock(path: pathlib.Path, *, what: str, timeout_s: float | None = None):
    """An exclusive flock on `path`, waited for with a message and a timeout that names the lock."""
    timeout_s = config.lock_timeout_s() if timeout_s is None else timeout_s
    with cache.writing(what):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = _open_nofollow(path, what)
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
                cache.progress(f"{what}: waiting for another build (pid {holder}) holding {path}")
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
    return cache.subdir("locks") / f"{key[:20]}.lock"


# ---------------------------------------------------------------- what the compiler read, and publication

def dependency_record(paths, build_dir: pathlib.Path) -> list[list]:
    """[path, size, mtime_ns, sha256] of each file the compiler read, outside the build folder."""
    inside = os.path.realpath(build_dir) + os.sep
    out, seen = [], set()
    for p in paths:
        if p in seen or os.path.realpath(p).startswith(inside):
            continue
        seen.add(p)
        try:
            st = os.stat(p)
            out.append([os.path.abspath(p), st.st_size, st.st_mtime_ns, sha256_file(pathlib.Path(p))])
        except OSError:
            continue  # a file the compiler probed and did not find
    return sorted(out)


def publish(staging: pathlib.Path, final: pathlib.Path, library: pathlib.Path, record: dict,
            deps: list | None = None, *, rename: bool = True) -> pathlib.Path:
    """Write the record and rename the staging folder into place (the caller holds the key's lock);
    a broken build at `final` is moved aside first, a library that is not a whole ELF file refused."""
    # A name of this build's own (unless the caller named it so): dlopen of a path this process has
    # loaded already would hand back the old library.
    if rename:
        base, dot, rest = library.name.partition(".")
        unique = library.with_name(f"{base}-{uuid.uuid4().hex[:8]}{dot}{rest}")
        os.rename(library, unique)
        library = unique
    st = library.stat()
    os.chmod(library, stat.S_IMODE(st.st_mode) & ~0o022)  # a umask of 002 must not make it group-writable
    problem = elf_problem(library, st.st_size)
    if problem:
        raise cache.CacheError(f"{record.get('label', library.name)}: the linker wrote a damaged library {library} "
                         f"({problem}); is the disk full? The build folder is {staging}")
    record = dict(record, format=KEY_FORMAT, library=library.name, size=st.st_size, sha256=sha256_file(library),
                  deps=deps if deps is not None else [])
    cache.check(record, cache.RECORD, "the record")  # what is written is what lookup accepts
    tmp = staging / "meta.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(record, indent=1, sort_keys=True))
    os.replace(tmp, staging / "meta.json")
    if os.path.lexists(final):
        trash = cache.subdir("trash") / f"{final.name}-{uuid.uuid4().hex[:8]}"
        os.rename(final, trash)
    os.rename(staging, final)
    return final / library.name
