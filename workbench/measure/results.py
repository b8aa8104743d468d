"""Append-only benchmark results (JSON Lines) with provenance.

One JSON object per line, never rewritten: a crash can at worst truncate the last line, which
:func:`read_rows` skips. Every row carries the columns of :data:`SCHEMA`, provenance included,
so a row read on its own says what was measured, where, and on which code.
"""

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
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .ceilings import driver_version

if TYPE_CHECKING:
    import pandas

__all__ = ["LATER_COLUMNS", "PROVENANCE_KEYS", "SCHEMA", "append_rows", "provenance", "read_rows", "to_dataframe"]

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
    "host_bound": bool,           # host_ms > median_ms (null where host_ms is missing): bench_rows.host_bound
}

PROVENANCE_KEYS: tuple[str, ...] = (
    "run_id", "timestamp", "gpu", "driver", "torch", "cuda", "commit", "workbench_version",
    "python", "host",
)

_GIT_TIMEOUT_S = 5.0


def _git(repo_root: pathlib.Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=repo_root, capture_output=True, text=True,
            timeout=_GIT_TIMEOUT_S, check=False,
        )
    except (OSError, subprocess.SubprocessError):  # no git, bad cwd, timeout
        return None
    return proc.stdout if proc.returncode == 0 else None


def commit(repo_root: pathlib.Path) -> str:
    # A copy of the tree without .git (the GPU machine gets one) is told its commit by the caller.
    if os.environ.get("WORKBENCH_COMMIT"):
        return os.environ["WORKBENCH_COMMIT"]
    head = _git(repo_root, "rev-parse", "--short", "HEAD")
    if head is None or not head.strip():
        return "unknown"
    # Untracked files do not change what was benchmarked; modified tracked files do.
    status = _git(repo_root, "status", "--porcelain", "--untracked-files=no")
    dirty = status is not None and status.strip() != ""
    return head.strip() + ("-dirty" if dirty else "")


def provenance(repo_root: pathlib.Path | None = None, version: str = "unknown") -> dict[str, str]:
    """Where and on what this run happens: the PROVENANCE_KEYS columns of a row.

    ``repo_root`` is the git checkout whose commit is recorded (default: the current directory);
    ``version`` is the workbench version. A fresh run_id is drawn on every call, so call this
    once per benchmark run and share the dict between its rows.
    """
    import torch

    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
    else:
        gpu = f"cpu: {platform.processor() or platform.machine()}"
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


def _json_value(v: Any) -> Any:
    # numpy scalars are not JSON-serializable; non-finite floats become null so the file stays
    # strict JSON that jq, pandas and browsers can read.
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def append_rows(path: pathlib.Path, rows: Iterable[dict[str, Any]]) -> int:
    """Append rows to the JSONL file at ``path``; return how many were written.

    Every row must have every SCHEMA key (extra keys are kept). All rows are checked before any
    is written, so a bad batch leaves the file unchanged. The write is flushed and fsynced.
    """
    lines: list[str] = []
    for i, row in enumerate(rows):
        missing = [k for k in SCHEMA if k not in row]
        if missing:
            raise ValueError(
                f"row {i} is missing column {missing[0]!r}"
                + (f" (and {len(missing) - 1} more: {missing[1:]})" if len(missing) > 1 else "")
            )
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
            if f.read(1) != b"\n":
                prefix = b"\n"
        f.write(prefix + "".join(lines).encode("utf-8"))  # "a" mode: always at the end
        f.flush()
        os.fsync(f.fileno())
    return len(lines)


def read_rows(path: pathlib.Path) -> list[dict[str, Any]]:
    """All rows of a results file, in order. Lines that are not a JSON object (a truncated write)
    are skipped with a warning naming the line."""
    rows: list[dict[str, Any]] = []
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


def write_report(folder: pathlib.Path | str, stem: str, rows: Iterable[dict[str, Any]], lines: list[str]) -> None:
    """A measuring script's report (scripts/edit_loop.py, nvrtc_kernel_cost.py): its rows as
    <stem>.jsonl (any keys: not benchmark rows) and its table as <stem>.txt, both replaced; the table
    is printed."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / f"{stem}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def to_dataframe(rows: Iterable[dict[str, Any]]) -> pandas.DataFrame:
    """Rows as a pandas DataFrame: SCHEMA columns first, in SCHEMA order, then any extras."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError("to_dataframe() needs pandas: pip install pandas") from exc
    rows = list(rows)
    extras = list(dict.fromkeys(k for r in rows for k in r if k not in SCHEMA))
    return pd.DataFrame.from_records(rows, columns=[*SCHEMA, *extras])
