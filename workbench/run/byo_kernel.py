"""The handle a brought implementation (byo.py) becomes, a CallableKernel, and what it is held to:
every call's outputs against the op's declaration (check_outputs), the probe of the devices and
dtypes it runs on, its signature against the op's call (out_argument_hint, out_positions), and why
an extension's library does not load (load_failure)."""
from __future__ import annotations

import ctypes
import inspect
import os
import pathlib
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable

from ..build import toolchain
from ..errors import WorkbenchError
from ..model import registry
from ..model.opspec import as_tuple, input_grads, one_or_tuple
from . import loader

PROBE_SIZE_MAX = 64                             # the probe's inputs: the op's smallest non-empty check size


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
        self._function = None
        if self.backward_fn is not None and self.spec.differentiable:
            # Autograd through kernel(...) uses the implementation's own backward, as k.backward does.
            from .torchops import autograd_function

            self._function = autograd_function(f"byo_{self.op}_{re.sub(r'[^A-Za-z0-9_]', '_', self.name)}",
                                               lambda: self.spec, self.call_fn, self._backward_of_function)

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
        spec = self.spec
        if not spec.differentiable:
            raise WorkbenchError(f"{self.op} has no differentiable inputs, so no backward")
        tensors, values = spec.call_args(args, attrs, grads=len(spec.outputs))
        grads, inputs = tensors[:len(spec.outputs)], tensors[len(spec.outputs):]
        if self.backward_fn is not None:
            got = self.backward_fn(*grads, *inputs, *values)
        elif self.autograd:
            got = input_grads(spec, lambda *leaves: self._checked(self.call_fn(leaves, values), "fwd", leaves, values),
                              inputs, grads)
        else:
            raise WorkbenchError(f"{self.op}/{self.name} has no backward: none was given, and autograd cannot "
                                 f"see through it (its output does not require grad)")
        return one_or_tuple(self._checked(got, "bwd", tensors, values))

    def _checked(self, out, step: str, tensors, values) -> tuple:
        return check_outputs(self.spec, f"{self.op}/{self.name}", step, out, tensors, values)

    def _backward_of_function(self, grads, saved, attrs) -> tuple:
        import torch

        grads = [g if g is not None else torch.zeros_like(x) for g, x in zip(grads, saved)]
        return self._checked(listed(self.backward_fn(*grads, *saved, *attrs)), "bwd", (*grads, *saved), attrs)

    def __repr__(self) -> str:
        steps = "" if "backward" in self.steps else ", forward only"
        how = {"callable": "callable", "extension": "torch extension"}.get(self.kind, self.kind)
        return f"<{how} {self.op}/{self.name} on {self.device} [{', '.join(self.dtypes) or 'no dtypes'}]{steps}>"


def check_outputs(spec, who: str, step: str, out, tensors, values) -> tuple:
    """`out` as a tuple, checked against what the op declares for `step` (outputs, or the gradients
    of the differentiable inputs); WorkbenchError naming the output and what was expected."""
    import torch

    got = tuple(out) if isinstance(out, (list, tuple)) else (out,)
    inputs = tensors[len(tensors) - len(spec.inputs):]
    if step == "fwd":
        names = [o.name for o in spec.outputs]
        binder = spec.check_call("fwd", inputs, values)
        want = [(tuple(binder.shape_of(o.pattern)), inputs[0].dtype, inputs[0].device, f"the shape {o.pattern.display()} "
                 f"of its inputs and {spec.inputs[0].name}'s dtype") for o in spec.outputs]
        what = f"{spec.name}'s forward returns {len(names)} tensor{'s' if len(names) != 1 else ''} ({', '.join(names)})"
    else:
        diff = [(s, t) for s, t in zip(spec.inputs, inputs) if s.differentiable]
        names = [f"d{s.name}" for s, _ in diff]
        want = [(tuple(t.shape), t.dtype, t.device, f"{s.name}'s shape and dtype") for s, t in diff]
        what = f"{spec.name}'s backward returns the gradients of {', '.join(s.name for s, _ in diff)}"
    if len(got) != len(want):
        short = step == "bwd" and len(got) < len(want)
        raise WorkbenchError(f"{who} returned {len(got)} value{'s' if len(got) != 1 else ''} from its "
                             f"{'forward' if step == 'fwd' else 'backward'}; expected {len(want)}: {what}"
                             + (" (one for each, in order; a backward that leaves a gradient to Python code around "
                                "it, as an autograd.Function summing the bias's, is checked through that Function: "
                                "pass Function.apply instead, or load this with backward=None)" if short else ""))
    for name, g, (shape, dtype, device, why) in zip(names, got, want):
        if not isinstance(g, torch.Tensor):
            raise WorkbenchError(f"{who} returned {name} as {type(g).__name__}; expected a tensor of shape "
                                 f"{shape} and dtype {str(dtype).replace('torch.', '')}")
        problems = []
        if tuple(g.shape) != shape:
            problems.append(f"shape {tuple(g.shape)}")
        if g.dtype != dtype:
            problems.append(f"dtype {str(g.dtype).replace('torch.', '')}")
        if g.device != device:
            problems.append(f"device {g.device}")
        if problems:
            raise WorkbenchError(f"{who} returned {name} of {', '.join(problems)}; expected shape {shape}, dtype "
                                 f"{str(dtype).replace('torch.', '')} on {device} ({why})")
    return got


def listed(out):
    return tuple(out) if isinstance(out, list) else out


def probe_size(spec) -> tuple:
    import math

    sizes = [tuple(s) for s in spec.check_sizes if 0 not in s]
    small = [s for s in sizes if math.prod(s) <= PROBE_SIZE_MAX * PROBE_SIZE_MAX] or sizes or [spec.sample_size()]
    return max(small, key=lambda s: (len(s), math.prod(s)))  # a few dims and rows: (3, 5), not (1, 1)


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def probe(kernel, devices, dtypes) -> tuple[str | None, tuple, list[str], bool | None]:
    """(device, dtypes that ran and returned what the op declares, what happened per device/dtype,
    whether autograd flows through it: None where not asked)."""
    import torch

    from .cuda_errors import context_state, error_name, explained

    spec = kernel.spec
    size = probe_size(spec)
    attrs = spec.sample_attrs()[0]
    lines, found = [], {}
    for device in devices:
        ok, bad = [], []
        for dname in dtypes:
            gen = torch.Generator(device=device).manual_seed(0)
            try:
                inputs = spec.new_inputs(size, dname, torch.device(device), gen)
                _, values = spec.call_args(inputs, attrs)
                check_outputs(spec, f"{kernel.op}/{kernel.name}", "fwd", kernel.call_fn(inputs, values), inputs, values)
                ok.append(dname)
            except Exception as e:  # noqa: BLE001 - what raised is what the probe reports
                bad.append((dname, f"{error_name(e)}: {explained(e)}"[:300]))
            if device == "cuda":  # an error its launch left pending is its failure, not the next dtype's
                state, err = context_state(torch.device("cuda"))
                if state != "ok" and dname in ok:
                    ok.remove(dname)
                    bad.append((dname, f"left a CUDA error pending: {explained(err)}"[:300]))
                if state == "lost":
                    raise WorkbenchError(f"{kernel.op}/{kernel.name}: probing it on tiny {dname} inputs lost this "
                                         f"process's CUDA context ({explained(err)}): every later CUDA call here fails; "
                                         f"restart the process")
        found[device] = tuple(ok)
        said: dict[str, list[str]] = {}  # one message, the dtypes that got it
        for dname, msg in bad:
            said.setdefault(msg, []).append(dname)
        lines.append(f"{device}: " + (f"ran {', '.join(ok)}" if ok else "ran nothing")
                     + "".join(f"; {', '.join(ds)}: {msg}" for msg, ds in said.items()))
    device = next((d for d in devices if found.get(d)), None)
    flows = None
    if device is not None and spec.differentiable and kernel.backward_fn is None:
        try:
            gen = torch.Generator(device=device).manual_seed(0)
            inputs = [t.requires_grad_(s.differentiable) for s, t in
                      zip(spec.inputs, spec.new_inputs(size, found[device][0], torch.device(device), gen))]
            _, values = spec.call_args(inputs, attrs)
            with torch.enable_grad():
                flows = all(isinstance(o, torch.Tensor) and o.requires_grad
                            for o in as_tuple(kernel.call_fn(inputs, values)))
        except Exception as e:  # noqa: BLE001
            flows = False
            lines.append(f"autograd: calling it with inputs that require grad raised {first_line(e)[:160]}")
    return device, found.get(device, ()), lines, flows


def probed(kernel, device: str | None, wanted, declared: bool, writes_out) -> None:
    """Probe `kernel` (on `device`, else every device here) with the `wanted` dtypes; set its device,
    its dtypes (`wanted` where they were declared), whether autograd flows through it, and its note."""
    spec, who = kernel.spec, f"{kernel.op}/{kernel.name}"
    devices = [device] if device else (["cuda", "cpu"] if toolchain.gpu_available() else ["cpu"])
    found_device, found, lines, flows = probe(kernel, devices, wanted)
    if device is None and found_device is None:
        raise WorkbenchError(f"variant: {who} ran on no device and dtype here; the probe found:\n  "
                             + "\n  ".join(lines) + f"\n{writes_out or 'call it as ' + call_text(spec)}")
    kernel.device = device or found_device
    kernel.dtypes = tuple(wanted) if declared else found
    notes = [f"probed {who} on tiny inputs {spec.label(probe_size(spec))}: " + "; ".join(lines)]
    if declared:
        notes.append(f"declared dtypes {', '.join(wanted)} (taken as declared)")
    if spec.differentiable and kernel.backward_fn is None:
        kernel.autograd = bool(flows)
        notes.append("no backward given: gradients flow through it by autograd (its output requires grad)" if flows
                     else "no backward given, and autograd cannot see through it (its output does not require "
                     "grad): the backward checks are skipped")
    if not found and writes_out:
        notes.append(str(writes_out))
    kernel.probe = "; ".join(notes)


def call_text(spec) -> str:
    """How the op is called: `bias_gelu(x, bias) -> y`."""
    return (f"{spec.name}({', '.join([t.name for t in spec.inputs] + [f'{a.name}=...' for a in spec.attrs])}) -> "
            f"{', '.join(o.name for o in spec.outputs)}")


def signature(fn) -> tuple[list[str], str] | None:
    """(positional parameter names, what its annotation says it returns: "None", a type, or "" where
    unsaid) of a Python function, or of a pybind11 function as its docstring's first line gives
    them (`elementwise_mult(arg0: torch.Tensor, ...) -> None`); None where neither says."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        m = re.match(r"\s*[\w.]+\((.*?)\)\s*->\s*([^\n]+)", getattr(fn, "__doc__", None) or "")
        if not m:
            return None
        return [p.split(":")[0].strip() for p in m.group(1).split(",") if p.strip()], m.group(2).strip()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ret = sig.return_annotation
    return ([p.name for p in sig.parameters.values() if p.kind in kinds],
            "" if ret is inspect.Signature.empty else "None" if ret in (None, "None") else str(ret))


class OutHint(str):
    """Why a callable cannot be called as its op (it takes the op's outputs as arguments) and how to
    adapt it; returns_none: its signature says it returns nothing (certain, not a guess)."""
    returns_none = False


def out_argument_hint(spec, who: str, fn) -> OutHint | str:
    """An OutHint where fn's signature takes one argument per input, output and attribute of the op
    and returns nothing or does not say (a function that writes its result into a tensor it is
    given), else ""."""
    sig = signature(fn)
    n_out, n_in = len(spec.outputs), len(spec.inputs)
    if sig is None or sig[1] not in ("None", "") or len(sig[0]) != n_in + n_out + len(spec.attrs):
        return ""
    params, ret = sig
    outs = params[n_in:n_in + n_out]
    hint = OutHint(
        f"{who} cannot be called as the op, {call_text(spec)}: it takes {len(params)} arguments ({', '.join(params)}) "
        f"and returns {ret or 'what its signature does not say'}, so it likely writes its result into "
        f"{'arguments' if n_out > 1 else 'an argument'} it is given. Say which, and the workbench allocates "
        f"{', '.join(o.name for o in spec.outputs)} of the declared shape and passes it there: "
        f"out={outs if n_out > 1 else outs[0]!r} (or by position, out={list(range(n_in, n_in + n_out)) if n_out > 1 else n_in}) "
        f"in wb.load_source(..., style='extension') or wb.variant(fn, op={spec.name!r}, out=...)")
    hint.returns_none = ret == "None"
    return hint


def out_positions(spec, who: str, fn, out) -> tuple[int, ...]:
    """variant(out=...) as positions in fn's positional arguments, one per output of the op: names
    are looked up in its signature. ValueError naming what does not fit."""
    if out is None:
        return ()
    items = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(items) != len(spec.outputs):
        raise ValueError(f"out: {spec.name} has {len(spec.outputs)} output(s) ({', '.join(o.name for o in spec.outputs)}); "
                         f"give one parameter name or position for each; got {out!r}")
    params = (signature(fn) or ([], ""))[0]
    n_args = len(spec.inputs) + len(items)
    positions = []
    for item in items:
        if isinstance(item, str):
            if item not in params:
                raise ValueError(f"out={item!r} names no parameter of {who}" + (
                    f" (its parameters: {', '.join(params)}); give one of those or a position" if params else
                    ": its signature is not known here; give the parameter's position (0 is the first)"))
            item = params.index(item)
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < n_args:
            raise ValueError(f"out: a parameter name or a position from 0 to {n_args - 1} (its tensor arguments: "
                             f"{len(spec.inputs)} inputs and {len(items)} output(s)); got {item!r}")
        positions.append(item)
    if len(set(positions)) != len(positions):
        raise ValueError(f"out: each output needs a position of its own; got {out!r}")
    return tuple(positions)


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
                f"library defines {', '.join(exported_inits(lib)) or 'no PyInit_ function'}: its PYBIND11_MODULE "
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


def exported_inits(lib: pathlib.Path) -> list[str]:
    try:
        out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return re.findall(r"\b(PyInit_\w+)", out)
