"""Ops and their variants, as found in the tree.

An op is a folder kernels/<op>/ with its <op>.h, a harness file bindings/<op>.cpp, and a Python
spec workbench/ops/<op>.py (reference, inputs, byte counts, fake and autograd registration). A
variant is a sibling source file kernels/<op>/<variant>.cu (CUDA) or .cpp (CPU); its name, device
and dtypes are read from its WB_EXPORT_VARIANT(...) call, so listing needs no build.
"""
from __future__ import annotations

import importlib
import pathlib
import re
from dataclasses import dataclass

from . import config

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DTYPE_BITS = {"WB_F32": "float32", "WB_F64": "float64", "WB_F16": "float16", "WB_BF16": "bfloat16"}
_registered_python: set[str] = set()


@dataclass(frozen=True)
class VariantInfo:
    op: str
    name: str
    device: str              # "cuda" or "cpu"
    dtypes: tuple[str, ...]
    description: str
    source: pathlib.Path

    def __repr__(self) -> str:
        return f"{self.name} ({self.device}: {', '.join(self.dtypes)}) - {self.description}"


def op_dirs() -> list[pathlib.Path]:
    return sorted(d for d in config.KERNELS_DIR.iterdir() if d.is_dir() and (d / f"{d.name}.h").exists())


def ops() -> list[str]:
    """Ops that have kernels, a harness file and a Python spec."""
    return [d.name for d in op_dirs()
            if (config.BINDINGS_DIR / f"{d.name}.cpp").exists()
            and (config.PACKAGE_DIR / "ops" / f"{d.name}.py").exists()]


def check_op(op: str) -> None:
    if not isinstance(op, str) or op not in ops():
        raise ValueError(f"op must be one of {ops()}; got {op!r}")


def check_variant_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"variant name must be an identifier (letters, digits, '_'); got {name!r}")


def spec(op: str):
    """The op's Python spec (workbench/ops/<op>.py: SPEC)."""
    check_op(op)
    return importlib.import_module(f"workbench.ops.{op}").SPEC


def _export_args(text: str) -> list[str] | None:
    """The top-level arguments of the WB_EXPORT_VARIANT( ... ) call in a source text."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    start = text.find("WB_EXPORT_VARIANT(")
    if start < 0:
        return None
    i, depth, args, cur, in_str = start + len("WB_EXPORT_VARIANT("), 1, [], "", False
    while i < len(text) and depth:
        ch = text[i]
        if in_str:
            cur += ch
            if ch == "\\":
                cur += text[i + 1]
                i += 1
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str, cur = True, cur + ch
        elif ch in "([{":
            depth, cur = depth + 1, cur + ch
        elif ch in ")]}":
            depth -= 1
            if depth:
                cur += ch
        elif ch == "," and depth == 1:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    args.append(cur.strip())
    return args


def static_variant(op: str, source: pathlib.Path, name: str | None = None) -> VariantInfo:
    """Read a variant's declaration from its source without building it."""
    text = source.read_text(errors="replace")
    args = _export_args(text)
    if not args or len(args) != 6:
        raise ValueError(f"{source}: a variant source must end with "
                         f"WB_EXPORT_VARIANT(op, device, dtypes, \"description\", launchers, status_string)")
    declared_op, device, dtypes, desc = args[:4]
    if declared_op != op:
        raise ValueError(f"{source}: declares a variant of op '{declared_op}', expected '{op}'")
    names = tuple(v for k, v in _DTYPE_BITS.items() if re.search(rf"\b{k}\b", dtypes))
    description = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', desc))
    return VariantInfo(op=op, name=name or source.stem, device="cuda" if "CUDA" in device else "cpu",
                       dtypes=names, description=description, source=source)


def variant_sources(op: str) -> dict[str, pathlib.Path]:
    check_op(op)
    d = config.KERNELS_DIR / op
    return {p.stem: p for p in sorted([*d.glob("*.cu"), *d.glob("*.cpp")])}


def variant_source(op: str, variant: str) -> pathlib.Path:
    sources = variant_sources(op)
    if variant not in sources:
        raise ValueError(f"{op} has no variant {variant!r}; variants: {', '.join(sources)} "
                         f"(or load_inline('{op}', source, name='{variant}'))")
    return sources[variant]


def variants(op: str) -> list[VariantInfo]:
    """The op's variants in kernels/<op>/, plus those built from strings in this process."""
    from . import loader

    out = [static_variant(op, path, name) for name, path in variant_sources(op).items()]
    known = {v.name for v in out}
    for k in loader.loaded(op):
        if k.name not in known:
            out.append(VariantInfo(op, k.name, k.device, k.dtypes, k.description + " (inline)", k.source))
    return out


def register_python_parts() -> None:
    """Fake (meta) implementations and autograd formulas for every op, once per process."""
    for op in ops():
        if op not in _registered_python:
            spec(op).register_python()
            _registered_python.add(op)
