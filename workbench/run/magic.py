"""The %%workbench cell magic: a notebook cell built as a variant of an op.

    %load_ext workbench

    %%workbench OP NAME [--only gpu|cpu] [--quiet]
    <the variant's CUDA C++ (or C++ for a CPU variant), ending in WB_EXPORT_VARIANT(...)>

The cell is built with workbench.load_inline(OP, cell, name=NAME) (CUDA when it has a __global__
function or says WB_DEVICE_CUDA, through NVRTC's tier) and the Kernel bound to NAME; one line says
what happened (built or cached, seconds, device, dtypes, tier, and whether an earlier build of NAME
is now stale: handles to it keep running it). --only gpu / --only cpu: build only on a machine
with / without a visible GPU, so a CUDA cell and its C++ twin under one NAME serve either machine.
--quiet: no line after a successful build. A compile error raises workbench.BuildError with the
cell's own line numbers (the %%workbench line is line 1); NAME keeps its last good build.
"""
from __future__ import annotations

import argparse
import builtins
import keyword
import shlex
import types

from IPython.core.error import UsageError

from . import loader
from ..model import registry
from ..build import toolchain
from ..errors import BuildError, WorkbenchError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print and exit; a magic must raise
        raise UsageError(f"%%workbench: {message}\n{self.format_usage().strip()}")


_PARSER = _Parser(prog="%%workbench", add_help=False,
                  description="Build this cell as variant NAME of OP and bind the Kernel to NAME.")
_PARSER.add_argument("op", metavar="OP", help="the op the cell is a variant of (one of workbench.ops())")
_PARSER.add_argument("name", metavar="NAME", help="the variant's name, bound in the notebook to its Kernel")
_PARSER.add_argument("--only", choices=("gpu", "cpu"),
                     help="build only where a GPU is (gpu) or is not (cpu) visible; else skip the cell")
_PARSER.add_argument("--quiet", action="store_true", help="print nothing after a successful build")


def _usage(message: str) -> UsageError:
    return UsageError(f"%%workbench: {message}\n{_PARSER.format_usage().strip()}")


def parse(line: str) -> argparse.Namespace:
    """The magic line's arguments, validated; UsageError names the argument and what was expected."""
    try:
        argv = shlex.split(line)
    except ValueError as e:
        raise _usage(f"cannot split the arguments ({e})") from None
    args = _PARSER.parse_args(argv)
    try:
        registry.check_op(args.op)
    except ValueError:
        raise _usage(f"OP must be one of {registry.ops()}; got {args.op!r}") from None
    try:
        registry.check_variant_name(args.name)
    except ValueError:
        raise _usage(f"NAME must be an identifier (letters, digits, '_', not starting with a digit); "
                     f"got {args.name!r}") from None
    if keyword.iskeyword(args.name) or hasattr(builtins, args.name):
        raise _usage(f"NAME {args.name!r} is a Python keyword or builtin; binding a kernel to it would "
                     f"hide it in the notebook: pick another name")
    return args


def _bound(namespace: dict, name: str) -> str:
    value = namespace.get(name)
    if isinstance(value, loader.Kernel):
        return f"{name} is still {value.op}/{value.qualified} ({value.device})"
    return f"{name} is not bound by this cell"


def _status(k: loader.Kernel, previous: loader.Kernel | None) -> str:
    how = "built" if k.built else "loaded from the cache"
    tier = f", {k.options.compiler}" if k.device == "cuda" else ""
    line = f"{k.name} = {k.op}/{k.qualified}: {how} in {k.seconds:.2f} s ({k.device}: {', '.join(k.dtypes)}{tier})"
    if k.device == "cuda" and not toolchain.gpu_available():
        line += "; no GPU is visible, so it cannot run here"
    if previous is not None and previous.build_id != k.build_id:
        line += (f"; the previous build of {k.name} (@{previous.build_id}) is now stale: "
                 f"handles to it still run it")
    return line


def run(line: str, cell: str, namespace: dict) -> None:
    """The magic's body: parse `line`, build `cell`, bind NAME in `namespace`, print one line."""
    args = parse(line)
    if not cell or not cell.strip():
        raise _usage(f"the cell is empty; expected the source of variant {args.name!r} of {args.op} "
                     f"below the %%workbench line")
    if args.only is not None:
        gpu = toolchain.gpu_available()
        if args.only == "gpu" and not gpu:
            print(f"skipped %%workbench {args.op} {args.name}: --only gpu, and no GPU is visible here "
                  f"(torch.cuda.is_available() is False); {_bound(namespace, args.name)}")
            return
        if args.only == "cpu" and gpu:
            import torch
            print(f"skipped %%workbench {args.op} {args.name}: --only cpu, and a GPU is visible here "
                  f"({torch.cuda.get_device_name()}); {_bound(namespace, args.name)}")
            return
    if isinstance(namespace.get(args.name), types.ModuleType):
        raise _usage(f"NAME {args.name!r} is a module in this notebook; binding a kernel to it would hide "
                     f"the module: pick another name")
    previous = next((k for k in loader.loaded(args.op) if k.name == args.name), None)
    # A first line standing for the %%workbench line, so the compiler's line numbers are the cell's.
    source = f"// %%workbench {args.op} {args.name}\n{cell}"
    try:
        kernel = loader.load_inline(args.op, source, name=args.name)
    except BuildError:
        raise  # rendered by IPython through BuildError._render_traceback_; NAME keeps its last good build
    except (ValueError, WorkbenchError) as e:  # the source is not a variant of OP, or cannot build here
        raise UsageError(f"%%workbench {args.op} {args.name}: {e}") from None
    namespace[args.name] = kernel
    if not args.quiet:
        print(_status(kernel, previous))


def load_ipython_extension(ipython) -> None:
    """Register %%workbench (called by `%load_ext workbench`)."""
    def workbench(line, cell):
        run(line, cell, ipython.user_ns)

    workbench.__doc__ = __doc__
    ipython.register_magic_function(workbench, magic_kind="cell", magic_name="workbench")
