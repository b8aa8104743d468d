"""Starting a runner (remote.py): the C++ runner holding a variant library of the workbench's ABI
and its op's binding (start_cxx), the Python runner holding anything else (start_python), and
isolated(op, variant), which serves a variant by name, source, Kernel, callable or extension from a
runner of its own as a Kernel the checks call."""
from __future__ import annotations

import json
import pathlib
import sys

import torch

from .. import config, dtypes as dtypes_
from ..build.toolchain import arch_list
from ..model import registry
from .remote import START_TIMEOUT_S, CallRefused, Remote, Runner, hex_text, kernel
from .sandbox import Sandbox


def read_variant_reply(rest: str) -> dict:
    """What a runner's "variant" reply says of the library (the library's own words, not a verdict)."""
    try:
        op, device, mask, steps, *desc = rest.split(" ")
        int(mask), int(steps), bytes.fromhex(desc[0] if desc else "")
    except ValueError:
        raise CallRefused(f"the runner's answer to loading the library is not the protocol's: {rest[:200]!r}") from None
    names = tuple(n for i, n in enumerate(dtypes_.NAMES) if int(mask) & (1 << i))
    return {"op": op, "device": device, "dtypes": names,
            "steps": tuple(s for i, s in enumerate(("forward", "backward")) if int(steps) & (1 << i)),
            "description": bytes.fromhex(desc[0]).decode(errors="replace") if desc else ""}


def runner_executable() -> pathlib.Path:
    """The C++ runner, built once per toolchain (torch-free, like the NumPy front end's builds)."""
    from ..ship import ndarray_build

    return ndarray_build.build_runner(arch_list())[0]


def binding_library(op: str) -> pathlib.Path:
    """The op's binding for the C++ runner, built torch-free (the NumPy front end's build)."""
    from ..ship import ndarray_build

    return ndarray_build.build_binding(op)[0]


def build_library(op: str, source: pathlib.Path, name: str, folder: str, line_info: bool = False):
    """A variant library of the workbench's ABI, built torch-free: ndarray_build.build_variant's
    (library, build folder, whether it was built, key)."""
    from ..ship import ndarray_build

    include = [config.COMMON_DIR, registry.sources(op).kernel_dir, source.parent]
    return ndarray_build.build_variant(f"{folder}-{op}/{name}", source, include, arch_list,
                                       extra_flags=["-lineinfo"] if line_info else [])


def start_cxx(op: str, variant_library, binding_library, label: str, *, executable=None,
              sandbox: Sandbox | None = None, prefix=(), timeout_s: float = START_TIMEOUT_S) -> tuple[Runner, dict]:
    """A C++ runner holding a variant library (torch-free: the NumPy front end's builds) and its
    op's binding; returns it with what it read of the library."""
    r = Runner([str(executable or runner_executable())], label=label, sandbox=sandbox, prefix=prefix)
    try:
        r.request("declare " + hex_text(registry.spec(op).declaration()), timeout_s=START_TIMEOUT_S)
        r.request(f"binding {binding_library}", timeout_s=START_TIMEOUT_S)
        return r, read_variant_reply(r.request(f"variant {variant_library} {label}", timeout_s=timeout_s))
    except BaseException:
        r.discard()
        raise


def start_python(address: dict, label: str, *, sandbox: Sandbox | None = None, prefix=(),
                 timeout_s: float = START_TIMEOUT_S) -> tuple[Runner, dict]:
    """A Python runner (python_runner.py) holding the variant at `address` (python_runner.address_of)."""
    argv = [sys.executable, "-m", "workbench.judge.python_runner"]
    if sandbox is not None:
        sandbox = Sandbox(**{**sandbox.__dict__, "readable": (*sandbox.readable, config.REPO_ROOT),
                             "env": (*sandbox.env, ("PYTHONPATH", str(config.REPO_ROOT)))})
    r = Runner(argv, label=label, sandbox=sandbox, prefix=prefix, env=None if sandbox else config.child_env())
    r.keeps_layout = True
    try:
        return r, read_variant_reply(r.request(f"variant {hex_text(json.dumps(address))}", timeout_s=timeout_s))
    except BaseException:
        r.discard()
        raise


def isolated(op: str, variant, *, sandbox: Sandbox | None = None, prefix=(), line_info: bool = False,
             own_memory: bool = False):
    """`variant` (a name, a Kernel, a source path, a callable, an extension) served from a runner of
    its own, as a Kernel the checks call (kernel()): a C++ variant of the workbench's ABI in the C++
    runner (its torch-free build), anything else in the Python runner. A fault in it ends the
    runner, never this process; the next call starts another. own_memory: every call on the
    runner's allocations, one per tensor, copied from host memory (a sanitizer's bounds)."""
    from ..run import byo, loader
    from ..ship import ndarray_build

    v = byo.as_variant(op, variant)
    source = None
    if isinstance(v, (loader.Kernel, loader.BuiltVariant)) and not isinstance(v, byo.CallableKernel):
        source = pathlib.Path(v.source)
    elif isinstance(v, str):
        source = registry.variant_sources(op).get(v) or (pathlib.Path(v) if pathlib.Path(v).is_file() else None)
    # Where no nvcc is (an installed wheel), a CUDA variant is served by the Python runner (its prebuilt library)
    if source is not None and (source.suffix == ".cpp" or source.suffix == ".cu" and ndarray_build.can_build_cuda()):
        name = v if isinstance(v, str) and not pathlib.Path(v).is_file() else getattr(v, "name", source.stem)
        info = registry.static_variant(op, source, name)
        library = build_library(op, source, name, "runner", line_info)[0]
        binding = binding_library(op)
        remote = Remote(op, info.device, lambda: start_cxx(op, library, binding, name, sandbox=sandbox, prefix=prefix),
                        own_memory=own_memory)
        return kernel(remote, name, info.dtypes, source=source, library=library, description=info.description)
    from .python_runner import address_of

    address = address_of(op, v)
    if line_info:
        address["options"] = {**address.get("options", {}), "line_info": True}
    device = getattr(v, "device", None) or ("cuda" if torch.cuda.is_available() else "cpu")
    remote = Remote(op, device, lambda: start_python(address, address["name"], sandbox=sandbox, prefix=prefix),
                    own_memory=own_memory)
    dtypes = getattr(v, "dtypes", None)  # a callable's or an extension's as probed here (none: nothing runs)
    dtypes = dtypes_.NAMES if dtypes is None else dtypes
    return kernel(remote, address["name"], dtypes, description=getattr(v, "description", ""))
