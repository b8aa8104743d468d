"""scale_bias_relu's math (its declaration: scale_bias_relu.py): y = relu(x * scale + bias)."""
import torch


def reference(x, bias, scale):
    return torch.relu(x.double() * scale + bias.double())


def eager(x, bias, scale):
    return torch.relu(x * scale + bias)
