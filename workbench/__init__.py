"""Kernel Workbench: JIT-compiled CUDA kernel variants as differentiable PyTorch ops, checked
against a float64 reference and timed against eager PyTorch and torch.compile.

    import workbench as wb
    wb.ops(); wb.variants("bias_gelu")
    k = wb.load("bias_gelu", "scalar"); y = k(x, bias)
    wb.check("bias_gelu", "scalar"); wb.gradcheck("bias_gelu", "scalar")
    wb.profile("bias_gelu", ["scalar", "vec4"], shape=(8192, 8192))   # why: Nsight Compute's counters

In a notebook, `%load_ext workbench` adds the %%workbench cell magic (workbench.magic).
"""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import BuildError, IsolatedRunError, LockTimeout, WorkbenchError
from .loader import Kernel, define_op, load, load_inline, load_source
from .opspec import Attr, ErrorCase, Layer, OpSpec, Output, Tensor
from .registry import ops, variants

# Imported on first use, so that `import workbench` (and `python -m workbench`) does not import
# torch before it has to: the exercise checker starts its GPU child first.
_LAZY = {"bench": ("benchmark", "bench"), "check": ("correctness", "check"),
         "variant": ("byo", "variant"),  # bring your own: a callable as a variant of an op (byo.py)
         "gradcheck": ("correctness", "gradcheck"), "nn": ("nn", None), "correctness": ("correctness", None),
         "benchmark": ("benchmark", None),
         "profile": ("profile", None),  # a callable module: wb.profile(...), wb.profile.roofline(...)
         "export": ("export", None),  # a callable module: wb.export(op, variants, out)
         "ndarray": ("ndarray", None)}  # the NumPy front end (no torch): wb.ndarray.load(op, variant)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    value = importlib.import_module(f"workbench.{module}")
    return getattr(value, attr) if attr else value


def load_ipython_extension(ipython) -> None:
    """`%load_ext workbench`: register the %%workbench cell magic. IPython is imported only here,
    so `import workbench` never needs it."""
    from .magic import load_ipython_extension as load

    load(ipython)


__all__ = ["ops", "variants", "variant", "load", "load_inline", "load_source", "define_op", "check", "gradcheck", "bench",
           "profile", "Kernel", "OpSpec", "Tensor", "Attr", "Output", "Layer", "ErrorCase",
           "BuildError", "IsolatedRunError", "LockTimeout", "WorkbenchError", "nn", "__version__"]

