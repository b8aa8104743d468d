"""The NumPy front end: the same torch-free variant libraries on NumPy arrays, in a process that
never imports torch (the CUDA extension guide's standalone pybind11 path).

    from workbench import ndarray as wbn
    f = wbn.load("vector_add", "vec4")     # builds (content-keyed cache) or loads the cached build
    f(a, b, c)                              # c written in place; or c = f(a, b)
    f.last_timing                           # kernel_ms, h2d_ms, d2h_ms (CUDA events), bytes, wall_ms
    f.time(a, b, c, repeat=50)              # staged once, the kernel timed 50 times (median kernel_ms)
    g_a, g_b = f.backward(g_c, a, b)        # the backward step, where the variant has one

Variants and bindings are built with nvcc or the host compiler (ndarray_build.py) and opened by one
pybind11 module (bindings/ndarray/ndarray_module.cpp). CPU variants run on the arrays' memory;
CUDA variants on device copies. Calls go through the C++ call contract every front end runs
(bindings/harness/call_contract.h); what NumPy adds is checked here: C-contiguity, byte order,
writable and separate outputs.
"""
from __future__ import annotations

import functools
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from .. import build, config, dtypes
from ..build import cache
from . import ndarray_build
from ..model import registry
from ..errors import WorkbenchError
from ..model.shapes import shape_text

_lock = threading.RLock()
_ext = None                        # the extension module, once built and imported
_bindings: dict[str, tuple[str, int]] = {}   # op -> (build key, WbOpBinding*) opened in this process
_STEPS = {"forward": 0, "backward": 1}


def extension():
    """The pybind11 module, built once per toolchain."""
    global _ext
    with _lock:
        if _ext is None:
            lib, bdir, _ = ndarray_build.build_module()
            cache.mark_in_use(bdir)
            _ext = ndarray_build.import_module(lib)
        return _ext


def device_count() -> int:
    """CUDA devices the front end sees (0 without a GPU, a driver, or a CUDA toolkit)."""
    return extension().device_count()[0]


def devices() -> list[dict]:
    """Name, capability, SM count and memory of each visible CUDA device."""
    return list(extension().devices())


def copy_bandwidth_gbps(nbytes: int = 1 << 30, repeat: int = 10, device: int = 0) -> float:
    """The device-to-device copy rate (read + written bytes, median of `repeat` timed cudaMemcpy):
    the ceiling a memory-bound kernel's GB/s is compared with."""
    ext = extension()
    if not getattr(ext, "with_cuda", False) or device_count() == 0:
        raise WorkbenchError(f"no CUDA device visible ({ext.device_count()[1]})")
    return 2 * nbytes / statistics.median(ext.copy_ms(nbytes, repeat, device)) / 1e6


def arch_list() -> str:
    """The torch path's arch list (build.arch_list), the GPUs asked through this module, not torch."""
    return build.arch_list(capabilities=lambda: [tuple(d["capability"]) for d in devices()])


def ops() -> list[str]:
    """Ops with at least one C++ variant (Python variants need torch)."""
    return [op for op in registry.ops() if variants(op)]


def variants(op: str) -> list[registry.VariantInfo]:
    """The op's C++ variants (.cu, .cpp), read from their sources without building."""
    return [registry.static_variant(op, path, name) for name, path in registry.variant_sources(op).items()
            if path.suffix in (".cu", ".cpp")]


@dataclass(frozen=True)
class Timing:
    """One call's times in milliseconds: kernel times by CUDA events (host clock on a CPU), staging
    (cudaMemcpy, None on a CPU) and alloc (cudaMalloc) times, and the whole call's wall time."""
    device: str
    kernel_ms: float                  # median of kernel_ms_all
    kernel_ms_all: tuple = ()
    h2d_ms: float | None = None
    d2h_ms: float | None = None
    h2d_bytes: int = 0
    d2h_bytes: int = 0
    alloc_ms: float | None = None
    wall_ms: float = 0.0
    launched: bool = True             # False: an empty call, nothing to launch

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class NdKernel:
    """A loaded build of one C++ variant, called on NumPy arrays: f(a, b) or f(a, b, c) (the
    outputs after the inputs, written in place), attributes by position after the arrays or by name."""
    op: str
    name: str
    device: str
    dtypes: tuple[str, ...]
    description: str
    steps: tuple[str, ...]
    library: object
    binding_library: object
    built: bool
    seconds: float
    spec: object = field(repr=False)
    _handles: tuple = field(repr=False, default=(0, 0, 0))   # (OpDecl*, WbOpBinding*, WbVariantInfo*)
    last_timing: Timing | None = None
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)   # CPU variants' thread pool

    @property
    def label(self) -> str:
        return f"{self.op}/{self.name}"

    def __call__(self, *args, out=None, **attrs):
        return self._call("forward", args, attrs, out, 1, 0)

    def backward(self, *args, out=None, **attrs):
        """Gradients of the outputs, then the inputs (and attributes) -> a gradient per
        differentiable input (a tuple when there are several)."""
        return self._call("backward", args, attrs, out, 1, 0)

    def time(self, *args, repeat: int = 20, warmup: int = 3, out=None, **attrs) -> Timing:
        """The forward staged once and launched warmup + repeat times; the returned Timing's
        kernel_ms is the median of the `repeat` timed launches (also in last_timing)."""
        if not isinstance(repeat, int) or repeat < 1 or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"repeat must be an int >= 1 and warmup an int >= 0; got {repeat!r}, {warmup!r}")
        self._call("forward", args, attrs, out, repeat, warmup)
        return self.last_timing

    def __repr__(self) -> str:
        state = "built" if self.built else "cached"
        return (f"<NdKernel {self.label} on {self.device} [{', '.join(self.dtypes)}] {state} in {self.seconds:.2f} s, "
                f"NumPy front end>")

    # ------------------------------------------------------------------ one call

    def _names(self, step: str):
        """(array names in call order, whether the step reads each, output names)."""
        spec = self.spec
        ins = [t.name for t in spec.inputs]
        if step == "forward":
            return ins, [True] * len(ins), [o.name for o in spec.outputs]
        grads = [f"grad_{o.name}" for o in spec.outputs]
        read = [True] * len(grads) + [t.read_by_backward for t in spec.inputs]
        return grads + ins, read, [f"grad_{t.name}" for t in spec.inputs if t.differentiable]

    def _call(self, step: str, args: tuple, attrs: dict, out, repeat: int, warmup: int):
        spec, prefix = self.spec, f"{self.label}: "
        if step not in self.steps:
            raise NotImplementedError(f"{self.label} has no {step}"
                                      + ("; the op has no differentiable inputs" if not spec.differentiable else ""))
        names, read, out_names = self._names(step)
        n = len(names)
        if len(args) < n:
            raise TypeError(f"{prefix}expected arrays {', '.join(names)}"
                            f"{' (then the outputs ' + ', '.join(out_names) + ', optional)' if out_names else ''}; "
                            f"got {len(args)} argument(s)")
        arrays, rest = list(args[:n]), list(args[n:])
        outs = []
        while rest and isinstance(rest[0], np.ndarray) and len(outs) < len(out_names):
            outs.append(rest.pop(0))
        if out is not None:
            if outs:
                raise TypeError(f"{prefix}outputs given twice (positionally and as out=)")
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if len(outs) != len(out_names):
                raise TypeError(f"{prefix}out must be {len(out_names)} array(s) ({', '.join(out_names)}); got {len(outs)}")
        # Attributes: positional after the arrays, or by name; kinds checked by the spec.
        first = len(names) - len(spec.inputs)
        _, values = spec.call_args((*arrays[first:], *rest), attrs)
        for name, a in zip(names, arrays):
            _check_array(prefix, name, a)
        attr_values = [float(v) if a.kind is float else int(v) for a, v in zip(spec.attrs, values)]
        # The call contract every front end runs (bindings/harness/call_contract.h): the call check,
        # in the harness's words, and the outputs' shapes; then what NumPy adds.
        ext, (decl, binding, variant) = extension(), self._handles
        shapes = ext.check(decl, _STEPS[step], prefix, [a.shape for a in arrays],
                           [_dtype_name(a.dtype) for a in arrays], attr_values)
        dtype = _dtype_name(arrays[first].dtype)  # the arrays' one float dtype (the contract's check)
        if dtype not in self.dtypes:
            takes = " or ".join(self.dtypes)
            raise TypeError(f"{prefix}{names[first]} must be a {takes} array (variant '{self.name}' takes {takes}); "
                            f"got {dtype}")
        for name, a, r in zip(names, arrays, read):
            if r:
                _check_layout(prefix, name, a)
        outs = self._outputs(prefix, out_names, shapes, outs, dtype)
        _check_overlap(prefix, names, arrays, out_names, outs)
        if self.device == "cuda":
            self._need_device()
        start = time.perf_counter()
        # A dtype NumPy does not export through the buffer protocol (ml_dtypes' bfloat16) goes as the
        # unsigned ints of its size: the same memory, shape and writability.
        staged, staged_outs = ([a if a.dtype.isbuiltin else a.view(f"u{a.itemsize}") for a in group]
                               for group in (arrays, outs))
        try:   # the contract's empty-tensor guard, then the run (the GIL released while it runs)
            raw = ext.run(decl, binding, variant, _STEPS[step], dtypes.NAMES.index(dtype), staged, staged_outs,
                          attr_values, repeat=repeat, warmup=warmup, threads=max(1, int(self.threads)),
                          label=self.name)
        except RuntimeError as e:
            raise WorkbenchError(f"{prefix}{e}") from None
        wall_ms = (time.perf_counter() - start) * 1e3
        if not raw["launched"]:  # an empty call: the outputs are zeros (a sum over nothing), nothing timed
            self.last_timing = Timing(self.device, 0.0, (), launched=False, wall_ms=wall_ms)
        else:
            kernel = tuple(raw["kernel_ms_all"])
            self.last_timing = Timing(
                self.device, statistics.median(kernel), kernel, raw.get("h2d_ms"), raw.get("d2h_ms"),
                raw.get("h2d_bytes", 0), raw.get("d2h_bytes", 0), raw.get("alloc_ms"), wall_ms)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _outputs(self, prefix, names, shapes, given, dtype) -> list:
        if not given:
            return [np.empty(s, dtype=dtype) for s in shapes]
        for name, s, o in zip(names, shapes, given):
            _check_array(prefix, f"{name} (an output)", o)
            if _dtype_name(o.dtype) != dtype:
                raise TypeError(f"{prefix}{name} (an output) must be a {dtype} array like the inputs; got {o.dtype.name}")
            if tuple(o.shape) != tuple(s):
                raise ValueError(f"{prefix}{name} (an output) must have shape {shape_text(s)}; got shape {shape_text(o.shape)}")
            if not o.flags.writeable:
                raise ValueError(f"{prefix}{name} (an output) is read-only (flags.writeable is False); the output "
                                 f"is written in place: pass a writable array, or leave it out to get a new one")
            _check_layout(prefix, f"{name} (an output)", o)
        return list(given)

    def _need_device(self) -> None:
        count, why = extension().device_count()
        if count == 0:
            cpu = [v.name for v in variants(self.op) if v.device == "cpu"]
            raise WorkbenchError(f"{self.label} is a CUDA variant and no CUDA device is visible ({why}); "
                                 f"CPU variants of {self.op}: {', '.join(cpu) or 'none'}")


@functools.lru_cache(maxsize=None)
def _dtype_name(dtype: np.dtype) -> str:
    """dtype.name, once per dtype (NumPy computes it in Python each time: ~3 us)."""
    return dtype.name


def _check_array(prefix: str, name: str, a) -> None:
    """A plain numpy.ndarray (a mask would be ignored) in this machine's byte order."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{prefix}{name} must be a numpy.ndarray; got {type(a).__name__}")
    plain = name.split()[0]
    if isinstance(a, np.ma.MaskedArray):
        raise TypeError(f"{prefix}{name} is a masked array (numpy.ma); the kernels read every element and would "
                        f"ignore its mask: pass {plain}.filled(value) to choose what the masked elements hold, or "
                        f"{plain}.data to use them as they are")
    if not a.dtype.isnative:
        raise TypeError(f"{prefix}{name} is stored in the other byte order (dtype {a.dtype.str!r}, "
                        f"{'big' if a.dtype.byteorder == '>' else 'little'}-endian); the kernels read this machine's "
                        f"({sys.byteorder}-endian) numbers: pass {plain}.astype({plain}.dtype.newbyteorder('=')), "
                        f"a copy in native order")


def _check_overlap(prefix: str, names, arrays, out_names, outs) -> None:
    """An aliased output (mm(A, B, A)) would give silently wrong numbers."""
    for o_name, o in zip(out_names, outs):
        for name, a in zip(names, arrays):
            if o.size and a.size and np.shares_memory(o, a):
                raise ValueError(f"{prefix}{o_name} (an output) shares memory with {name} (an input); the kernel reads "
                                 f"{name} while it writes {o_name}, which would give wrong results: pass a separate "
                                 f"output array (or leave it out to get a new one)")
    for i, (n1, o1) in enumerate(zip(out_names, outs)):
        for n2, o2 in list(zip(out_names, outs))[i + 1:]:
            if o1.size and o2.size and np.shares_memory(o1, o2):
                raise ValueError(f"{prefix}outputs {n1} and {n2} share memory; pass separate arrays")


def _check_layout(prefix: str, name: str, a: np.ndarray) -> None:
    if not a.flags.c_contiguous:
        raise ValueError(f"{prefix}{name} must be C-contiguous; got a strided array (shape {shape_text(a.shape)}, "
                         f"strides {tuple(a.strides)} bytes): np.ascontiguousarray({name.split()[0]}) makes a "
                         f"contiguous copy")
    if not a.flags.aligned:
        raise ValueError(f"{prefix}{name} must be aligned to its {a.itemsize}-byte elements; got an unaligned buffer")


def _binding(op: str) -> tuple[int, object, bool]:
    """(WbOpBinding*, library, built now) of the op's binding, rebuilt when edited."""
    lib, bdir, built, key = ndarray_build.build_binding(op)
    with _lock:
        if _bindings.get(op, ("",))[0] != key:
            info = extension().open_binding(str(lib))
            if info["abi_version"] != extension().binding_abi_version or info.get("op") != op:
                raise WorkbenchError(f"{lib}: a binding of {info.get('op')!r} with binding ABI {info['abi_version']}; "
                                     f"expected {op!r} with ABI {extension().binding_abi_version}")
            cache.mark_in_use(bdir)
            _bindings[op] = (key, info["handle"])
        return _bindings[op][1], lib, built


def load(op: str, variant: str) -> NdKernel:
    """Build (or fetch from the cache) and open one C++ variant of an op for NumPy arrays. A CUDA
    variant builds and links without a GPU; calling it needs one."""
    start = time.perf_counter()
    registry.check_op(op)
    found = {v.name: v for v in variants(op)}
    if variant not in found:
        others = [n for n, p in registry.variant_sources(op).items() if p.suffix == ".py"]
        raise ValueError(f"{op} has no C++ variant {variant!r}; C++ variants: {', '.join(found) or 'none'}"
                         + (f" (Python variants, which need torch: {', '.join(others)})" if others else ""))
    static, spec = found[variant], registry.spec(op)
    src = registry.sources(op)
    include = [config.COMMON_DIR, src.kernel_dir]
    label = f"ndarray-{op}/{variant}"
    extension()
    lib, bdir, built, _ = ndarray_build.build_variant(label, static.source, include, arch_list)
    binding, binding_lib, _ = _binding(op)
    info = extension().open_variant(str(lib))
    if info["abi_version"] != extension().abi_version or info.get("op") != op:
        raise WorkbenchError(f"{lib}: a variant of {info.get('op')!r} with ABI {info['abi_version']}; expected "
                             f"{op!r} with ABI {extension().abi_version}")
    cache.mark_in_use(bdir)
    names = tuple(n for n in dtypes.NAMES if info["dtype_mask"] & (1 << dtypes.NAMES.index(n)))
    return NdKernel(op=op, name=variant, device=info["device"], dtypes=names, description=info["description"],
                    steps=tuple(info["steps"]), library=lib, binding_library=binding_lib, built=built,
                    seconds=time.perf_counter() - start, spec=spec,
                    _handles=(extension().declare(*spec.fields()), binding, info["handle"]))


__all__ = ["NdKernel", "Timing", "arch_list", "copy_bandwidth_gbps", "device_count", "devices", "extension", "load", "ops", "variants"]
