"""The cache's folders and what it trusts of them.

The cache runs whatever libraries it holds, so it must be the user's alone. It is created 0700; a
cache root (or a folder in it) owned by another user, or writable by group or others, is refused
with an error that says why and how to fix it; a home folder or `/` is never a cache root. Build
folders must be the user's own. A read-only or full cache is an error naming the folder and what
to do. Builds are made in staging folders that carry the workbench's marker from the start; a
notebook's source strings are written under sources/, named by their hash.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import pathlib
import shutil
import stat
import sys
import uuid

from .. import config
from ..errors import WorkbenchError

MARKER = ".workbench-build"  # in every folder the workbench builds in: what `clean` may remove
_STORAGE_ERRNOS = {errno.EROFS: "read-only", errno.EACCES: "not writable", errno.EPERM: "not writable",
                   errno.ENOSPC: "full", errno.EDQUOT: "over its disk quota"}


class CacheError(WorkbenchError):
    """The build cache cannot be used as it is: not private, not writable, full, or a link where
    a file of the workbench's belongs. The message names the folder and what to do."""


def progress(message: str) -> None:
    if not config.quiet():
        print(f"[workbench] {message}", file=sys.stderr, flush=True)


_root_ok: dict[str, tuple] = {}   # a root checked in this process -> the stat that was checked


def _home_folders(all_users: bool = False) -> set[str]:
    """The filesystem root and this user's home folder (every user's, with all_users): never a
    cache root, whose builds/, locks/ and trash/ would mix with a person's files."""
    import pwd

    homes = {"/", os.path.realpath(os.path.expanduser("~"))}
    with contextlib.suppress(KeyError):
        homes.add(os.path.realpath(pwd.getpwuid(os.geteuid()).pw_dir))
    if all_users:
        with contextlib.suppress(OSError):
            homes |= {os.path.realpath(p.pw_dir) for p in pwd.getpwall() if p.pw_dir and p.pw_dir != "/nonexistent"}
    return homes


def check_root_location(path: pathlib.Path, *, all_users: bool = False) -> None:
    """Refuse a cache root that is the filesystem root or a home folder (CacheError)."""
    real = os.path.realpath(path)
    if real in _home_folders(all_users):
        what = "the filesystem root" if real == "/" else "a home folder"
        raise CacheError(
            f"the build cache {path} is {what}: the workbench keeps builds/, locks/, sources/ and trash/ in its "
            f"cache folder, and `clean` removes from there. Point WORKBENCH_CACHE at a folder of its own (e.g. "
            f"WORKBENCH_CACHE=~/.cache/workbench), or unset it for that default")


def storage_error(e: OSError, what: str) -> CacheError | None:
    """A CacheError naming the cache folder and what to do for a read-only or full cache, else None."""
    why = _STORAGE_ERRNOS.get(e.errno)
    where = config.cache_dir()
    if why is None or e.filename and not os.path.abspath(os.fsdecode(e.filename)).startswith(
            os.path.abspath(where)):
        return None  # not the cache's trouble (a source that cannot be read): raised as it is
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        todo = ("free space there (`python -m workbench clean --older-than 7` removes builds unused for a week), "
                "or point WORKBENCH_CACHE at a folder on another disk")
    else:
        todo = ("point WORKBENCH_CACHE at a writable folder of your own (e.g. WORKBENCH_CACHE=~/.cache/workbench), "
                "or make this one writable")
    return CacheError(f"{what}: the build cache {where} is {why} ({e.strerror}: {e.filename or where}); {todo}")


def full_disk_error(e: Exception, what: str, log: pathlib.Path | None = None) -> CacheError | None:
    """A CacheError for a build that failed because a disk filled up (the compiler says so), else None."""
    text = str(e)
    if "No space left on device" not in text and "Disk quota exceeded" not in text:
        return None
    import tempfile

    return CacheError(
        f"{what}: the build ran out of disk space: the build cache {config.cache_dir()} (or the compiler's "
        f"temporary folder, {tempfile.gettempdir()}) is full. Free space there (`python -m workbench clean "
        f"--older-than 7` removes builds unused for a week), or point WORKBENCH_CACHE (or TMPDIR) at a folder on "
        f"another disk" + (f"; the compiler's words are in {log}" if log else ""))


@contextlib.contextmanager
def writing(what: str):
    """Turn a read-only, unwritable or full cache (EROFS, EACCES, ENOSPC ...) met while building
    into a CacheError that names the cache folder and what to do."""
    try:
        yield
    except OSError as e:
        err = storage_error(e, what)
        if err is None:
            raise
        raise err from None


def root() -> pathlib.Path:
    """The cache folder, created 0700 where missing and checked private (CacheError if not)."""
    path = config.cache_dir()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        check_root_location(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)
        except OSError as e:
            if e.errno not in _STORAGE_ERRNOS and e.errno not in (errno.ENOENT, errno.ENOTDIR):
                raise
            raise CacheError(f"the build cache {path} cannot be created ({e.strerror}: {e.filename}); point "
                             f"WORKBENCH_CACHE at a writable folder of your own (e.g. "
                             f"WORKBENCH_CACHE=~/.cache/workbench)") from None
        st = os.stat(path)
    sig = (st.st_dev, st.st_ino, st.st_uid, st.st_mode)
    if _root_ok.get(str(path)) == sig:
        return path
    check_root_location(path)
    problem = config.private_dir_problem(path)
    if problem:
        raise CacheError(
            f"the build cache {path} is not private: {problem}. The workbench loads the libraries it finds there "
            f"into your process, so a cache that someone else can write could run their code. Use a folder of "
            f"your own: `mkdir -m 700 <folder>` and WORKBENCH_CACHE=<folder> (or unset WORKBENCH_CACHE for "
            f"~/.cache/workbench); if this folder is yours alone, `chmod 700 {path}`")
    _root_ok[str(path)] = sig
    return path


def subdir(name: str) -> pathlib.Path:
    """A folder of the cache (builds, locks, sources, logs, trash), created 0700; one that is not this
    user's own, or that group or others may write (a cache that was shared once), is refused."""
    path = root() / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        with writing(f"creating {path}"), contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        what = ("a link" if stat.S_ISLNK(st.st_mode) else "not a folder" if not stat.S_ISDIR(st.st_mode)
                else f"owned by uid {st.st_uid}" if st.st_uid != os.geteuid()
                else f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})")
        raise CacheError(f"{path} is {what}: the cache's own folders must be yours alone (something else put it "
                         f"there). Move it away (or remove it), and the workbench makes a fresh one")
    return path


def builds_root() -> pathlib.Path:
    return subdir("builds")


def build_dir_for(label: str, key: str) -> pathlib.Path:
    return builds_root() / f"{label.replace('/', '-')}-{key[:20]}"


def foreign(path: pathlib.Path, st: os.stat_result, kind: str) -> str | None:
    """Why an entry of a build folder is not the workbench's own (None: it is)."""
    if kind == "dir" and not stat.S_ISDIR(st.st_mode) or kind == "file" and not stat.S_ISREG(st.st_mode):
        return f"{path} is not a {'folder' if kind == 'dir' else 'regular file'} (a link?)"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to uid {st.st_uid}, not to you"
    if st.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def new_staging_dir(label: str, key: str) -> pathlib.Path:
    """A fresh folder (0700) to build in, carrying the workbench's marker from the start."""
    d = builds_root() / f".staging-{label.replace('/', '-')}-{key[:12]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with writing(f"building {label}"):
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


def write_text(path: pathlib.Path, text: str | bytes) -> None:
    """Write `text` (or bytes) to `path` atomically (a temporary file per writer, renamed into
    place), unless the file already holds exactly that."""
    data = text.encode() if isinstance(text, str) else text
    if path.is_file() and not path.is_symlink() and path.read_bytes() == data:
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.replace(path)  # replaces a link at `path` itself, never writes through it


def write_source(kind: str, text: str, suffix: str, name: str) -> pathlib.Path:
    """A source string written under the cache, named by its hash."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = subdir("sources") / kind / f"{name}-{digest}{suffix}"
    with writing(f"writing the source of {kind}/{name}"):
        write_text(path, text)
    return path
