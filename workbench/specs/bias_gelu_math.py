"""bias_gelu's math (its declaration: bias_gelu.py): y = GELU_tanh(x + bias)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

_K = math.sqrt(2.0 / math.pi)


def _gelu_tanh(v: torch.Tensor) -> torch.Tensor:
    # GELU_tanh(v) = v * 0.5 * (1 + tanh(u)) = v * sigmoid(2u): the same function as
    # F.gelu(approximate="tanh") (a test holds them together), without the cancellation in
    # 1 + tanh(u) that costs the tanh form most of its digits for negative v.
    u = _K * (v + 0.044715 * v.pow(3))
    return v * torch.sigmoid(2.0 * u)


def reference(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return _gelu_tanh(x.double() + bias.double())


def eager(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.gelu(x + bias, approximate="tanh")


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


def double_backward(upstream, grads, inputs, attrs):
    """The backward's own derivative, for create_graph=True (gradient penalties). dx = dy gelu'(v),
    dbias = sum(dx), v = x + bias; with upstream (gdx, gdbias) and G = gdx + gdbias:
    d/d dy = G gelu'(v), d/dv = G dy gelu''(v)."""
    (g_dx, g_dbias), (grad_y,), (x, bias) = upstream, grads, inputs
    acc = torch.promote_types(x.dtype, torch.float32)
    total = torch.zeros_like(x, dtype=acc)
    if g_dx is not None:
        total = total + g_dx.to(acc)
    if g_dbias is not None:
        total = total + g_dbias.to(acc)
    d1, d2 = _gelu_tanh_derivatives(x.to(acc) + bias.to(acc))
    grad_v = total * grad_y.to(acc) * d2
    return ((total * d1).to(grad_y.dtype), grad_v.to(x.dtype), grad_v.reshape(-1, x.shape[-1]).sum(0).to(bias.dtype))


def layer_init(params) -> None:
    """wb.nn.BiasGELU's bias: small random values rather than zeros, so that a fresh layer already
    exercises the bias path."""
    torch.nn.init.uniform_(params["bias"], -0.1, 0.1)
