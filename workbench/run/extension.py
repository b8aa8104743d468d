"""A torch extension (style="extension"): a .cpp/.cu with `#include <torch/extension.h>` and
`PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)` exporting `forward` (and `backward`), or a
`TORCH_LIBRARY(ns, m)` defining them, built by torch.utils.cpp_extension through the workbench's
content-keyed cache (its locks, its records, its BuildError naming file and line), then served
through byo.py's callable path. It compiles the torch headers: tens of seconds cold, where the
workbench's own variant ABI (kernels/common/wb_variant.h) builds in a few; a cached build loads at
once."""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import pathlib
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from .. import build
from ..build import cache, toolchain
from . import loader
from ..model import registry
from ..build.tree import cuda_source_piece
from .byo import CallableKernel, variant
from ..errors import WorkbenchError

_lock = threading.RLock()
_modules: dict[str, Any] = {}  # extension library path -> its loaded module / namespace (under _lock)
EXTENSION_MESSAGE = ("a torch extension: compiling it includes torch/extension.h, the torch headers (tens of "
                     "seconds on a cold cache; the workbench's own variant ABI exists to avoid that). A cached "
                     "build loads at once")


_PYBIND = re.compile(r"^\s*PYBIND11_MODULE\s*\(", re.M)
_TORCH_LIBRARY = re.compile(r"^\s*TORCH_LIBRARY\s*\(\s*([A-Za-z_]\w*)\s*,", re.M)


def _uncommented(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)


def is_extension_source(text: str) -> bool:
    """A source written the course's way: torch/extension.h with PYBIND11_MODULE or TORCH_LIBRARY."""
    text = _uncommented(text)
    return bool(_PYBIND.search(text) or _TORCH_LIBRARY.search(text)) or "torch/extension.h" in text


def _style_of(path: pathlib.Path, text: str) -> tuple[str, str | None]:
    clean = _uncommented(text)
    if _PYBIND.search(clean):
        return "pybind11", None
    m = _TORCH_LIBRARY.search(clean)
    if m:
        return "torch_library", m.group(1)
    raise ValueError(f"{path}: an extension-style source must export its functions with "
                     f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def(\"forward\", ...); m.def(\"backward\", ...); }} "
                     f"or TORCH_LIBRARY(namespace, m) {{ m.def(\"forward(Tensor x, ...) -> Tensor\"); ... }}")


def _piece(op: str, path: pathlib.Path, options: build.BuildOptions = build.DEFAULT_OPTIONS) -> build.Piece:
    """An extension source's build piece. One label per op, whatever the name, so the same text
    finds the same build (a notebook's, a test's, the exercise checker's); options as a variant's
    (line info for wb.profile)."""
    return cuda_source_piece(label=f"{op}/torch_extension", kind="extension", source=path, include_dirs=[path.parent],
                             options=options)


def _extension_path(op: str, path) -> pathlib.Path:
    registry.check_op(op)
    path = pathlib.Path(path).resolve()
    if not path.is_file() or path.suffix not in (".cu", ".cpp"):
        raise ValueError(f"an extension-style source must be an existing .cu or .cpp file; got {str(path)!r}")
    if path.suffix == ".cu" and not toolchain.can_build_cuda():
        raise WorkbenchError(f"{path.name} is CUDA code, and this machine cannot build CUDA code "
                             f"({'torch has no CUDA' if not toolchain.torch_has_cuda() else 'no nvcc found'})")
    return path


@dataclass
class BuiltExtension(loader.BuiltVariant):
    """An extension-style source built and not loaded (the exercise checker's): its dtypes are not
    written in the source, so they are what the child's probe finds (`dtypes` empty until then)."""
    style: str = "extension"
    probed: bool = False        # set by the checker's load check, from the child's report


def build_extension(op: str, path, name: str | None = None) -> BuiltExtension:
    """Build (or find in the cache) an extension-style source without loading it in this process
    (loader.build_source's rule: its code runs only in a child). Raises BuildError naming file and
    line, ValueError for a source that exports nothing the workbench can call."""
    start = time.perf_counter()
    path = _extension_path(op, path)
    _style_of(path, path.read_text(errors="replace"))
    name = name or path.stem
    cache.progress(f"{op}/{name}: {EXTENSION_MESSAGE}")
    with build.built_not_loaded():
        lib, bdir, built, key, _ = build.get_or_build(_piece(op, path))
    cache.mark_in_use(bdir)
    device = "cuda" if path.suffix == ".cu" else "cpu"
    return BuiltExtension(op=op, name=name, source=path, library=lib, build_dir=bdir, built=built,
                          seconds=time.perf_counter() - start, key=key, device=device, dtypes=(),
                          description=f"torch extension {path.name}")


def _load_module(lib: pathlib.Path, style: str, namespace: str | None):
    """The extension's functions: its pybind11 module (imported from the library; its init function
    is PyInit_<the build's name>, the library's stem), or its torch.ops namespace."""
    import torch

    with _lock:
        if str(lib) in _modules:
            return _modules[str(lib)]
        if style == "pybind11":
            modname = lib.name.split(".")[0]
            loader_ = importlib.machinery.ExtensionFileLoader(modname, str(lib))
            spec = importlib.util.spec_from_file_location(modname, str(lib), loader=loader_)
            module = importlib.util.module_from_spec(spec)
            loader_.exec_module(module)
        else:
            try:
                torch.ops.load_library(str(lib))
            except RuntimeError as e:
                if "TORCH_LIBRARY" not in str(e) and "namespace" not in str(e):
                    raise
                raise WorkbenchError(f"{lib.name}: TORCH_LIBRARY({namespace}, ...) is already registered in this process "
                                     f"(an earlier build of this source, or another library): a namespace can be "
                                     f"registered once per process. Restart the process to load the edited build, or "
                                     f"use PYBIND11_MODULE, which loads every build afresh ({str(e).splitlines()[0]})") from None
            module = getattr(torch.ops, namespace)
        _modules[str(lib)] = module
        return module


def load_extension(op: str, path, name: str | None = None, *, dtypes=None, device=None, forward: str = "forward",
                   backward: str | None = "backward", inline_label: str | None = None,
                   options: build.BuildOptions = build.DEFAULT_OPTIONS) -> CallableKernel:
    """Build (cached) and load an extension-style source and serve its `forward` (and `backward`,
    where it exports one) as a variant of `op` (wb.variant: probed where not declared). `backward`
    takes (grads of the outputs..., inputs..., attributes...) and returns the gradients of the
    differentiable inputs (a tensor or a list of them). options: how it is built beyond the
    defaults (BuildOptions(line_info=True) for wb.profile's source lines), as loader.load's."""
    start = time.perf_counter()
    path = _extension_path(op, path)
    text = path.read_text(errors="replace")
    style, namespace = _style_of(path, text)
    name = name or path.stem
    cache.progress(f"{op}/{name}: {EXTENSION_MESSAGE}")
    rename = {str(path): inline_label} if inline_label else None
    lib, bdir, built, key, _ = build.get_or_build(_piece(op, path, options), rename=rename)
    cache.mark_in_use(bdir)
    module = _load_module(lib, style, namespace)
    fwd = getattr(module, forward, None) if style == "pybind11" else _op_or_none(module, forward)
    if fwd is None:
        how = f'm.def("{forward}", ...) in PYBIND11_MODULE' if style == "pybind11" else f'm.def("{forward}(...)") in TORCH_LIBRARY'
        raise ValueError(f"{path.name}: the extension exports no {forward!r} function ({how})")
    bwd = None
    if backward:
        bwd = getattr(module, backward, None) if style == "pybind11" else _op_or_none(module, backward)
    if device is None:
        device = "cuda" if path.suffix == ".cu" else "cpu"
    if device == "cuda" and not toolchain.gpu_available():
        # Built and loaded; nothing to probe it on here. Declared as the course's .cu says: CUDA.
        dtypes = dtypes or ()
    k = _extension_variant(op, name, fwd, bwd, dtypes, device, module, path, lib, key, built, style)
    k.origin["functions"] = [forward, backward]
    k.options = options
    k.seconds = time.perf_counter() - start
    return k


def _op_or_none(namespace, fn_name: str):
    try:
        return getattr(namespace, fn_name)
    except (AttributeError, RuntimeError):
        return None


def _extension_variant(op, name, fwd, bwd, dtypes, device, module, path, lib, key, built, style) -> CallableKernel:
    desc = f"torch extension {path.name} ({style}; {'forward and backward' if bwd else 'forward only'})"
    origin = {"declared": {"dtypes": list(dtypes) if dtypes else None, "device": device}}
    if device == "cuda" and not toolchain.gpu_available():
        spec = registry.spec(op)
        steps = ("forward", "backward") if bwd is not None and spec.differentiable else ("forward",)
        info = {"op": op, "name": name, "build_id": key[:10], "device": device, "dtypes": list(dtypes or ()),
                "steps": steps, "description": desc, "kind": "extension",
                "probe": "not probed: a CUDA extension, and no GPU is visible here"}
        k = CallableKernel(op=op, name=name, build_id=key[:10], device=device, dtypes=tuple(dtypes or ()),
                           description=desc, library=lib, source=path, built=built, seconds=0.0, info=info, fn=fwd,
                           backward_fn=bwd, kind="extension", module=module, origin=origin, probe=info["probe"])
        cache.progress(f"{op}/{name}: {k.probe}")
        return k
    k = variant(fwd, op=op, backward=bwd, dtypes=dtypes, device=device, name=name, kind="extension", module=module,
                origin=origin, library=lib, source=path, build_id=key[:10], built=built, description=desc)
    k.probe = f"{EXTENSION_MESSAGE}; " + k.probe
    k.info["probe"] = k.probe
    return k


def load_inline_extension(op: str, source: str, name: str, **kw) -> CallableKernel:
    """An extension-style source string (a notebook cell): written to the cache under its hash
    (loader's sources folder), built and served as load_extension does; errors name lines of the
    string."""
    registry.check_op(op)
    if not isinstance(source, str) or not source.strip():
        raise ValueError("load_inline(style='extension'): source must be a non-empty string of C++ or CUDA C++")
    registry.check_variant_name(name)
    is_cuda = "__global__" in source or "<<<" in source
    path = cache.write_source(op, source, ".cu" if is_cuda else ".cpp", name)
    return load_extension(op, path, name, inline_label=f"<inline {op}/{name}>", **kw)


def from_child_address(address: dict) -> CallableKernel:
    """The extension a child_address describes (byo.child_address: its source, style, functions and
    declared dtypes/device), built or found in the cache and loaded in this (child) process."""
    declared = address.get("declared") or {}
    forward, backward = address.get("functions") or ("forward", "backward")
    return load_extension(address["op"], address["source"], address["name"], dtypes=declared.get("dtypes"),
                          device=declared.get("device"), forward=forward, backward=backward,
                          options=build.BuildOptions(**address.get("options", {})))
