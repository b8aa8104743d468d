"""A benchmark's result: its rows with the table a shell prints, the frame, the saved file and the
plots (bench_rows says what each row means; plot draws them). Torch-free."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import config
from . import results
from .bench_rows import TABLE_COLUMNS, bound_text, clock_text, row_status


def _float(v) -> float:
    """A row's number, NaN where it is missing or null (rows saved before the column existed)."""
    return math.nan if v is None else float(v)


@dataclass
class BenchResult:
    rows: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        """Medians, spread, GB/s, % of the copy ceiling and speedups, one line per row; then the host's
        time to issue a call and what bounds the row ("host" where that exceeds the GPU time, "gpu",
        "-" where not measured: CPU rows), what the output checks found ("check": ok, WRONG,
        IMPOSSIBLE) and the SM clock during the row (MHz, min-max; "!" where the clocks moved or
        throttled); the notes say why."""
        w = max([10] + [len(str(r["variant"])) for r in self.rows])  # ladder rungs have long names
        # Compute-bound rows (matmul) show TFLOP/s and % of the matmul ceiling in those columns.
        compute = any("pct_of_matmul_ceiling" in r for r in self.rows)
        rate, pct = ("TFLOPs", "pct_of_matmul_ceiling") if compute else ("GBps", "pct_of_ceiling")
        head = (f"{'direction':9s} {'dtype':9s} {'shape':>12s} {'provider':{w}s} {'median ms':>10s} "
                f"{'p20-p80 ms':>17s} {'TFLOP/s' if compute else 'GB/s':>8s} {'%peak' if compute else '%ceil':>6s} "
                f"{'x eager':>8s} {'x compile':>9s} {'host ms':>9s} {'bound':5s} {'check':10s} {'SM MHz':>10s}")
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
                f"{f(_float(r.get('host_ms')), '9.4f')} {bound_text(r):5s} {row_status(r):10s} {clock_text(r):>10s}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def save(self, path=None):
        """Append the rows to `path` (default workbench-results/bench.jsonl: config.output_dir());
        returns the path."""
        path = path or config.output_dir() / "bench.jsonl"
        results.append_rows(path, self.rows)
        return path

    def plot(self, out_dir=None):
        """Save every plot as a PNG under out_dir (default workbench-results/plots); returns the paths."""
        from ..explain import plot
        return plot.plot_all(self.rows, out_dir or config.output_dir() / "plots")

    def figure(self):
        """The same plots in one matplotlib Figure, returned and not saved: a notebook cell ending
        in r.figure() shows them inline (speedup over eager and over torch.compile, and GB/s
        against the copy ceiling, one row of panels per dtype and direction)."""
        from ..explain import plot
        return plot.figure(self.rows)

    def ladder_figure(self, op=None, **kw):
        """The op's ladder (the variants its spec lists in teaching order) as one Figure, returned
        and not saved: GB/s per rung at one size with each step's speedup, the baselines and the
        copy ceiling; one panel per dtype and direction. kw: dtype, direction, shape (a label such
        as "16384x16384"). op defaults to the rows' op (name it when the rows hold several)."""
        from ..explain import plot
        if op is None:
            ops = sorted({r["op"] for r in self.rows})
            if len(ops) != 1:
                raise ValueError(f"ladder_figure: the rows hold ops {ops}; name one with op=")
            op = ops[0]
        return plot.ladder_figure(self.rows, op=op, **kw)

    def frame(self, all_columns: bool = False):
        """The rows as a pandas DataFrame (needs pandas): the table's columns, or every column
        (provenance included) with all_columns=True."""
        df = results.to_dataframe(self.rows)
        return df if all_columns else df.reindex(columns=list(TABLE_COLUMNS))  # rows saved before a column existed

    def __repr__(self) -> str:
        return self.table()
