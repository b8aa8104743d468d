"""What to build and its content key: a Piece, and BuildOptions.

Every caller (the loader, extension-style sources, the NumPy front end, setup.py's wheel) describes
its library once as a Piece and hands it to get_or_build whole. The content key is a sha256 over the
piece's kind, flags, arch list and toolchain and its source with every header it reaches by quoted
#include (by bytes, or by tokens for the NVRTC tier: a comment edit is the same build). The key only
names the folder; what the compiler actually read, recorded with the build, decides staleness.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import re
from dataclasses import dataclass, field

from .cache import KEY_FORMAT


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


_LITERAL_OR_COMMENT = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)
_LITERAL_OR_SPACE = re.compile(r'("(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')|\s+')
_LAYOUT_MATTERS = re.compile(r"\b(?:__LINE__|__FILE__|assert)\b")


def tokens(text: str) -> str:
    """The text as the compiler reads it, layout aside: each comment and run of whitespace one space,
    a line break kept only where a preprocessor line ends. A text that names __LINE__, __FILE__ or
    assert is returned as it is: there a moved line changes what it compiles to."""
    if _LAYOUT_MATTERS.search(text):
        return text
    text = _LITERAL_OR_COMMENT.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else " ", text)
    out = []
    for line in text.replace("\\\n", " ").split("\n"):
        line = _LITERAL_OR_SPACE.sub(lambda m: m.group(1) or " ", line).strip()
        out.append(f"\n{line}\n" if line.startswith("#") else line)
    return " ".join(word for word in out if word)


# path -> [(mtime_ns, size, inode), sha256, its quoted includes, sha256 of its tokens once asked]:
# a file is read again only when its stat changes. (A stale entry could only name a folder: lookup
# checks what the compiler read, by content.)
_scanned: dict[str, list] = {}


def _scan(path: pathlib.Path, by_tokens: bool = False) -> tuple[bytes, list[str]]:
    st = path.stat()
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    hit = _scanned.get(str(path))
    if hit is None or hit[0] != stamp:
        data = path.read_bytes()
        hit = _scanned[str(path)] = [stamp, hashlib.sha256(data).digest(),
                                     _INCLUDE.findall(data.decode("utf-8", errors="replace")), None]
    if by_tokens and hit[3] is None:
        hit[3] = hashlib.sha256(tokens(path.read_text(errors="replace")).encode()).digest()
    return hit[3 if by_tokens else 1], hit[2]


def include_closure(source: pathlib.Path, include_dirs) -> list[tuple[str, pathlib.Path | None]]:
    """(include name, path) of the source (named '<source>') and every quoted header it reaches, as
    the compiler resolves them (the including file's folder, then include_dirs); None: not found."""
    seen: set[pathlib.Path] = set()
    out: list[tuple[str, pathlib.Path | None]] = []

    def visit(path: pathlib.Path, name: str) -> None:
        path = path.resolve()
        if path in seen:
            return
        seen.add(path)
        out.append((name, path))
        for inc in _scan(path)[1]:
            for d in [path.parent, *include_dirs]:
                cand = d / inc
                if cand.is_file():
                    visit(cand, inc)
                    break
            else:
                out.append((inc, None))

    visit(pathlib.Path(source), "<source>")
    return out


_NOT_FOUND = hashlib.sha256(b"<not found>").digest()


def content_key(*, kind: str, sources: list[pathlib.Path], include_dirs: list[pathlib.Path],
                flags: list[str], arch_list: str | None, toolchain: dict, by_tokens: bool = False) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"format": KEY_FORMAT, "kind": kind, "flags": flags, "arch_list": arch_list,
                         "toolchain": toolchain, **({"by_tokens": True} if by_tokens else {})}, sort_keys=True).encode())
    for src in sources:
        _hash_closure(h, src, include_dirs, by_tokens)
    return h.hexdigest()


def closure_digest(source: pathlib.Path, include_dirs: list[pathlib.Path]) -> str:
    """A hash of a header and everything it includes: an op's contract, which its binding and its
    variants must have been built against alike."""
    h = hashlib.sha256()
    _hash_closure(h, source, include_dirs)
    return h.hexdigest()[:16]


def _hash_closure(h, source: pathlib.Path, include_dirs: list[pathlib.Path], by_tokens: bool = False) -> None:
    """Each file of the source's include closure, by name and content (or tokens), into the hash h:
    the source is named '<source>', so the same text at another path gives the same key."""
    for name, path in include_closure(source, include_dirs):
        h.update(name.encode() + b"\0" + (_scan(path, by_tokens)[0] if path is not None else _NOT_FOUND))


def sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- pieces

CPP_EXTENSION, RAW, NVRTC = "cpp_extension", "raw", "nvrtc"
COMPILER_CHOICES = ("nvcc", "nvrtc")  # BuildOptions.compiler: what a user names


@dataclass(frozen=True)
class BuildOptions:
    """How a torch-facing CUDA variant is built beyond its defaults. line_info: nvcc -lineinfo (the
    line table a profiler's source page needs). compiler: "nvcc" (the whole file) or "nvrtc" (the
    NVRTC tier: nvrtc_tier.py) for `arch` (e.g. "sm_90a"; default the current GPU's, else the arch
    list's newest)."""
    line_info: bool = False
    compiler: str = "nvcc"
    arch: str | None = None

    def __post_init__(self):
        if self.compiler not in COMPILER_CHOICES:
            raise ValueError(f"compiler must be one of {COMPILER_CHOICES}; got {self.compiler!r}")
        if self.arch is not None and not re.fullmatch(r"sm_\d+[a-z]?", self.arch):
            raise ValueError(f"arch must look like sm_90a or sm_80; got {self.arch!r}")

    def nvcc_flags(self) -> list[str]:
        """The CUDA flags these options add, after the user's WORKBENCH_NVCC_FLAGS."""
        user = user_nvcc_flags()
        return user + (["-lineinfo"] if self.line_info and "-lineinfo" not in user else [])

    def as_dict(self) -> dict:
        """Only what differs from the defaults (a child process is handed this, and rebuilds it)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v != getattr(DEFAULT_OPTIONS, k)}


DEFAULT_OPTIONS = BuildOptions()
# The edit loop's tier (wb.load_inline, the %%workbench magic): device edits rebuilt by NVRTC alone.
EDIT_LOOP_OPTIONS = BuildOptions(compiler="nvrtc")


def user_nvcc_flags() -> list[str]:
    """WORKBENCH_NVCC_FLAGS: the user's own nvcc flags, added to every CUDA build (and its key)."""
    return os.environ.get("WORKBENCH_NVCC_FLAGS", "").split()


@dataclass(frozen=True)
class Piece:
    """One library to build or load. `kind` (harness, binding, variant, extension, ndarray-*) is in
    its key; `label` names it in messages and build folders. `compiler`: "cpp_extension" (a torch
    extension: `cflags` for the host compiler, `cuda_cflags` for nvcc), "raw" (`command` + `cflags`
    + includes + the source + `link`: no torch) or "nvrtc" (`command`: NVRTC's version and options)."""
    label: str
    kind: str
    sources: tuple[pathlib.Path, ...]
    include_dirs: tuple[pathlib.Path, ...]
    with_cuda: bool = False
    cflags: tuple[str, ...] = ()
    cuda_cflags: tuple[str, ...] = ()           # cpp_extension: nvcc's flags
    compiler: str = CPP_EXTENSION
    command: tuple[str, ...] = ()               # raw: the compiler (a command: "ccache g++" is two words)
    link: tuple[str, ...] = ()                  # raw: after the source; cpp_extension: link flags
    suffix: str = ".so"                         # raw: the library's file name ending
    arch_list: str | None = None                # CUDA code's arch list (None for a build without CUDA)
    toolchain: dict | None = field(default=None, compare=False, hash=False)  # the key's; None: torch's (pipeline)

    def __post_init__(self):
        for name in ("sources", "include_dirs", "cflags", "cuda_cflags", "command", "link"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.compiler not in (CPP_EXTENSION, RAW, NVRTC):
            raise ValueError(f"compiler must be {CPP_EXTENSION!r}, {RAW!r} or {NVRTC!r}; got {self.compiler!r}")
        if self.compiler == RAW and (not self.command or len(self.sources) != 1):
            raise ValueError(f"{self.label}: a raw build takes a compiler command and exactly one source")

    @property
    def flags(self) -> list[str]:
        """The flags as the content key sees them (paths left out: the same text elsewhere is the same build)."""
        if self.compiler == RAW:
            return [*self.command[1:], *self.cflags, *self.link]
        if self.compiler == NVRTC:
            return [*self.command, *self.cflags, *self.cuda_cflags]
        return [*self.cflags, *(self.cuda_cflags if self.with_cuda else ()), *(["cuda"] if self.with_cuda else []),
                *self.link]

    def key(self, toolchain: dict, arch_list: str | None = None) -> str:
        """The content key under `toolchain` (and `arch_list`, default the piece's own)."""
        arch = (arch_list or self.arch_list) if self.with_cuda else None
        # The NVRTC tier keys on tokens, but where line numbers are compiled in (-lineinfo).
        by_tokens = self.compiler == NVRTC and "-lineinfo" not in self.flags
        return content_key(kind=self.kind, sources=list(self.sources), include_dirs=list(self.include_dirs),
                                flags=self.flags, arch_list=arch, toolchain=toolchain, by_tokens=by_tokens)
