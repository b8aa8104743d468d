"""A benchmark's rows and what is said of them: each row's check and clocks as the table shows them,
the speedups over the baselines, which rows may be reported (trusted), and the notes on what the
output checks found. Torch-free: plots and the CLI read saved rows with it."""
from __future__ import annotations

import math

from . import verify

# Every op has these two: its eager math, and torch.compile of it. A spec adds its own (spec.baselines).
BASELINES = ("eager", "compile")


def baselines_of(spec) -> tuple[str, ...]:
    """The baselines an op can be timed against: eager, compile, then the spec's own."""
    return BASELINES + tuple(b for b in spec.baselines if b not in BASELINES)


# The columns of BenchResult.table(), as BenchResult.frame() returns them.
TABLE_COLUMNS = ("direction", "dtype", "shape", "variant", "median_ms", "p20_ms", "p80_ms", "GBps",
                 "pct_of_ceiling", "speedup_vs_eager", "speedup_vs_compile", "host_ms", "host_bound", "verified",
                 "impossible", "clock_warning")


def host_bound(row: dict) -> bool | None:
    """Whether the host's time to issue one call (host_ms: calls back to back, no sync) exceeds the
    GPU's time per call (median_ms): a loop of such calls then runs at the host's rate, and the GPU
    time is what a CUDA graph or a deeper queue would get. None where there is nothing to compare:
    rows saved before host_ms was measured, and CPU rows (the host does the work there; its time is
    the call's time, median_ms, and no device time runs beside it)."""
    host, gpu = row.get("host_ms"), row.get("median_ms")
    if host is None or gpu is None or math.isnan(host) or math.isnan(gpu):
        return None
    return host > gpu


def bound_text(row: dict) -> str:
    """The table's "bound" column: "host" (host-bound), "gpu", or "-" (host_bound is None)."""
    b = host_bound(row)
    return "-" if b is None else "host" if b else "gpu"


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


def clock_text(row: dict) -> str:
    c = row.get("clocks") or {}
    if not c:
        return "-"
    lo, hi = c["sm_mhz_min"], c["sm_mhz_max"]
    return (f"{hi}" if lo == hi else f"{lo}-{hi}") + ("!" if row.get("clock_warning") else "")


def row_status(row: dict) -> str:
    """"ok", "WRONG" or "IMPOSSIBLE" (a row that was checked, or rows from before the checks: "-")."""
    if row.get("verified") == verify.WRONG:
        return "WRONG"
    if row.get("impossible"):
        return "IMPOSSIBLE"
    return "ok" if row.get("verified") == verify.CHECKED else "-"


def trusted(row: dict) -> bool:
    """A row whose time may be reported as a speedup: not wrong, not impossible (rows saved before
    outputs were checked carry no verdict and count as they did then)."""
    return row.get("verified") != verify.WRONG and not row.get("impossible")


def add_speedups(rows: list[dict]) -> None:
    """speedup_vs_eager / _vs_compile per (op, dtype, shape, direction) group, from the rows
    themselves (a run's rows, or the rows children returned, merged): NaN where the baseline is
    missing or either row is wrong or impossible."""
    base: dict[tuple, float] = {}
    for r in rows:
        if r.get("kind") == "baseline" and trusted(r):
            base[(r["op"], r["dtype"], r["shape"], r["direction"], r["variant"])] = r["median_ms"]
    for r in rows:
        for b in BASELINES:
            ms = base.get((r["op"], r["dtype"], r["shape"], r["direction"], b))
            ok = ms is not None and trusted(r) and r.get("median_ms") and not math.isnan(r["median_ms"])
            r[f"speedup_vs_{b}"] = ms / r["median_ms"] if ok else math.nan
