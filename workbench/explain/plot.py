"""Plots of benchmark rows: speedup over a baseline and achieved bandwidth, against size; and an
op's ladder (its spec's variants in teaching order: GB/s per rung at one size, each step's speedup).
BenchResult, what wb.bench returns, is a run's rows with their table, frame, saved file and plots.

Figures use matplotlib's object API (``matplotlib.figure.Figure``), never pyplot: headless, and a
notebook's backend is left alone. plot_axes.py draws onto a given Axes; ``figure()`` draws every
plot into one Figure that a notebook displays inline, writing nothing.
"""

from __future__ import annotations

import functools
import io
import math
import pathlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import config
from ..measure.bench_rows import BASELINES, append_rows, clock_text, host_bound, row_status, to_dataframe
from .plot_axes import (Row, compute_bound, draw_bandwidth, draw_ladder, draw_speedup, draw_throughput, gbps, ladder_at,
                        newest_run, rows_by_shape)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["BenchResult", "figure", "ladder_figure", "plot_all", "plot_bandwidth", "plot_ladder", "plot_speedup"]

_DPI = 120
_LADDER_SIZE = (9.0, 5.0)


def _png(out_path, draw: Callable[[Axes], object], figsize: tuple[float, float] = (7.0, 4.5)) -> pathlib.Path:
    """A Figure drawn by draw(ax), saved as a PNG at out_path."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    draw(fig.add_subplot())
    out_path = pathlib.Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=_DPI, format="png")
    fig.clear()  # a pyplot-free Figure is freed with its last reference; clear() drops artists now
    return out_path


def plot_speedup(rows: list[Row], out_path: pathlib.Path, *, op: str, dtype: str, direction: str,
                 baseline: str = "eager") -> pathlib.Path:
    """Save a PNG of speedup over ``baseline`` against size, one line per other provider."""
    return _png(out_path, lambda ax: draw_speedup(ax, rows, op=op, dtype=dtype, direction=direction, baseline=baseline))


def plot_bandwidth(rows: list[Row], out_path: pathlib.Path, *, op: str, dtype: str,
                   direction: str) -> pathlib.Path:
    """Save a PNG of achieved GB/s against size, one line per provider, with the copy ceiling."""
    return _png(out_path, lambda ax: draw_bandwidth(ax, rows, op=op, dtype=dtype, direction=direction))


def _ladder_of(op: str, required: bool = False) -> tuple[str, ...]:
    """The op's declared ladder; () when it declares none or is not an op here (required: ValueError)."""
    from ..model import registry

    try:
        ladder = tuple(getattr(registry.spec(op), "ladder", ()) or ())
    except ValueError:
        ladder = ()
    if required and not ladder:
        raise ValueError(f"op {op!r} declares no ladder (its spec's ladder is empty, or it is not an op "
                         f"in this checkout)")
    return ladder


def plot_ladder(rows: list[Row], out_path: pathlib.Path, *, op: str, dtype: str, direction: str,
                shape: str | None = None) -> pathlib.Path:
    """Save a PNG of the op's ladder at one size (see draw_ladder)."""
    ladder = _ladder_of(op, required=True)
    return _png(out_path, lambda ax: draw_ladder(ax, rows, op=op, dtype=dtype, direction=direction, shape=shape,
                                                 ladder=ladder), _LADDER_SIZE)


def _token(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "", s.replace("fwd+bwd", "fwdbwd")) or "unknown"


def _panels(rows: list[Row]) -> list[tuple[str, str, str, list[Row], list[str]]]:
    """(op, dtype, direction, its newest run's rows, panels) for each combination in the rows; the
    panels, in order: "speedup_vs_eager" and "speedup_vs_compile" where that baseline was run, then
    "throughput" (a compute-bound op's) or "bandwidth" where bandwidth is known."""
    out = []
    for op, dtype, direction in sorted({(str(r["op"]), str(r["dtype"]), str(r["direction"])) for r in rows}):
        sel = newest_run(rows, op=op, dtype=dtype, direction=direction)
        providers = {r.get("variant") for r in sel if r.get("median_ms") is not None}
        sel += newest_run(rows, op=op, dtype=dtype, direction=direction, untrusted=True)  # named, not drawn
        panels = [f"speedup_vs_{b}" for b in BASELINES if b in providers]
        if compute_bound(sel):
            panels.append("throughput")
        elif any(gbps(r) is not None for r in sel):
            panels.append("bandwidth")
        out.append((op, dtype, direction, sel, panels))
    return out


def _draw_panel(ax: Axes, panel: str, rows: list[Row], *, op: str, dtype: str, direction: str) -> None:
    if panel == "bandwidth":
        draw_bandwidth(ax, rows, op=op, dtype=dtype, direction=direction)
    elif panel == "throughput":
        draw_throughput(ax, rows, op=op, dtype=dtype, direction=direction)
    else:
        draw_speedup(ax, rows, op=op, dtype=dtype, direction=direction, baseline=panel.rsplit("_", 1)[1])


def plot_all(rows: list[Row], out_dir: pathlib.Path) -> list[pathlib.Path]:
    """Every plot the rows support, for each (op, dtype, direction) present; returns the paths.

    Per combination (its newest run): ``<op>_<direction>_<dtype>_<panel>.png`` for each of its
    panels (_panels), and ``..._ladder.png`` where the op declares a ladder and two or more of its
    rungs have rows at some size (drawn at the largest such size). "fwd+bwd" is written "fwdbwd" in
    file names. ``roofline_fwd.png`` (and ``roofline_fwdbwd.png``): every op's best variant per
    dtype by arithmetic intensity and TFLOP/s (roofline.py).
    """
    from . import roofline

    out_dir = pathlib.Path(out_dir)
    paths: list[pathlib.Path] = []
    for op, dtype, direction, sel, panels in _panels(rows):
        stem = f"{_token(op)}_{_token(direction)}_{_token(dtype)}"
        for panel in panels:
            paths.append(_png(out_dir / f"{stem}_{panel}.png", lambda ax: _draw_panel(
                ax, panel, sel, op=op, dtype=dtype, direction=direction)))
        ladder = _ladder_of(op)
        if _has_ladder(sel, ladder):
            paths.append(_png(out_dir / f"{stem}_ladder.png", lambda ax: draw_ladder(
                ax, sel, op=op, dtype=dtype, direction=direction, ladder=ladder), _LADDER_SIZE))
    for direction in ("fwd", "fwd+bwd"):  # every op's best variant per dtype under the measured roofs
        if roofline.points(rows, direction=direction):
            paths.append(_png(out_dir / f"roofline_{_token(direction)}.png",
                              lambda ax: roofline.draw(ax, rows, direction=direction), (12.0, 6.0)))
    return paths


def _has_ladder(sel: list[Row], ladder: tuple[str, ...], shape: str | None = None) -> bool:
    """Whether draw_ladder can draw these rows (one run's): two or more rungs at the shape."""
    try:
        ladder_at(rows_by_shape(sel), ladder, shape, "")
    except ValueError:
        return False
    return True


@functools.cache
def _notebook_figure_class() -> type:
    from matplotlib.figure import Figure

    class NotebookFigure(Figure):
        """A Figure that Jupyter shows as a PNG by itself: no pyplot, no backend to select."""

        def _repr_png_(self) -> bytes:
            buf = io.BytesIO()
            self.savefig(buf, format="png", dpi=_DPI)
            return buf.getvalue()

    return NotebookFigure


def figure(rows: list[Row]) -> Figure:
    """Every panel plot_all() would save, in one Figure (a row per (op, dtype, direction)), nothing
    written: a notebook cell that ends with it displays it."""
    panels = _panels(list(rows))
    if not panels:
        raise ValueError("figure: no benchmark rows to plot")
    ncols = max(len(p[-1]) for p in panels)
    fig = _notebook_figure_class()(figsize=(5.2 * ncols, 3.9 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), ncols, squeeze=False)
    for row_axes, (op, dtype, direction, sel, names) in zip(axes, panels):
        for ax, panel in zip(row_axes, names):
            _draw_panel(ax, panel, sel, op=op, dtype=dtype, direction=direction)
        for ax in row_axes[len(names):]:
            ax.set_visible(False)
    return fig


def ladder_figure(rows: Iterable[Row], *, op: str, dtype: str | None = None, direction: str | None = None,
                  shape: str | None = None) -> Figure:
    """The op's ladder (see plot_ladder) drawn into a Figure and returned, nothing written: one
    panel per (dtype, direction), or only those named. Unnamed combinations whose rows cannot
    make a ladder (fewer than two rungs at the size) are left out; named ones raise instead."""
    ladder = _ladder_of(op, required=True)
    rows = [r for r in rows if r.get("op") == op]
    combos = sorted({(str(r["dtype"]), str(r["direction"])) for r in rows
                     if dtype in (None, r.get("dtype")) and direction in (None, r.get("direction"))})
    if dtype is None or direction is None:
        combos = [(d, di) for d, di in combos
                  if _has_ladder(newest_run(rows, op=op, dtype=d, direction=di), ladder, shape)]
    if not combos:
        raise ValueError(f"ladder_figure: no rows for op={op!r} dtype={dtype!r} direction={direction!r} "
                         f"with two or more of its ladder variants {list(ladder)} at one size")
    fig = _notebook_figure_class()(figsize=(_LADDER_SIZE[0], _LADDER_SIZE[1] * len(combos)), layout="constrained")
    for ax, (d, di) in zip(fig.subplots(len(combos), 1, squeeze=False)[:, 0], combos):
        draw_ladder(ax, rows, op=op, dtype=d, direction=di, shape=shape, ladder=ladder)
    return fig


# The columns of BenchResult.table(), as BenchResult.frame() returns them.
TABLE_COLUMNS = ("direction", "dtype", "shape", "variant", "median_ms", "p20_ms", "p80_ms", "GBps",
                 "pct_of_ceiling", "speedup_vs_eager", "speedup_vs_compile", "host_ms", "host_bound", "verified",
                 "impossible", "clock_warning")


@dataclass
class BenchResult:
    """A benchmark's rows and notes: .table() .frame() .save() .plot() .figure() .ladder_figure()."""
    rows: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        """One line per row: medians, spread, GB/s (TFLOP/s), % of the ceiling, speedups, the host's
        time per call and what bounds the row (host, gpu, "-" for CPU rows), what the output checks
        found (ok, WRONG, IMPOSSIBLE) and the SM clock (MHz, min-max, "!" where it moved); then the notes."""
        w = max([10] + [len(str(r["variant"])) for r in self.rows])  # ladder rungs have long names
        # Compute-bound rows (matmul) show TFLOP/s and % of the matmul ceiling in those columns.
        compute = any("pct_of_matmul_ceiling" in r for r in self.rows)
        rate, pct = ("TFLOPs", "pct_of_matmul_ceiling") if compute else ("GBps", "pct_of_ceiling")
        head = (f"{'direction':9s} {'dtype':9s} {'shape':>12s} {'provider':{w}s} {'median ms':>10s} "
                f"{'p20-p80 ms':>17s} {'TFLOP/s' if compute else 'GB/s':>8s} {'%peak' if compute else '%ceil':>6s} "
                f"{'x eager':>8s} {'x compile':>9s} {'host ms':>9s} {'bound':5s} {'check':10s} {'SM MHz':>10s}")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            def f(v, spec):  # "-" in the column's width where nothing was measured (None: rows saved before the column)
                if isinstance(v, (int, float)) and not math.isnan(v):
                    return format(v, spec)
                return format("-", spec.split(".")[0] if spec[0] in "<>" else ">" + spec.split(".")[0])
            bound = {None: "-", True: "host", False: "gpu"}[host_bound(r)]
            lines.append(
                f"{r['direction']:9s} {r['dtype']:9s} {r['shape']:>12s} {r['variant']:{w}s} "
                f"{f(r['median_ms'], '10.4f')} "
                f"{f(r['p20_ms'], '8.4f') + '-' + f(r['p80_ms'], '<8.4f') if r['median_ms'] == r['median_ms'] else f(math.nan, '17')} "
                f"{f(r.get(rate, math.nan), '8.1f')} {f(r.get(pct, math.nan), '6.1f')} "
                f"{f(r['speedup_vs_eager'], '8.2f')} {f(r['speedup_vs_compile'], '9.2f')} "
                f"{f(r.get('host_ms'), '9.4f')} {bound:5s} {row_status(r):10s} {clock_text(r):>10s}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def save(self, path=None):
        """Append the rows to `path` (default workbench-results/bench.jsonl); returns the path."""
        path = path or config.output_dir() / "bench.jsonl"
        append_rows(path, self.rows)
        return path

    def plot(self, out_dir=None):
        """Save every plot as a PNG under out_dir (default workbench-results/plots); returns the paths."""
        return plot_all(self.rows, out_dir or config.output_dir() / "plots")

    def figure(self):
        """The same plots in one matplotlib Figure, returned and not saved (a notebook shows it)."""
        return figure(self.rows)

    def ladder_figure(self, op=None, **kw):
        """The op's ladder as one Figure, not saved (ladder_figure; op defaults to the rows' only op)."""
        if op is None:
            ops = sorted({r["op"] for r in self.rows})
            if len(ops) != 1:
                raise ValueError(f"ladder_figure: the rows hold ops {ops}; name one with op=")
            op = ops[0]
        return ladder_figure(self.rows, op=op, **kw)

    def frame(self, all_columns: bool = False):
        """The rows as a pandas DataFrame (needs pandas): the table's columns, or every column
        (provenance included) with all_columns=True."""
        df = to_dataframe(self.rows)
        return df if all_columns else df.reindex(columns=list(TABLE_COLUMNS))  # rows saved before a column existed

    def __repr__(self) -> str:
        return self.table()
