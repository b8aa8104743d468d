"""Content keys: what names a build in the cache.

A key is a sha256 over the piece's kind, flags, arch list and toolchain, and the source with every
header it reaches by quoted #include lines (by bytes; or by tokens, for the NVRTC tier: a comment or
whitespace edit is the same build). The key only names the folder; what the compiler actually read
is recorded with the build (records.py), which decides whether a hit is stale.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import re

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
KEY_FORMAT = 2  # bump when what goes into a key or a record changes (2: records carry the compiler's deps)


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


# path -> [(mtime_ns, size, inode), sha256 of the content, its quoted includes, sha256 of its tokens
# once asked for]: a file is read and scanned again only when its stat changes, so a warm load hashes
# no header twice. (A stale entry could only name a folder: records.lookup checks what the compiler
# read, by content.)
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
    """(include name, resolved path) for the source (named '<source>') and every quoted header it
    reaches, as the compiler resolves them (the including file's folder first, then include_dirs),
    in a stable order; the path is None for a header not found."""
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


def source_closure(source: pathlib.Path, include_dirs: list[pathlib.Path],
                   by_tokens: bool = False) -> list[tuple[str, bytes]]:
    """(name, sha256 of the content, or of its tokens) over include_closure: the source named
    '<source>' so the same text at another path gives the same key; a header not found with the
    digest of b"<not found>"."""
    return [(name, _scan(path, by_tokens)[0] if path is not None else _NOT_FOUND)
            for name, path in include_closure(source, include_dirs)]


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
    """Each file of the source's include closure, by name and content (or tokens), into the hash h."""
    for name, digest in source_closure(source, include_dirs, by_tokens):
        h.update(name.encode() + b"\0" + digest)


def sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
