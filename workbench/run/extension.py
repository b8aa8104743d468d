"""A torch extension (style="extension"): .cpp/.cu files with `#include <torch/extension.h>` and a
`PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)` (or a module name of its own, as a setup.py build writes
it) exporting `forward` (and `backward`), or a `TORCH_LIBRARY(ns, m)` defining them, built by
torch.utils.cpp_extension through the workbench's content-keyed cache (its locks, its records, its
BuildError naming file and line), then served through byo.py's callable path. Several files are
one extension, as the course lays one out (`[binding.cpp, kernels.cu]`). Their C++ files read a
precompiled torch/extension.h (build/torch_pch.py); a .cu that includes it parses the torch headers
(nvcc has no precompiled headers), where the workbench's own variant ABI (kernels/common/
wb_variant.h) builds in a few seconds. A cached build loads at once.

The library is built without loading it, then imported here, so that a load that fails says why:
the dynamic loader's words and the symbols the library needs that nothing here defines (a function
declared in one file and defined in another that was not built with it)."""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import importlib.machinery
import importlib.util
import os
import pathlib
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from .. import build
from ..build import cache, toolchain, torch_pch
from . import loader
from ..model import registry
from ..build import cuda_source_piece
from .byo import CallableKernel, variant
from .probe import out_argument_hint, out_positions
from ..errors import WorkbenchError

_lock = threading.RLock()
_modules: dict[str, Any] = {}  # extension library path -> its loaded module / namespace (under _lock)
EXTENSION_MESSAGE = ("a torch extension: compiling it includes torch/extension.h, the torch headers (its C++ files "
                     "read them precompiled; a .cu file parses them: nvcc has no precompiled headers, and the "
                     "workbench's own variant ABI exists to avoid that). A cached build loads at once")


_PYBIND = re.compile(r"^\s*PYBIND11_MODULE\s*\(\s*([A-Za-z_]\w*)\s*,", re.M)
_TORCH_LIBRARY = re.compile(r"^\s*TORCH_LIBRARY\s*\(\s*([A-Za-z_]\w*)\s*,", re.M)


def _uncommented(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)


def is_extension_source(text: str) -> bool:
    """A source written the course's way: torch/extension.h with PYBIND11_MODULE or TORCH_LIBRARY."""
    text = _uncommented(text)
    return bool(_PYBIND.search(text) or _TORCH_LIBRARY.search(text)) or "torch/extension.h" in text


@dataclass(frozen=True)
class _Style:
    kind: str                 # "pybind11" or "torch_library"
    name: str | None          # the pybind11 module's name (None: TORCH_EXTENSION_NAME) or the namespace


def _style_of(paths, texts) -> _Style:
    clean = "\n".join(_uncommented(t) for t in texts)
    modules = _PYBIND.findall(clean)
    if len(modules) > 1:
        raise ValueError(f"{', '.join(p.name for p in paths)}: PYBIND11_MODULE appears {len(modules)} times; an "
                         f"extension defines its module once")
    if modules:
        return _Style("pybind11", None if modules[0] == "TORCH_EXTENSION_NAME" else modules[0])
    m = _TORCH_LIBRARY.search(clean)
    if m:
        return _Style("torch_library", m.group(1))
    raise ValueError(f"{', '.join(p.name for p in paths)}: an extension-style source must export its functions with "
                     f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def(\"forward\", ...); m.def(\"backward\", ...); }} "
                     f"or TORCH_LIBRARY(namespace, m) {{ m.def(\"forward(Tensor x, ...) -> Tensor\"); ... }}")


def _piece(op: str, paths, options: build.BuildOptions = build.DEFAULT_OPTIONS) -> build.Piece:
    """The extension's build piece: every file, nvcc for the .cu ones. One label per op, whatever
    the name, so the same text finds the same build (a notebook's, a test's, the exercise
    checker's); options as a variant's (line info for wb.profile). The precompiled torch headers'
    folder comes first on the include path; it is not part of the key (the same code comes out),
    and -Winvalid-pch is on either way (a build log says where a .gch was not used)."""
    first = next((p for p in paths if p.suffix == ".cu"), paths[0])
    dirs = list(dict.fromkeys(p.parent for p in paths))
    piece = cuda_source_piece(label=f"{op}/torch_extension", kind="extension", source=first, include_dirs=dirs,
                              options=options)
    pch = torch_pch.folder(piece.cflags) if any(p.suffix == ".cpp" for p in paths) else None
    return dataclasses.replace(piece, sources=tuple(paths), include_dirs=(pch, *dirs) if pch else tuple(dirs),
                               cflags=(*piece.cflags, *torch_pch.FLAGS))


def _extension_paths(op: str, path) -> tuple[pathlib.Path, ...]:
    registry.check_op(op)
    given = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    paths = tuple(pathlib.Path(p).resolve() for p in given)
    bad = [str(p) for p in paths if not p.is_file() or p.suffix not in (".cu", ".cpp")]
    if not paths or bad:
        raise ValueError(f"an extension-style source is one or more existing .cu or .cpp files (a list: "
                         f"[binding.cpp, kernels.cu]); got {bad or given!r}")
    if len(set(p.name for p in paths)) != len(paths):
        raise ValueError(f"an extension's files need names of their own (their objects share a folder); got "
                         f"{[str(p) for p in paths]}")
    cu = [p.name for p in paths if p.suffix == ".cu"]
    if cu and not toolchain.can_build_cuda():
        raise WorkbenchError(f"{', '.join(cu)} is CUDA code, and this machine cannot build CUDA code "
                             f"({'torch has no CUDA' if not toolchain.torch_has_cuda() else 'no nvcc found'})")
    return paths


def _prepared(op: str, path, options=build.DEFAULT_OPTIONS):
    """(paths, style, piece) of an extension-style source: a file, or a list of them."""
    paths = _extension_paths(op, path)
    style = _style_of(paths, [p.read_text(errors="replace") for p in paths])
    return paths, style, _piece(op, paths, options)


@dataclass
class BuiltExtension(loader.BuiltVariant):
    """An extension-style source built and not loaded (the exercise checker's): its dtypes are not
    written in the source, so they are what the child's probe finds (`dtypes` empty until then)."""
    style: str = "extension"
    probed: bool = False        # set by the checker's load check, from the child's report


def _build(op: str, name: str, piece: build.Piece, rename=None):
    cache.progress(f"{op}/{name}: {EXTENSION_MESSAGE}")
    with build.built_not_loaded():
        built = build.get_or_build(piece, rename=rename)
    cache.mark_in_use(built.build_dir)
    log = built.build_dir / "build.log"
    unused = torch_pch.unused(log.read_text(errors="replace")) if built.built and log.exists() else ""
    if unused:
        cache.progress(f"{op}/{name}: the precompiled torch headers were not used: {unused}")
    return built


def build_extension(op: str, path, name: str | None = None) -> BuiltExtension:
    """Build (or find in the cache) an extension-style source (a file, or a list of them) without
    loading it in this process (loader.build_source's rule: its code runs only in a child). Raises
    BuildError naming file and line, ValueError for a source that exports nothing the workbench can
    call."""
    start = time.perf_counter()
    paths, _, piece = _prepared(op, path)
    name = name or paths[0].stem
    lib, bdir, built, key, _ = _build(op, name, piece)
    device = "cuda" if any(p.suffix == ".cu" for p in paths) else "cpu"
    return BuiltExtension(op=op, name=name, source=paths[0], library=lib, build_dir=bdir, built=built,
                          seconds=time.perf_counter() - start, key=key, device=device, dtypes=(),
                          description=f"torch extension {', '.join(p.name for p in paths)}")


def _load_module(lib: pathlib.Path, style: _Style, paths):
    """The extension's functions: its pybind11 module (imported from the library under the name its
    PYBIND11_MODULE gives: TORCH_EXTENSION_NAME is the build's own, the library's stem), or its
    torch.ops namespace. A library that does not load raises WorkbenchError saying why."""
    import torch

    with _lock:
        if str(lib) in _modules:
            return _modules[str(lib)]
        try:
            if style.kind == "pybind11":  # TORCH_EXTENSION_NAME: the build's, which a copy's name is not
                modname = style.name or next(iter(_exported_inits(lib)), "PyInit_" + lib.name.split(".")[0])[7:]
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
                    raise WorkbenchError(f"{lib.name}: TORCH_LIBRARY({style.name}, ...) is already registered in this "
                                         f"process (an earlier build of this source, or another library): a namespace "
                                         f"can be registered once per process. Restart the process to load the edited "
                                         f"build, or use PYBIND11_MODULE, which loads every build afresh "
                                         f"({str(e).splitlines()[0]})") from None
                module = getattr(torch.ops, style.name)
        except (ImportError, OSError) as e:
            raise WorkbenchError(load_failure(lib, paths, e)) from None
        _modules[str(lib)] = module
        return module


def load_failure(lib: pathlib.Path, paths, err: BaseException) -> str:
    """Why the library at `lib` (built from `paths`) did not load: the dynamic loader's words, and
    the symbols it needs that neither it nor anything loaded here defines, demangled."""
    words = str(err.__cause__ or err).strip()
    files = ", ".join(p.name for p in paths)
    missing = unresolved(lib)
    if missing:
        shown = "\n  ".join(missing[:12]) + (f"\n  ... and {len(missing) - 12} more" if len(missing) > 12 else "")
        return (f"the extension built from {files} does not load: it uses {len(missing)} symbol(s) that none of "
                f"its files defines:\n  {shown}\nA function declared in one file and defined in another needs both "
                f"files in the build: wb.load_source(op, [binding.cpp, kernels.cu], style='extension') "
                f"(the dynamic loader: {words})")
    init = re.search(r"\(PyInit_(\w+)\)", words)
    if init:
        return (f"the extension built from {files} does not load: Python looks for PyInit_{init.group(1)}, and the "
                f"library defines {', '.join(_exported_inits(lib)) or 'no PyInit_ function'}: its PYBIND11_MODULE "
                f"name is not one the workbench could read from the source ({words})")
    return f"the extension built from {files} does not load: {words}"


def unresolved(lib: pathlib.Path) -> list[str]:
    """The symbols `lib` needs that neither its dependencies nor this process define, demangled
    (ldd -r, with the folders of every library loaded here on its search path); [] where the tools
    are missing."""
    folders = {os.path.dirname(line.split()[-1]) for line in pathlib.Path("/proc/self/maps").read_text().splitlines()
               if ".so" in line and line.split()[-1].startswith("/")}
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join([*sorted(folders), os.environ.get("LD_LIBRARY_PATH", "")]))
    try:
        out = subprocess.run(["ldd", "-r", str(lib)], capture_output=True, text=True, env=env, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    here = ctypes.CDLL(None)
    names = []
    for sym in re.findall(r"undefined symbol: (\S+)", out.stdout + out.stderr):
        try:
            here[sym]  # defined in this process (the interpreter's own C API): resolved at load time
        except AttributeError:
            names.append(sym)
    names = list(dict.fromkeys(names))
    try:
        demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                                   timeout=60).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return names
    return demangled if len(demangled) == len(names) else names


def _exported_inits(lib: pathlib.Path) -> list[str]:
    try:
        out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return re.findall(r"\b(PyInit_\w+)", out)


def load_extension(op: str, path, name: str | None = None, *, dtypes=None, device=None, forward: str = "forward",
                   backward: str | None = "backward", out=None, inline_label: str | None = None,
                   options: build.BuildOptions = build.DEFAULT_OPTIONS, library=None) -> CallableKernel:
    """Build (cached) and load an extension-style source (a file, or a list: [binding.cpp,
    kernels.cu]) and serve its `forward` (and `backward`, where it exports one) as a variant of
    `op` (wb.variant: probed where not declared). `backward` takes (grads of the outputs...,
    inputs..., attributes...) and returns the gradients of the differentiable inputs (a tensor or
    a list of them). out: where `forward` takes the op's outputs (a function like
    elementwise_mult(a, b, result)): the parameter's name or position (byo.variant). options: how
    it is built beyond the defaults (BuildOptions(line_info=True) for wb.profile's source lines),
    as loader.load's. library: the build of these sources made elsewhere (the exercise checker's
    hashed copy, in a runner that has no build cache), loaded as it is."""
    start = time.perf_counter()
    if library is None:
        paths, style, piece = _prepared(op, path, options)
        name = name or paths[0].stem
        rename = {str(paths[0]): inline_label} if inline_label else None
        lib, _, built, key, _ = _build(op, name, piece, rename)
        with_cuda = piece.with_cuda
    else:
        paths = tuple(pathlib.Path(p) for p in ([path] if isinstance(path, (str, os.PathLike)) else path))
        style = _style_of(paths, [p.read_text(errors="replace") for p in paths])
        lib, built, key = pathlib.Path(library), False, hashlib.sha256(pathlib.Path(library).read_bytes()).hexdigest()
        name, with_cuda = name or paths[0].stem, any(p.suffix == ".cu" for p in paths)
    module = _load_module(lib, style, paths)
    fwd = getattr(module, forward, None) if style.kind == "pybind11" else _op_or_none(module, forward)
    if fwd is None:
        how = f'm.def("{forward}", ...) in PYBIND11_MODULE' if style.kind == "pybind11" else \
            f'm.def("{forward}(...)") in TORCH_LIBRARY'
        exported = [n for n in dir(module) if not n.startswith("_")] if style.kind == "pybind11" else []
        raise ValueError(f"{', '.join(p.name for p in paths)}: the extension exports no {forward!r} function ({how})"
                         + (f"; it exports {', '.join(exported)}: name one with forward=" if exported else ""))
    bwd = None
    if backward:
        bwd = getattr(module, backward, None) if style.kind == "pybind11" else _op_or_none(module, backward)
    if device is None:
        device = "cuda" if with_cuda else "cpu"
    k = _extension_variant(op, name, fwd, bwd, dtypes, device, module, paths, lib, key, built, style, out)
    k.origin.update(functions=[forward, backward], sources=[str(p) for p in paths])
    k.options = options
    k.seconds = time.perf_counter() - start
    return k


def _op_or_none(namespace, fn_name: str):
    try:
        return getattr(namespace, fn_name)
    except (AttributeError, RuntimeError):
        return None


def _extension_variant(op, name, fwd, bwd, dtypes, device, module, paths, lib, key, built, style, out) -> CallableKernel:
    desc = f"torch extension {', '.join(p.name for p in paths)} ({style.kind}; " \
        f"{'forward and backward' if bwd else 'forward only'})"
    named = f"PYBIND11_MODULE({style.name}, m) names its module itself: loaded under that name, nothing rewritten; " \
        if style.kind == "pybind11" and style.name else ""
    origin = {"declared": {"dtypes": list(dtypes) if dtypes else None, "device": device}}
    if device == "cuda" and not toolchain.gpu_available():
        # Built and loaded; nothing to probe it on here. Declared as the course's .cu says: CUDA.
        spec = registry.spec(op)
        hint = "" if out is not None else out_argument_hint(spec, f"{op}/{name}", fwd)
        steps = ("forward", "backward") if bwd is not None and spec.differentiable else ("forward",)
        probe = named + (str(hint) if hint else "not probed: a CUDA extension, and no GPU is visible here")
        info = {"op": op, "name": name, "build_id": key[:10], "device": device, "dtypes": list(dtypes or ()),
                "steps": steps, "description": desc, "kind": "extension", "probe": probe}
        k = CallableKernel(op=op, name=name, build_id=key[:10], device=device, dtypes=() if hint else tuple(dtypes or ()),
                           description=desc, library=lib, source=paths[0], built=built, seconds=0.0, info=info, fn=fwd,
                           backward_fn=bwd, kind="extension", module=module, origin=origin, probe=probe,
                           out=out_positions(spec, f"{op}/{name}", fwd, out))
        cache.progress(f"{op}/{name}: {probe}")
        return k
    k = variant(fwd, op=op, backward=bwd, dtypes=dtypes, device=device, name=name, kind="extension", module=module,
                origin=origin, library=lib, source=paths[0], build_id=key[:10], built=built, description=desc, out=out)
    k.probe = f"{named}{EXTENSION_MESSAGE}; " + k.probe
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
    """The extension a child_address describes (byo.child_address: its sources, style, functions,
    out positions and declared dtypes/device; the exercise checker's: its library too), built or
    found in the cache and loaded in this (runner) process."""
    declared = address.get("declared") or {}
    forward, backward = address.get("functions") or ("forward", "backward")
    return load_extension(address["op"], address["source"], address["name"], dtypes=declared.get("dtypes"),
                          device=declared.get("device"), forward=forward, backward=backward, out=address.get("out"),
                          options=build.BuildOptions(**address.get("options", {})), library=address.get("library"))
