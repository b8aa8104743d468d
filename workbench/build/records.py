"""A build's record, and the checks a warm hit passes before its library is loaded.

The record keeps every file the compiler actually read (its depfile: -MD/-MF, nvcc -MD, ninja's
deps log) with its size, mtime and sha256; a hit whose dependencies changed (a header included as
<...>, through a macro, or found through CPATH) is stale and is rebuilt. A build is published by
renaming a finished directory into place, so readers see either nothing or a complete build; a
warm hit checks its record against schema.RECORD before using any field of it, the library's size
and sha256 against the record, and that the ELF file's segments and sections lie within it (a
truncated library would kill the process with SIGBUS when loaded). A damaged record or library is
rebuilt.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import struct
import uuid

from . import schema
from .keys import KEY_FORMAT, sha256_file
from .store import CacheError, foreign, subdir

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
            out.append([os.path.abspath(p), st.st_size, st.st_mtime_ns, sha256_file(pathlib.Path(p))])
        except OSError:
            continue  # a file the compiler probed and did not find
    return sorted(out)


def _stale_dependency(deps: list) -> str | None:
    """The first recorded dependency (schema-checked) that changed since the build (None: none did).
    A file whose size and mtime are as recorded is taken as unchanged (a stat: cheap on a warm hit);
    a regular file of the recorded size is hashed; anything else changed."""
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
    problem = foreign(build_dir, dst, "dir") or foreign(meta_path, mst, "file")
    if problem:
        return None, None, f"not the workbench's own build: {problem}"
    try:
        meta = schema.load(meta_path, schema.RECORD)
    except schema.RecordError as e:
        return None, None, f"damaged build record: {e}"
    lib = build_dir / meta["library"]
    try:
        st = os.lstat(lib)
    except OSError as e:
        return None, None, f"its library {lib} is missing ({e.strerror})"
    problem = foreign(lib, st, "file")
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
    record = dict(record, format=KEY_FORMAT, library=library.name, size=st.st_size, sha256=sha256_file(library),
                  deps=deps if deps is not None else [])
    schema.check(record, schema.RECORD, "the record")  # what is written is what lookup accepts
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
