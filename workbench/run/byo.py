"""Bring your own implementation: any callable, or a torch extension written the course's way,
checked and timed as a variant of an op. One path: an extension is built and loaded, then its
functions go through variant() as any callable does.

    v = wb.variant(fn, op="bias_gelu")                  # dtypes and device probed, and said
    wb.check("bias_gelu", fn); wb.bench("bias_gelu", ["cpu", fn])
    ext = wb.load_inline("bias_gelu", source, name="course", style="extension")

A callable takes the op's tensor inputs, then its attributes (by name), and returns the op's
outputs; `backward`, where given, takes (grads of the outputs..., inputs..., attributes...).
Nothing is taken on trust (byo_kernel.py): outputs are checked against the declaration on every
call, and what was not declared is probed on tiny inputs. An extension (.cpp/.cu files with
torch/extension.h and a PYBIND11_MODULE or TORCH_LIBRARY exporting `forward`, maybe `backward`)
is built through the content-keyed cache (C++ files read a precompiled torch/extension.h), then
imported. isolate=True, wb.profile and sanitize re-make a variant in a runner (child_address): an
extension from its sources, a callable by module path (not __main__, not a lambda).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import pathlib
import re
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from .. import build, dtypes as dtypes_
from ..build import cache, toolchain, torch_pch
from ..build import cuda_source_piece
from ..errors import WorkbenchError
from ..model import registry
from . import loader, process_state
from .byo_kernel import CallableKernel, exported_inits, load_failure, out_argument_hint, out_positions, probed

_lock = threading.RLock()
_made: dict[tuple, "CallableKernel"] = {}   # (op, fn, backward) -> the variant made of it (undeclared)
_modules: dict[str, Any] = {}               # an extension's library path -> its loaded module or namespace
EXTENSION_MESSAGE = ("a torch extension: compiling it includes torch/extension.h, the torch headers (its C++ files "
                     "read them precompiled; a .cu file parses them: nvcc has no precompiled headers, and the "
                     "workbench's own variant ABI exists to avoid that). A cached build loads at once")


def qualified_name(fn) -> str:
    """module.qualname of a callable ("__main__." left off); a callable object's class's."""
    target = fn if (inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isbuiltin(fn)) else None
    qual = getattr(fn, "__qualname__", None) or getattr(type(fn), "__qualname__", None) or repr(fn)
    module = getattr(fn, "__module__", None) if target is not None or hasattr(fn, "__qualname__") \
        else getattr(type(fn), "__module__", None)
    if module in (None, "__main__", "builtins"):
        return qual
    return f"{module}.{qual}"


def variant(fn, op: str, backward=None, dtypes=None, device=None, name: str | None = None, *, out=None,
            kind: str = "callable", module=None, origin: dict | None = None, library=None, source=None,
            build_id: str | None = None, built: bool = False, description: str | None = None) -> CallableKernel:
    """A callable as a variant of `op` (see the module). dtypes / device: probed where not given.
    backward: (grads..., inputs..., attrs...) -> gradients of the differentiable inputs. name:
    default module.qualname. out: for a function that writes its result into a tensor it is given
    (`elementwise_mult(a, b, result)`), that parameter's name or position (one per output); the
    workbench allocates it. kind and the rest: an extension's or a runner's (judge/remote.py)."""
    start = time.perf_counter()
    registry.check_op(op)
    if isinstance(fn, CallableKernel):
        return fn
    if not callable(fn) or isinstance(fn, (str, loader.Kernel)):
        raise TypeError(f"variant: fn must be a callable (a function taking the op's inputs); got {fn!r}")
    if backward is not None and not callable(backward):
        raise TypeError(f"variant: backward must be a callable or None; got {backward!r}")
    undeclared = dtypes is None and device is None and name is None and out is None and kind == "callable"
    hit = None
    if undeclared:
        with _lock, contextlib.suppress(TypeError):  # an unhashable callable: made afresh
            hit = _made.get((op, fn, backward))
    if hit is not None:
        return hit
    spec = registry.spec(op)
    name = name or qualified_name(fn)
    if not isinstance(name, str) or not name.strip() or len(name) > 200 or "\n" in name:
        raise ValueError(f"variant: name must be a one-line string of at most 200 characters; got {name!r}")
    if name in ("eager", "compile", *spec.baselines):
        raise ValueError(f"variant: name {name!r} is one of {op}'s baselines; pass another name=")
    if kind != "runner" and name in {v.name for v in process_state.variants(op)}:  # a runner's is that variant itself
        raise ValueError(f"variant: name {name!r} is one of {op}'s own variants (wb.variants({op!r})); rows would "
                         f"not tell them apart: pass another name=")
    if device is not None and device not in ("cuda", "cpu"):
        raise ValueError(f"variant: device must be 'cuda', 'cpu' or None (probed); got {device!r}")
    unprobed = device == "cuda" and not toolchain.gpu_available()  # a runner's calls say so; an extension is built
    if unprobed and kind == "callable":
        raise RuntimeError("variant: device='cuda' but no GPU is visible here")
    wanted = list(dtypes_.NAMES) if dtypes is None else dtypes_.names(dtypes)
    src = source
    with contextlib.suppress(TypeError):  # a builtin has no source file
        src = src or inspect.getsourcefile(fn)
    src = src or "<callable>"
    steps = ("forward", "backward") if spec.differentiable and backward is not None else ("forward",)
    info = {"op": op, "name": name, "build_id": build_id or _identity(fn, backward), "device": device or "cpu",
            "dtypes": list(wanted), "steps": steps, "description": description or f"{kind} {name}", "kind": kind}
    kernel = CallableKernel(op=op, name=name, build_id=info["build_id"], device=device or "cpu", dtypes=tuple(wanted),
                            description=info["description"], library=pathlib.Path(library or src),
                            source=pathlib.Path(src), built=built, seconds=0.0, info=info, fn=fn,
                            backward_fn=backward, kind=kind, module=module, origin=dict(origin or {}),
                            out=out_positions(spec, f"{op}/{name}", fn, out))
    writes_out = "" if out is not None else out_argument_hint(spec, f"{op}/{name}", fn)
    if writes_out and writes_out.returns_none:  # its signature says so: nothing to probe
        kernel.dtypes = ()
        kernel.probe = str(writes_out)
    elif unprobed and kind == "extension":  # built and loaded; declared CUDA, as the course's .cu says
        kernel.dtypes = () if writes_out else tuple(dtypes or ())
        kernel.probe = str(writes_out) or "not probed: a CUDA extension, and no GPU is visible here"
    elif dtypes is None or device is None or (spec.differentiable and backward is None):
        probed(kernel, device, wanted, dtypes is not None, writes_out)
    else:
        kernel.probe = f"declared: {device}, {', '.join(wanted)}, with a backward"
    if not kernel.dtypes and not (unprobed and kind == "extension"):
        kernel.probe += "; no dtype ran: nothing to check"
    steps = ("forward", "backward") if spec.differentiable and (backward is not None or kernel.autograd) else ("forward",)
    kernel.info.update(device=kernel.device, dtypes=list(kernel.dtypes), steps=steps, probe=kernel.probe)
    kernel.seconds = time.perf_counter() - start
    cache.progress(f"{op}/{name}: {kernel.probe}")
    if undeclared:
        with _lock, contextlib.suppress(TypeError):
            _made[(op, fn, backward)] = kernel
    return kernel


def _identity(fn, backward) -> str:
    """A stable id for rows (build_id's place): the hash of the callables' qualified names and code."""
    h = hashlib.sha256()
    for f in (fn, backward):
        if f is None:
            continue
        h.update(qualified_name(f).encode())
        code = getattr(f, "__code__", None)
        if code is not None:
            h.update(code.co_code)
    return h.hexdigest()[:10]


def as_variant(op: str, v):
    """What the tools accept as a variant: a name or a loaded Kernel as it is, any other callable
    made a CallableKernel (probed once per callable and process)."""
    if isinstance(v, (str, loader.Kernel, loader.BuiltVariant)) or not callable(v):
        return v
    return variant(v, op=op)


# ---------------------------------------------------------------------------- a torch extension

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
    """The extension's build piece: one label per op, so the same text finds the same build. The
    precompiled torch headers' folder comes first on the include path, outside the key (the same
    code comes out); -Winvalid-pch says in the log where a .gch was not used."""
    first = next((p for p in paths if p.suffix == ".cu"), paths[0])
    dirs = list(dict.fromkeys(p.parent for p in paths))
    piece = cuda_source_piece(label=f"{op}/torch_extension", kind="extension", source=first, include_dirs=dirs,
                              options=options)
    pch = torch_pch.folder(piece.cflags) if any(p.suffix == ".cpp" for p in paths) else None
    return replace(piece, sources=tuple(paths), include_dirs=(pch, *dirs) if pch else tuple(dirs),
                   cflags=(*piece.cflags, *torch_pch.FLAGS))


def _prepared(op: str, path, options=build.DEFAULT_OPTIONS):
    """(paths, style, piece) of an extension-style source: a file, or a list of them."""
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
    built = build.get_or_build(piece, rename=rename)
    cache.mark_in_use(built.build_dir)
    log = built.build_dir / "build.log"
    unused = torch_pch.unused(log.read_text(errors="replace")) if built.built and log.exists() else ""
    if unused:
        cache.progress(f"{op}/{name}: the precompiled torch headers were not used: {unused}")
    return built


def build_extension(op: str, path, name: str | None = None) -> BuiltExtension:
    """Build (or find in the cache) an extension-style source without loading it here (its code
    runs only in a child: the exercise checker's)."""
    start = time.perf_counter()
    paths, _, piece = _prepared(op, path)
    name = name or paths[0].stem
    lib, bdir, built, key, _ = _build(op, name, piece)
    return BuiltExtension(op=op, name=name, source=paths[0], library=lib, build_dir=bdir, built=built,
                          seconds=time.perf_counter() - start, key=key, device="cuda" if piece.with_cuda else "cpu", dtypes=(),
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
                modname = style.name or next(iter(exported_inits(lib)), "PyInit_" + lib.name.split(".")[0])[7:]
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


def load_extension(op: str, path, name: str | None = None, *, dtypes=None, device=None, forward: str = "forward",
                   backward: str | None = "backward", out=None, inline_label: str | None = None,
                   options: build.BuildOptions = build.DEFAULT_OPTIONS, library=None) -> CallableKernel:
    """Build (cached) and load an extension-style source (a file, or [binding.cpp, kernels.cu]) and
    serve its `forward` (and `backward`) through variant(). options: as loader.load's. library: a
    build of these sources made elsewhere (the exercise checker's, in a runner without a cache)."""
    start = time.perf_counter()
    if library is None:
        paths, style, piece = _prepared(op, path, options)
        name = name or paths[0].stem
        rename = {str(paths[0]): inline_label} if inline_label else None
        lib, _, built, key, _ = _build(op, name, piece, rename)
    else:
        paths = tuple(pathlib.Path(p) for p in ([path] if isinstance(path, (str, os.PathLike)) else path))
        style = _style_of(paths, [p.read_text(errors="replace") for p in paths])
        lib, built, key = pathlib.Path(library), False, hashlib.sha256(pathlib.Path(library).read_bytes()).hexdigest()
        name = name or paths[0].stem
    module = _load_module(lib, style, paths)
    fwd, bwd = _function(module, forward), _function(module, backward)
    if fwd is None:
        how = f'm.def("{forward}", ...) in PYBIND11_MODULE' if style.kind == "pybind11" else \
            f'm.def("{forward}(...)") in TORCH_LIBRARY'
        exported = [n for n in dir(module) if not n.startswith("_")] if style.kind == "pybind11" else []
        raise ValueError(f"{', '.join(p.name for p in paths)}: the extension exports no {forward!r} function ({how})"
                         + (f"; it exports {', '.join(exported)}: name one with forward=" if exported else ""))
    device = device or ("cuda" if any(p.suffix == ".cu" for p in paths) else "cpu")
    desc = f"torch extension {', '.join(p.name for p in paths)} ({style.kind}; " \
        f"{'forward and backward' if bwd else 'forward only'})"
    origin = {"declared": {"dtypes": list(dtypes) if dtypes else None, "device": device},
              "functions": [forward, backward], "sources": [str(p) for p in paths]}
    k = variant(fwd, op=op, backward=bwd, dtypes=dtypes, device=device, name=name, kind="extension", module=module,
                origin=origin, library=lib, source=paths[0], build_id=key[:10], built=built, description=desc, out=out)
    named = f"PYBIND11_MODULE({style.name}, m) names its module itself: loaded under that name, nothing rewritten; " \
        if style.kind == "pybind11" and style.name else ""
    k.probe = k.info["probe"] = f"{named}{EXTENSION_MESSAGE}; {k.probe}"
    k.options = options
    k.seconds = time.perf_counter() - start
    return k


def _function(module, fn_name: str | None):
    """A function the extension exports (a pybind11 module's attribute or a torch.ops op), else None."""
    try:
        return getattr(module, fn_name) if fn_name else None
    except (AttributeError, RuntimeError):
        return None


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


# ---------------------------------------------------------------------------------------- isolation

def origin_of(fn) -> dict | None:
    """{"module": ..., "qualname": ..., "path": a folder to put on sys.path} for a callable a child
    can import and find the same object in; None where it cannot."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, type):  # a classmethod bound to its class (an autograd.Function's apply): found
        # through that class, since its own __qualname__ may name the base that defined it
        module, qual = owner.__module__, f"{owner.__qualname__}.{fn.__name__}"
    else:
        module, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not qual or module == "__main__" or "<" in qual:
        return None
    mod = sys.modules.get(module)
    obj = mod
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    if isinstance(owner, type):
        found = getattr(obj, "__self__", None) is owner and getattr(obj, "__name__", None) == fn.__name__
    else:
        found = obj is fn or getattr(obj, "__func__", None) is getattr(fn, "__func__", object())
    if not found:
        return None
    path = getattr(mod, "__file__", None)
    root = None
    if path:
        root = pathlib.Path(path).resolve().parent
        for _ in range(module.count(".")):
            root = root.parent
    return {"module": module, "qualname": qual, "path": str(root) if root else None}


def child_address(op: str, kernel: CallableKernel) -> dict:
    """How a runner (judge.python_runner) re-makes this variant: an extension by its source, a callable
    by module path; a callable that cannot be imported there raises WorkbenchError."""
    if kernel.kind == "extension":  # with its build options (line info): the runner loads that same build
        options = {"options": kernel.options.as_dict()} if kernel.options.as_dict() else {}
        return {"op": op, "name": kernel.name, "source": kernel.origin.get("sources") or str(kernel.source),
                "style": "extension", "declared": kernel.origin.get("declared"), "out": list(kernel.out) or None,
                "functions": kernel.origin.get("functions"), **options}
    made = {"fn": origin_of(kernel.fn), "backward": origin_of(kernel.backward_fn) if kernel.backward_fn else None}
    missing = [w for w in ("fn", "backward") if made[w] is None and (w == "fn" or kernel.backward_fn is not None)]
    if missing:
        what = kernel.fn if "fn" in missing else kernel.backward_fn
        raise WorkbenchError(
            f"{op}/{kernel.name}: a callable cannot be sent to a runner process (isolate=True, wb.profile) as an "
            f"object; it is imported there by module path, and {qualified_name(what)} cannot be "
            f"({'defined in __main__ (a notebook or script)' if getattr(what, '__module__', None) == '__main__' else 'a lambda or a local function' if '<' in getattr(what, '__qualname__', '<') else 'not found under its module path'}). "
            f"Move it to a module of its own (a .py file importable from here) and pass that function, or run "
            f"without isolate")
    return {"op": op, "name": kernel.name, "callable": made, "out": list(kernel.out) or None,
            "declared": {"dtypes": list(kernel.dtypes), "device": kernel.device}}


def from_child_address(address: dict) -> CallableKernel:
    """The variant a child_address describes, re-made in this (runner) process: an extension built
    or found in the cache (the exercise checker's address names its library too) and loaded, a
    callable imported by module path."""
    declared = address.get("declared") or {}
    dtypes, device = declared.get("dtypes") or None, declared.get("device")
    if address.get("style") == "extension":
        forward, backward = address.get("functions") or ("forward", "backward")
        return load_extension(address["op"], address["source"], address["name"], dtypes=dtypes, device=device,
                              forward=forward, backward=backward, out=address.get("out"),
                              options=build.BuildOptions(**address.get("options", {})), library=address.get("library"))
    fns = []
    for o in (address["callable"]["fn"], address["callable"].get("backward")):
        obj = None
        if o is not None:
            if o.get("path") and o["path"] not in sys.path:
                sys.path.insert(0, o["path"])
            obj = importlib.import_module(o["module"])
            for part in o["qualname"].split("."):
                obj = getattr(obj, part)
        fns.append(obj)
    return variant(fns[0], op=address["op"], backward=fns[1], name=address["name"], out=address.get("out"),
                   dtypes=dtypes, device=device)
