"""What a file the cache reads may hold, checked before any field of it is used.

A build's record (meta.json), a shared cache's manifest, an NVRTC unit and the toolchain memo are
each read by `load`: opened without following a link and without waiting (a FIFO is refused, never
read), a regular file of at most MAX_BYTES, nested at most MAX_DEPTH deep, then checked against its
schema below. Anything else is one RecordError naming the file, the field and what it must be: the
caller rebuilds (a record) or refuses (a manifest), saying so.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
from typing import NamedTuple

from .keys import KEY_FORMAT

MAX_DEPTH = 8            # the schemas nest 3 deep; a deeper file is refused before it is parsed
MAX_BYTES = 64 << 20     # a record listing every header of torch is ~0.5 MB


class RecordError(ValueError):
    """A file of the cache that is not what its schema says; args[0] names the file, the field and
    what was expected."""


def read_regular(path, size: int | None = None) -> bytes:
    """The bytes of `path`, a regular file (a link, FIFO or device is refused, never read) of exactly
    `size` bytes where given, else of at most MAX_BYTES; read with that bound."""
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


def load(path, schema) -> dict:
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


# ---------------------------------------------------------------- the schema language

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


# ---------------------------------------------------------------- the files the cache reads

HEX64 = text(r"[0-9a-f]{64}", "a sha256 (64 hex digits)")
HEX32 = text(r"[0-9a-f]{32}", "32 hex digits")
NAME = text(r"(?!\.\.?\Z)[^/\0]{1,255}", "a file name (no '/', NUL, '.' or '..'; at most 255 characters)")
PATH = text(r"/[^\0]{0,4095}", "an absolute path (no NUL; at most 4096 characters)")
TEXT = text()

RECORD = {  # a build's meta.json (records.py)
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
