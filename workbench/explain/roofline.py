"""The roofline from timings alone: ops placed by arithmetic intensity (FLOPs per byte the op must
move, from its spec) and achieved FLOP/s (benchmark rows), under the device's measured ceilings: the
copy rate (a memory roof, FLOP/s = bytes/s x intensity) and cuBLAS's matmul rate per dtype (flat
compute roofs, TF32 off for float32)."""
from __future__ import annotations

import math
import pathlib
from typing import Any

Row = dict[str, Any]


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def points(rows: list[Row], *, ops=None, direction: str = "fwd", every: bool = False) -> list[dict]:
    """One point per (op, dtype) for its best variant (highest FLOP/s over the sizes timed), or per
    (op, dtype, variant) with every=True: {op, dtype, variant, shape, intensity, TFLOPs}, from the
    newest row of each (op, dtype, variant, shape) with FLOPs."""
    newest: dict[tuple, Row] = {}
    for r in rows:
        if r.get("kind") != "variant" or r.get("direction") != direction or (ops and r.get("op") not in ops):
            continue
        if r.get("verified") == "wrong" or r.get("impossible"):  # no point for a row that cannot be trusted
            continue
        if not (_finite(r.get("flops")) and r["flops"] > 0 and _finite(r.get("bytes")) and r["bytes"] > 0
                and _finite(r.get("median_ms"))):
            continue
        key = (r["op"], r["dtype"], r["variant"], r["shape"])
        if key not in newest or str(r.get("timestamp", "")) >= str(newest[key].get("timestamp", "")):
            newest[key] = r
    best: dict[tuple, Row] = {}
    for (op, dtype, variant, _), r in newest.items():
        key = (op, dtype, variant) if every else (op, dtype)
        if key not in best or r["TFLOPs"] > best[key]["TFLOPs"]:
            best[key] = r
    return [dict(op=r["op"], dtype=r["dtype"], variant=r["variant"], shape=r["shape"],
                 intensity=r["flops"] / r["bytes"], TFLOPs=r["TFLOPs"]) for r in best.values()]


def ceilings(rows: list[Row], peaks: dict | None = None) -> tuple[float | None, dict[str, float]]:
    """(copy GB/s, {dtype: matmul TFLOP/s}) from the rows (their ceiling_GBps and
    matmul_ceiling_TFLOPs), with `peaks` (dtype -> TFLOP/s) filling in dtypes the rows lack."""
    copy = max((float(r["ceiling_GBps"]) for r in rows if _finite(r.get("ceiling_GBps"))), default=None)
    found = {r["dtype"]: float(r["matmul_ceiling_TFLOPs"]) for r in rows if _finite(r.get("matmul_ceiling_TFLOPs"))}
    return copy, {**(peaks or {}), **found}


def draw(ax, rows: list[Row], *, ops=None, direction: str = "fwd", every: bool = False,
         peaks: dict | None = None) -> list[dict]:
    """Draw the roofline onto a matplotlib Axes; returns the points drawn."""
    pts = points(rows, ops=ops, direction=direction, every=every)
    if not pts:
        raise ValueError("roofline: no benchmark rows with FLOPs and bytes to place")
    copy, tops = ceilings(rows, peaks)
    lo = min(p["intensity"] for p in pts) / 4
    hi = max([p["intensity"] for p in pts] + [1.0]) * 4
    if tops and copy:
        hi = max(hi, max(tops.values()) * 1e12 / (copy * 1e9) * 4)
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    if copy:
        top = max(tops.values()) if tops else math.inf
        ax.plot(xs, [min(copy * 1e9 * x / 1e12, top) for x in xs], color="black", linewidth=1.2,
                label=f"memory roof: copy rate {copy:.0f} GB/s")
    for i, (dtype, t) in enumerate(sorted(tops.items(), key=lambda kv: -kv[1])):
        ax.axhline(t, color="grey", linestyle=("--", ":", "-.")[i % 3], linewidth=1,
                   label=f"compute roof: cuBLAS {dtype} {t:.0f} TFLOP/s" + (" (TF32 off)" if dtype == "float32" else ""))
    markers = "osD^v<>p*h"
    for i, p in enumerate(sorted(pts, key=lambda p: (p["op"], p["dtype"], p["variant"]))):
        label = f"{p['op']}/{p['variant']} {p['dtype']} {p['shape']}"
        ax.scatter([p["intensity"]], [p["TFLOPs"]], marker=markers[i % len(markers)], s=40, zorder=3, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte the op must move)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"roofline ({direction})")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: no point hidden
    return pts


def figure(rows: list[Row], path=None, **kw):
    """The roofline as a Figure; also a PNG at `path` where given."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 6), layout="constrained")
    draw(fig.add_subplot(), rows, **kw)
    if path is not None:
        pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, format="png")
    return fig
