"""The content-keyed build cache, and what it trusts.

A build's key is a sha256 over its source, every header it includes (found by following quoted
#include lines), its flags and arch list, and the toolchain (torch, torch.version.cuda, nvcc, C++
ABI, Python tag). The key only names the folder: what the compiler actually read is taken from the
compiler itself (its depfile: -MD/-MF, nvcc -MD, ninja's deps log), and the record keeps every such
file with its size, mtime and sha256; a hit whose dependencies changed (a header included as <...>,
through a macro, or found through CPATH) is stale and is rebuilt.

A build is published by renaming a finished directory into place, so readers see either nothing or
a complete build; a warm hit checks the library's size and sha256 against its record, that the
record names a file inside its own folder, and that the ELF file's segments and sections lie within
it (a truncated library would kill the process with SIGBUS when loaded), then loads it without
calling ninja. A damaged record or library is rebuilt.

Trust: the cache runs whatever libraries it holds, so it must be the user's alone. It is created
0700; a cache root (or a folder in it) owned by another user, or writable by group or others, is
refused with an error that says why and how to fix it. Build folders, records and libraries must
be the user's own. Lock files are opened without following links. Locks are flock()s: they die with
the process that holds them, so a killed build never leaves a lock that blocks the next one.
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
import stat
import struct
import sys
import time
import uuid

from . import config
from .errors import LockTimeout, WorkbenchError

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
_KEY_FORMAT = 2  # bump when what goes into a key or a record changes (2: records carry the compiler's deps)
MARKER = ".workbench-build"  # in every folder the workbench builds in: what `clean` may remove
_STORAGE_ERRNOS = {errno.EROFS: "read-only", errno.EACCES: "not writable", errno.EPERM: "not writable",
                   errno.ENOSPC: "full", errno.EDQUOT: "over its disk quota"}


class CacheError(WorkbenchError):
    """The build cache cannot be used as it is: not private, not writable, full, or a link where
    a file of the workbench's belongs. The message names the folder and what to do."""


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


# ---------------------------------------------------------------- the cache's folders, and trust

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


def _foreign(path: pathlib.Path, st: os.stat_result, kind: str) -> str | None:
    """Why an entry of a build folder is not the workbench's own (None: it is)."""
    if kind == "dir" and not stat.S_ISDIR(st.st_mode) or kind == "file" and not stat.S_ISREG(st.st_mode):
        return f"{path} is not a {'folder' if kind == 'dir' else 'regular file'} (a link?)"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to uid {st.st_uid}, not to you"
    if st.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


# ---------------------------------------------------------------- ELF check before dlopen

_PT_LOAD, _SHT_NOBITS = 1, 8


def elf_problem(path: pathlib.Path, size: int) -> str | None:
    """Why `path` is not a whole ELF shared library, else None: its header, program headers,
    loadable segments and sections must lie within its `size` bytes. dlopen maps segments as the
    headers say, and touching a page past the end of a truncated file is a SIGBUS that kills the
    process; this is checked before any library is loaded."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if len(ident) < 52 or ident[:4] != b"\x7fELF":
                return "not an ELF file (no ELF header)"
            is64, little = ident[4] == 2, ident[5] == 1
            e = "<" if little else ">"
            if is64:
                if len(ident) < 64:
                    return "its ELF header is cut short"
                phoff, shoff = struct.unpack_from(e + "QQ", ident, 32)
                phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", ident, 54)
            else:
                phoff, shoff = struct.unpack_from(e + "II", ident, 28)
                phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", ident, 42)
            if phnum == 0 or phoff + phnum * phentsize > size:
                return f"its program headers ({phnum} at offset {phoff}) run past its end ({size} bytes)"
            f.seek(phoff)
            ph = f.read(phnum * phentsize)
            for i in range(phnum):
                if is64:
                    p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(e + "IIQQQQ", ph, i * phentsize)
                else:
                    p_type, p_offset, _, _, p_filesz = struct.unpack_from(e + "IIIII", ph, i * phentsize)
                if p_type == _PT_LOAD and p_offset + p_filesz > size:
                    return (f"a loadable segment ends at byte {p_offset + p_filesz}, past its end ({size} bytes): "
                            f"the file is truncated")
            if shnum and shoff + shnum * shentsize > size:
                return f"its section headers (at offset {shoff}) run past its end ({size} bytes): the file is truncated"
            if shnum:
                f.seek(shoff)
                sh = f.read(shnum * shentsize)
                for i in range(shnum):
                    if is64:
                        sh_type, _, _, sh_offset, sh_size = struct.unpack_from(e + "IIQQQQ", sh, i * shentsize)[1:6]
                    else:
                        sh_type, _, _, sh_offset, sh_size = struct.unpack_from(e + "IIIIII", sh, i * shentsize)[1:6]
                    if sh_type != _SHT_NOBITS and sh_offset + sh_size > size:
                        return f"section {i} ends at byte {sh_offset + sh_size}, past its end ({size} bytes): truncated"
    except (OSError, struct.error) as e:
        return f"its ELF headers cannot be read ({e})"
    return None


# ---------------------------------------------------------------- dependencies the compiler read

def parse_depfile(text: str, cwd: pathlib.Path) -> list[str]:
    """The prerequisites of a make-style depfile (gcc -MD, nvcc -MD), as absolute paths."""
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    out: list[str] = []
    for line in text.splitlines():
        if ":" not in line:
            continue
        # the rule's target ends at the first ': ' (paths with spaces are escaped as '\ ')
        _, _, rest = line.partition(": ") if ": " in line else line.partition(":")
        token, escaped = "", False
        for ch in rest + " ":
            if escaped:
                token += ch
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch.isspace():
                if token:
                    out.append(token)
                token = ""
            else:
                token += ch
    return [os.path.normpath(p if os.path.isabs(p) else cwd / p) for p in out]


def ninja_deps(build_dir: pathlib.Path) -> list[str] | None:
    """The headers and sources ninja recorded from the compilers' depfiles (cpp_extension's rules say
    `deps = gcc`: ninja reads each .d file into .ninja_deps and removes it). None where ninja says
    nothing (no deps log)."""
    import subprocess

    ninja = shutil.which("ninja")
    if ninja is None or not (build_dir / ".ninja_deps").exists():
        return None
    proc = subprocess.run([ninja, "-C", str(build_dir), "-t", "deps"], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return None
    paths = [ln.strip() for ln in proc.stdout.splitlines() if ln.startswith("    ") and ln.strip()]
    return [os.path.normpath(p if os.path.isabs(p) else build_dir / p) for p in paths]


def dependency_record(paths, build_dir: pathlib.Path) -> list[list]:
    """[path, size, mtime_ns, sha256] for each file the compiler read (files inside the build folder,
    its own outputs, left out)."""
    inside = os.path.realpath(build_dir) + os.sep
    out, seen = [], set()
    for p in paths:
        if p in seen or os.path.realpath(p).startswith(inside):
            continue
        seen.add(p)
        try:
            st = os.stat(p)
            out.append([p, st.st_size, st.st_mtime_ns, _sha256_file(pathlib.Path(p))])
        except OSError:
            continue  # a file the compiler probed and did not find
    return sorted(out)


def _stale_dependency(deps: list) -> str | None:
    """The first recorded dependency that changed since the build (None: none did). A file whose size
    and mtime are as recorded is taken as unchanged (a stat: cheap on a warm hit); any other is hashed."""
    for entry in deps:
        if not (isinstance(entry, list) and len(entry) == 4):
            return "its dependency list is malformed"
        path, size, mtime_ns, digest = entry
        try:
            st = os.stat(path)
        except OSError:
            return f"{path}, which it was compiled from, is gone"
        if st.st_size == size and st.st_mtime_ns == mtime_ns:
            continue
        if _sha256_file(pathlib.Path(path)) != digest:
            return f"{path} changed since it was built"
    return None


# ---------------------------------------------------------------- lookup and publication

def lookup(build_dir: pathlib.Path) -> tuple[pathlib.Path | None, dict | None, str | None]:
    """(library, record, problem): the published library if its record vouches for it, else the
    reason it cannot be used (missing, truncated, foreign, stale): the caller rebuilds it."""
    meta_path = build_dir / "meta.json"
    try:
        dst = os.lstat(build_dir)
        mst = os.lstat(meta_path)
    except FileNotFoundError:
        return None, None, None
    except OSError as e:
        return None, None, f"unreadable build folder ({e})"
    problem = _foreign(build_dir, dst, "dir") or _foreign(meta_path, mst, "file")
    if problem:
        return None, None, f"not the workbench's own build: {problem}"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as e:
        return None, None, f"unreadable build record {meta_path} ({e})"
    if not isinstance(meta, dict):
        return None, None, f"the build record {meta_path} is not a JSON object (a {type(meta).__name__})"
    name = meta.get("library")
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\0" in name:
        return None, None, f"the build record {meta_path} names no library file inside its own folder ({name!r})"
    lib = build_dir / name
    try:
        st = os.lstat(lib)
    except OSError as e:
        return None, None, f"its library {lib} is missing ({e.strerror})"
    problem = _foreign(lib, st, "file")
    if problem:
        return None, meta, f"not the workbench's own build: {problem}"
    if meta.get("format") != _KEY_FORMAT or not isinstance(meta.get("deps"), list):
        return None, meta, "a build record of an older workbench (no dependency list)"
    if st.st_size != meta.get("size"):
        return None, meta, f"library is {st.st_size} bytes, its record says {meta.get('size')} (truncated?)"
    if _sha256_file(lib) != meta.get("sha256"):
        return None, meta, "library does not match its recorded sha256 (foreign or modified file)"
    problem = elf_problem(lib, st.st_size)
    if problem:
        return None, meta, f"damaged library {lib}: {problem}"
    stale = _stale_dependency(meta["deps"])
    if stale:
        return None, meta, f"stale: {stale}"
    return lib, meta, None


# ---------------------------------------------------------------- a shared cache, by explicit opt-in

_HEX64 = re.compile(r"[0-9a-f]{64}")


def manifest_of(cache_root: pathlib.Path) -> dict:
    """A manifest for WORKBENCH_SHARED_CACHE_MANIFEST: every published build under `cache_root`, by
    folder name, with its library's sha256 as its record says. Whoever writes it vouches for those
    libraries: make it from a cache you built or checked yourself."""
    builds = {}
    for d in sorted((pathlib.Path(cache_root) / "builds").iterdir()):
        with contextlib.suppress(OSError, ValueError, TypeError):
            meta = json.loads((d / "meta.json").read_text())
            if isinstance(meta, dict) and _HEX64.fullmatch(str(meta.get("sha256"))):
                builds[d.name] = meta["sha256"]
    return {"format": 1, "builds": builds}


def shared_cache() -> tuple[pathlib.Path, dict] | None:
    """(folder, {build folder name: library sha256}) of the shared read-only cache the user opted into
    (WORKBENCH_SHARED_CACHE, with the manifest they trust in WORKBENCH_SHARED_CACHE_MANIFEST); None
    without one. The manifest must be the user's (or root's) and writable by nobody else."""
    folder = os.environ.get("WORKBENCH_SHARED_CACHE")
    if not folder:
        return None
    manifest = os.environ.get("WORKBENCH_SHARED_CACHE_MANIFEST")
    if not manifest:
        raise CacheError(
            f"WORKBENCH_SHARED_CACHE={folder} is set without WORKBENCH_SHARED_CACHE_MANIFEST: a shared cache is "
            f"used only for the builds listed in a manifest you trust (build folder -> the library's sha256; "
            f"workbench.cache.manifest_of(folder) writes one from a cache you checked). Set it, or unset "
            f"WORKBENCH_SHARED_CACHE")
    try:
        st = os.stat(manifest)
        data = json.loads(pathlib.Path(manifest).read_text())
    except (OSError, ValueError) as e:
        raise CacheError(f"WORKBENCH_SHARED_CACHE_MANIFEST={manifest} cannot be read ({e}); point it at the "
                         f"manifest of the shared cache you trust") from None
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
        raise CacheError(f"WORKBENCH_SHARED_CACHE_MANIFEST={manifest} is not yours alone (owner uid {st.st_uid}, mode "
                         f"{stat.S_IMODE(st.st_mode):04o}): a manifest someone else can change vouches for nothing. "
                         f"Keep your own copy (chmod 600)")
    builds = data.get("builds") if isinstance(data, dict) else None
    if not isinstance(builds, dict) or not all(isinstance(k, str) and isinstance(v, str) and _HEX64.fullmatch(v)
                                               for k, v in builds.items()):
        raise CacheError(f"WORKBENCH_SHARED_CACHE_MANIFEST={manifest} must be a JSON object {{\"builds\": {{build "
                         f"folder name: library sha256}}}}, as workbench.cache.manifest_of writes")
    return pathlib.Path(folder).expanduser(), builds


def import_shared(final: pathlib.Path, what: str) -> bool:
    """Copy the build of `final`'s name from the shared cache into this user's cache, where the
    trusted manifest lists it and the library's bytes match its sha256 (they are read once, checked,
    and those bytes are what is written: the shared file is never loaded itself). The caller holds
    the key's lock and looks the build up again (its dependencies are checked there). Returns
    whether a build was imported."""
    shared = shared_cache()
    if shared is None:
        return False
    folder, trusted = shared
    want = trusted.get(final.name)
    if want is None:
        return False
    src = folder / "builds" / final.name
    try:
        meta = json.loads((src / "meta.json").read_text())
        name = meta.get("library") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name or name in (".", "..") or "/" in name:
            raise ValueError(f"its record names no library file inside its folder ({name!r})")
        data = (src / name).read_bytes()
    except (OSError, ValueError) as e:
        progress(f"{what}: the shared cache's build {src} is unusable ({e}); building it here")
        return False
    if hashlib.sha256(data).hexdigest() != want:
        progress(f"{what}: the shared cache's {src / name} does not match the sha256 your manifest trusts; "
                 f"not used, building it here")
        return False
    staging = new_staging_dir(final.name, want)
    lib = staging / name
    fd = os.open(lib, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o755)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    record = {k: v for k, v in meta.items() if k not in ("format", "library", "size", "sha256", "deps")}
    deps = meta.get("deps") if isinstance(meta.get("deps"), list) else []
    try:
        publish(staging, final, lib, dict(record, imported_from=str(src)), deps)
    except CacheError:
        discard(staging)
        return False
    progress(f"{what}: imported from the shared cache {folder} (sha256 as your manifest says)")
    return True


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


def new_staging_dir(label: str, key: str) -> pathlib.Path:
    """A fresh folder (0700) to build in, carrying the workbench's marker from the start."""
    d = builds_root() / f".staging-{label.replace('/', '-')}-{key[:12]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with writing(f"building {label}"):
        os.mkdir(d, 0o700)
        (d / MARKER).write_text(f"{label}\n{key}\n")
    return d


def publish(staging: pathlib.Path, final: pathlib.Path, library: pathlib.Path, record: dict,
            deps: list | None = None, *, rename: bool = True) -> pathlib.Path:
    """Write the record (with the compiler-reported dependencies, each with its digest) and rename the
    staging directory into place (atomic). A broken build at `final` is moved aside first; callers
    hold the key's lock, so nobody else publishes. A library that is not a whole ELF file is refused."""
    # A name of this build's own: a rebuild under the same key (a dependency changed) must not reach
    # dlopen under a path already loaded in this process, which would hand back the old library.
    # (rename=False: the caller named it so already.)
    if rename:
        base, dot, rest = library.name.partition(".")
        unique = library.with_name(f"{base}-{uuid.uuid4().hex[:8]}{dot}{rest}")
        os.rename(library, unique)
        library = unique
    st = library.stat()
    os.chmod(library, stat.S_IMODE(st.st_mode) & ~0o022)  # a umask of 002 must not make it group-writable
    problem = elf_problem(library, st.st_size)
    if problem:
        raise CacheError(f"{record.get('label', library.name)}: the linker wrote a damaged library {library} "
                         f"({problem}); is the disk full? The build folder is {staging}")
    record = dict(record, format=_KEY_FORMAT, library=library.name, size=st.st_size, sha256=_sha256_file(library),
                  deps=deps if deps is not None else [])
    tmp = staging / "meta.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(record, indent=1, sort_keys=True))
    os.replace(tmp, staging / "meta.json")
    if os.path.lexists(final):
        trash = subdir("trash") / f"{final.name}-{uuid.uuid4().hex[:8]}"
        os.rename(final, trash)
    os.rename(staging, final)
    return final / library.name


def discard(path: pathlib.Path) -> None:
    """Remove a folder the workbench made (never following a link inside it)."""
    if os.path.islink(path):
        return
    shutil.rmtree(path, ignore_errors=True)


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
    """Why `d` is not a build folder the workbench wrote (None: it is). It must be a real folder (not
    a link) of this user's, carrying the workbench's marker or a build record it wrote."""
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
        if stat.S_ISREG(os.lstat(d / "meta.json").st_mode):
            meta = json.loads((d / "meta.json").read_text())
            if isinstance(meta, dict) and {"key", "label", "sha256", "library"} <= set(meta):
                return None
    except (OSError, ValueError):
        pass
    return "carries no workbench build record"


def clean(*, older_than_s: float | None = None, max_bytes: int | None = None, everything: bool = False) -> dict:
    """Remove builds: all idle ones (`everything`), those not used for `older_than_s`, or the
    least recently used until the cache is under `max_bytes`. Only folders that carry a build record
    (or the marker) the workbench wrote are touched, links are never followed, and a build that
    some process has loaded is never removed. Refuses a cache root that is the filesystem root or
    a home folder. Returns what was removed, kept in use, and left alone (with why)."""
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
