"""What a brought implementation (byo.py) is held to before anything trusts it: every call's outputs
against the op's declaration (check_outputs: count, shape, dtype, device, named in the error), the
probe of the devices and dtypes it runs on, on tiny inputs, with what raised where, and its
signature against the op's call (a function that writes its result into an argument it is given:
out_argument_hint, out_positions)."""
from __future__ import annotations

import inspect
import re

from ..build import toolchain
from ..errors import WorkbenchError
from ..model.opspec import as_tuple

PROBE_SIZE_MAX = 64                             # the probe's inputs: the op's smallest non-empty check size


def one_or_tuple(out: tuple):
    return out[0] if len(out) == 1 else tuple(out)


def check_outputs(spec, who: str, step: str, out, tensors, values) -> tuple:
    """`out` as a tuple, checked against what the op declares for `step` ("fwd": its outputs, of
    the shapes its patterns give and the first input's dtype and device; "bwd": the gradients of its
    differentiable inputs, each of its input's shape and dtype). Raises WorkbenchError naming the
    output and what was expected."""
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


def devices_here() -> list[str]:
    return (["cuda"] if toolchain.gpu_available() else []) + ["cpu"]


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
