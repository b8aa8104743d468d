"""Bring your own implementation: any callable, or a torch extension written the course's way,
checked and timed as a variant of an op.

    v = wb.variant(fn, op="bias_gelu")                  # dtypes and device probed, and said
    wb.check("bias_gelu", fn); wb.bench("bias_gelu", ["cpu", fn])
    ext = wb.load_inline("bias_gelu", source, name="course", style="extension")

A callable takes the op's tensor inputs, then its attributes (by name), as a variant does, and
returns the op's outputs (a tensor, or a tuple/list in the spec's order). `backward`, where given,
takes (grads of the outputs..., inputs..., attributes...) and returns the gradients of the
differentiable inputs (a tensor or a tuple/list), as a variant's backward step does; it then
serves autograd too (an autograd.Function around the two). Without one, gradients flow through the
callable where autograd can (its output requires grad when its inputs do: plain torch ops, an
autograd.Function's apply); where it cannot (an extension's raw forward, a NumPy round trip), the
backward checks are skipped with a note saying so.

Nothing is taken on trust: a call that returns the wrong number of tensors, or a tensor of another
shape, dtype or device than the op's declaration says, raises a WorkbenchError naming the output
and what was expected (in the check matrix: a failed case with that message). Inputs reach the
callable as the matrix makes them (strided, offset by one element, transposed): a callable that
assumes contiguous, aligned memory is found out there.

What was not declared is probed: each available device (CUDA where a GPU is visible, then the
CPU) and each dtype, on tiny inputs; what ran and returned the declared shapes and dtypes is
recorded, what raised is named, and the probe's note (`kernel.probe`) says so (also printed, unless
WORKBENCH_QUIET). The probe proves that a call runs, not that it is right: the check does that.

Rows, tables and plots name a callable by its qualified name, `module.qualname` ("__main__." left
off: a notebook's own functions are named by their qualname).

isolate=True, wb.profile and sanitize serve a variant from a runner process (workbench/judge),
which cannot be handed a function object, so it imports it by module path: a callable defined at
the top level of an importable module (not __main__, not a lambda or a local function) is re-made
in the runner from that module (its backward likewise); any other callable is refused with a
message saying why and what to do. An extension travels as its source (the runner finds the build
in the cache).

A torch extension written the course's way is served through this path by extension.py.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import pathlib
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import dtypes as dtypes_
from ..build import cache, toolchain
from ..errors import WorkbenchError
from ..model import registry
from ..model.opspec import as_tuple
from . import loader, process_state
from .probe import (call_text, check_outputs, devices_here, listed, one_or_tuple, out_argument_hint, out_positions, probe,
                    probe_size)

_lock = threading.RLock()
_made: dict[tuple, "CallableKernel"] = {}       # (op, fn, backward) -> the variant made of it (undeclared)



def qualified_name(fn) -> str:
    """module.qualname of a callable ("__main__." left off); a callable object's class's."""
    target = fn if (inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isbuiltin(fn)) else None
    qual = getattr(fn, "__qualname__", None) or getattr(type(fn), "__qualname__", None) or repr(fn)
    module = getattr(fn, "__module__", None) if target is not None or hasattr(fn, "__qualname__") \
        else getattr(type(fn), "__module__", None)
    if module in (None, "__main__", "builtins"):
        return qual
    return f"{module}.{qual}"


@dataclass(repr=False)
class CallableKernel(loader.Kernel):
    """A callable served as a variant of `op`: the interface of a loaded Kernel (op, name, device,
    dtypes, steps, spec, runs_on, __call__, backward), so check, gradcheck, bench, profile and the
    plots take it as they take one. `kind`: "callable" or "extension"."""
    fn: Callable = None
    backward_fn: Callable | None = None
    kind: str = "callable"
    autograd: bool = False          # no backward given; autograd flows through fn
    probe: str = ""                 # what the probe found (or what was declared)
    module: Any = None              # an extension's loaded module (pybind11) or torch.ops namespace
    origin: dict = field(default_factory=dict)   # how a runner re-makes it (child_address)
    out: tuple = ()                 # where fn takes the op's outputs, pre-allocated (positions), if it does

    def __post_init__(self):
        self._spec = registry.spec(self.op)  # once: registry.spec looks at the tree on every call
        self._function = _autograd_function(self) if self.backward_fn is not None and self.spec.differentiable \
            else None

    @property
    def qualified(self) -> str:
        return self.name

    @property
    def stale(self) -> bool:
        return False

    @property
    def spec(self):
        from . import torchops

        return torchops.current_spec(self.op) or self._spec

    @property
    def op_overload(self):
        return None

    def __call__(self, *args, **attrs):
        spec = self.spec
        tensors, values = spec.call_args(args, attrs)
        if self._function is not None:
            out = self._function.apply(*tensors, *values)
        else:
            out = self.call_fn(tensors, values)
        return one_or_tuple(self._checked(out, "fwd", tensors, values))

    def call_fn(self, tensors, values):
        """The callable itself on (tensors, attribute values): attributes by name for a Python
        callable (as the op's eager math takes them), by position for an extension's function."""
        args, outs = list(tensors), ()
        if self.out:  # it writes into outputs it is given: allocated here, of the shapes the op declares
            binder = self.spec.check_call("fwd", tensors, values)
            outs = tuple(tensors[0].new_empty(binder.shape_of(o.pattern)) for o in self.spec.outputs)
            for pos, o in sorted(zip(self.out, outs), key=lambda po: po[0]):
                args.insert(pos, o)
        got = self.fn(*args, *values) if self.kind == "extension" else self.fn(*args, **self.spec.attr_dict(values))
        return outs or listed(got)

    def backward(self, *args, **attrs):
        """The backward step: the given backward, else autograd through the callable."""
        import torch

        spec = self.spec
        if not spec.differentiable:
            raise WorkbenchError(f"{self.op} has no differentiable inputs, so no backward")
        tensors, values = spec.call_args(args, attrs, grads=len(spec.outputs))
        grads, inputs = tensors[:len(spec.outputs)], tensors[len(spec.outputs):]
        if self.backward_fn is not None:
            got = self.backward_fn(*grads, *inputs, *values)
        elif self.autograd:
            with torch.enable_grad():
                leaves = [t.detach().requires_grad_(s.differentiable) for s, t in zip(spec.inputs, inputs)]
                outs = self._checked(self.call_fn(leaves, values), "fwd", leaves, values)
                wanted = [t for s, t in zip(spec.inputs, leaves) if s.differentiable]
                got = torch.autograd.grad(outs, wanted, grads, allow_unused=True)
            got = tuple(torch.zeros_like(w) if g is None else g for g, w in zip(got, wanted))
        else:
            raise WorkbenchError(f"{self.op}/{self.name} has no backward: none was given, and autograd cannot "
                                 f"see through it (its output does not require grad)")
        return one_or_tuple(self._checked(got, "bwd", tensors, values))

    def _checked(self, out, step: str, tensors, values) -> tuple:
        """The outputs of a step as a tuple, after checking their number, shapes, dtypes and device
        against the op's declaration; a WorkbenchError naming the output and what was expected."""
        return check_outputs(self.spec, f"{self.op}/{self.name}", step, out, tensors, values)

    def __repr__(self) -> str:
        steps = "" if "backward" in self.steps else ", forward only"
        how = {"callable": "callable", "extension": "torch extension"}.get(self.kind, self.kind)
        return f"<{how} {self.op}/{self.name} on {self.device} [{', '.join(self.dtypes) or 'no dtypes'}]{steps}>"


def _autograd_function(kernel: CallableKernel):
    """forward = the callable, backward = the given backward: autograd through kernel(...) uses the
    implementation's own backward, as k.backward does (gradcheck and the matrix hold the same one)."""
    import torch

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            spec = kernel.spec
            n = len(spec.inputs)
            ctx.save_for_backward(*args[:n])
            ctx.attrs = args[n:]
            return kernel.call_fn(args[:n], args[n:])

        @staticmethod
        def backward(ctx, *grads):
            spec = kernel.spec
            grads = [g if g is not None else torch.zeros_like(x) for g, x in zip(grads, ctx.saved_tensors)]
            got = iter(kernel._checked(listed(kernel.backward_fn(*grads, *ctx.saved_tensors, *ctx.attrs)), "bwd",
                                       (*grads, *ctx.saved_tensors), ctx.attrs))
            return (*[next(got) if t.differentiable else None for t in spec.inputs], *[None] * len(ctx.attrs))

    Function.__name__ = Function.__qualname__ = f"byo_{kernel.op}_{re.sub(r'[^A-Za-z0-9_]', '_', kernel.name)}"
    return Function


def variant(fn, op: str, backward=None, dtypes=None, device=None, name: str | None = None, *, out=None,
            kind: str = "callable", module=None, origin: dict | None = None, library=None, source=None,
            build_id: str | None = None, built: bool = False, description: str | None = None) -> CallableKernel:
    """A callable as a variant of `op` (see the module). dtypes / device: what it takes; probed
    where not given (the note in .probe says what was found). backward: (grads..., inputs...,
    attrs...) -> gradients of the differentiable inputs. name: how rows and plots call it (default
    module.qualname). out: for a function that writes its result into a tensor it is given (as
    `elementwise_mult(a, b, result)` does) rather than returning it, that parameter's name or
    position (a list: one per output of the op, in order); the workbench allocates it, of the
    declared shape, and passes it there. Returns a CallableKernel, which wb.check / gradcheck /
    bench / profile take."""
    start = time.perf_counter()
    registry.check_op(op)
    if isinstance(fn, CallableKernel):
        return fn
    if not callable(fn) or isinstance(fn, (str, loader.Kernel)):
        raise TypeError(f"variant: fn must be a callable (a function taking the op's inputs); got {fn!r}")
    if backward is not None and not callable(backward):
        raise TypeError(f"variant: backward must be a callable or None; got {backward!r}")
    undeclared = dtypes is None and device is None and name is None and out is None and kind == "callable"
    if undeclared:
        with _lock:
            try:
                hit = _made.get((op, fn, backward))
            except TypeError:  # an unhashable callable: made afresh
                hit = None
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
    if device == "cuda" and not toolchain.gpu_available() and kind != "runner":  # a runner's calls say so
        raise RuntimeError("variant: device='cuda' but no GPU is visible here")
    wanted = list(dtypes_.NAMES) if dtypes is None else dtypes_.names(dtypes)
    src = source or _source_of(fn)
    steps = ("forward", "backward") if spec.differentiable and backward is not None else ("forward",)
    info = {"op": op, "name": name, "build_id": build_id or _identity(fn, backward), "device": device or "cpu",
            "dtypes": list(wanted), "steps": steps, "description": description or f"{kind} {name}", "kind": kind}
    kernel = CallableKernel(op=op, name=name, build_id=info["build_id"], device=device or "cpu", dtypes=tuple(wanted),
                            description=info["description"], library=pathlib.Path(library or src),
                            source=pathlib.Path(src), built=built, seconds=0.0, info=info, fn=fn,
                            backward_fn=backward, kind=kind, module=module, origin=dict(origin or {}),
                            out=out_positions(spec, f"{op}/{name}", fn, out))
    probe_devices = [device] if device else devices_here()
    writes_out = "" if out is not None else out_argument_hint(spec, f"{op}/{name}", fn)
    if writes_out and writes_out.returns_none:  # its signature says so: nothing to probe
        kernel.dtypes = ()
        kernel.probe = str(writes_out)
    elif dtypes is None or device is None or (spec.differentiable and backward is None):
        found_device, found, lines, flows = probe(kernel, probe_devices, wanted)
        if device is None and found_device is None:
            raise WorkbenchError(f"variant: {op}/{name} ran on no device and dtype here; the probe found:\n  "
                                 + "\n  ".join(lines) + f"\n{writes_out or 'call it as ' + call_text(spec)}")
        kernel.device = device or found_device
        kernel.dtypes = tuple(wanted) if dtypes is not None else found
        notes = [f"probed {op}/{name} on tiny inputs {spec.label(probe_size(spec))}: " + "; ".join(lines)]
        if dtypes is not None:
            notes.append(f"declared dtypes {', '.join(wanted)} (taken as declared)")
        if spec.differentiable and backward is None:
            if flows:
                kernel.autograd = True
                steps = ("forward", "backward")
                notes.append("no backward given: gradients flow through it by autograd (its output requires grad)")
            else:
                notes.append("no backward given, and autograd cannot see through it (its output does not require "
                             "grad): the backward checks are skipped")
        if not found and writes_out:
            notes.append(str(writes_out))
        kernel.probe = "; ".join(notes)
    else:
        kernel.probe = f"declared: {device}, {', '.join(wanted)}, with a backward"
    if not kernel.dtypes:
        kernel.probe += "; no dtype ran: nothing to check"
    kernel.info.update(device=kernel.device, dtypes=list(kernel.dtypes), steps=steps, probe=kernel.probe)
    kernel.seconds = time.perf_counter() - start
    cache.progress(f"{op}/{name}: {kernel.probe}")
    if undeclared:
        with _lock, _suppress_type_error():
            _made[(op, fn, backward)] = kernel
    return kernel


class _suppress_type_error:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is not None and issubclass(kind, TypeError)


def _source_of(fn) -> str:
    try:
        return inspect.getsourcefile(fn) or "<callable>"
    except TypeError:
        return "<callable>"


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
    """How a runner (judge.pyrunner) re-makes this variant: an extension by its source, a callable
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


def from_child_address(spec: dict) -> CallableKernel:
    """The callable a child_address describes, re-made in this (child) process (an extension's
    address: extension.from_child_address)."""
    declared = spec.get("declared") or {}
    fns = []
    for o in (spec["callable"]["fn"], spec["callable"].get("backward")):
        if o is None:
            fns.append(None)
            continue
        if o.get("path") and o["path"] not in sys.path:
            sys.path.insert(0, o["path"])
        obj = importlib.import_module(o["module"])
        for part in o["qualname"].split("."):
            obj = getattr(obj, part)
        fns.append(obj)
    return variant(fns[0], op=spec["op"], backward=fns[1], name=spec["name"], out=spec.get("out"),
                   dtypes=declared.get("dtypes") or None, device=declared.get("device"))
