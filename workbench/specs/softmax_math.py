"""softmax's math (its declaration: softmax.py): softmax over the last dimension."""
import torch


def reference(x):
    return torch.softmax(x.double(), -1)


def eager(x):
    return torch.softmax(x, -1)  # float math inside for fp16/bf16, as the kernels: the baseline
