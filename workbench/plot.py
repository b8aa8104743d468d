"""Plots of benchmark rows: speedup over a baseline and achieved bandwidth, against size; and an
op's ladder (its spec's variants in teaching order: GB/s per rung at one size, each step's speedup).

Figures are built with matplotlib's object API (``matplotlib.figure.Figure``) and saved through
the Agg renderer. That never touches pyplot's global state or backend, so it works headless
and does not change the backend of a notebook that imports the workbench. The ``_draw_*``
helpers draw onto a given Axes so tests (and notebooks) can inspect what was drawn;
``figure()`` draws every plot into one Figure that a notebook displays inline, writing nothing.
"""

from __future__ import annotations

import functools
import io
import math
import pathlib
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["figure", "ladder_figure", "plot_all", "plot_bandwidth", "plot_ladder", "plot_speedup"]

BASELINES = ("eager", "compile")
_DPI = 120

Row = dict[str, Any]


def _untrusted(r: Row) -> str:
    """"WRONG" or "IMPOSSIBLE" for a row whose output check failed or whose rate is beyond the
    device (benchmark.py): never drawn as a speedup or a rate; "" for any other row."""
    if r.get("verified") == "wrong":
        return "WRONG"
    return "IMPOSSIBLE" if r.get("impossible") else ""


def _newest_run(rows: Iterable[Row], *, op: str, dtype: str, direction: str, untrusted: bool = False) -> list[Row]:
    """The trusted rows for op/dtype/direction from the newest run_id among them (untrusted=True:
    that run's WRONG and IMPOSSIBLE rows instead, which the plots name but do not draw).

    "Newest" is the run with the latest timestamp (ISO 8601 UTC strings sort chronologically).
    Rows already filtered to one run come back unchanged.
    """
    sel = [r for r in rows if r.get("op") == op and r.get("dtype") == dtype and r.get("direction") == direction]
    if not sel:
        raise ValueError(f"no rows for op={op!r} dtype={dtype!r} direction={direction!r}")
    latest: dict[Any, str] = {}
    for r in sel:
        rid, ts = r.get("run_id"), str(r.get("timestamp") or "")
        latest[rid] = max(latest.get(rid, ""), ts)
    newest = max(latest, key=lambda rid: latest[rid])
    return [r for r in sel if r.get("run_id") == newest and bool(_untrusted(r)) == untrusted]


def _mark_untrusted(ax: Axes, rows: Iterable[Row], *, op: str, dtype: str, direction: str) -> None:
    """Name, in red under the axes, the rows of this panel that are not drawn and why."""
    bad = _newest_run(rows, op=op, dtype=dtype, direction=direction, untrusted=True)
    if bad:
        text = "not drawn: " + "; ".join(f"{r['variant']} {r['shape']} {_untrusted(r)}" for r in bad[:4]) \
            + (f"; {len(bad) - 4} more" if len(bad) > 4 else "")
        # below the x axis label, clear of the data and the legend (constrained layout makes room)
        ax.annotate(text, xy=(0, 0), xycoords="axes fraction", xytext=(0, -40), textcoords="offset points",
                    color="red", fontsize="x-small", va="top", annotation_clip=False)


def _median_by_provider(rows: list[Row]) -> dict[str, dict[str, tuple[int, float]]]:
    """provider -> shape -> (numel, median_ms); a later row for the same point wins."""
    out: dict[str, dict[str, tuple[int, float]]] = {}
    for r in rows:
        if r.get("median_ms") is None:
            continue
        out.setdefault(str(r["variant"]), {})[str(r["shape"])] = (int(r["numel"]), float(r["median_ms"]))
    return out


def _order(providers: Iterable[str]) -> list[str]:
    # Variants first in the order they were benchmarked, then the baselines in fixed order, so
    # colours and legend order are stable between plots.
    ps = list(providers)
    return [p for p in ps if p not in BASELINES] + [b for b in BASELINES if b in ps]


def _style(provider: str) -> dict[str, Any]:
    return {"linestyle": ":", "marker": "s"} if provider in BASELINES else {"linestyle": "-", "marker": "o"}


def _gpu_title(rows: list[Row]) -> str | None:
    gpus = {r.get("gpu") for r in rows if r.get("gpu")}
    return str(next(iter(gpus))) if len(gpus) == 1 else None


def _draw_speedup(ax: Axes, rows: Iterable[Row], *, op: str, dtype: str, direction: str,
                  baseline: str = "eager") -> None:
    """Draw speedup over ``baseline`` (baseline median / provider median, same shape) vs numel."""
    sel = _newest_run(rows, op=op, dtype=dtype, direction=direction)
    medians = _median_by_provider(sel)
    base = medians.get(baseline)
    if not base:
        raise ValueError(f"no {baseline!r} rows for {op} {direction} {dtype}: cannot plot speedup over it")
    for provider in _order(p for p in medians if p != baseline):
        pts = sorted(
            (numel, base[shape][1] / ms)
            for shape, (numel, ms) in medians[provider].items()
            if shape in base and ms > 0
        )
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, label=provider, **_style(provider))
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1.0, label=f"{baseline} (baseline)")
    ax.set_xscale("log")
    ax.set_xlabel("size (elements)")
    ax.set_ylabel(f"speedup over {baseline} (x)")
    ax.set_title(f"{op} {direction} {dtype}: speedup over {baseline}")
    _mark_untrusted(ax, rows, op=op, dtype=dtype, direction=direction)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title=_gpu_title(sel), fontsize="small")


def _gbps(r: Row) -> float | None:
    if r.get("GBps") is not None:
        return float(r["GBps"])
    # Fall back to the declared bytes when a writer left GBps empty.
    if r.get("bytes") and r.get("median_ms"):
        return float(r["bytes"]) / (float(r["median_ms"]) * 1e-3) / 1e9
    return None


def _ceiling(rows: list[Row]) -> float | None:
    """The rows' copy ceiling in GB/s, or None where there is none (CPU rows carry NaN)."""
    ceilings = [float(r["ceiling_GBps"]) for r in rows
                if r.get("ceiling_GBps") and math.isfinite(float(r["ceiling_GBps"]))]
    # One GPU per run, so the rows agree; max() only guards against a stray value.
    return max(ceilings) if ceilings else None


def _compute_bound(rows: list[Row]) -> bool:
    """Whether the rows are a compute-bound op's (they carry TFLOP/s against the GEMM ceiling):
    their plots show TFLOP/s and that ceiling, not GB/s and the copy ceiling."""
    return any(r.get("matmul_ceiling_TFLOPs") is not None for r in rows)


def _tflops(r: Row) -> float | None:
    return float(r["TFLOPs"]) if r.get("TFLOPs") is not None else None


def _rate(rows: list[Row]) -> tuple[Any, Any, str, float | None, str]:
    """What the rows are measured in: (row -> value or None, value -> label, axis label, ceiling
    or None, the ceiling's legend). TFLOP/s against cuBLAS's rate for a compute-bound op's rows,
    achieved GB/s against the copy rate otherwise."""
    if _compute_bound(rows):
        peaks = [float(r["matmul_ceiling_TFLOPs"]) for r in rows
                 if r.get("matmul_ceiling_TFLOPs") is not None and math.isfinite(float(r["matmul_ceiling_TFLOPs"]))]
        c = max(peaks) if peaks else None
        return (_tflops, lambda t: f"{t:.1f} TFLOP/s" if t >= 1 else f"{t:.2g} TFLOP/s", "achieved TFLOP/s", c,
                f"compute ceiling: cuBLAS at 8192^3, {c:.0f} TFLOP/s" if c else "")
    c = _ceiling(rows)
    return (_gbps, _fmt_gbps, "achieved GB/s", c,
            f"memory ceiling: copy rate {c:.0f} GB/s (bytes read + written)" if c else "")


def _draw_throughput(ax: Axes, rows: Iterable[Row], *, op: str, dtype: str, direction: str) -> None:
    """A compute-bound op's counterpart of the bandwidth panel: achieved TFLOP/s against size per
    provider, and cuBLAS's rate (the matmul ceiling) as a horizontal line."""
    sel = _newest_run(rows, op=op, dtype=dtype, direction=direction)
    value, _, ylabel, c, ceiling_label = _rate(sel)
    points: dict[str, dict[str, tuple[int, float]]] = {}
    for r in sel:
        t = value(r)
        if t is not None and r.get("flops"):
            points.setdefault(str(r["variant"]), {})[str(r["shape"])] = (int(r["flops"]), t)
    if not points:
        raise ValueError(f"no TFLOP/s in the rows for {op} {direction} {dtype}")
    for provider in _order(points):
        xs, ys = zip(*sorted(points[provider].values()))
        ax.plot(xs, ys, label=provider, **_style(provider))
    if c is not None:
        ax.axhline(c, color="black", linestyle="--", linewidth=1.0, label=ceiling_label)
    ax.set_xscale("log")
    ax.set_xlabel("work (FLOPs per call)")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{op} {direction} {dtype}: achieved TFLOP/s")
    _mark_untrusted(ax, rows, op=op, dtype=dtype, direction=direction)
    ax.set_ylim(bottom=0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title=_gpu_title(sel), fontsize="x-small", loc="best")


def _draw_bandwidth(ax: Axes, rows: Iterable[Row], *, op: str, dtype: str, direction: str) -> None:
    """Draw achieved GB/s vs numel per provider, and the copy ceiling as a horizontal line."""
    sel = _newest_run(rows, op=op, dtype=dtype, direction=direction)
    points: dict[str, dict[str, tuple[int, float]]] = {}
    for r in sel:
        g = _gbps(r)
        if g is not None:
            points.setdefault(str(r["variant"]), {})[str(r["shape"])] = (int(r["numel"]), g)
    if not points:
        raise ValueError(f"no bandwidth (GBps or bytes) in the rows for {op} {direction} {dtype}")
    for provider in _order(points):
        xs, ys = zip(*sorted(points[provider].values()))
        ax.plot(xs, ys, label=provider, **_style(provider))
    c = _ceiling(sel)
    if c is not None:
        ax.axhline(c, color="black", linestyle="--", linewidth=1.0, label=f"copy ceiling {c:.0f} GB/s")
    ax.set_xscale("log")
    ax.set_xlabel("size (elements)")
    ax.set_ylabel("achieved GB/s")
    ax.set_title(f"{op} {direction} {dtype}: achieved bandwidth")
    _mark_untrusted(ax, rows, op=op, dtype=dtype, direction=direction)
    ax.set_ylim(bottom=0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title=_gpu_title(sel), fontsize="small")


def _fmt_gbps(g: float) -> str:
    return f"{g:.0f} GB/s" if g >= 10 else f"{g:.2g} GB/s"


def _by_shape(sel: list[Row]) -> dict[str, dict[str, Row]]:
    """shape -> provider -> its row, for the timed rows with a bandwidth; a later row for the same
    point wins. Shapes keep the order the rows give them (the order they were benchmarked in)."""
    out: dict[str, dict[str, Row]] = {}
    for r in sel:
        if r.get("median_ms") is not None and float(r["median_ms"]) > 0 and (_gbps(r) or _tflops(r)) is not None:
            out.setdefault(str(r["shape"]), {})[str(r["variant"])] = r
    return out


def _ladder_at(by_shape: dict[str, dict[str, Row]], ladder: tuple[str, ...], shape: str | None,
               what: str) -> tuple[str, list[str]]:
    """(the shape, the ladder variants with rows there, in ladder order). shape=None picks the
    largest numel at which two or more rungs have rows (the first benchmarked of equal numels)."""
    if shape is None:
        fit = [s for s, at in by_shape.items() if sum(v in at for v in ladder) >= 2]
        if not fit:
            raise ValueError(f"ladder: {what} has no size at which two or more of its ladder variants "
                             f"{list(ladder)} have rows")
        shape = max(fit, key=lambda s: int(next(iter(by_shape[s].values()))["numel"]))
    if shape not in by_shape:
        raise ValueError(f"ladder: no rows for {what} at shape {shape!r}; its shapes: {list(by_shape)}")
    rungs = [v for v in ladder if v in by_shape[shape]]
    if len(rungs) < 2:
        raise ValueError(f"ladder: {what} {shape} has rows for {len(rungs)} of its ladder variants "
                         f"{list(ladder)} ({rungs}); a ladder needs two or more")
    return shape, rungs


def _draw_ladder(ax: Axes, rows: Iterable[Row], *, op: str, dtype: str, direction: str,
                 shape: str | None = None, ladder: tuple[str, ...]) -> None:
    """Draw the ladder at one size of the newest run: a bar of achieved GB/s per rung with rows, in
    ladder order, each labelled with its GB/s and (from the second on) its speedup over the rung
    before it; the first-to-last speedup in a text box; the baselines after the rungs as grey
    hatched bars outside that chain; the copy ceiling as a dashed line where the rows have one.
    A compute-bound op's rows (_rate): TFLOP/s and the matmul ceiling instead.

    shape: a shape label such as "16384x16384" (default: the largest size with two or more rungs).
    """
    sel = _newest_run(rows, op=op, dtype=dtype, direction=direction)
    by_shape = _by_shape(sel)
    shape, rungs = _ladder_at(by_shape, ladder, shape, f"{op} {direction} {dtype}")
    at = by_shape[shape]
    baselines = [b for b in BASELINES if b in at] + [
        v for v, r in at.items() if r.get("kind") == "baseline" and v not in BASELINES and v not in ladder]
    value, fmt, ylabel, c, ceiling_label = _rate(sel)
    ms = {v: float(at[v]["median_ms"]) for v in rungs}
    heights = [float(value(at[v]) or 0.0) for v in rungs + baselines]

    bars = ax.bar(range(len(rungs)), heights[:len(rungs)], color="C0", label="ladder rungs")
    labels = [fmt(heights[0])] + [f"{fmt(h)}\nx{ms[prev] / ms[v]:.2f}"
                                  for prev, v, h in zip(rungs, rungs[1:], heights[1:])]
    # A white backing keeps a label readable where the ceiling line crosses it.
    text = {"padding": 2, "fontsize": "x-small", "bbox": {"facecolor": "white", "edgecolor": "none", "pad": 0.5}}
    ax.bar_label(bars, labels=labels, **text)
    if baselines:
        bars = ax.bar(range(len(rungs), len(heights)), heights[len(rungs):], color="lightgray",
                      edgecolor="dimgray", hatch="//", label="baselines (not rungs)")
        ax.bar_label(bars, labels=[fmt(h) for h in heights[len(rungs):]], **text)
    top = max(heights)
    if c is not None:
        ax.axhline(c, color="black", linestyle="--", linewidth=1.0, label=ceiling_label)
        top = max(top, c)
    ax.text(0.02, 0.97, f"{rungs[0]} -> {rungs[-1]}: x{ms[rungs[0]] / ms[rungs[-1]]:.2f} overall",
            transform=ax.transAxes, ha="left", va="top", fontsize="small",
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85})
    ax.set_xticks(range(len(heights)), rungs + baselines, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, top * 1.55)  # room above the bars for their labels, the text box and the legend
    ax.set_title(f"{op} {direction} {dtype} {shape}: the ladder")
    _mark_untrusted(ax, rows, op=op, dtype=dtype, direction=direction)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(title=_gpu_title(sel), fontsize="small", loc="upper right")


def _new_figure(figsize: tuple[float, float] = (7.0, 4.5)) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def _save(fig: Figure, out_path: pathlib.Path) -> pathlib.Path:
    out_path = pathlib.Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=_DPI, format="png")
    fig.clear()  # a pyplot-free Figure is freed with its last reference; clear() drops artists now
    return out_path


def plot_speedup(rows: list[Row], out_path: pathlib.Path, *, op: str, dtype: str, direction: str,
                 baseline: str = "eager") -> pathlib.Path:
    """Save a PNG of speedup over ``baseline`` against size, one line per other provider."""
    fig, ax = _new_figure()
    _draw_speedup(ax, rows, op=op, dtype=dtype, direction=direction, baseline=baseline)
    return _save(fig, out_path)


def plot_bandwidth(rows: list[Row], out_path: pathlib.Path, *, op: str, dtype: str,
                   direction: str) -> pathlib.Path:
    """Save a PNG of achieved GB/s against size, one line per provider, with the copy ceiling."""
    fig, ax = _new_figure()
    _draw_bandwidth(ax, rows, op=op, dtype=dtype, direction=direction)
    return _save(fig, out_path)


_LADDER_SIZE = (9.0, 5.0)


def _ladder_of(op: str) -> tuple[str, ...]:
    """The op's declared ladder; () when it declares none or is not an op in this checkout."""
    from . import registry

    try:
        return tuple(getattr(registry.spec(op), "ladder", ()) or ())
    except ValueError:
        return ()


def _declared_ladder(op: str) -> tuple[str, ...]:
    ladder = _ladder_of(op)
    if not ladder:
        raise ValueError(f"op {op!r} declares no ladder (its spec's ladder is empty, or it is not an op "
                         f"in this checkout)")
    return ladder


def plot_ladder(rows: list[Row], out_path: pathlib.Path, *, op: str, dtype: str, direction: str,
                shape: str | None = None) -> pathlib.Path:
    """Save a PNG of the op's ladder (its spec's ``ladder``) at one size: GB/s per rung with the
    step-to-step speedups, the baselines and the copy ceiling. See _draw_ladder."""
    fig, ax = _new_figure(_LADDER_SIZE)
    _draw_ladder(ax, rows, op=op, dtype=dtype, direction=direction, shape=shape, ladder=_declared_ladder(op))
    return _save(fig, out_path)


def _token(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "", s.replace("fwd+bwd", "fwdbwd")) or "unknown"


def _panels(rows: list[Row]) -> list[tuple[str, str, str, list[Row], list[str]]]:
    """(op, dtype, direction, its newest run's rows, panels) for each combination in the rows, where
    the panels are those the rows support, in order: "speedup_vs_eager" and "speedup_vs_compile"
    when that baseline was run, and "throughput" (TFLOP/s) for a compute-bound op's rows or else
    "bandwidth" when bandwidth is known."""
    out = []
    for op, dtype, direction in sorted({(str(r["op"]), str(r["dtype"]), str(r["direction"])) for r in rows}):
        sel = _newest_run(rows, op=op, dtype=dtype, direction=direction)
        providers = {r.get("variant") for r in sel if r.get("median_ms") is not None}
        sel += _newest_run(rows, op=op, dtype=dtype, direction=direction, untrusted=True)  # named, not drawn
        panels = [f"speedup_vs_{b}" for b in BASELINES if b in providers]
        if _compute_bound(sel):
            panels.append("throughput")
        elif any(_gbps(r) is not None for r in sel):
            panels.append("bandwidth")
        out.append((op, dtype, direction, sel, panels))
    return out


def _draw_panel(ax: Axes, panel: str, rows: list[Row], *, op: str, dtype: str, direction: str) -> None:
    if panel == "bandwidth":
        _draw_bandwidth(ax, rows, op=op, dtype=dtype, direction=direction)
    elif panel == "throughput":
        _draw_throughput(ax, rows, op=op, dtype=dtype, direction=direction)
    else:
        _draw_speedup(ax, rows, op=op, dtype=dtype, direction=direction, baseline=panel.rsplit("_", 1)[1])


def plot_all(rows: list[Row], out_dir: pathlib.Path) -> list[pathlib.Path]:
    """Every plot the rows support, for each (op, dtype, direction) present; returns the paths.

    Per combination (its newest run): ``<op>_<direction>_<dtype>_speedup_vs_eager.png`` and
    ``..._speedup_vs_compile.png`` when that baseline was run, and ``..._throughput.png`` (TFLOP/s,
    compute-bound ops) or ``..._bandwidth.png`` when bandwidth is known; ``..._ladder.png`` when the op's spec declares a ladder and two or more of
    its rungs have rows at some size (drawn at the largest such size). "fwd+bwd" is written
    "fwdbwd" in file names. ``roofline_fwd.png`` (and ``roofline_fwdbwd.png``): every op's best
    variant per dtype by arithmetic intensity and TFLOP/s (workbench/roofline.py).
    """
    out_dir = pathlib.Path(out_dir)
    paths: list[pathlib.Path] = []
    ladders: dict[str, tuple[str, ...]] = {}
    for op, dtype, direction, sel, panels in _panels(rows):
        stem = f"{_token(op)}_{_token(direction)}_{_token(dtype)}"
        for panel in panels:
            fig, ax = _new_figure()
            _draw_panel(ax, panel, sel, op=op, dtype=dtype, direction=direction)
            paths.append(_save(fig, out_dir / f"{stem}_{panel}.png"))
        if op not in ladders:
            ladders[op] = _ladder_of(op)
        if _has_ladder(sel, ladders[op]):
            fig, ax = _new_figure(_LADDER_SIZE)
            _draw_ladder(ax, sel, op=op, dtype=dtype, direction=direction, ladder=ladders[op])
            paths.append(_save(fig, out_dir / f"{stem}_ladder.png"))
    from . import roofline
    for direction in ("fwd", "fwd+bwd"):  # every op's best variant per dtype under the measured roofs
        if roofline.points(rows, direction=direction):
            fig, ax = _new_figure((12.0, 6.0))
            roofline.draw(ax, rows, direction=direction)
            paths.append(_save(fig, out_dir / f"roofline_{_token(direction)}.png"))
    return paths


def _has_ladder(sel: list[Row], ladder: tuple[str, ...], shape: str | None = None) -> bool:
    """Whether _draw_ladder can draw these rows (one run's): two or more rungs at the shape."""
    try:
        _ladder_at(_by_shape(sel), ladder, shape, "")
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
    """Every plot that plot_all() would save, drawn into one Figure and returned, nothing written:
    a row of panels (speedup over eager, over torch.compile, achieved GB/s) per (op, dtype,
    direction). The last expression of a notebook cell displays it inline."""
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
    ladder = _declared_ladder(op)
    rows = [r for r in rows if r.get("op") == op]
    combos = sorted({(str(r["dtype"]), str(r["direction"])) for r in rows
                     if dtype in (None, r.get("dtype")) and direction in (None, r.get("direction"))})
    if dtype is None or direction is None:
        combos = [(d, di) for d, di in combos
                  if _has_ladder(_newest_run(rows, op=op, dtype=d, direction=di), ladder, shape)]
    if not combos:
        raise ValueError(f"ladder_figure: no rows for op={op!r} dtype={dtype!r} direction={direction!r} "
                         f"with two or more of its ladder variants {list(ladder)} at one size")
    fig = _notebook_figure_class()(figsize=(_LADDER_SIZE[0], _LADDER_SIZE[1] * len(combos)), layout="constrained")
    for ax, (d, di) in zip(fig.subplots(len(combos), 1, squeeze=False)[:, 0], combos):
        _draw_ladder(ax, rows, op=op, dtype=d, direction=di, shape=shape, ladder=ladder)
    return fig
