"""Ops and their variants: what exists, read without building anything.

An op in the tree is three pieces: a folder kernels/<op>/ with its torch-free contract <op>.h (the
parameter structs and launcher table) and its variants, a binding bindings/<op>.cpp (fills the
structs from a checked call), and a spec workbench/specs/<op>.py (the torch-free declaration
everything else derives from; its math beside it in <op>_math.py). This module is the process's one
store of specs: spec(op) imports a tree op's declaration once and keeps it; define_op's are put
here; the fakes, autograd, the loader, the NumPy front end and export all read them from here. An op can also be given as the same three pieces from a notebook
(workbench.define_op); those are listed here once defined. A variant is a source file beside the
op's header: kernels/<op>/<variant>.cu (CUDA) or .cpp (CPU), whose name, device and dtypes are read
from its WB_EXPORT_VARIANT(...) call, or kernels/<op>/<variant>.py (a PyTorch formula or Triton
kernels), whose module-level WB_VARIANT = {...} literal is read with `ast`; listing builds and
imports nothing (no triton import to list a Triton variant).
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
# A Python variant's kinds: plain tensor ops (autograd flows through them), or Triton kernels
# registered with torch.library.triton_op (torch.compile sees into them).
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
        """Whether the variant takes tensors on this device type ("cuda" or "cpu")."""
        return self.device in (device_type, "any")

    def __repr__(self) -> str:
        kind = f", {self.kind}" if self.python else ""
        return f"{self.name} ({self.device}{kind}: {', '.join(self.dtypes)}) - {self.description}"


@dataclass(frozen=True)
class OpSources:
    """Where an op's C++ lives: the header's folder (also its variants' include dir), the header
    and the binding source."""
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
    """One look-up of an op, carried down a load: its spec, where its C++ lives, and its variant
    files (name -> path, from one listing of its folder)."""
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
        """Whether `source` is the op's own file of that name (not a string, not a file elsewhere)."""
        return self.variant_files.get(name) == source


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
    return sorted(set(_tree_ops()) | set(_inline_sources))


def _is_tree_op(op: str) -> bool:
    return ((config.KERNELS_DIR / op / f"{op}.h").exists() and (config.BINDINGS_DIR / f"{op}.cpp").exists()
            and (config.PACKAGE_DIR / "specs" / f"{op}.py").exists())


def check_op(op: str) -> None:
    """A known op, by three stats of its files (the folder is listed only to say what is known)."""
    if not isinstance(op, str) or not _NAME.fullmatch(op) or not (op in _inline_sources or _is_tree_op(op)):
        raise ValueError(f"op must be one of {ops()}; got {op!r}")


def check_variant_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"variant name must be an identifier (letters, digits, '_'); got {name!r}")
    if len(name) > MAX_NAME:
        raise ValueError(f"variant name must be at most {MAX_NAME} characters (it names files in the build cache); "
                         f"got a {len(name)}-character name {name[:20]!r}...")


def check_not_shadowing(r: ResolvedOp, name: str, source: pathlib.Path, replace: bool, what: str) -> None:
    """Refuse a variant built from a string or another file under the name of one of the tree's
    variants (kernels/<op>/<name>.*), unless replace=True: it would take that name's place in
    torch.ops while the file still says otherwise."""
    tree = r.variant_files.get(name) if not r.sources.inline else None
    if tree is not None and tree != source and not replace:
        raise ValueError(f"{what}: name={name!r} is a variant of the tree ({tree}); loading this source under that "
                         f"name would replace it in this process. Pick another name, or pass replace=True to "
                         f"replace it on purpose")


def spec(op: str):
    """The op's spec: workbench/specs/<op>.py's SPEC (imported on the first look-up, then kept: the
    fakes read it on every call), or the one given to define_op. Torch-free: its math is imported
    when first used."""
    found = _specs.get(op) if isinstance(op, str) else None
    if found is not None:
        return found
    check_op(op)
    return _import_spec(op)


def _import_spec(op: str):
    """A known tree op's spec, imported and kept (the caller checked the op)."""
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
    """Record an op defined from a notebook (workbench.define_op does the checking and building).
    Returns what the name had before ((spec, sources) or None), for restore_inline_op."""
    if spec.name in _tree_ops():
        raise ValueError(f"op {spec.name!r} is in the tree (kernels/{spec.name}/); pick another name for a "
                         f"notebook op, or edit the tree's files")
    before = (_specs[spec.name], _inline_sources[spec.name]) if spec.name in _inline_sources else None
    _specs[spec.name], _inline_sources[spec.name] = spec, srcs
    return before


def restore_inline_op(op: str, before: tuple | None) -> None:
    """Undo add_inline_op (a define_op whose binding failed to build leaves nothing behind): the
    earlier definition of the name is back, or the name is gone."""
    if before is None:
        _specs.pop(op, None)
        _inline_sources.pop(op, None)
    else:
        _specs[op], _inline_sources[op] = before


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
    """Read a variant's declaration from its source without building (or importing) it."""
    if source.suffix == ".py":
        return python_variant(op, source, name)
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


_PY_EXPECTED = ('a Python variant declares itself in a module-level literal, e.g.\n'
                '    WB_VARIANT = {"op": "OP", "device": "cuda", "dtypes": ("float32", "bfloat16"),\n'
                '                  "description": "what it adds", "kind": "triton"}\n'
                f'with device one of {PYTHON_DEVICES}, kind one of {PYTHON_KINDS}, dtypes a non-empty '
                f'tuple of {dtypes.NAMES}')


def python_declaration(text: str, source) -> dict:
    """The WB_VARIANT literal of a Python variant's text, validated (ValueError naming the file and
    what is expected). A syntax error propagates as SyntaxError (the loader reports it as a
    BuildError; listing as a ValueError)."""
    tree = ast.parse(text, filename=str(source))
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
    # The harness's order (its messages list dtypes this way), whatever order the file uses.
    return dict(decl, dtypes=tuple(n for n in dtypes.NAMES if n in names))


def python_variant(op: str, source: pathlib.Path, name: str | None = None, text: str | None = None) -> VariantInfo:
    """A Python variant's declaration, read with `ast` (the file is not imported)."""
    try:
        decl = python_declaration(source.read_text() if text is None else text, source)
    except SyntaxError as e:
        raise ValueError(f"{source}:{e.lineno}: cannot read the variant's declaration: SyntaxError: {e.msg}") from None
    if decl["op"] != op:
        raise ValueError(f"{source}: declares a variant of op '{decl['op']}', expected '{op}'")
    return VariantInfo(op=op, name=name or source.stem, device=decl["device"], dtypes=decl["dtypes"],
                       description=decl["description"], source=source, kind=decl["kind"])


def resolve(op: str) -> ResolvedOp:
    """The op looked up once: spec, sources and variant files (ValueError for an unknown op)."""
    check_op(op)
    declared = _specs.get(op) or _import_spec(op)
    srcs = _sources(op)
    return ResolvedOp(op, declared, srcs, _variant_files(op, srcs.kernel_dir))


def variant_sources(op: str) -> dict[str, pathlib.Path]:
    """The op's variant files: every .cu, .cpp and .py beside its header (a .py whose name starts
    with '_' is a helper, not a variant)."""
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
    """The op's variants in its folder (a declared ladder's rungs first, in ladder order), each as
    its source declares it. (wb.variants adds what this process built from strings: run/process_state.py.)"""
    r = resolve(op)
    rank = {name: i for i, name in enumerate(r.spec.ladder)}
    found = sorted(r.variant_files.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))
    return [static_variant(op, path, name) for name, path in found]
