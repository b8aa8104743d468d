"""The cache's folders, and what it trusts of the files in them (README: "What the cache trusts").

The cache holds libraries the workbench loads, so it must be the user's alone: created 0700, a
root or folder of another user's or writable by others refused with an error saying how to fix it,
never a home folder or `/`. A read-only or full cache is an error naming the folder and what to do.
A process that loads a library holds a shared flock on its build's `inuse` file, so `clean` can
tell a build in use from an idle one.

Every file the cache reads (a build's record, a shared manifest, an NVRTC unit, the toolchain memo)
goes through load_checked: opened without following a link or waiting (a FIFO is refused), of
bounded size and depth, then checked against its schema below; anything else is one RecordError
naming the file, the field and what it must be.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import math
import os
import pathlib
import re
import stat
import sys
import uuid
from typing import NamedTuple

from .. import config
from ..errors import WorkbenchError

KEY_FORMAT = 2  # bump when what goes into a key or a record changes (2: records carry the compiler's deps)
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
    """The filesystem root and this user's home folder (every user's, with all_users)."""
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


@contextlib.contextmanager
def writing(what: str):
    """A read-only, unwritable or full cache met inside, raised as storage_error's CacheError."""
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
    """A folder of the cache, created 0700; one not this user's own or writable by others is refused."""
    path = root() / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        with writing(f"creating {path}"), contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        st = os.lstat(path)
    problem = foreign(path, st, "dir")
    if problem:
        raise CacheError(f"{problem}: the cache's own folders must be yours alone (something else put it there). "
                         f"Move it away (or remove it), and the workbench makes a fresh one")
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


def write_text(path: pathlib.Path, text: str | bytes) -> None:
    """Write `text` (or bytes) to `path` by a temporary file renamed into place, unless it holds that."""
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


# ---------------------------------------------------------------- what a file of the cache may hold

MAX_DEPTH = 8            # the schemas nest 3 deep; a deeper file is refused before it is parsed
MAX_BYTES = 64 << 20     # a record listing every header of torch is ~0.5 MB


class RecordError(ValueError):
    """A file of the cache that is not what its schema says; args[0] names the file and field."""


def read_regular(path, size: int | None = None) -> bytes:
    """The bytes of `path`, a regular file (a link, FIFO or device is refused, never read) of exactly
    `size` bytes where given, else of at most MAX_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise RecordError(f"{path}: cannot be read ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(f"{path}: not a regular file (mode {stat.filemode(st.st_mode)})")
        if st.st_size != size and (size is not None or st.st_size > MAX_BYTES):
            raise RecordError(f"{path}: {st.st_size} bytes, not {size if size is not None else f'at most {MAX_BYTES}'}")
        with open(fd, "rb", closefd=False) as f:
            return f.read(MAX_BYTES if size is None else size)
    finally:
        os.close(fd)


_STRING, _BRACKET = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S), re.compile(rb"[\[\]{}]")


def load_checked(path, schema) -> dict:
    """The JSON file at `path`, read as read_regular does, nested at most MAX_DEPTH deep and checked
    against `schema` (RecordError otherwise)."""
    data, depth = read_regular(path), 0
    for m in _BRACKET.finditer(_STRING.sub(b"", data)):
        depth += 1 if m[0] in b"[{" else -1
        if depth > MAX_DEPTH:
            raise RecordError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(data)
        check(value, schema, "the whole file")
    except RecordError as e:
        raise RecordError(f"{path}: {e}") from None
    except ValueError as e:  # not JSON: a UnicodeDecodeError and an integer too long to convert included
        raise RecordError(f"{path}: not JSON ({e})") from None
    return value


class Text(NamedTuple):
    """A string that matches `pattern` in full."""
    pattern: re.Pattern
    what: str


def text(pattern: str = r"[^\0]*", what: str = "a string without NUL") -> Text:
    return Text(re.compile(pattern, re.S), what)


_LEAF = {int: lambda v: type(v) is int and -(1 << 63) <= v < 1 << 63, bool: lambda v: type(v) is bool,
         float: lambda v: type(v) in (int, float) and math.isfinite(v), None: lambda v: v is None}


def check(value, spec, field: str) -> None:
    """Raise RecordError where `value` does not match `spec`: a Text; int (an integer of 64 bits),
    float (a finite number), bool, None (null), an int value (that integer); a frozenset (any of its
    specs); [spec] (a list of such); (spec, ...) (a list of exactly those); {Text: spec} (an object
    of such entries); {"name": spec, "name?": spec} (an object with those fields, "?": optional;
    other fields may hold anything, MAX_DEPTH bounds them)."""
    if isinstance(spec, Text) or not isinstance(spec, (frozenset, list, tuple, dict)):
        if not (type(value) is str and spec.pattern.fullmatch(value) if isinstance(spec, Text) else
                value == spec and type(value) is int if type(spec) is int else _LEAF[spec](value)):
            _fail(field, _what(spec), value)
    elif isinstance(spec, frozenset):
        for s in spec:
            try:
                return check(value, s, field)
            except RecordError:
                pass
        _fail(field, " or ".join(sorted(map(_what, spec))), value)
    elif isinstance(spec, (list, tuple)):
        if type(value) is not list or isinstance(spec, tuple) and len(value) != len(spec):
            _fail(field, _what(spec), value)
        for i, x in enumerate(value):
            check(x, spec[i] if isinstance(spec, tuple) else spec[0], f"{field}[{i}]")
    elif type(value) is not dict:
        _fail(field, "a JSON object", value)
    elif isinstance(next(iter(spec)), Text):  # {Text: spec}: entries of any name
        (keys, values), = spec.items()
        for k, x in value.items():
            check(k, keys, f"{field} key")
            check(x, values, f"{field}[{k!r:.60}]")
    else:
        for name, s in spec.items():
            key = name.rstrip("?")
            if key in value:
                check(value[key], s, key if field == "the whole file" else f"{field}.{key}")
            elif not name.endswith("?"):
                raise RecordError(f"{field} lacks the field {key!r}")


def _what(spec) -> str:
    if isinstance(spec, Text):
        return spec.what
    if isinstance(spec, tuple):
        return f"a list of {len(spec)} items"
    if isinstance(spec, list):
        return "a list"
    return str(spec) if type(spec) is int else {int: "an integer", float: "a finite number", bool: "a boolean",
                                                  None: "null"}[spec]


def _fail(field: str, what: str, value) -> None:
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "an object", type(None): "null"}
    got = kinds[type(value)] + (f" ({value!r:.60})" if isinstance(value, (int, float, str)) else "")
    raise RecordError(f"{field} must be {what}, not {got}")


HEX64 = text(r"[0-9a-f]{64}", "a sha256 (64 hex digits)")
HEX32 = text(r"[0-9a-f]{32}", "32 hex digits")
NAME = text(r"(?!\.\.?\Z)[^/\0]{1,255}", "a file name (no '/', NUL, '.' or '..'; at most 255 characters)")
PATH = text(r"/[^\0]{0,4095}", "an absolute path (no NUL; at most 4096 characters)")
TEXT = text()

RECORD = {  # a build's meta.json (written by records.publish, read by build.lookup)
    "format": KEY_FORMAT, "library": NAME, "size": int, "sha256": HEX64, "key": HEX64, "label": TEXT,
    "deps": [(PATH, int, int, HEX64)],  # [path, size, mtime_ns, sha256] of each file the compiler read
    "kind?": TEXT, "arch_list?": frozenset({TEXT, None}), "toolchain?": {TEXT: frozenset({TEXT, bool, None})},
    "build_seconds?": float, "created?": float, "sources?": [TEXT], "flags?": [TEXT], "cuda_flags?": [TEXT],
    "command?": [TEXT], "nvrtc_unit?": HEX32, "nvrtc_options?": [TEXT], "kernels?": int, "imported_from?": TEXT,
    "host_rebuilt?": frozenset({TEXT, bool, None}),
    **{f"{k}?": TEXT for k in ("compiler_version", "device_compiler", "nvrtc_version", "host_key", "host_build",
                               "nvcc_build", "nvrtc_fallback")}}
MANIFEST = {"format": 2, "builds": {NAME: {"sha256": HEX64, "size": int}}}  # shared.py: what the user vouches for
UNIT = {"key": HEX32, "label": TEXT, "main": TEXT, "texts": {TEXT: TEXT}, "options": [TEXT],  # nvrtc_kernels.Unit
        "kernels": {TEXT: TEXT}}
MEMO = {"stamp": TEXT, "version": TEXT}  # toolchain.nvcc_version's memo


def manifest_of(cache_root: pathlib.Path) -> dict:
    """A manifest for WORKBENCH_SHARED_CACHE_MANIFEST: each build under `cache_root` by folder name,
    its library's sha256 and size as its record says. Make it from a cache you built or checked."""
    builds = {}
    for d in sorted((pathlib.Path(cache_root) / "builds").iterdir()):
        try:
            meta = load_checked(d / "meta.json", RECORD)
        except RecordError:
            continue
        builds[d.name] = {"sha256": meta["sha256"], "size": meta["size"]}
    return {"format": 2, "builds": builds}
