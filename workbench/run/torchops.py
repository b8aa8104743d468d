"""torch.ops.workbench.<op>: the fake implementations and the backward's derivative, from the spec.

The C++ harness defines the schemas, serves real calls and records autograd (op_autograd.cpp, no
Python per call); this module registers, once per op and process, a fake that checks a call as the
harness would and returns outputs of the declared shapes (torch.compile, opcheck), and
<op>_backward_backward for create_graph=True (the spec's double_backward, else autograd through
the eager math). Both read the spec at call time, so an edited spec (same schema) takes effect
without a restart. A Triton variant's own ops (pyvariant.py) share fake_outputs and register_autograd.
"""
from __future__ import annotations

from ..model import registry
from ..model.opspec import OpSpec, as_tuple, one_or_tuple

_registered: set[str] = set()  # ops whose fake and double backward are registered in this process
_library = None                # the torch.library fragment holding the <op>_backward_backward kernels


def current_spec(op: str) -> OpSpec | None:
    """The op's spec in this process's registry, if its Python parts are registered here (None: not)."""
    return registry.spec(op) if op in _registered else None


def eager_double_backward(spec: OpSpec, upstream, grads, inputs, attrs: dict) -> tuple:
    """The backward's own derivative where the spec gives none: autograd twice through the eager
    math. Returns gradients for (grads of outputs..., inputs...)."""
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
    """(tensors, attributes, what follows: the harness's variant name, or nothing)."""
    k = n_tensors + len(spec.attrs)
    return args[:n_tensors], args[n_tensors:k], args[k:]


def fake_outputs(spec: OpSpec, step: str, tensors, attrs):
    """The fake of every workbench op: a step's outputs as empty tensors of the declared shapes,
    after the harness's checks."""
    binder = spec.check_call(step, tensors, attrs)
    inputs = tensors[len(tensors) - len(spec.inputs):]
    if step == "fwd":
        outs = [inputs[0].new_empty(binder.shape_of(o.pattern)) for o in spec.outputs]
    else:
        outs = [t.new_empty(t.shape) for s, t in zip(spec.inputs, inputs) if s.differentiable]
    return one_or_tuple(outs)


def _fake(op: str, step: str, *args):
    spec = registry.spec(op)
    n = len(spec.inputs) + (len(spec.outputs) if step == "bwd" else 0)
    tensors, attrs, _ = _split(spec, args, n)
    return fake_outputs(spec, step, tensors, attrs)


def register(spec: OpSpec) -> None:
    """Register the op's fakes and double backward, once per process."""
    import torch

    if spec.name in _registered:
        return
    _registered.add(spec.name)
    op = spec.name
    torch.library.register_fake(f"workbench::{op}")(lambda *a: _fake(op, "fwd", *a))
    if not spec.differentiable:
        return
    torch.library.register_fake(f"workbench::{op}_backward")(lambda *a: _fake(op, "bwd", *a))
    global _library
    if _library is None:
        _library = torch.library.Library("workbench", "FRAGMENT")
    # CompositeImplicitAutograd: its tensor ops are recorded in turn (a third derivative).
    _library.impl(f"{op}_backward_backward", lambda upstream, saved, *rest: _double_backward(op, upstream, saved, *rest),
                  "CompositeImplicitAutograd")


def backward_derivative(spec: OpSpec, upstream, grads, inputs, attrs: dict) -> tuple:
    """Gradients for (grads of outputs..., inputs...) of <op>_backward given `upstream`."""
    if spec.double_backward:
        return spec.double_backward(upstream, grads, inputs, attrs)
    return eager_double_backward(spec, upstream, grads, inputs, attrs)


def _double_backward(op: str, upstream, saved, *attr_values) -> list:
    """<op>_backward_backward(upstream, saved = grads + inputs, attrs..., variant): a list (Tensor[])."""
    import torch

    s = registry.spec(op)
    grads, inputs = tuple(saved[:len(s.outputs)]), tuple(saved[len(s.outputs):])
    got = backward_derivative(s, tuple(upstream), grads, inputs, s.attr_dict(attr_values[:len(s.attrs)]))
    return [torch.zeros_like(t) if g is None else g for g, t in zip(got, saved)]


def autograd_function(name: str, spec_of, forward, backward):
    """An autograd.Function of the op's tensors and attributes: forward(tensors, attrs) -> outputs,
    backward(grads, tensors, attrs) -> the differentiable inputs' gradients, in order."""
    import torch

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            n = len(spec_of().inputs)
            ctx.save_for_backward(*args[:n])
            ctx.attrs = args[n:]
            return forward(args[:n], args[n:])

        @staticmethod
        def backward(ctx, *grads):
            got = iter(backward(grads, ctx.saved_tensors, ctx.attrs))
            return (*[next(got) if t.differentiable else None for t in spec_of().inputs], *[None] * len(ctx.attrs))

    Function.__name__ = Function.__qualname__ = name
    return Function


def register_autograd(name: str, spec_of, namespace: str = "workbench_py") -> None:
    """Autograd in Python for a Triton variant's own op <namespace>::<name> (the harness's are in
    C++): its backward calls <name>_backward, itself differentiable through backward_derivative."""
    import torch

    backward_op = getattr(getattr(torch.ops, namespace), f"{name}_backward").default

    def setup_context(ctx, inputs, output):
        s = spec_of()
        tensors, attrs, rest = _split(s, inputs, len(s.inputs))
        ctx.save_for_backward(*tensors)
        ctx.attrs, ctx.rest = attrs, rest

    def backward(ctx, *grads):
        s = spec_of()
        tensors = ctx.saved_tensors
        if any(g is None for g in grads):  # an output nobody used: its gradient is zero
            binder = s.check_call("fwd", tensors, ctx.attrs)
            grads = tuple(torch.zeros(binder.shape_of(o.pattern), dtype=tensors[0].dtype, device=tensors[0].device)
                          if g is None else g for o, g in zip(s.outputs, grads))
        got = as_tuple(backward_op(*grads, *tensors, *ctx.attrs, *ctx.rest))
        out, k = [], 0
        for i, t in enumerate(s.inputs):
            if t.differentiable:
                out.append(got[k] if ctx.needs_input_grad[i] else None)
                k += 1
            else:
                out.append(None)
        return (*out, *([None] * (len(s.attrs) + len(ctx.rest))))

    torch.library.register_autograd(f"{namespace}::{name}", backward, setup_context=setup_context)

    def setup_backward_context(ctx, inputs, output):
        s = spec_of()
        tensors, attrs, rest = _split(s, inputs, len(s.outputs) + len(s.inputs))
        ctx.save_for_backward(*tensors)
        ctx.attrs, ctx.n_rest = attrs, len(rest)

    def backward_of_backward(ctx, *upstream):
        s = spec_of()
        saved = ctx.saved_tensors
        grads, inputs = saved[:len(s.outputs)], saved[len(s.outputs):]
        attrs = s.attr_dict(ctx.attrs)
        got = backward_derivative(s, upstream, grads, inputs, attrs)
        return (*got, *([None] * (len(s.attrs) + ctx.n_rest)))

    torch.library.register_autograd(f"{namespace}::{name}_backward", backward_of_backward,
                                    setup_context=setup_backward_context)
