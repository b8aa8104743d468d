"""rmsnorm's math (its declaration: rmsnorm.py): y = x / sqrt(mean(x^2 over the last dim) + eps) * weight."""
import torch
import torch.nn.functional as F


def reference(x, weight, eps):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.double()


def eager(x, weight, eps):
    """The formula as models write it (Llama's RMSNorm): float math, rounded to x's dtype, then
    scaled by the weight. Also the `pytorch` variant (kernels/rmsnorm/pytorch.py)."""
    acc = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(acc)
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def f_rms_norm(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def layer_init(params) -> None:
    """wb.nn.RMSNorm's weight starts at ones, as torch.nn.RMSNorm's."""
    torch.nn.init.ones_(params["weight"])
