"""Loading: the harness (built once per toolchain), each op's binding, and variant libraries.

`load(op, variant)` resolves the op once (registry.resolve) and carries it down: the op is declared
in this process and its binding loaded, then the variant's piece goes through build.get_or_build
(a wheel's prebuilt library, a warm cache hit, or a build under the key's lock). The library is
registered with the harness under `name` and `name@build_id`, and what it declares (device, dtypes,
description) is what the harness reads from its exported descriptor, never the source text. A
Kernel calls its exact build, so a handle to an older build keeps working after an edit; every
record of what is loaded lives in process_state.STATE. A Python variant needs neither harness nor
compiler: pyvariant.py imports it per content.
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import pathlib
import time
from dataclasses import dataclass

from ..build import cache, toolchain
from .. import config
from . import nvrtc_routes, pyvariant, torchops
from .kernel import Kernel, PythonKernel
from .process_state import STATE
from ..model import registry
from ..model.registry import ResolvedOp
from ..build import (DEFAULT_OPTIONS, EDIT_LOOP_OPTIONS, BuildOptions, binding_piece, get_or_build, harness_piece,
                      variant_piece)
from ..build.piece import closure_digest
from ..errors import WorkbenchError


def ensure_harness() -> dict:
    """Build (once per toolchain) and load the C++ harness; it knows no op until one is declared."""
    with STATE.lock:
        if STATE.harness is not None:
            return STATE.harness
        import torch

        # An installed wheel's harness says how it was built; otherwise CUDA where it can be built.
        with_cuda = _wheel().harness_with_cuda() if config.INSTALLED else None
        if with_cuda is None:
            with_cuda = toolchain.can_build_cuda()
        start = time.perf_counter()
        lib, bdir, built, key, _ = get_or_build(harness_piece(with_cuda))
        if _other_harness_loaded(lib):
            raise WorkbenchError(
                "torch.ops.workbench is already registered in this process by another build of the "
                "harness (its sources or the toolchain changed since it was loaded); restart the "
                "process to load the new one")
        torch.ops.load_library(str(lib))
        cache.mark_in_use(bdir)
        STATE.harness_lib = ctypes.CDLL(str(lib))  # the same handle torch.ops.load_library opened
        info = json.loads(_call_harness("workbench_harness_info"))
        STATE.harness = dict(info, library=str(lib), key=key, built=built, seconds=time.perf_counter() - start)
        return STATE.harness


def _wheel():
    """build/prebuilt.py: an installed wheel's libraries (a checkout never imports it)."""
    from ..build import prebuilt

    return prebuilt


def _other_harness_loaded(lib: pathlib.Path) -> bool:
    """Whether another build of the harness is loaded here (TORCH_LIBRARY(workbench) registers once
    per process); ctypes finds an already loaded library's handle, nothing runs."""
    import torch
    return any(pathlib.Path(p).resolve() != lib.resolve() and hasattr(ctypes.CDLL(p), "workbench_harness_info")
               for p in torch.ops.loaded_libraries)


def _call_harness(fn: str, *args: str) -> str:
    """Call one of the harness's C entry points; raise its error message as WorkbenchError."""
    size = 1 << 16
    out = ctypes.create_string_buffer(size)
    func = getattr(STATE.harness_lib, fn)
    func.restype = ctypes.c_int
    status = func(*[a.encode() for a in args], out, ctypes.c_size_t(size))
    text = out.value.decode(errors="replace")
    if status != 0:
        raise WorkbenchError(text)
    return text


def ensure_op(r: ResolvedOp, *, python: bool = True) -> None:
    """Declare the op here (once) and load its newest binding. python=False skips the fake and
    autograd registration (which imports much of torch), for a process that never calls variants."""
    ensure_harness()
    with STATE.lock:
        # Built before the op is declared: a binding that does not build leaves no schema behind.
        lib, bdir, built, key, _ = get_or_build(binding_piece(r))
        if r.op not in STATE.declared:
            import torch

            try:  # the declaration as data (op_decl.h's OpFields): the harness parses no text
                torch.ops.workbench_harness.define_op(*r.spec.fields())
            except (ValueError, RuntimeError) as e:
                raise WorkbenchError(str(e)) from None
            STATE.declared.add(r.op)
        if python:
            torchops.register(r.spec)  # the current spec: an edited one (same schema) takes over
        if STATE.bindings.get(r.op, ("",))[0] != key:
            # The contract: the hash of the op's header and what it includes (its variants must agree).
            digest = closure_digest(r.sources.header, [config.COMMON_DIR, r.sources.kernel_dir])
            _call_harness("workbench_register_binding", r.op, str(lib), digest)
            cache.mark_in_use(bdir)
            STATE.bindings[r.op] = (key, digest)


def _register_python(r: ResolvedOp, name: str, source: pathlib.Path) -> Kernel:
    start = time.perf_counter()
    op = r.op
    build_, imported = pyvariant.load(op, name, source, lambda: registry.spec(op),
                                      last_good=STATE.last_good.get((op, name)))
    v = build_.info
    import torch

    device = v.device if v.device != "any" else ("cuda" if torch.cuda.is_available() else "cpu")
    steps = ("forward", "backward") if r.spec.differentiable else ("forward",)
    info = {"name": name, "build_id": build_.build_id, "path": str(source), "kind": v.kind, "device": v.device,
            "dtypes": list(v.dtypes), "description": v.description, "steps": steps, "ops": list(build_.ops)}
    kernel = PythonKernel(op=op, name=name, build_id=build_.build_id, device=device, dtypes=v.dtypes,
                          description=v.description, library=source, source=source, built=imported,
                          seconds=time.perf_counter() - start, info=info, kind=v.kind, build=build_)
    STATE.put(kernel, str(source), r.is_tree_variant(name, source),
              dataclasses.replace(v, description=v.description + " (inline)"))
    return kernel


def _register(r: ResolvedOp, name: str, source: pathlib.Path, *, inline_label: str | None = None,
              python: bool = True, options: BuildOptions = DEFAULT_OPTIONS) -> Kernel:
    """Build (or find) and register one variant of the resolved op. What it declares (device, dtypes,
    description) is what its library exports, as the harness reads it: its source text is not read."""
    if source.suffix == ".py":
        return _register_python(r, name, source)
    start = time.perf_counter()
    op = r.op
    ensure_op(r, python=python)
    _check_can_build(r, name, source)
    rename = {str(source): inline_label} if inline_label else None
    lib, bdir, built, key, record = get_or_build(variant_piece(r, name, source, options), rename=rename,
                                                 last_good=STATE.last_good.get((op, name)))
    build_id = key[:10]
    with STATE.lock:
        try:  # the contract of the binding just ensured: the variant's build key covers the same header
            info = json.loads(_call_harness("workbench_register_variant", op, name, build_id, str(lib),
                                            STATE.bindings[op][1]))
        except WorkbenchError as e:
            if not any(s in str(e) for s in ("exports no workbench_variant_info", "exports a variant of op")):
                raise
            raise ValueError(f"{inline_label or source}: {e}; expected WB_EXPORT_VARIANT({op}, device, dtypes, "
                             f"\"description\", launchers, status_string)") from None
        nvrtc_routes.attach(lib, record.get("nvrtc_unit"))  # an NVRTC tier library's kernels: its provider
        cache.mark_in_use(bdir)
        kernel = Kernel(op=op, name=name, build_id=build_id, device=info["device"], dtypes=tuple(info["dtypes"]),
                        description=info["description"], library=lib, source=source, built=built,
                        seconds=time.perf_counter() - start, info=info, options=options)
        STATE.put(kernel, str(lib), r.is_tree_variant(name, source), registry.VariantInfo(
            op, name, kernel.device, kernel.dtypes, kernel.description + " (inline)", source))
    return kernel


def _check_can_build(r: ResolvedOp, name: str, source: pathlib.Path) -> None:
    """A .cu variant where CUDA code cannot be built (and no wheel prebuilt it): say so, and what can run."""
    if source.suffix != ".cu" or toolchain.can_build_cuda() or config.INSTALLED and _wheel().manifest() is not None:
        return
    import torch

    cpu = [n for n, p in r.variant_files.items() if p.suffix == ".cpp"
           or p.suffix == ".py" and registry.python_variant(r.op, p, n).runs_on("cpu")]
    raise WorkbenchError(
        f"{r.op}/{name} is a CUDA variant, and this machine cannot build CUDA code "
        f"(torch {torch.__version__} {'has no CUDA' if not toolchain.torch_has_cuda() else 'found no nvcc'}); "
        f"CPU variants here: {', '.join(cpu)}")


def load(op: str, variant: str, *, options: BuildOptions = DEFAULT_OPTIONS) -> Kernel:
    """Build (or fetch from the cache) and load kernels/<op>/<variant>.*; options: beyond the
    default build (BuildOptions(line_info=True): nvcc -lineinfo)."""
    r = registry.resolve(op)
    return _register(r, variant, r.variant_source(variant), options=_checked(options))


def load_source(op: str, path, name: str | None = None, *, python: bool = True,
                options: BuildOptions = DEFAULT_OPTIONS) -> Kernel:
    """Build and load a variant of `op` from a .cu, .cpp or .py file anywhere; `name` defaults to
    the file's stem. python=False: see ensure_op; options: see load."""
    r = registry.resolve(op)
    path = pathlib.Path(path).resolve()
    if not path.is_file() or path.suffix not in registry.SUFFIXES:
        raise ValueError(f"load_source: path must be an existing .cu, .cpp or .py file; got {str(path)!r}")
    name = name or path.stem
    registry.check_variant_name(name)
    return _register(r, name, path, python=python, options=_checked(options))


def _checked(options) -> BuildOptions:
    if not isinstance(options, BuildOptions):
        raise TypeError(f"options must be a workbench.build.BuildOptions; got {type(options).__name__}")
    return options


@dataclass
class BuiltVariant:
    """A variant's library built and not loaded here (its code runs only in a child: the exercise
    checker's; byo.BuiltExtension), described by what its sources say."""
    op: str
    name: str
    source: pathlib.Path
    library: pathlib.Path       # the built .so (cuobjdump reads it as a file)
    build_dir: pathlib.Path     # holds build.log (ptxas's report)
    built: bool                 # compiled by this call (False: found in the cache)
    seconds: float
    key: str                    # the content key; a load of the same source finds the same build
    device: str
    dtypes: tuple[str, ...]
    description: str

    @property
    def build_id(self) -> str:
        return self.key[:10]    # as a loaded Kernel's


def load_inline(op: str, source: str, name: str, *, replace: bool = False,
                options: BuildOptions = EDIT_LOOP_OPTIONS) -> Kernel:
    """Build a variant of `op` from a source string (a notebook cell), written to the cache under
    its hash; errors point at lines of the string. A tree variant's name needs replace=True (this
    build then takes that name in this process). options: the NVRTC tier by default (a device edit
    is rebuilt by NVRTC alone)."""
    r = registry.resolve(op)
    if not isinstance(source, str) or not source.strip():
        raise ValueError("load_inline: source must be a non-empty string of CUDA C++ (or C++ for a CPU variant)")
    registry.check_variant_name(name)
    registry.check_not_shadowing(r, name, replace, f"load_inline({op!r}, ..., name={name!r})")
    is_cuda = "__global__" in source or "WB_DEVICE_CUDA" in source
    path = cache.write_source(op, source, ".cu" if is_cuda else ".cpp", name)
    return _register(r, name, path, inline_label=f"<inline {op}/{name}>", options=_checked(options))


def define_op(spec, header: str, binding: str) -> None:
    """Define an op from a notebook: an OpSpec, its contract header and its binding (source text or
    a path each). It is declared and its binding built at once, so errors show here."""
    from ..model.opspec import OpSpec

    if not isinstance(spec, OpSpec):
        raise TypeError(f"define_op: spec must be a workbench.OpSpec; got {type(spec).__name__}")
    texts = {}
    for what, value in (("header", header), ("binding", binding)):
        if isinstance(value, pathlib.Path) or (isinstance(value, str) and "\n" not in value and value.endswith(
                (".h", ".cpp")) and pathlib.Path(value).is_file()):
            value = pathlib.Path(value).read_text()
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"define_op: {what} must be C++ source text (or a path to a file); got {value!r}")
        texts[what] = value
    if "WB_EXPORT_BINDING(" not in texts["binding"]:
        raise ValueError(f"define_op: the binding must end with WB_EXPORT_BINDING({spec.name}, ...) "
                         f"(see bindings/wb_binding.h)")
    digest = hashlib.sha256((texts["header"] + "\0" + texts["binding"]).encode()).hexdigest()[:16]
    folder = cache.subdir("sources") / "ops" / f"{spec.name}-{digest}"
    # The binding in a subfolder: every .cu/.cpp beside the header would be taken for a variant.
    header_path, binding_path = folder / f"{spec.name}.h", folder / "binding" / f"{spec.name}.cpp"
    cache.write_text(header_path, texts["header"])
    cache.write_text(binding_path, texts["binding"])
    before = registry.add_inline_op(spec, registry.OpSources(folder, header_path, binding_path, inline=True))
    try:
        ensure_op(registry.resolve(spec.name))
    except BaseException:  # e.g. the binding does not build: the op is not left listed without one
        registry.restore_inline_op(spec.name, before)
        raise


def get(op: str, name: str) -> Kernel:
    """The newest loaded build of `name`, else load it from kernels/<op>/."""
    return STATE.newest(op, name) or load(op, name)


def loaded(op: str) -> list[Kernel]:
    return STATE.loaded(op)
