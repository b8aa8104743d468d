"""Hardware counters for one call of a variant, from Nsight Compute (ncu).

`measure(op, variant, size, dtype, direction, metrics)` runs the variant in a child process under
ncu: the child warms the call up, then makes it once more inside the NVTX range "wb_measure", and
ncu profiles exactly the kernels launched in that range (the warm-up, the inputs' creation and
anything torch launches outside it are left out). Returns one dict per kernel: its name and the
metrics, in base units (bytes, sectors, ns).

Where ncu is missing, or the driver does not let it read the counters (ERR_NVGPUCTRPERM, a
sandboxed container), NcuUnavailable says so and how to go on without it; the child has a time
limit, so a stuck profiler fails instead of hanging.
"""
from __future__ import annotations

import csv
import io
import os
import pathlib
import shutil
import tempfile

from . import isolate, toolchain
from .errors import IsolatedRunError, WorkbenchError

RANGE = "wb_measure"
# Global-memory traffic: bytes the kernels' load instructions asked for (32-byte sectors at L1,
# whether they then hit or missed), and what actually moved to and from DRAM.
LOAD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
STORE_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
DURATION = "gpu__time_duration.sum"
TRAFFIC = (LOAD_SECTORS, STORE_SECTORS, DRAM_READ, DRAM_WRITE, DURATION)


class NcuUnavailable(WorkbenchError):
    """ncu is not installed, or cannot read this GPU's counters here."""


def find() -> str | None:
    """ncu: $WORKBENCH_NCU, PATH, or the CUDA toolkit's bin/."""
    env = os.environ.get("WORKBENCH_NCU")
    if env:
        return env if pathlib.Path(env).is_file() else None
    home = toolchain.cuda_home()
    for cand in (shutil.which("ncu"), home and str(pathlib.Path(home) / "bin" / "ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and pathlib.Path(cand).is_file():
            return cand
    return None


def parse_csv(text: str) -> list[dict]:
    """ncu --csv --page raw --print-units base: a header row of metric names, a row of units, then
    one row per profiled kernel. Numbers lose their thousands separators."""
    start = text.find('"ID"')
    if start < 0:
        return []
    rows = list(csv.reader(io.StringIO(text[start:])))
    header, body = rows[0], [r for r in rows[2:] if len(r) == len(rows[0])]
    out = []
    for r in body:
        d = {}
        for k, v in zip(header, r):
            try:
                d[k] = float(v.replace(",", ""))
            except ValueError:
                d[k] = v
        out.append(d)
    return out


def _permission_problem(text: str) -> str | None:
    if "ERR_NVGPUCTRPERM" in text:
        return ("the driver does not let this user read the GPU's performance counters (ERR_NVGPUCTRPERM); "
                "run as an administrator or with the NVreg_RestrictProfilingToAdminUsers=0 module option")
    if "==ERROR== Profiling is not supported" in text or "not supported on this device" in text:
        return "ncu cannot profile this GPU or runtime"
    return None


def measure(op: str, variant, size, dtype: str, direction: str = "fwd", metrics=TRAFFIC, *,
            timeout_s: float = 300, keep_csv=None) -> list[dict]:
    """Per-kernel counters of one `direction` call of the variant at `size`, `dtype` (see module).
    keep_csv: a path to copy ncu's raw CSV to (test fixtures are captured this way)."""
    exe = find()
    if exe is None:
        raise NcuUnavailable("Nsight Compute (ncu) not found: it ships with the CUDA toolkit (bin/ncu under "
                             "CUDA_HOME); put it on PATH or set WORKBENCH_NCU. Without it, time the variant "
                             "(wb.bench) and read its ptxas report and SASS instead")
    spec = isolate.variant_spec(op, variant)
    with tempfile.TemporaryDirectory(prefix="workbench-ncu-") as tmp:
        log = pathlib.Path(tmp) / "ncu.csv"
        prefix = [exe, "--target-processes", "all", "--nvtx", "--nvtx-include", f"{RANGE}/",
                  "--metrics", ",".join(metrics), "--csv", "--page", "raw", "--print-units", "base",
                  "--log-file", str(log)]
        kwargs = dict(size=list(size), dtype=dtype, direction=direction)
        try:
            isolate.run("measure", spec, kwargs, timeout_s=timeout_s, prefix=prefix)
        except IsolatedRunError as e:
            text = (log.read_text(errors="replace") if log.exists() else "") + e.full_output
            why = _permission_problem(text)
            if why:
                raise NcuUnavailable(f"ncu cannot read the counters here: {why}") from None
            raise
        text = log.read_text(errors="replace") if log.exists() else ""
        if keep_csv:
            pathlib.Path(keep_csv).write_text(text)
        why = _permission_problem(text)
        if why:
            raise NcuUnavailable(f"ncu cannot read the counters here: {why}")
        kernels = parse_csv(text)
        if not kernels:
            raise WorkbenchError(f"ncu profiled no kernel in the NVTX range {RANGE!r} of {op}/{spec['name']}; "
                                 f"its output:\n" + "\n".join(text.splitlines()[-15:]))
        return kernels


def total(kernels: list[dict], metric: str) -> float:
    return sum(float(k.get(metric, 0.0)) for k in kernels)
