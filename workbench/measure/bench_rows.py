"""A benchmark's rows and their verdicts: the columns and provenance every row carries, the
append-only results file (JSON Lines), the physics guard (a row faster than the device can move its
bytes or do its FLOPs is impossible), the speedups over the baselines, which rows may be reported
(trusted) and the notes on what the output checks found. A run's rows with their table and plots
are explain.plot.BenchResult."""
from __future__ import annotations

import datetime
import json
import math
import os
import pathlib
import platform
import socket
import subprocess
import uuid
import warnings

import numpy as np

from . import verify

# The documented columns. Values may be None where not applicable (e.g. speedup_vs_compile when
# compile was not run); the types say what a present value is.
SCHEMA: dict[str, type] = {
    "op": str,                    # op name, e.g. "bias_gelu"
    "variant": str,               # provider: a variant name, or "eager" / "compile"
    "kind": str,                  # "variant" | "baseline"
    "dtype": str,                 # "float32", "bfloat16", ...
    "shape": str,                 # "4096x4096"
    "numel": int,
    "direction": str,             # "fwd" | "bwd" | "fwd+bwd"
    "median_ms": float,
    "p20_ms": float,
    "p80_ms": float,
    "n_samples": int,
    "rel_std_err": float,         # standard error of the median / median
    "method": str,                # "cuda-events" | "cuda-graph" | "cpu"
    "bytes": int,                 # bytes the op must move (declared by the op)
    "flops": int,                 # flops the op must do (declared by the op)
    "GBps": float,                # bytes / median time
    "TFLOPs": float,              # flops / median time, in 1e12 per second
    "pct_of_ceiling": float,      # 100 * GBps / ceiling_GBps
    "ceiling_GBps": float,        # the device's measured copy bandwidth
    "speedup_vs_eager": float,    # eager median / this median
    "speedup_vs_compile": float,  # compile median / this median
    "peak_mem_bytes": int,        # -1 when not measured (CPU)
    "attrs": dict,                # the op's attributes for this row ({} for an op without any)
    # provenance, as returned by provenance()
    "run_id": str,
    "timestamp": str,             # UTC, ISO 8601
    "gpu": str,
    "driver": str,
    "torch": str,
    "cuda": str,
    "commit": str,                # short hash, "-dirty" if tracked files changed, or "unknown"
    "workbench_version": str,
    "python": str,
    "host": str,
}

# Columns added after rows were first saved: bench writes them, append_rows does not require them
# (older rows lack them and stay readable; readers take row.get(...) as "not measured").
LATER_COLUMNS: dict[str, type] = {
    "host_ms": float,             # the host's time to issue one call, back to back (NaN/null: not measured, CPU rows)
    "host_bound": bool,           # host_ms > median_ms (null where host_ms is missing): host_bound()
}

PROVENANCE_KEYS: tuple[str, ...] = tuple(SCHEMA)[list(SCHEMA).index("run_id"):]

# Every op has these two: its eager math, and torch.compile of it. A spec adds its own (spec.baselines).
BASELINES = ("eager", "compile")


def _git(repo_root: pathlib.Path, *args: str) -> str:
    try:
        proc = subprocess.run(["git", *args], cwd=repo_root, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):  # no git, bad cwd, timeout
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def commit(repo_root: pathlib.Path) -> str:
    """The checkout's short hash, "-dirty" where tracked files changed, or "unknown"."""
    # A copy of the tree without .git (the GPU machine gets one) is told its commit by the caller.
    if os.environ.get("WORKBENCH_COMMIT"):
        return os.environ["WORKBENCH_COMMIT"]
    head = _git(repo_root, "rev-parse", "--short", "HEAD")
    if not head:
        return "unknown"
    # Untracked files do not change what was benchmarked; modified tracked files do.
    return head + ("-dirty" if _git(repo_root, "status", "--porcelain", "--untracked-files=no") else "")


def provenance(repo_root: pathlib.Path | None = None, version: str = "unknown") -> dict[str, str]:
    """The PROVENANCE_KEYS columns: the commit of the checkout at repo_root (default: the current
    directory), the workbench version, and a fresh run_id (call once per run, share between its rows)."""
    import torch

    from .ceilings import driver_version

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else \
        f"cpu: {platform.processor() or platform.machine()}"
    return {
        "run_id": uuid.uuid4().hex[:12],
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": gpu,
        "driver": driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "",
        "commit": commit(pathlib.Path.cwd() if repo_root is None else pathlib.Path(repo_root)),
        "workbench_version": version,
        "python": platform.python_version(),
        "host": socket.gethostname(),
    }


def _json_value(v):
    # numpy scalars are not JSON-serializable; non-finite floats become null so the file stays
    # strict JSON that jq, pandas and browsers can read.
    v = v.item() if isinstance(v, np.generic) else v
    return None if isinstance(v, float) and not math.isfinite(v) else v


def append_rows(path, rows) -> int:
    """Append rows to the JSONL file at `path`; return how many were written. Every row must have
    every SCHEMA key (extra keys are kept); all are checked before any is written. Never rewritten:
    a crash can at worst truncate the last line, which read_rows skips."""
    lines: list[str] = []
    for i, row in enumerate(rows):
        missing = [k for k in SCHEMA if k not in row]
        if missing:
            raise ValueError(f"row {i} is missing column {missing[0]!r}"
                             + (f" (and {len(missing) - 1} more: {missing[1:]})" if len(missing) > 1 else ""))
        clean = {k: _json_value(v) for k, v in row.items()}
        lines.append(json.dumps(clean, allow_nan=False, separators=(",", ":")) + "\n")
    if not lines:
        return 0
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        # If an earlier writer died mid-line, start on a fresh line so only its row is lost.
        prefix = b""
        if f.seek(0, os.SEEK_END) > 0:
            f.seek(-1, os.SEEK_END)
            prefix = b"" if f.read(1) == b"\n" else b"\n"
        f.write(prefix + "".join(lines).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    return len(lines)


def read_rows(path) -> list[dict]:
    """All rows of a results file, in order; a line that is not a JSON object (a truncated write)
    is skipped with a warning naming it."""
    rows: list[dict] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            if not isinstance(row, dict):
                warnings.warn(f"{path}:{lineno}: skipping unreadable (truncated?) line", stacklevel=2)
                continue
            rows.append(row)
    return rows


def write_report(folder, stem: str, rows, lines: list[str]) -> None:
    """A measuring script's report (scripts/edit_loop.py, nvrtc_kernel_cost.py): its rows as
    <stem>.jsonl (any keys: not benchmark rows) and its table as <stem>.txt, both replaced; the table
    is printed."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / f"{stem}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def to_dataframe(rows):
    """Rows as a pandas DataFrame: SCHEMA columns first, in SCHEMA order, then any extras."""
    import pandas as pd

    rows = list(rows)
    extras = list(dict.fromkeys(k for r in rows for k in r if k not in SCHEMA))
    return pd.DataFrame.from_records(rows, columns=[*SCHEMA, *extras])


def baselines_of(spec) -> tuple[str, ...]:
    """The baselines an op can be timed against: eager, compile, then the spec's own."""
    return BASELINES + tuple(b for b in spec.baselines if b not in BASELINES)


def host_bound(row: dict) -> bool | None:
    """Whether the host's time to issue one call (host_ms: calls back to back, no sync) exceeds the
    GPU's time per call (median_ms): a loop of such calls then runs at the host's rate. None where
    there is nothing to compare: rows saved before host_ms was measured, and CPU rows."""
    host, gpu = row.get("host_ms"), row.get("median_ms")
    if host is None or gpu is None or math.isnan(host) or math.isnan(gpu):
        return None
    return host > gpu


def row_status(row: dict) -> str:
    """"ok", "WRONG" or "IMPOSSIBLE" (rows from before the output checks: "-")."""
    if row.get("verified") == verify.WRONG:
        return "WRONG"
    if row.get("impossible"):
        return "IMPOSSIBLE"
    return "ok" if row.get("verified") == verify.CHECKED else "-"


def trusted(row: dict) -> bool:
    """A row whose time may be reported as a speedup: not wrong, not impossible (rows saved before
    outputs were checked carry no verdict and count as they did then)."""
    return row.get("verified") != verify.WRONG and not row.get("impossible")


def clock_text(row: dict) -> str:
    c = row.get("clocks") or {}
    if not c:
        return "-"
    lo, hi = c["sm_mhz_min"], c["sm_mhz_max"]
    return (f"{hi}" if lo == hi else f"{lo}-{hi}") + ("!" if row.get("clock_warning") else "")


def add_speedups(rows: list[dict]) -> None:
    """speedup_vs_eager / _vs_compile per (op, dtype, shape, direction) group, from the rows
    themselves: NaN where the baseline is missing or either row is not trusted."""
    base: dict[tuple, float] = {}
    for r in rows:
        if r.get("kind") == "baseline" and trusted(r):
            base[(r["op"], r["dtype"], r["shape"], r["direction"], r["variant"])] = r["median_ms"]
    for r in rows:
        for b in BASELINES:
            ms = base.get((r["op"], r["dtype"], r["shape"], r["direction"], b))
            ok = ms is not None and trusted(r) and r.get("median_ms") and not math.isnan(r["median_ms"])
            r[f"speedup_vs_{b}"] = ms / r["median_ms"] if ok else math.nan


def verdict_notes(rows: list[dict], rotated: set) -> list[str]:
    """What the checks found, for the table's notes: how outputs were checked, then each wrong or
    impossible row and each row whose clocks moved."""
    if not rows:
        return []
    against = sorted({r["verify_against"] for r in rows if r.get("verify_against")})
    notes = ["outputs checked at every timed shape: before timing (fresh inputs, outputs poisoned), the last "
             "timed call, after timing (new inputs); against the " + " / ".join(against or ["float64 reference"])]
    if rotated and min(rotated) > 1:
        notes.append(f"the timed calls rotated through {min(rotated)} input sets")
    elif rotated:
        notes.append("the timed calls used one input set at some sizes (memory): an answer replayed by "
                     "pointer is caught there only by the checks before and after timing")
    hosts = [r for r in rows if host_bound(r)]
    if hosts:
        notes.append(f"host-bound ('host' under bound): {len(hosts)} of {len(rows)} rows, where issuing one call "
                     "(back to back, no sync) took the host longer than the GPU's time per call; such calls in a "
                     "loop run at the host's rate, the GPU time is the kernels' own")
    for r in rows:
        where = f"{r['variant']} {r['direction']} {r['dtype']} {r['shape']}"
        if r.get("verified") == verify.WRONG:
            notes.append(f"WRONG {where}: {r['verify_detail']}")
        elif r.get("impossible"):
            notes.append(f"IMPOSSIBLE {where}: {r['impossible_reason']}")
        if r.get("clock_warning"):
            notes.append(f"clocks {where}: {r['clock_warning']}")
    return notes


# The physics guard. Bandwidth: a row's rate is the op's declared bytes over its median; the DRAM
# limit is the better of the device's measured copy and read-only rates (a sum only reads, and can
# beat a copy, which turns the bus around) plus BANDWIDTH_MARGIN, beyond the few percent these
# ceilings moved between runs. Rows that move less than L2_MULTIPLE times the L2 are not held to it
# (their data can stay in the L2). FLOPs: a row's rate may not exceed the chip's peak for the dtype
# (FLOPS_PER_SM_CLOCK x SMs x the maximum SM clock) plus FLOP_MARGIN; for an architecture not in the
# table, UNKNOWN_ARCH_FACTOR x the measured cuBLAS rate.
BANDWIDTH_MARGIN = 0.10
FLOP_MARGIN = 0.02
L2_MULTIPLE = 4
UNKNOWN_ARCH_FACTOR = 1.5

# FLOPs per SM per clock, dense, from the datasheets: (major, minor) -> dtype -> rate. A100 (8.0):
# 312 TF fp16 at 1.41 GHz x 108 SMs = 2048; H100 (9.0): 989 TF at 1.83 GHz x 132 SMs = 4096.
# float32 without TF32 (the benchmark turns it off): 64 (8.0) / 128 (9.0) FMA lanes x 2. float64:
# the tensor-core rate (DMMA).
FLOPS_PER_SM_CLOCK = {
    (8, 0): {"float16": 2048, "bfloat16": 2048, "float32": 128, "float64": 128},
    (9, 0): {"float16": 4096, "bfloat16": 4096, "float32": 256, "float64": 256},
}


def peak_tflops(capability: tuple[int, int], sms: int, max_sm_mhz: float, dtype: str) -> float | None:
    """The chip's peak TFLOP/s for dtype, or None where the table does not know the chip."""
    rate = FLOPS_PER_SM_CLOCK.get(tuple(capability), {}).get(dtype)
    if rate is None or not max_sm_mhz:
        return None
    return rate * sms * max_sm_mhz * 1e6 / 1e12


def judge(row: dict, *, bandwidth_limit_GBps: float, l2_bytes: int, flops_limit_TFLOPs: float | None,
          bytes_floor: bool = True) -> str:
    """"" if the row is physically possible, else why not. bytes_floor: whether the op's declared
    bytes are a floor for this provider: for a variant, handed exactly the tensors the op declares;
    not for PyTorch's baselines, whose autograd may save other tensors (torch.compile keeps a 1-byte
    mask where the backward of a ReLU is declared to read x), so only their FLOPs are held."""
    gbps, nbytes = row.get("GBps"), row.get("bytes") or 0
    if (bytes_floor and gbps is not None and not math.isnan(gbps) and bandwidth_limit_GBps
            and not math.isnan(bandwidth_limit_GBps) and nbytes >= L2_MULTIPLE * l2_bytes and gbps > bandwidth_limit_GBps):
        return (f"{gbps:.0f} GB/s is {gbps / bandwidth_limit_GBps * (1 + BANDWIDTH_MARGIN):.2f}x the device's "
                f"memory bandwidth ({bandwidth_limit_GBps / (1 + BANDWIDTH_MARGIN):.0f} GB/s measured): the "
                f"{nbytes / 1e6:.0f} MB the op must move cannot move that fast, so part of the work was not done")
    tflops = row.get("TFLOPs")
    if (flops_limit_TFLOPs and tflops is not None and not math.isnan(tflops) and row.get("flops")
            and tflops > flops_limit_TFLOPs):
        return (f"{tflops:.1f} TFLOP/s is above the chip's peak for {row.get('dtype')} "
                f"({flops_limit_TFLOPs / (1 + FLOP_MARGIN):.1f} TFLOP/s): part of the work was not done")
    return ""


class Limits:
    """The limits of one CUDA device, measured or computed once per benchmark."""

    def __init__(self, device, cache_dir, dtypes, *, gemm_tflops: dict | None = None):
        import torch

        from . import ceilings, conditions

        props = torch.cuda.get_device_properties(device)
        self.copy_GBps = ceilings.copy_bandwidth_gbps(device, cache_dir=cache_dir)["copy_GBps"]
        self.read_GBps = ceilings.read_bandwidth_gbps(device, cache_dir=cache_dir)["read_GBps"]
        self.bandwidth_limit_GBps = max(self.copy_GBps, self.read_GBps) * (1 + BANDWIDTH_MARGIN)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)
        max_mhz = conditions.max_sm_mhz(device.index if device.index is not None else torch.cuda.current_device())
        max_mhz = max_mhz or float(getattr(props, "clock_rate", 0) or 0) / 1e3
        self.flops_limit_TFLOPs = {}
        for d in dtypes:
            peak = peak_tflops((props.major, props.minor), props.multi_processor_count, max_mhz, d)
            if peak is None and gemm_tflops and d in gemm_tflops:
                peak = UNKNOWN_ARCH_FACTOR * gemm_tflops[d]
            self.flops_limit_TFLOPs[d] = None if peak is None else peak * (1 + FLOP_MARGIN)

    def judge(self, row: dict, *, bytes_floor: bool = True) -> str:
        return judge(row, bandwidth_limit_GBps=self.bandwidth_limit_GBps, l2_bytes=self.l2_bytes,
                     flops_limit_TFLOPs=self.flops_limit_TFLOPs.get(row.get("dtype")), bytes_floor=bytes_floor)

    def fields(self) -> dict:
        return {"copy_GBps": self.copy_GBps, "read_GBps": self.read_GBps,
                "bandwidth_limit_GBps": self.bandwidth_limit_GBps}
