"""The host-bound mark (issue 26, item 5): a benchmark row is host-bound when the host's time to issue
one call (calls back to back, no sync: timing.loop_ms_per_call) exceeds the GPU's time per call.
The rows carry host_ms and host_bound; the table shows the host time and a "bound" column; the
notes and the plots (legend mark, a line under the axes) name the host-bound rows. CPU rows, whose
time is the host's own, are not marked ("-", None); rows saved before the column stay readable.
On the GPU: a tiny torch.sum is host-bound, a 1 GiB one is not."""
from __future__ import annotations

import math

import pytest

from workbench.explain import plot_axes
from workbench.measure import bench_rows, timing
from workbench.explain.plot import BenchResult


def _row(variant, median_ms, host_ms=None, shape="1048576", numel=1 << 20, **kw):
    r = dict(op="reduce_sum", kind="baseline" if variant in ("eager", "compile") else "variant", dtype="float32",
             shape=shape, numel=numel, direction="fwd", variant=variant, median_ms=median_ms, p20_ms=median_ms,
             p80_ms=median_ms, GBps=4.0 * numel / (median_ms * 1e-3) / 1e9, bytes=4 * numel, verified="ok",
             impossible=False, speedup_vs_eager=math.nan, speedup_vs_compile=math.nan, run_id="r1",
             timestamp="2026-11-25T00:00:00+00:00", gpu="test GPU", ceiling_GBps=3000.0)
    if host_ms is not None:
        r["host_ms"] = host_ms
    return dict(r, **kw)


def test_host_bound_compares_the_hosts_time_with_the_gpus():
    assert bench_rows.host_bound(_row("fast", 0.008, host_ms=0.030)) is True
    assert bench_rows.host_bound(_row("fast", 0.350, host_ms=0.030)) is False
    # nothing to compare: a CPU row (host_ms not measured apart: NaN, saved as null) and an older row
    assert bench_rows.host_bound(_row("cpu", 0.5, host_ms=math.nan)) is None
    assert bench_rows.host_bound(dict(_row("cpu", 0.5), host_ms=None)) is None
    assert bench_rows.host_bound(_row("fast", 0.008)) is None
    assert bench_rows.host_bound(_row("fast", math.nan, host_ms=0.03)) is None  # a row not timed


def test_loop_ms_per_call_times_issuing_apart_from_the_sync():
    """With a fake clock: each call costs the host 0.01 ms, each sync 1 ms. The host time per call
    leaves the syncs out; the synced time spreads the closing sync over the loop's calls."""
    now = [0.0]
    calls = []

    def fn():
        calls.append(1)
        now[0] += 1e-5

    def sync():
        now[0] += 1e-3

    host, synced = timing.loop_ms_per_call(fn, gpu_ms=0.5, sync=sync, clock=lambda: now[0], loops=3)
    assert len(calls) == 3 * 10  # ~5 ms of GPU work a loop at 0.5 ms a call
    assert host == pytest.approx(0.01)
    assert synced == pytest.approx(0.01 + 1.0 / 10)
    calls.clear()
    timing.loop_ms_per_call(fn, gpu_ms=1e-4, sync=sync, clock=lambda: now[0], loops=1)
    assert len(calls) == 50  # tiny calls: at most 50, so the launch queue never fills


def test_the_table_shows_the_host_time_and_what_bounds_each_row():
    rows = [_row("fast", 0.008, host_ms=0.030), _row("eager", 0.350, host_ms=0.012, shape="16384x16384"),
            _row("cpu", 0.5, host_ms=math.nan), _row("old", 0.1)]
    lines = BenchResult(rows).table().splitlines()
    assert "host ms" in lines[0] and "bound" in lines[0]
    fast, eager, cpu, old = lines[2:]
    assert "0.0300 host " in fast and "0.0120 gpu " in eager
    assert " - " in cpu and cpu.split()[-3] == "-" and old.split()[-3] == "-"  # CPU and older rows: not marked
    assert all(line.split()[-2] == "ok" for line in (fast, eager, cpu, old))  # the check column stays second to last


def test_the_notes_name_host_bound_rows_only_when_there_are_some():
    notes = bench_rows.verdict_notes([_row("fast", 0.008, host_ms=0.030), _row("eager", 0.350, host_ms=0.012)], {3})
    host_notes = [n for n in notes if n.startswith("host-bound")]
    assert len(host_notes) == 1 and "1 of 2 rows" in host_notes[0]
    assert not [n for n in bench_rows.verdict_notes([_row("cpu", 0.5, host_ms=math.nan)], {3})
                if n.startswith("host-bound")]


def test_rows_keep_host_fields_through_the_results_file_and_older_rows_read(tmp_path):
    prov = {k: "x" for k in bench_rows.PROVENANCE_KEYS}
    full = {k: 0 for k in bench_rows.SCHEMA} | prov | {"attrs": {}}
    path = tmp_path / "rows.jsonl"
    bench_rows.append_rows(path, [dict(full, host_ms=0.03, host_bound=True), dict(full, host_ms=math.nan, host_bound=None),
                               full])  # the last one written as before the columns existed
    a, b, c = bench_rows.read_rows(path)
    assert a["host_ms"] == 0.03 and a["host_bound"] is True
    assert b["host_ms"] is None and b["host_bound"] is None and bench_rows.host_bound(b) is None
    assert "host_ms" not in c and bench_rows.host_bound(c) is None
    assert set(bench_rows.LATER_COLUMNS) == {"host_ms", "host_bound"}


def _axes():
    from matplotlib.figure import Figure

    return Figure().add_subplot()


def _texts(ax) -> str:
    return " | ".join(t.get_text() for t in ax.texts)


@pytest.mark.parametrize("panel", ["speedup", "bandwidth", "ladder"])
def test_plots_mark_host_bound_providers_in_the_legend_and_under_the_axes(panel):
    mark = plot_axes.HOST_MARK
    rows = [_row("eager", 0.010, host_ms=0.012), _row("fast", 0.008, host_ms=0.030),
            _row("vec_grid_stride", 0.009, host_ms=0.005),
            _row("eager", 0.35, host_ms=0.012, shape="16384x16384", numel=1 << 28),
            _row("fast", 0.34, host_ms=0.030, shape="16384x16384", numel=1 << 28),
            _row("vec_grid_stride", 0.345, host_ms=0.005, shape="16384x16384", numel=1 << 28)]
    ax = _axes()
    kw = dict(op="reduce_sum", dtype="float32", direction="fwd")
    if panel == "speedup":
        plot_axes.draw_speedup(ax, rows, **kw)
    elif panel == "bandwidth":
        plot_axes.draw_bandwidth(ax, rows, **kw)
    else:
        plot_axes.draw_ladder(ax, rows, shape="1048576", ladder=("vec_grid_stride", "fast"), **kw)
    names = ([t.get_text() for t in ax.get_xticklabels()] if panel == "ladder"
             else [t.get_text() for t in ax.get_legend().get_texts()])
    assert f"fast {mark}" in names and "vec_grid_stride" in names, names
    note = _texts(ax)
    assert f"{mark} host-bound" in note and "fast at 1048576" in note and "vec_grid_stride at" not in note
    if panel == "speedup":
        assert f"eager (baseline) {mark}" in names  # the baseline is host-bound at 1048576 too
    else:
        assert f"eager {mark}" in names and "eager at 1048576" in note
    # 16384x16384 is not host-bound for anyone: only the small size is named
    assert "16384x16384" not in note


def test_plots_of_older_rows_carry_no_mark():
    rows = [_row("eager", 0.010), _row("fast", 0.008)]
    ax = _axes()
    plot_axes.draw_bandwidth(ax, rows, op="reduce_sum", dtype="float32", direction="fwd")
    assert plot_axes.HOST_MARK not in " ".join(t.get_text() for t in ax.get_legend().get_texts()) + _texts(ax)


def test_a_cpu_bench_row_is_not_marked():
    """On the CPU the host does the work: the row's time is the host's, host_ms is not measured
    apart (NaN) and the row is neither host- nor GPU-bound."""
    import workbench as wb

    r = wb.bench("vector_add", variants=[], dtypes=["float32"], shapes=[(4096,)], baselines=["eager"], device="cpu",
                 budget_s=0.05)
    (row,) = r.rows
    assert math.isnan(row["host_ms"]) and row["host_bound"] is None
    assert r.table().splitlines()[2].split()[-3] == "-"


@pytest.mark.gpu
def test_gpu_rows_carry_the_host_time_and_a_tiny_sum_is_host_bound():
    """torch.sum of 1024 floats: ~2-3 us of GPU time (a graph replay) against ~5-10 us of Python and
    dispatch to issue it: host-bound. Of 2^28 floats (1 GiB, ~0.35 ms on an H100): not."""
    import workbench as wb

    r = wb.bench("reduce_sum", variants=[], dtypes=["float32"], shapes=[(1024,), (1 << 28,)], baselines=["eager"],
                 budget_s=0.2)
    small, large = r.rows
    assert small["host_ms"] > 0 and large["host_ms"] > 0
    assert small["host_bound"] is True, r.table()
    assert large["host_bound"] is False, r.table()
    assert "host " in r.table().splitlines()[2] and any(n.startswith("host-bound") for n in r.notes)
