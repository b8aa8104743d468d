"""Public torch only: no module of the workbench (nor its export templates, nor scripts/) imports,
reads or patches a private torch name (a `_x` component under torch: torch._C._foo,
torch.cuda._sleep, `from torch._functorch import ...`, getattr(torch._C, "_x")), nor assigns to
anything of torch's but a documented setting, outside ALLOWED: the few that have no public
equivalent, each with why. The scan is over the syntax tree, so comments and strings are not uses."""
from __future__ import annotations

import ast
import importlib
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

# A use is allowed where an entry is a prefix of it, component by component (torch._library.triton
# allows torch._library.triton.set_wrap_triton_enabled). Checked against torch 2.11 and 2.14.1.
ALLOWED = {
    "torch.cuda._sleep":
        "a GPU spin queued ahead of the start event (nvbench's blocking kernel); torch has no public "
        "kernel that waits a number of cycles (torch.cuda has no sleep/spin, and a sized matmul's time varies)",
    "torch._C._len_torch_dispatch_stack":
        "the direct call path must see any TorchDispatchMode; the only readers are this and "
        "torch.utils._python_dispatch's (private too): torch has no public 'is a dispatch mode active'",
    "torch._C._are_functorch_transforms_active":
        "the direct call path must see vmap/grad/jvp levels (their wrapped tensors are plain "
        "torch.Tensor to Python); torch.func has no public 'is a transform active'",
    "torch._library.triton":
        "the direct call path runs a triton_op's body as the op's own eager backend does, with "
        "wrap_triton off; torch.library.wrap_triton has no public switch (set_wrap_triton_enabled is private)",
    "torch._functorch.config":
        "AOTAutograd's donated_buffer must be off for the backward timing's retain_graph replays; "
        "torch.compile's options reach inductor's config only, and torch.compiler.config has no such key",
    "torch._C._dispatch_has_kernel_for_dispatch_key":
        "the exported test asserts the C++ Autograd kernel is registered; torch.library.get_kernel "
        "returns the computed kernel (the autograd fallback where none is), so it cannot tell",
    "torch._C._AutoDispatchBelowAutograd":
        "scripts/call_overhead.py times the layer below autograd; the guard is C++'s "
        "at::AutoDispatchBelowAutograd, with no public Python equivalent (inference_mode differs)",
}

# Documented settings a caller is meant to assign (torch's docs name them), not patches.
SETTINGS = {
    "torch.backends.cuda.matmul.allow_tf32",
    "torch.utils.deterministic.fill_uninitialized_memory",
}

# Names that stand for a torch module wherever they appear (a parameter `torch: Any`, a module
# passed in as `cpp_extension`), besides the names a file's imports bind.
ROOTS = {"torch": "torch", "cpp_extension": "torch.utils.cpp_extension"}


def _private(chain: str) -> bool:
    return any(re.fullmatch(r"_[A-Za-z]\w*", part) and not part.endswith("__") for part in chain.split("."))


def _chain(node: ast.AST, names: dict) -> str | None:
    """The dotted name of an attribute chain whose root is a torch module, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    return ".".join([names[node.id], *reversed(parts)])


def _source(path: pathlib.Path) -> str:
    text = path.read_text()
    if path.name.endswith(".py.in"):  # a template: its $name / ${name} placeholders as identifiers
        text = re.sub(r"\$\{?(\w+)\}?", r"\1", text)
    return text


def uses(source: str) -> list[str]:
    """Every private torch name `source` imports or reads, and every assignment to torch's
    ("patch <name>", documented SETTINGS aside), as dotted names."""
    tree = ast.parse(source)
    names = dict(ROOTS)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torch":
                    names[a.asname or a.name.split(".")[0]] = a.name if a.asname else "torch"
                    found.append(a.name)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
                found.append(f"{node.module}.{a.name}")
    outer = set()  # the attribute nodes inside a longer chain: only the whole chain counts
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            outer.add(id(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in outer:
            chain = _chain(node, names)
            if chain:
                found.append(chain)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2 \
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr") \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            base = node.args[0]
            chain = base.id if isinstance(base, ast.Name) and base.id in names else _chain(base, names)
            if chain:
                chain = f"{names.get(chain, chain)}.{node.args[1].value}"
                found.append(f"patch {chain}" if node.func.id in ("setattr", "delattr") else chain)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                for one in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    chain = _chain(one, names) if isinstance(one, ast.Attribute) else None
                    if chain and chain not in SETTINGS:
                        found.append(f"patch {chain}")
    return [u for u in found if u.startswith("patch ") or _private(u)]


def _allowed(use: str) -> bool:
    parts = use.removeprefix("patch ").split(".")
    return not use.startswith("patch ") and any(parts[:len(a.split("."))] == a.split(".") for a in ALLOWED)


def _files():
    for root in ("workbench", "scripts"):
        for path in sorted((REPO / root).rglob("*")):
            if path.name.endswith((".py", ".py.in")) and "__pycache__" not in path.parts:
                yield path


def _all_uses():
    return [(str(p.relative_to(REPO)), u) for p in _files() for u in uses(_source(p))]


def test_no_private_torch_name_outside_the_allow_list():
    bad = sorted({(f, u) for f, u in _all_uses() if not _allowed(u)})
    assert not bad, "private torch names or patches of torch (use a public API, or add to ALLOWED " \
                    "with why none exists):\n" + "\n".join(f"  {f}: {u}" for f, u in bad)


def test_every_allow_list_entry_is_still_used_and_names_something_in_this_torch():
    used = {u for _, u in _all_uses()}
    for entry in ALLOWED:
        assert any(_allowed(u) and u.split(".")[:len(entry.split("."))] == entry.split(".") for u in used), \
            f"{entry} is allowed but nothing uses it: take it off ALLOWED"
        parts = entry.split(".")
        obj = importlib.import_module(parts[0])
        for i, part in enumerate(parts[1:], 1):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                obj = importlib.import_module(".".join(parts[:i + 1]))


@pytest.mark.parametrize("source, expected", [
    ("import torch\ntorch.cuda._sleep(5)", ["torch.cuda._sleep"]),
    ("import torch as t\nx = t._C._foo.bar()", ["torch._C._foo.bar"]),
    ("from torch._functorch import config", ["torch._functorch.config"]),
    ("import torch._dynamo\ntorch._dynamo.reset()", ["torch._dynamo", "torch._dynamo.reset"]),
    ("from torch.utils import cpp_extension as ce\nce._import_module_from_library", ["torch.utils.cpp_extension._import_module_from_library"]),
    ("def f(cpp_extension):\n    cpp_extension.subprocess = 1", ["patch torch.utils.cpp_extension.subprocess"]),
    ("def f(torch):\n    return getattr(torch._C, '_cuda_getDevice', None)",
     ["torch._C", "torch._C._cuda_getDevice"]),
    ("import torch\nsetattr(torch.ops, 'load_library', 1)", ["patch torch.ops.load_library"]),
    ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = False", []),
    ("import torch\n# torch._C._foo in a comment\ns = 'torch.cuda._sleep'\nx = torch.__version__", []),
    ("import numpy as np\nnp._core", []),
])
def test_the_scan_finds_private_names_and_patches(source, expected):
    assert sorted(uses(source)) == sorted(expected)
