"""Python variants: kernels/<op>/<name>.py, the op's math as PyTorch tensor ops (kind "torch") or
Triton kernels (kind "triton"), declared in a module-level literal (registry.python_variant):

    WB_VARIANT = {"op": "rmsnorm", "device": "cuda", "dtypes": ("float32", "bfloat16"),
                  "description": "...", "kind": "triton"}

with forward(<tensor inputs...>, <attrs...>) and, for kind "triton" (optional for "torch"),
backward(<grads of outputs...>, <tensor inputs...>, <attrs...>). Each content of a file is one
build, executed as a module of its own (build_id: its hash), so handles to an old build keep
running the old code. Calls are checked as the C++ harness checks them (same order and words).
Kind "torch" runs in Python (autograd and torch.compile trace through it); kind "triton" becomes two
torch.library.triton_op ops per build, workbench_py::<op>__<name>_<build_id> and its _backward,
with the spec's fakes and torchops' autograd.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import linecache
import sys
import threading
import traceback
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import config
from ..model import registry
from . import torchops
from ..errors import BuildError
from ..model.opspec import as_tuple, input_grads, one_or_tuple

# Not torch.ops.workbench: the harness treats that namespace as its own (a second harness build in
# one process is refused by looking for it).
NAMESPACE = "workbench_py"
_lock = threading.RLock()
_builds: dict[tuple[str, str, str], "Build"] = {}   # (op, name, content hash) -> the build, imported once


@dataclass
class Build:
    """One content of one Python variant file, imported, with its checked entry points."""
    info: registry.VariantInfo
    build_id: str
    module: types.ModuleType
    spec_of: Callable                   # () -> the op's current spec
    forward: Callable = None            # (tensors..., attr values...) -> outputs
    backward: Callable = None           # (grads..., tensors..., attr values...) -> grads of differentiable inputs
    torch_dtypes: tuple = ()
    ops: tuple[str, ...] = field(default=())   # kind triton: the names of its two torch.ops.workbench_py ops
    function: Any = None                # kind torch with a backward: the autograd.Function that uses it
    passed: set = field(default_factory=set)  # keys of calls that passed the checks (see checked)
    passed_spec: Any = None                   # the spec they passed under

    def checked(self, step: str, args: tuple, spec=None) -> tuple[list, tuple]:
        """(contiguous tensors, attribute values) of a call, after the harness's checks under the
        op's current spec; a call like one that passed already (all the checks read) is not checked again."""
        spec = self.spec_of() if spec is None else spec
        n = len(spec.inputs) + (len(spec.outputs) if step == "bwd" else 0)
        tensors, attrs = args[:n], tuple(args[n:])
        if self.passed_spec is not spec:  # the op's spec defined again: check everything anew
            self.passed, self.passed_spec = set(), spec
        # Loops, not comprehensions: on Python 3.11 each comprehension is a frame of its own (a
        # Triton handle's call runs this; issue 26 counts its microseconds).
        key = [step, attrs]
        try:
            for t in tensors:
                key += t.shape, t.dtype, t.device
            key = tuple(key)
            seen = key in self.passed
        except (AttributeError, TypeError):  # not a tensor, or a symbolic shape: no key
            key, seen = None, False
        if not seen:
            self._check(spec, step, tensors, attrs)
            if key is not None:
                if len(self.passed) >= 256:  # a sweep over many shapes: keep the newest
                    self.passed.clear()
                self.passed.add(key)
        contiguous = []
        for t in tensors:
            contiguous.append(t.contiguous())
        return contiguous, attrs

    def _check(self, spec, step: str, tensors, attrs) -> None:
        n = len(tensors)
        spec.check_call(step, tensors, attrs)
        x, ref, v = tensors[n - len(spec.inputs)], spec.inputs[0].name, self.info
        device = v.device
        if device != "any" and x.device.type != device:
            raise RuntimeError(
                f"workbench::{v.op}: variant '{v.name}' runs on {'CUDA' if device == 'cuda' else 'CPU'} tensors; "
                f"{ref} is on {x.device}" + (" (move it to a GPU, or use a CPU variant such as 'cpu')"
                                             if device == "cuda" else " (use a CUDA variant, or .cpu() it)"))
        if x.dtype not in self.torch_dtypes:
            raise TypeError(f"workbench::{v.op}: variant '{v.name}' supports dtypes {', '.join(v.dtypes)}; "
                            f"{ref} is {str(x.dtype).replace('torch.', '')}")

    def run_forward(self, *args):
        tensors, attrs = self.checked("fwd", args)
        if self.function is not None:
            return one_or_tuple(self.function.apply(*tensors, *attrs))
        return self._launch(self.module.forward, tensors, attrs)

    def call_direct(self, args: tuple, defaults: tuple, spec):
        """A handle's forward call outside the custom op where nothing needs the dispatcher
        (runs_direct), else NotImplemented. It runs the checked body with wrap_triton off, as
        triton_op's eager backend does: the higher-order op's dispatch cost ~150 us a call on the
        H100 (218 us against a bare launch's 18). The body is called here, not through _launch,
        where the tensors are on the current device: each frame costs about a microsecond."""
        c = _torch_state()
        if not self.runs_direct(args, c):
            return NotImplemented
        tensors, attrs = self.checked("fwd", args + defaults, spec)
        switch = c.wrap_triton_switch
        if switch is None:  # a torch without the thread-local flag: its context manager
            from torch._library.triton import set_wrap_triton_enabled

            with set_wrap_triton_enabled(False):
                return self._launch(self.module.forward, tensors, attrs)
        flag = switch.wrap_triton_enabled
        was = getattr(flag, "value", switch.wrap_triton_enabled_default)
        flag.value = False
        try:
            x = tensors[0]
            if x.is_cuda and x.get_device() == c.cuda_device():
                return one_or_tuple(self.module.forward(*tensors, *attrs))
            return self._launch(self.module.forward, tensors, attrs)  # another GPU (made current there), or none
        finally:
            flag.value = was

    def run_backward(self, *args):
        tensors, attrs = self.checked("bwd", args)
        if hasattr(self.module, "backward"):
            return self._launch(self.module.backward, tensors, attrs)
        return self._autograd_backward(tensors, attrs)

    def _launch(self, fn, tensors, attrs):
        if self.info.kind == "triton" and tensors[0].is_cuda:
            import torch

            # Triton launches on the current device: make it the tensors' (as the harness's device guard does).
            # torch.accelerator's look-up, not torch.cuda.current_device(): a CUDA tensor means CUDA
            # is initialised, and that function's lazy-init check cost a microsecond or two a call.
            if tensors[0].get_device() != _torch_state().cuda_device():
                with torch.cuda.device(tensors[0].device):
                    return one_or_tuple(fn(*tensors, *attrs))
        return one_or_tuple(fn(*tensors, *attrs))

    def runs_direct(self, tensors, c=None) -> bool:
        """Whether a kind triton forward call may skip its custom op (call_direct): no graph to
        record, no tracing (dynamo's is asked; make_fx and export work through a mode or tensor
        subclasses, refused too), no functorch transform, plain tensors."""
        c = _torch_state() if c is None else c
        if self.info.kind != "triton" or c.dynamo_compiling() or c.dispatch_modes() or c.functorch() \
                or c.torch_function(tensors):  # a TorchFunctionMode, or a tensor overriding torch functions
            return False
        grad, plain = c.grad_enabled(), c.Tensor
        for t in tensors:  # a loop, not all(<generator>): the generator cost ~0.3 us a call
            if type(t) is not plain or (grad and t.requires_grad):
                return False
        return True

    def _autograd_backward(self, tensors, attrs):
        """Kind torch without a backward: autograd through its forward."""
        spec = self.spec_of()
        grads, inputs = tensors[:len(spec.outputs)], tensors[len(spec.outputs):]
        return one_or_tuple(input_grads(spec, lambda *leaves: self.module.forward(*leaves, *attrs), inputs, grads))


def _log(op: str, name: str, digest: str, text: str):
    path = config.cache_dir() / "logs" / f"{op}-{name}-{digest[:12]}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _build_error(op: str, name: str, source, digest: str, e: BaseException, last_good: str | None) -> BuildError:
    """A BuildError naming the file and the line of the variant's own code where `e` was raised."""
    text = "".join(traceback.format_exception(e))
    if isinstance(e, SyntaxError):
        line, first = e.lineno, f"SyntaxError: {e.msg}"
    else:
        ours = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == str(source)]
        line, first = (ours[-1].lineno if ours else None), f"{type(e).__name__}: {e}"
    return BuildError(f"{op}/{name}", str(source), line, first, _log(op, name, digest, text), last_good)


def _check_signature(fn, n: int, what: str, source, expected: str, kind: str) -> None:
    if not callable(fn):
        raise ValueError(f"{source}: a Python variant of kind {kind!r} must define a function {what}({expected})"
                         + ("" if fn is None else f"; got {what} = {fn!r}"))
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError:
        raise ValueError(f"{source}: {what} must take {n} positional arguments ({expected}); "
                         f"its signature is {what}{inspect.signature(fn)}") from None
    except ValueError:
        pass  # a callable without a signature: taken on trust


def _check_entry_points(module, kind: str, spec, source) -> None:
    tensors = ", ".join(t.name for t in spec.inputs)
    attrs = "".join(f", {a.name}" for a in spec.attrs)
    grads = ", ".join(f"grad_{o.name}" for o in spec.outputs)
    _check_signature(getattr(module, "forward", None), len(spec.inputs) + len(spec.attrs), "forward",
                     source, tensors + attrs, kind)
    if hasattr(module, "backward") or (kind == "triton" and spec.differentiable):
        _check_signature(getattr(module, "backward", None), len(spec.outputs) + len(spec.inputs) + len(spec.attrs),
                         "backward", source, f"{grads}, {tensors}{attrs}", kind)


def load(op: str, name: str, source, spec_of: Callable, *, last_good: str | None = None) -> tuple[Build, bool]:
    """(the build of the file's current content, whether this call imported it). A syntax or import
    error raises BuildError; a malformed declaration or entry point, ValueError."""
    text = source.read_text()
    digest = hashlib.sha256(text.encode()).hexdigest()
    with _lock:
        if (op, name, digest) in _builds:
            return _builds[(op, name, digest)], False
        try:
            code = compile(text, str(source), "exec")
        except SyntaxError as e:
            raise _build_error(op, name, source, digest, e, last_good) from None
        info = registry.python_variant(op, source, name, text)
        spec = spec_of()
        module_name = f"workbench_variant_{op}_{name}_{digest[:16]}"
        module = types.ModuleType(module_name)
        module.__file__ = str(source)
        # inspect.getsource (Triton's @jit reads its function's source) must see this build's
        # text, not the file as it is on disk later; a None mtime keeps checkcache from dropping it.
        linecache.cache[str(source)] = (len(text), None, text.splitlines(True), str(source))
        sys.modules[module_name] = module
        try:
            exec(code, module.__dict__)
        except Exception as e:
            del sys.modules[module_name]
            raise _build_error(op, name, source, digest, e, last_good) from None
        try:
            _check_entry_points(module, info.kind, spec, source)
        except ValueError:
            del sys.modules[module_name]
            raise
        import torch

        build = Build(info, digest[:10], module, spec_of,
                      torch_dtypes=tuple(getattr(torch, d) for d in info.dtypes))
        if info.kind == "torch":
            build.forward, build.backward = build.run_forward, build.run_backward
            if hasattr(module, "backward") and spec.differentiable:
                # Autograd through k(...) uses the variant's backward, as k.backward does.
                build.function = torchops.autograd_function(
                    f"{op}_{name}_{build.build_id}", spec_of,
                    lambda tensors, attrs: module.forward(*tensors, *attrs),
                    lambda grads, tensors, attrs: as_tuple(module.backward(*grads, *tensors, *attrs)))
        else:
            _register_triton_ops(build, spec)
        _builds[(op, name, digest)] = build
        return build, True


def _typed(run, params: list, n_out: int):
    """A function impl(<params>) calling run(*params), annotated: triton_op infers the schema from the
    signature (torch 2.11 takes no schema string there)."""
    import typing

    import torch

    names = ", ".join(n for n, _ in params)
    scope = {"_run": run}
    exec(f"def impl({names}):\n    return _run({names})\n", scope)  # noqa: S102 - names are identifiers
    impl = scope["impl"]
    impl.__annotations__ = {n: k for n, k in params}
    impl.__annotations__["return"] = torch.Tensor if n_out == 1 else typing.Tuple[(torch.Tensor,) * n_out]
    return impl


def _register_triton_ops(build: Build, spec) -> None:
    """workbench_py::<op>__<name>_<build_id> and its _backward: triton_ops, fakes from the spec."""
    import torch

    qual = f"{build.info.op}__{build.info.name}_{build.build_id}"
    kinds = {float: float, int: int, bool: bool}
    attrs = [(a.name, kinds[a.kind]) for a in spec.attrs]
    tensors = [(t.name, torch.Tensor) for t in spec.inputs]
    steps = [(qual, "fwd", tensors + attrs, len(spec.outputs), build.run_forward)]
    if spec.differentiable:
        grads = [(f"grad_{o.name}", torch.Tensor) for o in spec.outputs]
        steps.append((f"{qual}_backward", "bwd", grads + tensors + attrs, len(spec.differentiable), build.run_backward))
    for op_name, step, params, n_out, run in steps:
        opdef = torch.library.triton_op(f"{NAMESPACE}::{op_name}", _typed(run, params, n_out), mutates_args=())
        # The spec's fake (the harness's checks, the declared shapes) instead of running the body on
        # fake tensors: meta tensors get the same errors as real ones, and no kernel is traced.
        opdef.register_fake(lambda *args, _step=step: _fake(build, _step, args))
    if spec.differentiable:
        torchops.register_autograd(qual, build.spec_of, NAMESPACE)
        build.backward = getattr(getattr(torch.ops, NAMESPACE), f"{qual}_backward").default
    build.forward = getattr(getattr(torch.ops, NAMESPACE), qual).default
    build.ops = tuple(name for name, *_ in steps)


def _fake(build: Build, step: str, args: tuple) -> Any:
    spec = build.spec_of()
    n = len(spec.inputs) + (len(spec.outputs) if step == "bwd" else 0)
    return torchops.fake_outputs(spec, step, args[:n], args[n:])


@functools.cache
def _wrap_triton_switch():
    """torch's module behind set_wrap_triton_enabled where it keeps the switch as a thread-local
    `wrap_triton_enabled` beside its default (torch 2.11 and 2.14 do), else None."""
    try:
        from torch._library import triton as switch
    except ImportError:
        return None
    return switch if hasattr(switch, "wrap_triton_enabled") and hasattr(switch, "wrap_triton_enabled_default") else None


@functools.cache
def _torch_state() -> types.SimpleNamespace:
    """torch's state the direct path reads, each callable bound once, not looked up on every call."""
    import torch

    return types.SimpleNamespace(
        dynamo_compiling=torch.compiler.is_dynamo_compiling, dispatch_modes=torch._C._len_torch_dispatch_stack,
        wrap_triton_switch=_wrap_triton_switch(),
        torch_function=torch.overrides.has_torch_function, functorch=torch._C._are_functorch_transforms_active,
        grad_enabled=torch.is_grad_enabled, Tensor=torch.Tensor,
        cuda_device=torch.accelerator.current_device_index)  # asked only with a CUDA tensor in hand
