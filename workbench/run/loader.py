"""Loading: the harness (built once per toolchain), each op's binding, and variant libraries.

`load(op, variant)` resolves the op once (registry.resolve: spec, sources, variant files) and
carries that down: it makes sure the op is declared in this process (its schemas, fake and autograd
registration, from its spec) and its binding is loaded, then hands the variant's piece
(build/__init__.py) to the build pipeline (build.get_or_build: a warm hit loads with no ninja and no
lock; otherwise it is built under the key's lock and published). The library is registered with the
harness under `name` and `name@build_id`; the returned Kernel calls its exact build, so a handle to
an older build keeps working after an edit. What the library declares (device, dtypes, description)
is read from the harness; every record of what is loaded lives in process_state.STATE. Each piece is its
own library: editing one op's binding or one variant rebuilds that piece alone, never the harness.

Installed from a wheel, each piece is first looked up among the libraries the wheel prebuilt
(build/prebuilt.py, the pipeline's first tier): where its source and torch match, it loads with no
compiler and no cache.

A Python variant (kernels/<op>/<name>.py: a PyTorch formula or Triton kernels) needs neither the
harness nor a compiler: it is imported per content (pyvariant.py) and served by a PythonKernel,
the same interface with the same checks.
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
    """Build (once per toolchain) and load the C++ harness: the registries and the one kernel that
    serves every op. It knows no op: ops are declared to it at run time."""
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
    """Whether torch.ops.load_library loaded another build of the harness in this process (its
    TORCH_LIBRARY(workbench) is registered once per process): a library exporting the harness's
    entry point (already loaded: ctypes finds its handle, nothing runs)."""
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
    """Declare the resolved op in this process (once) and load its newest binding (rebuilt if
    edited). python=False leaves out the fake and autograd registration (torch.library's, which
    imports much of torch): for a process that builds and loads variants but never calls them (the
    exercise checker's, whose checks run in a child)."""
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
    """Import (once per content) and serve a Python variant; the C++ harness is not involved."""
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
    """Build (or find) and register one variant of the resolved op. Its description is the one its
    library exports (the harness returns it): the source's macro is not parsed here."""
    if source.suffix == ".py":
        return _register_python(r, name, source)
    start = time.perf_counter()
    op = r.op
    ensure_op(r, python=python)
    if not r.is_tree_variant(name, source):
        # A string or a file from elsewhere: a malformed or misaddressed WB_EXPORT_VARIANT is refused
        # before it costs a compile (what it declares is still read from the library, below).
        registry.static_variant(op, source, name)
    _check_can_build(r, name, source)
    rename = {str(source): inline_label} if inline_label else None
    lib, bdir, built, key, record = get_or_build(variant_piece(r, name, source, options), rename=rename,
                                                 last_good=STATE.last_good.get((op, name)))
    build_id = key[:10]
    with STATE.lock:
        # The contract of the binding just ensured: the variant's build key covers the same header.
        info = json.loads(_call_harness("workbench_register_variant", op, name, build_id, str(lib),
                                        STATE.bindings[op][1]))
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
    # With an installed wheel, prebuilt.find serves the variant or says why it cannot.
    if source.suffix != ".cu" or toolchain.can_build_cuda() or config.INSTALLED and _wheel().manifest() is not None:
        return
    import torch

    cpu = [n for n, p in r.variant_files.items() if p.suffix == ".cpp"
           or p.suffix == ".py" and registry.static_variant(r.op, p, n).runs_on("cpu")]
    raise WorkbenchError(
        f"{r.op}/{name} is a CUDA variant, and this machine cannot build CUDA code "
        f"(torch {torch.__version__} {'has no CUDA' if not toolchain.torch_has_cuda() else 'found no nvcc'}); "
        f"CPU variants here: {', '.join(cpu)}")


def load(op: str, variant: str, *, options: BuildOptions = DEFAULT_OPTIONS) -> Kernel:
    """Build (or fetch from the cache) and load one variant of an op from kernels/<op>/. options:
    how it is built beyond the defaults (BuildOptions(line_info=True): a build with nvcc -lineinfo)."""
    r = registry.resolve(op)
    return _register(r, variant, r.variant_source(variant), options=_checked(options))


def load_source(op: str, path, name: str | None = None, *, python: bool = True,
                options: BuildOptions = DEFAULT_OPTIONS) -> Kernel:
    """Build and load a variant of `op` from a source file anywhere (an exercise, a planted test
    kernel, a copy of a Python variant); `name` defaults to the file's stem. python=False: see
    ensure_op (a C++ variant only); options: see load. (wb.load_source also takes style="extension":
    byo.py.)"""
    r = registry.resolve(op)
    path, name = _source_file("load_source", path, name, registry.SUFFIXES)
    return _register(r, name, path, python=python, options=_checked(options))


def _source_file(what: str, path, name: str | None, suffixes) -> tuple[pathlib.Path, str]:
    """(the file, the variant's name: the given one, else the file's stem), both checked."""
    path = pathlib.Path(path).resolve()
    if not path.is_file() or path.suffix not in suffixes:
        raise ValueError(f"{what}: path must be an existing {', '.join(suffixes[:-1])} or {suffixes[-1]} file; "
                         f"got {str(path)!r}")
    name = name or path.stem
    registry.check_variant_name(name)
    return path, name


def _checked(options) -> BuildOptions:
    if not isinstance(options, BuildOptions):
        raise TypeError(f"options must be a workbench.build.BuildOptions; got {type(options).__name__}")
    return options


@dataclass
class BuiltVariant:
    """A C++/CUDA variant's library, built (or found in the cache) and NOT loaded: what a process
    that must never run the variant's code (the exercise checker's) knows of it, from its source
    text and its files. `device`, `dtypes` and `description` are the declaration read from the
    source (registry.static_variant), not the library's exported descriptor: reading that means
    loading the library, which runs its static initializers (a runner does it: workbench/judge)."""
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


def build_source(op: str, path, name: str | None = None) -> BuiltVariant:
    """Build (or find in the cache) a C++/CUDA variant of `op` from a source file, without loading
    it in this process: no dlopen, so none of its code runs here (compiling it is safe). A later
    load_source of the same file (in a child process) finds this build in the cache and only loads
    it; no build lock is held by then. Raises BuildError, ValueError or WorkbenchError as
    load_source does."""
    r = registry.resolve(op)
    path, name = _source_file("build_source", path, name, (".cu", ".cpp"))
    start = time.perf_counter()
    static = registry.static_variant(op, path, name=name)  # not loaded: the source is all there is to read
    _check_can_build(r, name, path)
    lib, bdir, built, key, _ = get_or_build(variant_piece(r, name, path))  # a build loads nothing
    cache.mark_in_use(bdir)  # a shared lock that keeps `clean` away until this process ends, not a build lock
    return BuiltVariant(op=op, name=name, source=path, library=lib, build_dir=bdir, built=built,
                        seconds=time.perf_counter() - start, key=key, device=static.device, dtypes=static.dtypes,
                        description=static.description)


def load_inline(op: str, source: str, name: str, *, replace: bool = False,
                options: BuildOptions = EDIT_LOOP_OPTIONS) -> Kernel:
    """Build a variant of `op` from a source string (a notebook cell). The text is written to the
    cache under a name derived from its hash; errors point at lines of the string. A name of one of
    the tree's variants (kernels/<op>/<name>.*) is refused unless replace=True, which makes this
    build that name in this process (wb.variants then describes it, not the file). (wb.load_inline
    also takes style="extension": byo.py.) options: the NVRTC tier by default (a device edit is
    rebuilt by NVRTC alone; build/nvrtc_tier.py)."""
    r = registry.resolve(op)
    if not isinstance(source, str) or not source.strip():
        raise ValueError("load_inline: source must be a non-empty string of CUDA C++ (or C++ for a CPU variant)")
    registry.check_variant_name(name)
    registry.check_not_shadowing(r, name, None, replace, f"load_inline({op!r}, ..., name={name!r})")
    is_cuda = "__global__" in source or "WB_DEVICE_CUDA" in source
    path = cache.write_source(op, source, ".cu" if is_cuda else ".cpp", name)
    return _register(r, name, path, inline_label=f"<inline {op}/{name}>", options=_checked(options))


def define_op(spec, header: str, binding: str) -> None:
    """Define an op from a notebook: its spec (an OpSpec), its contract header and its binding, each
    as source text or a path to a file. The op is declared and its binding built at once (errors
    show here); then load_inline / load_source build its variants, in this process, no restart."""
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
    """The newest loaded build of `name` (inline and file variants included), else load it from
    kernels/<op>/."""
    return STATE.newest(op, name) or load(op, name)


def loaded(op: str) -> list[Kernel]:
    return STATE.loaded(op)
