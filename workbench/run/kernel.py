"""The handle a load returns: a Kernel is one loaded build of a C++/CUDA variant, called like the op
through its torch.ops.workbench overloads (the harness runs that exact build, by name@build_id); a
PythonKernel is one imported content of a Python variant (run/pyvariant.py), the same interface.
"""
from __future__ import annotations

import ctypes
import functools
import pathlib
from dataclasses import dataclass, field

from ..build import DEFAULT_OPTIONS, BuildOptions
from ..errors import WorkbenchError
from ..model import registry
from . import pyvariant
from .process_state import STATE


@functools.cache
def _fast_call_new(harness: ctypes.CDLL):
    """The harness's workbench_fast_call_new, called with the GIL held (it makes a Python object)."""
    proto = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_char_p, ctypes.c_ssize_t, ctypes.py_object)
    return proto(("workbench_fast_call_new", harness))


@dataclass
class Kernel:
    """A loaded build of one variant. Call it like the op: k(x, bias), attributes by position or
    name (k(x, bias, scale=2.0)); k.backward(grad_y, x, bias) runs its backward step alone."""
    op: str
    name: str
    build_id: str
    device: str
    dtypes: tuple[str, ...]
    description: str
    library: pathlib.Path
    source: pathlib.Path
    built: bool                 # compiled by this load (False: loaded from the cache)
    seconds: float              # time this load took
    info: dict = field(default_factory=dict, repr=False)
    options: BuildOptions = field(default=DEFAULT_OPTIONS, repr=False)  # how it was built
    kind = "c++"                # a class attribute; a PythonKernel's is "torch" or "triton"

    def runs_on(self, device_type: str) -> bool:
        return self.info.get("device", self.device) in (device_type, "any")

    @property
    def qualified(self) -> str:
        return f"{self.name}@{self.build_id}"

    @property
    def stale(self) -> bool:
        """True once a newer build of the same name was loaded; this handle still runs its own."""
        newest = STATE.newest(self.op, self.name)
        return newest is not None and newest.build_id != self.build_id

    @property
    def steps(self) -> tuple[str, ...]:
        return tuple(self.info.get("steps", ("forward", "backward")))

    @property
    def spec(self):
        """The op's spec, from the registry's store (no look into the tree: calls stay cheap)."""
        return registry.spec(self.op)

    def __post_init__(self):
        # Resolved now, not on first use: torch.compile traces __call__, and dynamo cannot trace
        # functools.cached_property (it takes a lock on Python 3.11): a graph break.
        import torch

        ns = torch.ops.workbench
        self._ops = (getattr(ns, self.op).default,
                     getattr(ns, f"{self.op}_backward").default if self.spec.differentiable else None)
        self._qualified = self.qualified
        # The forward overload's own C++ callable (OpOverload.__call__ is one more Python frame),
        # the spec whose attribute defaults _defaults holds, and the harness's C caller of the op
        # with those defaults (see __call__).
        self._direct = self._ops[0]._op
        self._defaults_spec, self._defaults, self._fast = None, None, None
        self._compiling = torch.compiler.is_compiling
        self._dynamo_compiling = torch.compiler.is_dynamo_compiling

    def _set_defaults(self, spec) -> None:
        """The attribute values of a call that gives none (None: an attribute has no default)."""
        attrs = spec.attrs
        self._defaults = None if any(a.required for a in attrs) else tuple(a.value(a.default, spec.name) for a in attrs)
        self._fast = None if self._defaults is None else self._fast_caller(spec)
        self._defaults_spec = spec

    def _fast_caller(self, spec):
        """The harness's C caller of this build with the defaults (fast_call.cpp), or None where
        the op's schema is not one it serves."""
        return _fast_call_new(STATE.harness_lib)(f"workbench::{self.op}".encode(), len(spec.inputs),
                                                 (*self._defaults, self._qualified))

    @property
    def op_overload(self):
        return self._ops[0]

    def __call__(self, *args, **attrs):
        # The fast path: the op's tensors alone, every attribute at its default, handed to the
        # harness's C caller (fast_call.cpp: no Python frame and no schema parsing of torch's; it
        # returns NotImplemented for a call it does not serve). Dynamo cannot trace into C, and
        # is_dynamo_compiling is a constant to it: compiled, the overload below is in the graph.
        if not attrs and not self._dynamo_compiling() and self._fast is not None \
                and self._defaults_spec is registry.loaded_spec(self.op):
            out = self._fast(args)
            if out is not NotImplemented:
                return out
        spec = registry.spec(self.op)
        # Else the overload's C++ callable (no normalisation in Python; the harness checks the call
        # either way). Under torch.compile, the overload itself, which dynamo puts in the graph.
        if not attrs and len(args) == len(spec.inputs) and not self._compiling():
            if spec is not self._defaults_spec:
                self._set_defaults(spec)
            if self._defaults is not None:
                return self._direct(*args, *self._defaults, self._qualified)
        tensors, values = spec.call_args(args, attrs)
        return self._ops[0](*tensors, *values, self._qualified)

    def backward(self, *args, **attrs):
        """The backward step: gradients of the outputs, then the inputs (and attributes); returns
        the gradients of the differentiable inputs (a tuple when there are several)."""
        spec = self.spec
        if self._ops[1] is None:
            raise WorkbenchError(f"{self.op} has no differentiable inputs, so no backward")
        tensors, values = spec.call_args(args, attrs, grads=len(spec.outputs))
        return self._ops[1](*tensors, *values, self.qualified)

    def __repr__(self) -> str:
        state = "built" if self.built else "cached"
        stale = ", stale: a newer build of this name is loaded" if self.stale else ""
        steps = "" if "backward" in self.steps else ", forward only"
        return (f"<Kernel {self.op}/{self.qualified} on {self.device} [{', '.join(self.dtypes)}] "
                f"{state} in {self.seconds:.2f} s{steps}{stale}>")


@dataclass(repr=False)
class PythonKernel(Kernel):
    """A loaded build of a Python variant (kernels/<op>/<name>.py); `library` is its source file."""
    kind: str = "torch"
    build: pyvariant.Build | None = None

    def __post_init__(self):
        # no harness ops: the build's own entry points
        self._defaults_spec, self._defaults, self._fast = None, None, None

    def _fast_caller(self, spec):
        return None  # its own entry points (call_direct), not the harness's

    @property
    def spec(self):
        return self.build.spec_of()

    @property
    def op_overload(self):
        """The forward's custom op (kind triton); None for kind torch, which is plain Python."""
        return self.build.forward if self.kind == "triton" else None

    def __call__(self, *args, **attrs):
        # The op's tensors alone (see Kernel.__call__): the build's direct path with the defaults of
        # the spec they were read from, while that spec is the op's (a dict look-up, no frame).
        spec = self._defaults_spec
        if attrs or spec is None or spec is not registry.loaded_spec(self.op):
            spec = self.build.spec_of()
            if not attrs and spec is not self._defaults_spec:
                self._set_defaults(spec)
        if not attrs and self._defaults is not None and len(args) == len(spec.inputs):
            out = self.build.call_direct(args, self._defaults, spec)
            return self.build.forward(*args, *self._defaults) if out is NotImplemented else out
        tensors, values = spec.call_args(args, attrs)
        return self.build.forward(*tensors, *values)

    def backward(self, *args, **attrs):
        spec = self.spec
        if self.build.backward is None or not spec.differentiable:
            raise WorkbenchError(f"{self.op} has no differentiable inputs, so no backward")
        tensors, values = spec.call_args(args, attrs, grads=len(spec.outputs))
        return self.build.backward(*tensors, *values)
