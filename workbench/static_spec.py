"""An op's declaration read without importing its spec module (which may import torch).

workbench/specs/<op>.py defines `SPEC = OpSpec(...)`; its inputs, outputs, attributes and size
pattern are literal Tensor(...), Output(...) and Attr(...) calls, so they can be read with `ast`
the way registry.py reads a Python variant's WB_VARIANT. The result is a real OpSpec (its shape rule,
call_args and attribute checks work) whose reference and eager math are left out: a front end that
never imports torch (workbench.ndarray) checks calls with it. An op defined in this process
(define_op) already has its OpSpec in memory and is returned as it is.
"""
from __future__ import annotations

import ast
import functools
import pathlib

from . import config, registry
from .opspec import Attr, OpSpec, Output, Tensor

_CALLS = {"Tensor": Tensor, "Output": Output, "Attr": Attr}
_KINDS = {"float": float, "int": int, "bool": bool}
# Fields a call must give literally; any other keyword that is not a literal (a computed doc, say)
# is left at its default: the declaration's checks do not depend on it.
_ESSENTIAL = {"name", "dims", "differentiable", "read_by_backward", "kind", "default", "min", "max", "finite"}
_SPEC_FIELDS = ("inputs", "outputs", "attrs", "size", "doc")


class _NotLiteral(Exception):
    def __init__(self, node: ast.AST):
        super().__init__(node)
        self.node = node


def _value(node: ast.AST, consts: dict):
    """A literal, a tuple or list of them, float/int/bool, a module-level constant, a negated
    number, or a Tensor/Output/Attr call of those."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_value(e, consts) for e in node.elts)
    if isinstance(node, ast.Name):
        if node.id in _KINDS:
            return _KINDS[node.id]
        if node.id in consts:
            return consts[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand, consts)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Call):
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if func in _CALLS:
            args = [_value(a, consts) for a in node.args]
            kwargs = {}
            for kw in node.keywords:
                try:
                    kwargs[kw.arg] = _value(kw.value, consts)
                except _NotLiteral:
                    if kw.arg in _ESSENTIAL:
                        raise
            return _CALLS[func](*args, **kwargs)
    raise _NotLiteral(node)


def _constants(tree: ast.Module) -> dict:
    """Module-level NAME = <literal> assignments, in order (a later one may use an earlier one)."""
    out: dict = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            try:
                out[n.targets[0].id] = _value(n.value, out)
            except (_NotLiteral, TypeError, ValueError):
                pass
    return out


def read(path: pathlib.Path) -> OpSpec:
    """The OpSpec declared by `SPEC = OpSpec(...)` in `path`, reference and eager left out.
    ValueError naming the file and line where a field is not literal."""
    tree = ast.parse(path.read_text(), filename=str(path))
    consts = _constants(tree)
    call = next((n.value for n in tree.body if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "SPEC" for t in n.targets)
                 and isinstance(n.value, ast.Call)), None)
    if call is None:
        raise ValueError(f"{path}: no module-level SPEC = OpSpec(...)")
    fields = {}
    for kw in call.keywords:
        if kw.arg == "name" or kw.arg in _SPEC_FIELDS:
            try:
                fields[kw.arg] = _value(kw.value, consts)
            except _NotLiteral as e:
                if kw.arg == "doc":
                    continue
                raise ValueError(f"{path}:{e.node.lineno}: SPEC's {kw.arg} must be literal Tensor/Output/Attr "
                                 f"calls (read without importing the spec, which may import torch); got "
                                 f"{ast.unparse(e.node)!r}") from None
    missing = [f for f in ("name", "inputs", "outputs") if f not in fields]
    if missing:
        raise ValueError(f"{path}: SPEC = OpSpec(...) must give {', '.join(missing)} by keyword")
    fields.setdefault("doc", "")
    return OpSpec(reference=None, eager=None, **fields)


@functools.lru_cache(maxsize=64)
def _read_cached(path: str, mtime_ns: int, size: int) -> OpSpec:
    return read(pathlib.Path(path))


def spec(op: str) -> OpSpec:
    """The op's declaration, torch-free: read from workbench/specs/<op>.py with ast (cached while
    the file is unchanged), or the OpSpec of an op defined in this process."""
    registry.check_op(op)
    if registry.sources(op).inline:
        return registry.spec(op)
    path = config.PACKAGE_DIR / "specs" / f"{op}.py"
    st = path.stat()
    return _read_cached(str(path), st.st_mtime_ns, st.st_size)
