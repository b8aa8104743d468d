"""matmul's math (its declaration: matmul.py): y = a @ b, and the builders of its own bad-input cases."""
import torch


def reference(a, b):
    return a.double() @ b.double()


def eager(a, b):
    return torch.matmul(a, b)  # cuBLAS on CUDA (TF32 off by default: a true float32 GEMM)


def rank3_a(dev, gen):
    return [torch.randn(2, 5, 7, generator=gen, device=dev), torch.randn(7, 6, generator=gen, device=dev)], {}


def vector_b(dev, gen):
    return [torch.randn(5, 7, generator=gen, device=dev), torch.randn(7, generator=gen, device=dev)], {}
