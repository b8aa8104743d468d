"""`python -m workbench sanitize <op> <variant>`: compute-sanitizer over a small check run.

For each tool (memcheck, racecheck, initcheck, synccheck) the variant is served from a runner
(judge.start.isolated) behind compute-sanitizer, on memory of its own (one allocation per tensor,
PyTorch's caching allocator off), so an access past a tensor's end is one past an allocation's end;
the small check runs here. The tool's report is its log, written as the runner ends.
"""
from __future__ import annotations

import math
import pathlib
import re
import tempfile
from dataclasses import dataclass

from ..build import toolchain
from ..errors import IsolatedRunError, WorkbenchError

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# A small matrix: sanitizers slow kernels down by 10-100x.
SMALL_LAYOUTS = ["contiguous", "offset"]


def small_check(op: str) -> dict:
    """The check the sanitizers run: the op's three largest check sizes of at most 2^16 elements
    (sizes that leave partial tiles, not the biggest), contiguous and offset, seed 0."""
    from ..model import registry

    spec = registry.spec(op)
    fits = [tuple(s) for s in spec.check_sizes if 0 not in s
            and sum(math.prod(x) for x in spec.input_shapes(s)) <= 1 << 16]
    sizes = sorted(fits, key=lambda s: sum(math.prod(x) for x in spec.input_shapes(s)))[-3:]
    return dict(shapes=[list(s) for s in sizes], layouts=SMALL_LAYOUTS, seed=0)


def find() -> str | None:
    """compute-sanitizer: $WORKBENCH_COMPUTE_SANITIZER, PATH, or the CUDA toolkit's bin/."""
    return toolchain.cuda_tool("compute-sanitizer", "WORKBENCH_COMPUTE_SANITIZER")


@dataclass
class ToolResult:
    tool: str
    errors: int
    first_errors: str
    ran: bool


def summary_errors(text: str) -> int | None:
    """Errors in a compute-sanitizer report: 'ERROR SUMMARY: N errors' (memcheck, initcheck,
    synccheck) or 'RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)'. None: no summary
    (the tool did not run to the end)."""
    m = re.search(r"ERROR SUMMARY: (\d+) error", text)
    if m:
        return int(m.group(1))
    m = re.search(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, \d+ warnings?\)", text)
    return int(m.group(1)) if m else None


def run(op: str, variant, tools=TOOLS, *, timeout_s: float = 900) -> list[ToolResult]:
    for t in tools:
        if t not in TOOLS:
            raise ValueError(f"tools must be among {TOOLS}; got {t!r}")
    from . import loader
    from ..model import registry

    # A loaded Kernel describes itself; a name is read from its source (nothing loaded here).
    v = variant if isinstance(variant, loader.Kernel) else registry.static_variant(op, registry.variant_source(op, variant))
    if v.kind == "torch":  # its kernels are PyTorch's own: nothing of the variant's to sanitize
        raise ValueError(f"sanitize runs a variant's own CUDA kernels under compute-sanitizer; {op}/{v.name} "
                         f"is a PyTorch-formula variant (kind 'torch'), whose kernels are PyTorch's")
    if not v.runs_on("cuda"):
        raise ValueError(f"sanitize runs CUDA variants under compute-sanitizer; {op}/{v.name} "
                         f"runs on the CPU")
    exe = find()
    if exe is None:
        raise WorkbenchError(
            "compute-sanitizer not found: it ships with the CUDA toolkit (bin/compute-sanitizer under "
            "CUDA_HOME); put it on PATH or set WORKBENCH_COMPUTE_SANITIZER to its path")
    return [_run_tool(op, variant, exe, tool, timeout_s) for tool in tools]


def _run_tool(op: str, variant, exe: str, tool: str, timeout_s: float) -> ToolResult:
    from ..judge.remote import time_limit
    from ..judge.start import isolated
    from ..measure.correctness import check

    with tempfile.TemporaryDirectory(prefix="wb-sanitize-") as tmp:
        log = pathlib.Path(tmp) / f"{tool}.log"
        prefix = [*time_limit(timeout_s), "env", "PYTORCH_NO_CUDA_MEMORY_CACHING=1", exe, "--tool", tool,
                  "--print-limit", "10", "--log-file", str(log)]
        kernel = isolated(op, variant, prefix=prefix, own_memory=True)
        kernel.module.MAX_RESTARTS = 0  # the tool's report is the first runner's: a lost one is not replaced
        said = ""
        try:
            kernel.module.ensure()
            check(op, kernel, **small_check(op))
        except IsolatedRunError as e:  # the runner did not start: what it said
            said = e.full_output
        finally:
            kernel.module.close()  # the runner ends; the tool writes its summary and exits
        text = (log.read_text(errors="replace") if log.is_file() else "") + said
    errors = summary_errors(text)
    lines = [ln for ln in text.splitlines() if ln.startswith("=========")] or text.splitlines()[-12:]
    return ToolResult(tool, errors if errors is not None else -1, "\n".join(lines[:12]), errors is not None)


def main(op: str, variant, tools=TOOLS) -> int:
    results = run(op, variant, tools)
    bad = False
    for r in results:
        if not r.ran:
            status, bad = "DID NOT RUN (see output)", True
        elif r.errors:
            status, bad = f"{r.errors} error(s)", True
        else:
            status = "clean"
        print(f"{r.tool:10s} {status}")
        if r.errors or not r.ran:
            print("  " + r.first_errors.replace("\n", "\n  "))
    return 1 if bad else 0
