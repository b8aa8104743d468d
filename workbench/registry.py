"""Ops and their variants: what exists, read without building anything.

An op in the tree is three pieces: a folder kernels/<op>/ with its torch-free contract <op>.h (the
parameter structs and launcher table) and its variants, a binding bindings/<op>.cpp (fills the
structs from a checked call), and a spec workbench/specs/<op>.py (the declaration everything else
derives from). An op can also be given as the same three pieces from a notebook
(workbench.define_op); those are listed here once defined. A variant is a source file beside the
op's header, kernels/<op>/<variant>.cu (CUDA) or .cpp (CPU); its name, device and dtypes are read
from its WB_EXPORT_VARIANT(...) call, so listing needs no build.
"""
from __future__ import annotations

import importlib
import pathlib
import re
from dataclasses import dataclass

from . import config, dtypes

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DTYPE_BITS = {mask: name for name, mask in dtypes.MASKS.items()}


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


@dataclass(frozen=True)
class OpSources:
    """Where an op's C++ lives: the header's folder (also its variants' include dir), the header
    and the binding source."""
    kernel_dir: pathlib.Path
    header: pathlib.Path
    binding: pathlib.Path
    inline: bool = False


_inline_ops: dict[str, tuple[object, OpSources]] = {}          # op -> (spec, sources), from define_op
_inline_variants: dict[tuple[str, str], VariantInfo] = {}     # (op, name) -> newest build's description


def _tree_ops() -> list[str]:
    if not config.KERNELS_DIR.is_dir():
        return []
    return sorted(d.name for d in config.KERNELS_DIR.iterdir()
                  if d.is_dir() and (d / f"{d.name}.h").exists()
                  and (config.BINDINGS_DIR / f"{d.name}.cpp").exists()
                  and (config.PACKAGE_DIR / "specs" / f"{d.name}.py").exists())


def ops() -> list[str]:
    """Ops with a header, a binding and a spec: those in the tree (read afresh on every call, so
    an op added while a process runs is listed) and those defined in this process."""
    return sorted(set(_tree_ops()) | set(_inline_ops))


def check_op(op: str) -> None:
    if not isinstance(op, str) or op not in ops():
        raise ValueError(f"op must be one of {ops()}; got {op!r}")


def check_variant_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"variant name must be an identifier (letters, digits, '_'); got {name!r}")


def spec(op: str):
    """The op's spec (workbench/specs/<op>.py: SPEC, or the one given to define_op)."""
    check_op(op)
    if op in _inline_ops:
        return _inline_ops[op][0]
    return importlib.import_module(f"workbench.specs.{op}").SPEC


def sources(op: str) -> OpSources:
    check_op(op)
    if op in _inline_ops:
        return _inline_ops[op][1]
    d = config.KERNELS_DIR / op
    return OpSources(d, d / f"{op}.h", config.BINDINGS_DIR / f"{op}.cpp")


def add_inline_op(spec, srcs: OpSources) -> None:
    """Record an op defined from a notebook (workbench.define_op does the checking and building)."""
    if spec.name in _tree_ops():
        raise ValueError(f"op {spec.name!r} is in the tree (kernels/{spec.name}/); pick another name for a "
                         f"notebook op, or edit the tree's files")
    _inline_ops[spec.name] = (spec, srcs)


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
    declared_op, device, masks, desc = args[:4]
    if declared_op != op:
        raise ValueError(f"{source}: declares a variant of op '{declared_op}', expected '{op}'")
    names = tuple(v for k, v in _DTYPE_BITS.items() if re.search(rf"\b{k}\b", masks))
    description = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', desc))
    return VariantInfo(op=op, name=name or source.stem, device="cuda" if "CUDA" in device else "cpu",
                       dtypes=names, description=description, source=source)


def variant_sources(op: str) -> dict[str, pathlib.Path]:
    """The op's variant files: every .cu and .cpp beside its header."""
    d = sources(op).kernel_dir
    return {p.stem: p for p in sorted([*d.glob("*.cu"), *d.glob("*.cpp")])}


def variant_source(op: str, variant: str) -> pathlib.Path:
    found = variant_sources(op)
    if variant not in found:
        raise ValueError(f"{op} has no variant {variant!r}; variants: {', '.join(found) or 'none'} "
                         f"(or load_inline('{op}', source, name='{variant}'))")
    return found[variant]


def record_inline_variant(info: VariantInfo) -> None:
    """Note a variant built from a string or a file outside the op's folder (the loader calls this)."""
    _inline_variants[(info.op, info.name)] = info


def variants(op: str) -> list[VariantInfo]:
    """The op's variants in its folder (a declared ladder's rungs first, in ladder order), plus those
    built from strings or other files in this process."""
    rank = {name: i for i, name in enumerate(spec(op).ladder)}
    found = sorted(variant_sources(op).items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))
    out = [static_variant(op, path, name) for name, path in found]
    known = {v.name for v in out}
    for (o, name), info in sorted(_inline_variants.items()):
        if o == op and name not in known:
            out.append(info)
    return out
