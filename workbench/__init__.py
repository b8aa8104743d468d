"""Kernel Workbench: JIT-compiled CUDA kernel variants as differentiable PyTorch ops, checked
against a float64 reference and timed against eager PyTorch and torch.compile.

    import workbench as wb
    wb.ops(); wb.variants("bias_gelu")
    k = wb.load("bias_gelu", "scalar"); y = k(x, bias)
    wb.check("bias_gelu", "scalar"); wb.gradcheck("bias_gelu", "scalar")
    wb.profile("bias_gelu", ["scalar", "vec4"], shape=(8192, 8192))   # why: Nsight Compute's counters

In a notebook, `%load_ext workbench` adds the %%workbench cell magic (workbench.run.magic).
"""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import BuildError, IsolatedRunError, LockTimeout, WorkbenchError
from .run import loader as _loader
from .run.loader import Kernel, define_op, load
from .model.opspec import Attr, ErrorCase, Layer, OpSpec, Output, Tensor
from .model.registry import ops
from .run.process_state import variants

# Imported on first use, so that `import workbench` (and `python -m workbench`) does not import
# torch before it has to: the exercise checker starts its GPU child first.
_LAZY = {"bench": ("measure.benchmark", "bench"), "check": ("measure.correctness", "check"),
         "variant": ("run.byo", "variant"),  # bring your own: a callable as a variant of an op (run/byo.py)
         "gradcheck": ("measure.gradients", "gradcheck"), "nn": ("run.nn", None), "correctness": ("measure.correctness", None),
         "benchmark": ("measure.benchmark", None),
         "registry": ("model.registry", None),
         "profile": ("explain.profiling", "profile"),  # wb.profile(...), and wb.profile.roofline(...): an attribute of the function
         "export": ("ship.export", "export"),  # wb.export(op, variants, out)
         "ndarray": ("ship.ndarray", None)}  # the NumPy front end (no torch): wb.ndarray.load(op, variant)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    value = importlib.import_module(f"workbench.{module}")
    return getattr(value, attr) if attr else value


def _style(style: str, what: str) -> bool:
    """Whether `style` asks for a torch extension written the course's way (run/byo.py)."""
    if style not in ("workbench", "extension"):
        raise ValueError(f"{what}: style must be one of ['workbench', 'extension']; got {style!r}")
    return style == "extension"


def load_source(op: str, path, name: str | None = None, *, python: bool = True, options=None,
                style: str = "workbench", **extension):
    """Build and load a variant of `op` from a source file anywhere (loader.load_source; `name`
    defaults to the file's stem). style="extension": a torch extension written the course's way,
    `path` maybe a list of files, served as a variant (byo.load_extension; `extension`: its dtypes,
    device, forward, backward, out)."""
    if _style(style, "load_source"):
        from .run.byo import load_extension

        return load_extension(op, path, name, **extension, **({"options": options} if options else {}))
    _no_extension_arguments("load_source", extension)
    return _loader.load_source(op, path, name, python=python, options=options or _loader.DEFAULT_OPTIONS)


def load_inline(op: str, source: str, name: str, *, replace: bool = False, options=None, style: str = "workbench",
                **extension):
    """Build a variant of `op` from a source string (a notebook cell; loader.load_inline; options:
    build.BuildOptions, default the NVRTC tier's). style="extension": a torch extension written the
    course's way, served as a variant (byo.load_inline_extension)."""
    if _style(style, "load_inline"):
        from .run.byo import load_inline_extension

        return load_inline_extension(op, source, name, **extension, **({"options": options} if options else {}))
    _no_extension_arguments("load_inline", extension)
    return _loader.load_inline(op, source, name, replace=replace, options=options or _loader.EDIT_LOOP_OPTIONS)


def _no_extension_arguments(what: str, extension: dict) -> None:
    if extension:
        raise TypeError(f"{what}: unexpected keyword argument(s) {', '.join(sorted(extension))} (dtypes, device, "
                        f"forward, backward and out are style='extension''s)")


def load_ipython_extension(ipython) -> None:
    """`%load_ext workbench`: register the %%workbench cell magic (IPython is imported only here)."""
    from .run.magic import load_ipython_extension as load

    load(ipython)


__all__ = ["ops", "variants", "variant", "load", "load_inline", "load_source", "define_op", "check", "gradcheck", "bench",
           "profile", "Kernel", "OpSpec", "Tensor", "Attr", "Output", "Layer", "ErrorCase",
           "BuildError", "IsolatedRunError", "LockTimeout", "WorkbenchError", "nn", "__version__"]

