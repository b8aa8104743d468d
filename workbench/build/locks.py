"""Locks and in-use marks: flock()s on files of the cache's own, opened without following links.

A build lock dies with the process that holds it, so a killed build never leaves a lock that
blocks the next one. Each process that loads a library holds a shared flock on its build's
`inuse` file for its lifetime, so `clean` can tell a build in use from an idle one.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pathlib
import stat
import time

from .. import config
from ..errors import LockTimeout
from .store import CacheError, progress, storage_error, subdir, writing


def _open_nofollow(path: pathlib.Path, what: str, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """Open a file of the cache's own (a lock, an in-use mark) without following a link; refuse a
    link, or a file that is not a regular file of this user's, naming it (CacheError)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CacheError(f"{what}: {path} is a symbolic link (to {os.readlink(path)!r}); the workbench's own "
                             f"files are never links, and it does not write through one. Remove the link "
                             f"(rm {path}); something other than the workbench made it") from None
        err = storage_error(e, what)
        if err is not None:
            raise err from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise CacheError(f"{what}: {path} is not a regular file of yours (owner uid {st.st_uid}); remove it, and "
                         f"the workbench makes a fresh one")
    return fd


@contextlib.contextmanager
def file_lock(path: pathlib.Path, *, what: str, timeout_s: float | None = None):
    """An exclusive flock on `path`, waited for with a message and a timeout that names the lock.
    The lock file is opened without following links (a planted link is refused, never truncated)."""
    timeout_s = config.lock_timeout_s() if timeout_s is None else timeout_s
    with writing(what):
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
    return subdir("locks") / f"{key[:20]}.lock"


# Builds in use: each process that loads a library holds a shared flock on the build's `inuse`
# file for its lifetime, so `clean` can tell a build in use from an idle one.
_in_use_fds: dict[pathlib.Path, int] = {}


def mark_in_use(build_dir: pathlib.Path) -> None:
    if build_dir in _in_use_fds or build_dir == config.PREBUILT_DIR:
        return  # a wheel's prebuilt libraries are not the cache's to clean (nor to write beside)
    with contextlib.suppress(OSError):
        fd = os.open(build_dir / "inuse", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.utime(fd)  # the last-use time that clean(older_than_s=...) goes by
        _in_use_fds[build_dir] = fd


def in_use(build_dir: pathlib.Path) -> bool:
    path = build_dir / "inuse"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # a link or an unreadable file: not ours to judge idle
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
