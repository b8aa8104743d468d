"""bias_gelu: y = GELU_tanh(x + bias), bias broadcast over the last dimension."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .base import OpSpec


_K = math.sqrt(2.0 / math.pi)


def _gelu_tanh_f64(v: torch.Tensor) -> torch.Tensor:
    # GELU_tanh(v) = v * 0.5 * (1 + tanh(u)) = v * sigmoid(2u): the same function as
    # F.gelu(approximate="tanh") (tests hold them together), but without the cancellation in
    # 1 + tanh(u) that costs the tanh form most of its digits for negative v.
    u = _K * (v + 0.044715 * v.pow(3))
    return v * torch.sigmoid(2.0 * u)


def reference(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return _gelu_tanh_f64(x.detach().double() + bias.detach().double())


def reference_backward(grad_y: torch.Tensor, x: torch.Tensor, bias: torch.Tensor):
    """Gradients by float64 autograd through PyTorch ops: independent of the kernels' hand-derived
    derivative."""
    xd = x.detach().double().requires_grad_()
    bd = bias.detach().double().requires_grad_()
    dx, db = torch.autograd.grad(_gelu_tanh_f64(xd + bd), (xd, bd), grad_y.detach().double())
    return dx, db


def eager(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.gelu(x + bias, approximate="tanh")


def make_inputs(shape, dtype, device, generator: torch.Generator):
    cols = shape[-1] if len(shape) else 1
    # Spread x over the region where GELU bends (and beyond), never constant or zero.
    x = torch.randn(shape, generator=generator, device=device, dtype=torch.float32).mul_(2.0).to(dtype)
    bias = torch.randn((cols,), generator=generator, device=device, dtype=torch.float32).mul_(0.5).to(dtype)
    return x, bias


def bytes_moved(shape, dtype, direction: str) -> int:
    numel = 1
    for s in shape:
        numel *= s
    cols = shape[-1]
    size = torch.empty((), dtype=dtype).element_size()
    fwd = (2 * numel + cols) * size            # read x (and bias), write y
    bwd = (3 * numel + 2 * cols) * size        # read dy and x, write dx (bias in, dbias out)
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[direction]


def flops(shape, direction: str) -> int:
    numel = 1
    for s in shape:
        numel *= s
    return {"fwd": 12, "bwd": 22, "fwd+bwd": 34}[direction] * numel


def _gelu_tanh_derivatives(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GELU_tanh'(v) and GELU_tanh''(v) with torch ops (so they are differentiable in turn).
    With s = sigmoid(2u), u = k (v + c v^3):  gelu = v s,  s' = 2 s (1 - s) u',
    gelu' = s + v s',  gelu'' = 2 s' + v s'',  s'' = 2 (s' (1 - 2 s) u' + s (1 - s) u'')."""
    c = 0.044715
    s = torch.sigmoid(2.0 * _K * (v + c * v.pow(3)))
    du = _K * (1.0 + 3.0 * c * v * v)
    d2u = 6.0 * _K * c * v
    t = s * (1.0 - s)
    ds = 2.0 * t * du
    d2s = 2.0 * (ds * (1.0 - 2.0 * s) * du + t * d2u)
    return s + v * ds, 2.0 * ds + v * d2s


def _check_fake_args(x, bias):
    if x.device != bias.device:
        raise RuntimeError(f"workbench::bias_gelu: bias must be on the same device as x ({x.device}); "
                           f"got bias on {bias.device}")
    if x.dim() < 1:
        raise ValueError("workbench::bias_gelu: x must have at least 1 dimension; got a 0-dim tensor")
    if bias.dim() != 1 or bias.shape[0] != x.shape[-1]:
        raise ValueError(f"workbench::bias_gelu: bias must be 1-D with x.size(-1) = {x.shape[-1]} elements; "
                         f"got shape {list(bias.shape)}")


def register_python() -> None:
    @torch.library.register_fake("workbench::bias_gelu")
    def _fake_forward(x, bias, variant):
        _check_fake_args(x, bias)
        return x.new_empty(x.shape)

    @torch.library.register_fake("workbench::bias_gelu_backward")
    def _fake_backward(grad_y, x, bias, variant):
        _check_fake_args(x, bias)
        return x.new_empty(x.shape), bias.new_empty(bias.shape)

    def setup_context(ctx, inputs, output):
        x, bias, variant = inputs
        ctx.save_for_backward(x, bias)
        ctx.variant = variant

    def backward(ctx, grad_y):
        x, bias = ctx.saved_tensors
        dx, dbias = torch.ops.workbench.bias_gelu_backward(grad_y, x, bias, ctx.variant)
        return (dx if ctx.needs_input_grad[0] else None, dbias if ctx.needs_input_grad[1] else None, None)

    torch.library.register_autograd("workbench::bias_gelu", backward, setup_context=setup_context)

    # The backward op's own derivative, for create_graph=True (gradient penalties, double
    # backward). dx = dy * gelu'(v) and dbias = sum(dx), v = x + bias; given upstream grads
    # (gdx, gdbias), G = gdx + gdbias:  d/d dy = G gelu'(v),  d/dv = G dy gelu''(v).
    def setup_backward_context(ctx, inputs, output):
        grad_y, x, bias, variant = inputs
        ctx.save_for_backward(grad_y, x, bias)

    def backward_of_backward(ctx, g_dx, g_dbias):
        grad_y, x, bias = ctx.saved_tensors
        acc = torch.promote_types(x.dtype, torch.float32)
        upstream = torch.zeros_like(x, dtype=acc)
        if g_dx is not None:
            upstream = upstream + g_dx.to(acc)
        if g_dbias is not None:
            upstream = upstream + g_dbias.to(acc)
        d1, d2 = _gelu_tanh_derivatives(x.to(acc) + bias.to(acc))
        grad_v = upstream * grad_y.to(acc) * d2
        return ((upstream * d1).to(grad_y.dtype), grad_v.to(x.dtype),
                grad_v.reshape(-1, x.shape[-1]).sum(0).to(bias.dtype), None)

    torch.library.register_autograd("workbench::bias_gelu_backward", backward_of_backward,
                                    setup_context=setup_backward_context)


SPEC = OpSpec(
    name="bias_gelu",
    reference=reference,
    reference_backward=reference_backward,
    eager=eager,
    make_inputs=make_inputs,
    register_python=register_python,
    check_shapes=[(1, 1), (3, 5), (127, 129), (64, 1000), (33, 4099), (2, 3, 7), (257,), (4, 8), (0, 16), (6, 0)],
    input_names=("x", "bias"),
    grad_terms=lambda shape: (1, math.prod(shape[:-1])),  # dx element-wise; dbias sums every row
    bytes_moved=bytes_moved,
    flops=flops,
    bench_shapes={
        "cuda": [(512, 4096), (2048, 4096), (4096, 4096), (8192, 8192), (16384, 16384)],
        "cpu": [(64, 1024), (256, 4096), (1024, 4096)],
    },
    preferred={
        ("cuda", torch.float32): ["vec4", "scalar"],
        ("cuda", torch.float16): ["half", "scalar"],
        ("cuda", torch.bfloat16): ["half", "scalar"],
        ("cuda", torch.float64): ["scalar"],
        ("cpu", None): ["cpu"],
    },
)
