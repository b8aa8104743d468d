"""A benchmark's rows and what is said of them: the table (with each row's check and clocks),
the speedups over the baselines, which rows may be reported (trusted), and the notes on what the
output checks found. Torch-free: plots and the CLI read saved rows with it."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import config, results, verify

# Every op has these two: its eager math, and torch.compile of it. A spec adds its own (spec.baselines).
BASELINES = ("eager", "compile")


def baselines_of(spec) -> tuple[str, ...]:
    """The baselines an op can be timed against: eager, compile, then the spec's own."""
    return BASELINES + tuple(b for b in spec.baselines if b not in BASELINES)


# The columns of BenchResult.table(), as BenchResult.frame() returns them.
TABLE_COLUMNS = ("direction", "dtype", "shape", "variant", "median_ms", "p20_ms", "p80_ms", "GBps",
                 "pct_of_ceiling", "speedup_vs_eager", "speedup_vs_compile", "verified", "impossible", "clock_warning")


@dataclass
class BenchResult:
    rows: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        """Medians, spread, GB/s, % of the copy ceiling and speedups, one line per row; then what the
        output checks found ("check": ok, WRONG, IMPOSSIBLE) and the SM clock during the row (MHz,
        min-max; "!" where the clocks moved or throttled); the notes say why."""
        w = max([10] + [len(str(r["variant"])) for r in self.rows])  # ladder rungs have long names
        # Compute-bound rows (matmul) show TFLOP/s and % of the matmul ceiling in those columns.
        compute = any("pct_of_matmul_ceiling" in r for r in self.rows)
        rate, pct = ("TFLOPs", "pct_of_matmul_ceiling") if compute else ("GBps", "pct_of_ceiling")
        head = (f"{'direction':9s} {'dtype':9s} {'shape':>12s} {'provider':{w}s} {'median ms':>10s} "
                f"{'p20-p80 ms':>17s} {'TFLOP/s' if compute else 'GB/s':>8s} {'%peak' if compute else '%ceil':>6s} "
                f"{'x eager':>8s} {'x compile':>9s} {'check':10s} {'SM MHz':>10s}")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            def f(v, spec):  # "-" in the column's width where nothing was measured
                if isinstance(v, (int, float)) and not math.isnan(v):
                    return format(v, spec)
                return format("-", spec.split(".")[0] if spec[0] in "<>" else ">" + spec.split(".")[0])
            lines.append(
                f"{r['direction']:9s} {r['dtype']:9s} {r['shape']:>12s} {r['variant']:{w}s} "
                f"{f(r['median_ms'], '10.4f')} "
                f"{f(r['p20_ms'], '8.4f') + '-' + f(r['p80_ms'], '<8.4f') if r['median_ms'] == r['median_ms'] else f(math.nan, '17')} "
                f"{f(r.get(rate, math.nan), '8.1f')} {f(r.get(pct, math.nan), '6.1f')} "
                f"{f(r['speedup_vs_eager'], '8.2f')} {f(r['speedup_vs_compile'], '9.2f')} "
                f"{row_status(r):10s} {_clock_text(r):>10s}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def save(self, path=None):
        path = path or config.RESULTS_DIR / "bench.jsonl"
        results.append_rows(path, self.rows)
        return path

    def plot(self, out_dir=None):
        """Save every plot as a PNG under out_dir (default results/plots); returns the paths."""
        from . import plot
        return plot.plot_all(self.rows, out_dir or config.RESULTS_DIR / "plots")

    def figure(self):
        """The same plots in one matplotlib Figure, returned and not saved: a notebook cell ending
        in r.figure() shows them inline (speedup over eager and over torch.compile, and GB/s
        against the copy ceiling, one row of panels per dtype and direction)."""
        from . import plot
        return plot.figure(self.rows)

    def ladder_figure(self, op=None, **kw):
        """The op's ladder (the variants its spec lists in teaching order) as one Figure, returned
        and not saved: GB/s per rung at one size with each step's speedup, the baselines and the
        copy ceiling; one panel per dtype and direction. kw: dtype, direction, shape (a label such
        as "16384x16384"). op defaults to the rows' op (name it when the rows hold several)."""
        from . import plot
        if op is None:
            ops = sorted({r["op"] for r in self.rows})
            if len(ops) != 1:
                raise ValueError(f"ladder_figure: the rows hold ops {ops}; name one with op=")
            op = ops[0]
        return plot.ladder_figure(self.rows, op=op, **kw)

    def frame(self, all_columns: bool = False):
        """The rows as a pandas DataFrame (needs pandas): the table's columns, or every column
        (provenance included) with all_columns=True."""
        from . import results
        df = results.to_dataframe(self.rows)
        return df if all_columns else df.reindex(columns=list(TABLE_COLUMNS))  # rows saved before a column existed

    def __repr__(self) -> str:
        return self.table()


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
    for r in rows:
        where = f"{r['variant']} {r['direction']} {r['dtype']} {r['shape']}"
        if r.get("verified") == verify.WRONG:
            notes.append(f"WRONG {where}: {r['verify_detail']}")
        elif r.get("impossible"):
            notes.append(f"IMPOSSIBLE {where}: {r['impossible_reason']}")
        if r.get("clock_warning"):
            notes.append(f"clocks {where}: {r['clock_warning']}")
    return notes


def _clock_text(row: dict) -> str:
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
