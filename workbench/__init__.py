"""Kernel Workbench: JIT-compiled CUDA kernel variants as differentiable PyTorch ops, checked
against a float64 reference and timed against eager PyTorch and torch.compile.

    import workbench as wb
    wb.ops(); wb.variants("bias_gelu")
    k = wb.load("bias_gelu", "scalar"); y = k(x, bias)
    wb.check("bias_gelu", "scalar"); wb.gradcheck("bias_gelu", "scalar")
"""
from __future__ import annotations

__version__ = "0.1.0"

from .correctness import check, gradcheck
from .errors import BuildError, LockTimeout, WorkbenchError
from .loader import Kernel, load, load_inline
from .registry import ops, variants
from . import nn

__all__ = ["ops", "variants", "load", "load_inline", "check", "gradcheck", "bench", "Kernel",
           "BuildError", "LockTimeout", "WorkbenchError", "nn", "__version__"]


def __getattr__(name):
    # bench pulls in timing, results and plotting; load it on first use.
    if name == "bench":
        import importlib
        return importlib.import_module("workbench.bench").bench
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
