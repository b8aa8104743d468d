"""What a brought implementation (byo.py) is held to before anything trusts it: every call's outputs
against the op's declaration (check_outputs: count, shape, dtype, device, named in the error), and
the probe of the devices and dtypes it runs on, on tiny inputs, with what raised where."""
from __future__ import annotations

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
        raise WorkbenchError(f"{who} returned {len(got)} value{'s' if len(got) != 1 else ''} from its "
                             f"{'forward' if step == 'fwd' else 'backward'}; expected {len(want)}: {what}")
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
                if device == "cuda":
                    torch.cuda.synchronize()
                ok.append(dname)
            except Exception as e:  # noqa: BLE001 - what raised is what the probe reports
                if device == "cuda" and isinstance(e, getattr(torch, "AcceleratorError", ())):
                    raise
                bad.append((dname, first_line(e)[:300]))
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
