"""Ops and their variants: what exists, read without building or importing anything.

An op in the tree is kernels/<op>/<op>.h (its torch-free contract) with its variants beside it,
bindings/<op>.cpp and workbench/specs/<op>.py (its declaration); define_op adds ops from a notebook.
This module keeps the process's one store of specs. A variant is kernels/<op>/<name>.cu or .cpp
(listed from its WB_EXPORT_VARIANT(...) text) or <name>.py (its WB_VARIANT literal, read with `ast`).
"""
from __future__ import annotations

import ast
import importlib
import pathlib
import re
from dataclasses import dataclass

from .. import config, dtypes

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")   # used with fullmatch: "abc\n" is not a name
MAX_NAME = 64   # a variant's name goes into file names in the build cache (255 bytes at most each)
_DTYPE_BITS = {mask: name for name, mask in dtypes.MASKS.items()}
SUFFIXES = (".cu", ".cpp", ".py")
PYTHON_KINDS = ("torch", "triton")
PYTHON_DEVICES = ("cuda", "cpu", "any")   # "any": whatever device the tensors are on
_DECLARATION_KEYS = ("op", "device", "dtypes", "description", "kind")


@dataclass(frozen=True)
class VariantInfo:
    op: str
    name: str
    device: str              # "cuda" or "cpu"; a Python variant may say "any"
    dtypes: tuple[str, ...]
    description: str
    source: pathlib.Path
    kind: str = "c++"        # "c++" (.cu/.cpp), or a Python variant's "torch" / "triton"

    @property
    def python(self) -> bool:
        return self.kind in PYTHON_KINDS

    def runs_on(self, device_type: str) -> bool:
        return self.device in (device_type, "any")

    def __repr__(self) -> str:
        kind = f", {self.kind}" if self.python else ""
        return f"{self.name} ({self.device}{kind}: {', '.join(self.dtypes)}) - {self.description}"


@dataclass(frozen=True)
class OpSources:
    kernel_dir: pathlib.Path
    header: pathlib.Path
    binding: pathlib.Path
    inline: bool = False


_specs: dict[str, object] = {}                  # op -> its OpSpec: the one store of specs in this process
_inline_sources: dict[str, OpSources] = {}      # op -> its sources, for an op from define_op
# loaded_spec(op): the op's spec where it is imported or defined already, else None; a dict's own
# look-up, no Python frame (a Kernel handle's call asks it whether its defaults are current).
loaded_spec = _specs.get


@dataclass(frozen=True)
class ResolvedOp:
    """One look-up of an op, carried down a load: spec, sources, variant files (name -> path)."""
    op: str
    spec: object
    sources: OpSources
    variant_files: dict

    def variant_source(self, variant: str) -> pathlib.Path:
        if variant not in self.variant_files:
            raise ValueError(f"{self.op} has no variant {variant!r}; variants: {', '.join(self.variant_files) or 'none'} "
                             f"(or load_inline('{self.op}', source, name='{variant}'))")
        return self.variant_files[variant]

    def is_tree_variant(self, name: str, source: pathlib.Path) -> bool:
        return self.variant_files.get(name) == source


def _tree_ops() -> list[str]:
    if not config.KERNELS_DIR.is_dir():
        return []
    return sorted(d.name for d in config.KERNELS_DIR.iterdir() if d.is_dir() and _is_tree_op(d.name))


def ops() -> list[str]:
    """The tree's ops (listed afresh: an op added while a process runs is listed) and define_op's."""
    return sorted(set(_tree_ops()) | set(_inline_sources))


def _is_tree_op(op: str) -> bool:
    return ((config.KERNELS_DIR / op / f"{op}.h").exists() and (config.BINDINGS_DIR / f"{op}.cpp").exists()
            and (config.PACKAGE_DIR / "specs" / f"{op}.py").exists())


def check_op(op: str) -> None:
    if not isinstance(op, str) or not _NAME.fullmatch(op) or not (op in _inline_sources or _is_tree_op(op)):
        raise ValueError(f"op must be one of {ops()}; got {op!r}")


def check_variant_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"variant name must be an identifier (letters, digits, '_'); got {name!r}")
    if len(name) > MAX_NAME:
        raise ValueError(f"variant name must be at most {MAX_NAME} characters (it names files in the build cache); "
                         f"got a {len(name)}-character name {name[:20]!r}...")


def check_not_shadowing(r: ResolvedOp, name: str, replace: bool, what: str) -> None:
    """A string under a tree variant's name would take its place while the file says otherwise."""
    tree = r.variant_files.get(name) if not r.sources.inline else None
    if tree is not None and not replace:
        raise ValueError(f"{what}: name={name!r} is a variant of the tree ({tree}); loading this source under that "
                         f"name would replace it in this process. Pick another name, or pass replace=True to "
                         f"replace it on purpose")


def spec(op: str):
    """workbench/specs/<op>.py's SPEC (imported once, then kept: the fakes read it on every call),
    or define_op's."""
    found = _specs.get(op) if isinstance(op, str) else None
    if found is not None:
        return found
    check_op(op)
    return _import_spec(op)


def _import_spec(op: str):
    declared = importlib.import_module(f"workbench.specs.{op}").SPEC
    if getattr(declared, "name", None) != op:
        raise ValueError(f"workbench/specs/{op}.py: SPEC must be an OpSpec named {op!r}; got {declared!r:.80}")
    _specs[op] = declared
    return declared


def sources(op: str) -> OpSources:
    check_op(op)
    return _sources(op)


def _sources(op: str) -> OpSources:
    if op in _inline_sources:
        return _inline_sources[op]
    d = config.KERNELS_DIR / op
    return OpSources(d, d / f"{op}.h", config.BINDINGS_DIR / f"{op}.cpp")


def add_inline_op(spec, srcs: OpSources) -> tuple | None:
    """Record define_op's op; returns what the name had before, for restore_inline_op."""
    if _is_tree_op(spec.name):
        raise ValueError(f"op {spec.name!r} is in the tree (kernels/{spec.name}/); pick another name for a "
                         f"notebook op, or edit the tree's files")
    before = (_specs[spec.name], _inline_sources[spec.name]) if spec.name in _inline_sources else None
    _specs[spec.name], _inline_sources[spec.name] = spec, srcs
    return before


def restore_inline_op(op: str, before: tuple | None) -> None:
    """Undo add_inline_op: a define_op whose binding failed to build leaves nothing behind."""
    if before is None:
        _specs.pop(op, None)
        _inline_sources.pop(op, None)
    else:
        _specs[op], _inline_sources[op] = before


_STRING = r'"(?:[^"\\]|\\.)*"'
_COMMENT_OR_STRING = re.compile(rf"{_STRING}|//[^\n]*|/\*.*?\*/", re.S)
_ARG = rf"(?:{_STRING}|\([^()]*\)|[^,()\"])+"   # one macro argument: strings and (...) kept whole


def _export_args(text: str) -> list[str] | None:
    """The arguments of the WB_EXPORT_VARIANT(...) call in a source text (comments dropped; a "//"
    inside a string is text), or None where it has none."""
    text = _COMMENT_OR_STRING.sub(lambda m: m[0] if m[0].startswith('"') else " ", text)
    call = re.search(rf'\bWB_EXPORT_VARIANT\(((?:{_STRING}|\([^()]*\)|[^()"])*)\)', text)
    return None if call is None else [a.strip() for a in re.findall(_ARG, call[1])]


def static_variant(op: str, source: pathlib.Path, name: str | None = None) -> VariantInfo:
    """A variant's declaration as its source text writes it, for listing variants without building
    them (wb.variants, the CLI, export) and for a process that never loads the library (the exercise
    checker, the runners' parent). A load reads what the built library exports (the harness), never this."""
    if source.suffix == ".py":
        return python_variant(op, source, name)
    args = _export_args(source.read_text(errors="replace"))
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


_PY_EXPECTED = ('a Python variant declares itself in a module-level literal, e.g.\n'
                '    WB_VARIANT = {"op": "OP", "device": "cuda", "dtypes": ("float32", "bfloat16"),\n'
                '                  "description": "what it adds", "kind": "triton"}\n'
                f'with device one of {PYTHON_DEVICES}, kind one of {PYTHON_KINDS}, dtypes a non-empty '
                f'tuple of {dtypes.NAMES}')


def python_variant(op: str, source: pathlib.Path, name: str | None = None, text: str | None = None) -> VariantInfo:
    """A Python variant's WB_VARIANT literal, read with `ast` (the file is not imported), validated:
    ValueError naming the file and what is expected."""
    try:
        tree = ast.parse(source.read_text() if text is None else text, filename=str(source))
    except SyntaxError as e:
        raise ValueError(f"{source}:{e.lineno}: cannot read the variant's declaration: SyntaxError: {e.msg}") from None
    found = [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
             and any(isinstance(t, ast.Name) and t.id == "WB_VARIANT"
                     for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
    if len(found) != 1 or found[0].value is None:
        raise ValueError(f"{source}: {'no' if not found else 'more than one'} module-level WB_VARIANT = {{...}}; "
                         f"{_PY_EXPECTED}")
    node = found[0].value
    try:
        decl = ast.literal_eval(node)
    except ValueError:
        raise ValueError(f"{source}:{node.lineno}: WB_VARIANT must be a literal dict (no names or calls: it is "
                         f"read without importing the file); {_PY_EXPECTED}") from None

    def bad(what: str):
        return ValueError(f"{source}:{node.lineno}: WB_VARIANT {what}; {_PY_EXPECTED}")

    if not isinstance(decl, dict):
        raise bad(f"must be a dict; got {type(decl).__name__}")
    missing = [k for k in _DECLARATION_KEYS if k not in decl]
    unknown = sorted(set(map(str, decl)) - set(_DECLARATION_KEYS))
    if missing or unknown:
        raise bad(f"needs exactly the keys {list(_DECLARATION_KEYS)}"
                  + (f"; missing {missing}" if missing else "") + (f"; unknown {unknown}" if unknown else ""))
    if not isinstance(decl["op"], str):
        raise bad(f"op must be a string; got {decl['op']!r}")
    if decl["device"] not in PYTHON_DEVICES:
        raise bad(f"device must be one of {PYTHON_DEVICES}; got {decl['device']!r}")
    if decl["kind"] not in PYTHON_KINDS:
        raise bad(f"kind must be one of {PYTHON_KINDS}; got {decl['kind']!r}")
    names = decl["dtypes"]
    if (not isinstance(names, (tuple, list)) or not names or len(set(names)) != len(names)
            or not all(n in dtypes.NAMES for n in names)):
        raise bad(f"dtypes must be a non-empty tuple of distinct names among {dtypes.NAMES}; got {names!r}")
    if not isinstance(decl["description"], str):
        raise bad(f"description must be a string; got {decl['description']!r}")
    if decl["op"] != op:
        raise ValueError(f"{source}: declares a variant of op '{decl['op']}', expected '{op}'")
    # In the harness's order (its messages list dtypes this way), whatever order the file uses.
    return VariantInfo(op=op, name=name or source.stem, device=decl["device"],
                       dtypes=tuple(n for n in dtypes.NAMES if n in names), description=decl["description"],
                       source=source, kind=decl["kind"])


def resolve(op: str) -> ResolvedOp:
    check_op(op)
    declared = _specs.get(op) or _import_spec(op)
    srcs = _sources(op)
    return ResolvedOp(op, declared, srcs, _variant_files(op, srcs.kernel_dir))


def variant_sources(op: str) -> dict[str, pathlib.Path]:
    """Every .cu, .cpp and .py beside the op's header (a .py named _* is a helper, not a variant)."""
    return _variant_files(op, sources(op).kernel_dir)


def _variant_files(op: str, d: pathlib.Path) -> dict[str, pathlib.Path]:
    found = [p for suffix in SUFFIXES for p in d.glob(f"*{suffix}")
             if p.suffix != ".py" or (_NAME.fullmatch(p.stem) and not p.stem.startswith("_"))]
    by_name: dict[str, pathlib.Path] = {}
    for p in sorted(found):
        if p.stem in by_name:
            raise ValueError(f"{op}: two variant files named {p.stem!r}: {by_name[p.stem].name} and {p.name}; "
                             f"rename one")
        by_name[p.stem] = p
    return by_name


def variant_source(op: str, variant: str) -> pathlib.Path:
    return resolve(op).variant_source(variant)


def variants(op: str) -> list[VariantInfo]:
    """The op's variants in its folder, the ladder's rungs first, each as its source declares it."""
    r = resolve(op)
    rank = {name: i for i, name in enumerate(r.spec.ladder)}
    found = sorted(r.variant_files.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))
    return [static_variant(op, path, name) for name, path in found]
