"""torch.ops.workbench.<op>: the fake implementations and autograd formulas, derived from the spec.

The C++ harness defines the schemas and serves real calls; this module registers, once per op and
process, what PyTorch needs besides: a fake (meta) implementation that checks a call as the
harness would and returns outputs of the declared shapes (torch.compile, opcheck), and the autograd
formula, which calls <op>_backward with the same variant. Both look the spec up at call time, so
declaring an op again with an edited spec (same schema) takes effect without a restart.
"""
from __future__ import annotations

from .opspec import OpSpec, as_tuple

_specs: dict[str, OpSpec] = {}  # the current spec of each op registered in this process


def current_spec(op: str) -> OpSpec | None:
    """The spec op `op` was last registered with in this process (None: not registered)."""
    return _specs.get(op)


def eager_double_backward(spec: OpSpec, upstream, grads, inputs, attrs: dict) -> tuple:
    """The backward's own derivative for an op whose spec gives none: autograd twice through the
    op's eager PyTorch math (so create_graph=True works for every op, at the eager math's
    precision). Returns gradients for (grads of outputs..., inputs...)."""
    import torch

    with torch.enable_grad():
        ins = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]
        gs = [g.detach().requires_grad_() for g in grads]
        outs = as_tuple(spec.eager(*ins, **attrs))
        wanted = [x for s, x in zip(spec.inputs, ins) if s.differentiable]
        first = torch.autograd.grad(outs, wanted, gs, create_graph=True, allow_unused=True)
        pairs = [(f, u) for f, u in zip(first, upstream) if f is not None and u is not None and f.requires_grad]
        if not pairs:
            return tuple(torch.zeros_like(t) for t in (*gs, *ins))
        second = torch.autograd.grad([f for f, _ in pairs], [*gs, *ins], [u for _, u in pairs], allow_unused=True)
    return tuple(torch.zeros_like(t) if g is None else g for g, t in zip(second, (*gs, *ins)))


def _split(spec: OpSpec, args: tuple, n_tensors: int):
    return args[:n_tensors], args[n_tensors:n_tensors + len(spec.attrs)], args[-1]


def _fake(op: str, step: str, *args):
    spec = _specs[op]
    n = len(spec.inputs) + (len(spec.outputs) if step == "bwd" else 0)
    tensors, attrs, _ = _split(spec, args, n)
    binder = spec.check_call(step, tensors, attrs)
    ref = tensors[n - len(spec.inputs)]
    if step == "fwd":
        outs = [ref.new_empty(binder.shape_of(o.pattern)) for o in spec.outputs]
    else:
        inputs = tensors[n - len(spec.inputs):]
        outs = [t.new_empty(t.shape) for s, t in zip(spec.inputs, inputs) if s.differentiable]
    return outs[0] if len(outs) == 1 else tuple(outs)


def register(spec: OpSpec) -> None:
    """Register (or, for a spec edited in this process, re-point) op `spec.name`'s Python parts."""
    import torch

    first_time = spec.name not in _specs
    _specs[spec.name] = spec
    if not first_time:
        return
    op = spec.name
    torch.library.register_fake(f"workbench::{op}")(lambda *a: _fake(op, "fwd", *a))
    if not spec.differentiable:
        return
    # The backward op is differentiable too (create_graph=True): by the spec's double_backward, or
    # else by autograd through the eager math.
    torch.library.register_fake(f"workbench::{op}_backward")(lambda *a: _fake(op, "bwd", *a))
    backward_op = getattr(torch.ops.workbench, f"{op}_backward").default

    def setup_context(ctx, inputs, output):
        s = _specs[op]
        tensors, attrs, variant = _split(s, inputs, len(s.inputs))
        ctx.save_for_backward(*tensors)
        ctx.attrs, ctx.variant = attrs, variant

    def backward(ctx, *grads):
        s = _specs[op]
        tensors = ctx.saved_tensors
        if any(g is None for g in grads):  # an output nobody used: its gradient is zero
            binder = s.check_call("fwd", tensors, ctx.attrs)
            grads = tuple(torch.zeros(binder.shape_of(o.pattern), dtype=tensors[0].dtype, device=tensors[0].device)
                          if g is None else g for o, g in zip(s.outputs, grads))
        got = as_tuple(backward_op(*grads, *tensors, *ctx.attrs, ctx.variant))
        out, k = [], 0
        for i, t in enumerate(s.inputs):
            if t.differentiable:
                out.append(got[k] if ctx.needs_input_grad[i] else None)
                k += 1
            else:
                out.append(None)
        return (*out, *([None] * len(s.attrs)), None)

    torch.library.register_autograd(f"workbench::{op}", backward, setup_context=setup_context)

    def setup_backward_context(ctx, inputs, output):
        s = _specs[op]
        n = len(s.outputs) + len(s.inputs)
        tensors, attrs, _ = _split(s, inputs, n)
        ctx.save_for_backward(*tensors)
        ctx.attrs = attrs

    def backward_of_backward(ctx, *upstream):
        s = _specs[op]
        saved = ctx.saved_tensors
        grads, inputs = saved[:len(s.outputs)], saved[len(s.outputs):]
        attrs = s.attr_dict(ctx.attrs)
        got = s.double_backward(upstream, grads, inputs, attrs) if s.double_backward else \
            eager_double_backward(s, upstream, grads, inputs, attrs)
        return (*got, *([None] * len(s.attrs)), None)

    torch.library.register_autograd(f"workbench::{op}_backward", backward_of_backward,
                                    setup_context=setup_backward_context)
