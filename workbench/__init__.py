"""Kernel Workbench: JIT-compiled CUDA kernel variants as differentiable PyTorch ops, checked
against a float64 reference and timed against eager PyTorch and torch.compile.

    import workbench as wb
    wb.ops(); wb.variants("bias_gelu")
    k = wb.load("bias_gelu", "scalar"); y = k(x, bias)
    wb.check("bias_gelu", "scalar"); wb.gradcheck("bias_gelu", "scalar")

In a notebook, `%load_ext workbench` adds the %%workbench cell magic (workbench.magic).
"""
from __future__ import annotations

__version__ = "0.1.0"

from .benchmark import bench
from .correctness import check, gradcheck
from .errors import BuildError, IsolatedRunError, LockTimeout, WorkbenchError
from .loader import Kernel, define_op, load, load_inline, load_source
from .opspec import Attr, ErrorCase, Layer, OpSpec, Output, Tensor
from .registry import ops, variants
from . import nn


def load_ipython_extension(ipython) -> None:
    """`%load_ext workbench`: register the %%workbench cell magic. IPython is imported only here,
    so `import workbench` never needs it."""
    from .magic import load_ipython_extension as load

    load(ipython)


__all__ = ["ops", "variants", "load", "load_inline", "load_source", "define_op", "check", "gradcheck", "bench",
           "Kernel", "OpSpec", "Tensor", "Attr", "Output", "Layer", "ErrorCase",
           "BuildError", "IsolatedRunError", "LockTimeout", "WorkbenchError", "nn", "__version__"]

