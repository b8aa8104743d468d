"""Drawing benchmark rows onto a given matplotlib Axes (plot.py makes the figures and files from
these): speedup and rate curves against size, the ladder's bars, and, named under the axes, the
rows that are not drawn (wrong, impossible) and the host-bound ones (marked in the legend too).
Tests and notebooks inspect what was drawn."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..measure.bench_rows import BASELINES, host_bound, row_status, trusted

if TYPE_CHECKING:
    from matplotlib.axes import Axes

Row = dict[str, Any]
# Appended to a host-bound provider's legend entry (or ladder bar): bench_rows.host_bound.
HOST_MARK = "\u2020"


def _untrusted(r: Row) -> str:
    """"WRONG" or "IMPOSSIBLE" for a row never drawn (bench_rows.trusted); "" for any other."""
    return "" if trusted(r) else row_status(r)


def newest_run(rows: Iterable[Row], *, op: str, dtype: str, direction: str, untrusted: bool = False) -> list[Row]:
    """The trusted rows for op/dtype/direction from the run_id with the latest timestamp
    (untrusted=True: that run's WRONG and IMPOSSIBLE rows, which the plots name but do not draw)."""
    sel = [r for r in rows if r.get("op") == op and r.get("dtype") == dtype and r.get("direction") == direction]
    if not sel:
        raise ValueError(f"no rows for op={op!r} dtype={dtype!r} direction={direction!r}")
    latest: dict[Any, str] = {}
    for r in sel:
        rid, ts = r.get("run_id"), str(r.get("timestamp") or "")
        latest[rid] = max(latest.get(rid, ""), ts)
    newest = max(latest, key=lambda rid: latest[rid])
    return [r for r in sel if r.get("run_id") == newest and bool(_untrusted(r)) == untrusted]


def host_bound_shapes(sel: Iterable[Row]) -> dict[str, list[str]]:
    """provider -> the shapes at which its row is host-bound, for the rows drawn."""
    out: dict[str, list[str]] = {}
    for r in sel:
        if host_bound(r):
            out.setdefault(str(r["variant"]), []).append(str(r["shape"]))
    return out


def _label(provider: str, hosts: dict[str, list[str]]) -> str:
    return f"{provider} {HOST_MARK}" if provider in hosts else provider


def _under_axes(ax: Axes, text: str, offset: float, color: str) -> None:
    # below the x axis label, clear of the data and the legend (constrained layout makes room)
    ax.annotate(text, xy=(0, 0), xycoords="axes fraction", xytext=(0, offset), textcoords="offset points",
                color=color, fontsize="x-small", va="top", annotation_clip=False)


def _listed(items: list[str]) -> str:
    return "; ".join(items[:4]) + (f"; {len(items) - 4} more" if len(items) > 4 else "")


def _mark_rows(ax: Axes, rows: Iterable[Row], sel: list[Row], *, op: str, dtype: str, direction: str) -> None:
    """Name under the axes, in red, the rows of this panel that are not drawn and why; under that,
    in grey, the host-bound rows drawn (their providers carry HOST_MARK in the legend)."""
    bad = newest_run(rows, op=op, dtype=dtype, direction=direction, untrusted=True)
    if bad:
        _under_axes(ax, "not drawn: " + _listed([f"{r['variant']} {r['shape']} {_untrusted(r)}" for r in bad]), -40,
                    "red")
    hosts = host_bound_shapes(sel)
    if hosts:
        _under_axes(ax, f"{HOST_MARK} host-bound (issuing a call took the host longer than the GPU's time per call): "
                    + _listed([f"{p} at {', '.join(shapes)}" for p, shapes in hosts.items()]), -52 if bad else -40,
                    "dimgray")


Points = dict[str, dict[str, tuple[float, float]]]


def _points(rows: list[Row], x: Callable[[Row], float], y: Callable[[Row], float | None]) -> Points:
    """provider -> shape -> (x, y) for the rows where y is known; a later row for the same point wins."""
    out: Points = {}
    for r in rows:
        v = y(r)
        if v is not None:
            out.setdefault(str(r["variant"]), {})[str(r["shape"])] = (x(r), v)
    return out


def _numel(r: Row) -> int:
    return int(r["numel"])


def _order(providers: Iterable[str]) -> list[str]:
    # Variants in the order benchmarked, then the baselines in fixed order: stable colours and legends.
    ps = list(providers)
    return [p for p in ps if p not in BASELINES] + [b for b in BASELINES if b in ps]


def _gpu_title(rows: list[Row]) -> str | None:
    gpus = {r.get("gpu") for r in rows if r.get("gpu")}
    return str(next(iter(gpus))) if len(gpus) == 1 else None


def _draw_curves(ax: Axes, rows: Iterable[Row], sel: list[Row], points: Points, *, level: float | None,
                 level_label: str, level_color: str, xlabel: str, ylabel: str, title: str, op: str, dtype: str,
                 direction: str, legend_size: str = "small", from_zero: bool = True) -> None:
    """One curve per provider through its (size, value) points, a horizontal line at `level` (a
    ceiling, or the baseline), and the rows that are not drawn (wrong, impossible) named under the axes."""
    hosts = host_bound_shapes(sel)
    for provider in _order(points):
        xs, ys = zip(*sorted(points[provider].values()))
        style = {"linestyle": ":", "marker": "s"} if provider in BASELINES else {"linestyle": "-", "marker": "o"}
        ax.plot(xs, ys, label=_label(provider, hosts), **style)
    if level is not None:
        ax.axhline(level, color=level_color, linestyle="--", linewidth=1.0, label=level_label)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{op} {direction} {dtype}: {title}")
    _mark_rows(ax, rows, sel, op=op, dtype=dtype, direction=direction)
    if from_zero:
        ax.set_ylim(bottom=0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title=_gpu_title(sel), fontsize=legend_size, loc="best")


def draw_speedup(ax: Axes, rows: Iterable[Row], *, op: str, dtype: str, direction: str,
                 baseline: str = "eager") -> None:
    """Draw speedup over ``baseline`` (baseline median / provider median, same shape) vs numel."""
    sel = newest_run(rows, op=op, dtype=dtype, direction=direction)
    medians = _points(sel, _numel, lambda r: None if r.get("median_ms") is None else float(r["median_ms"]))
    base = medians.pop(baseline, None)
    if not base:
        raise ValueError(f"no {baseline!r} rows for {op} {direction} {dtype}: cannot plot speedup over it")
    speedups = {p: {s: (n, base[s][1] / ms) for s, (n, ms) in at.items() if s in base and ms > 0}
                for p, at in medians.items()}
    _draw_curves(ax, rows, sel, {p: at for p, at in speedups.items() if at}, level=1.0, level_color="gray",
                 level_label=f"{baseline} (baseline)" + (f" {HOST_MARK}" if baseline in host_bound_shapes(sel) else ""),
                 xlabel="size (elements)", ylabel=f"speedup over {baseline} (x)", title=f"speedup over {baseline}",
                 op=op, dtype=dtype, direction=direction, from_zero=False)


def gbps(r: Row) -> float | None:
    """The row's GB/s, or its declared bytes over its median where a writer left GBps empty."""
    if r.get("GBps") is not None:
        return float(r["GBps"])
    if r.get("bytes") and r.get("median_ms"):
        return float(r["bytes"]) / (float(r["median_ms"]) * 1e-3) / 1e9
    return None


def _ceiling(rows: list[Row], key: str = "ceiling_GBps") -> float | None:
    """The rows' ceiling (copy GB/s, or matmul_ceiling_TFLOPs), or None (CPU rows carry NaN)."""
    return max((float(r[key]) for r in rows if r.get(key) and math.isfinite(float(r[key]))), default=None)


def compute_bound(rows: list[Row]) -> bool:
    """Whether the rows are a compute-bound op's (TFLOP/s against the GEMM ceiling, not GB/s)."""
    return any(r.get("matmul_ceiling_TFLOPs") is not None for r in rows)


def _tflops(r: Row) -> float | None:
    return float(r["TFLOPs"]) if r.get("TFLOPs") is not None else None


def _rate(rows: list[Row]) -> tuple[Any, Any, str, float | None, str]:
    """What the rows are measured in: (row -> value or None, value -> label, axis label, ceiling
    or None, the ceiling's legend). TFLOP/s against cuBLAS's rate for a compute-bound op's rows,
    achieved GB/s against the copy rate otherwise."""
    if compute_bound(rows):
        c = _ceiling(rows, "matmul_ceiling_TFLOPs")
        return (_tflops, lambda t: f"{t:.1f} TFLOP/s" if t >= 1 else f"{t:.2g} TFLOP/s", "achieved TFLOP/s", c,
                f"compute ceiling: cuBLAS at 8192^3, {c:.0f} TFLOP/s" if c else "")
    c = _ceiling(rows)
    return (gbps, lambda g: f"{g:.0f} GB/s" if g >= 10 else f"{g:.2g} GB/s", "achieved GB/s", c,
            f"memory ceiling: copy rate {c:.0f} GB/s (bytes read + written)" if c else "")


def draw_throughput(ax: Axes, rows: Iterable[Row], *, op: str, dtype: str, direction: str) -> None:
    """A compute-bound op's bandwidth panel: achieved TFLOP/s against work per provider, under
    cuBLAS's rate (the matmul ceiling)."""
    sel = newest_run(rows, op=op, dtype=dtype, direction=direction)
    points = _points(sel, lambda r: int(r["flops"]), lambda r: _tflops(r) if r.get("flops") else None)
    if not points:
        raise ValueError(f"no TFLOP/s in the rows for {op} {direction} {dtype}")
    _, _, ylabel, c, ceiling_label = _rate(sel)
    _draw_curves(ax, rows, sel, points, level=c, level_label=ceiling_label, level_color="black",
                 xlabel="work (FLOPs per call)", ylabel=ylabel, title="achieved TFLOP/s", op=op, dtype=dtype,
                 direction=direction, legend_size="x-small")


def draw_bandwidth(ax: Axes, rows: Iterable[Row], *, op: str, dtype: str, direction: str) -> None:
    """Draw achieved GB/s vs numel per provider, and the copy ceiling as a horizontal line."""
    sel = newest_run(rows, op=op, dtype=dtype, direction=direction)
    points = _points(sel, _numel, gbps)
    if not points:
        raise ValueError(f"no bandwidth (GBps or bytes) in the rows for {op} {direction} {dtype}")
    c = _ceiling(sel)
    _draw_curves(ax, rows, sel, points, level=c, level_label=f"copy ceiling {c:.0f} GB/s" if c else "",
                 level_color="black", xlabel="size (elements)", ylabel="achieved GB/s", title="achieved bandwidth",
                 op=op, dtype=dtype, direction=direction)


def rows_by_shape(sel: list[Row]) -> dict[str, dict[str, Row]]:
    """shape -> provider -> its row, for the timed rows with a bandwidth; a later row for the same
    point wins. Shapes keep the order the rows give them (the order they were benchmarked in)."""
    out: dict[str, dict[str, Row]] = {}
    for r in sel:
        if r.get("median_ms") is not None and float(r["median_ms"]) > 0 and (gbps(r) or _tflops(r)) is not None:
            out.setdefault(str(r["shape"]), {})[str(r["variant"])] = r
    return out


def ladder_at(by_shape: dict[str, dict[str, Row]], ladder: tuple[str, ...], shape: str | None,
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


def draw_ladder(ax: Axes, rows: Iterable[Row], *, op: str, dtype: str, direction: str,
                 shape: str | None = None, ladder: tuple[str, ...]) -> None:
    """Draw the ladder at one size of the newest run (shape: e.g. "16384x16384"; default: the largest
    with two or more rungs): a bar of achieved GB/s (TFLOP/s: _rate) per rung in ladder order, each
    labelled with its speedup over the rung before; the first-to-last speedup in a text box; the
    baselines as grey hatched bars after them; the ceiling as a dashed line where known."""
    sel = newest_run(rows, op=op, dtype=dtype, direction=direction)
    by_shape = rows_by_shape(sel)
    shape, rungs = ladder_at(by_shape, ladder, shape, f"{op} {direction} {dtype}")
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
    hosts = host_bound_shapes(at.values())
    ax.set_xticks(range(len(heights)), [_label(v, hosts) for v in rungs + baselines], rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, top * 1.55)  # room above the bars for their labels, the text box and the legend
    ax.set_title(f"{op} {direction} {dtype} {shape}: the ladder")
    _mark_rows(ax, rows, list(at.values()), op=op, dtype=dtype, direction=direction)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(title=_gpu_title(sel), fontsize="small", loc="upper right")
