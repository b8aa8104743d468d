"""Tests for workbench.plot: what is drawn (labels, scales, ceiling) and which files are written."""

from __future__ import annotations

import pathlib

import pytest
from matplotlib.figure import Figure

from workbench.plot import _draw_bandwidth, _draw_speedup, plot_all, plot_bandwidth, plot_speedup

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SIZES = [(64, 64), (512, 512), (4096, 4096)]
# median ms at each size: vec4 fastest, then scalar, compile, eager
TIMES = {"scalar": 0.8, "vec4": 0.5, "eager": 1.0, "compile": 0.9}
CEILING = 2000.0


def synthetic_rows(run_id: str = "run2", timestamp: str = "2025-02-01T00:00:00+00:00",
                   direction: str = "fwd", providers: tuple[str, ...] = ("scalar", "vec4", "eager", "compile"),
                   scale: float = 1.0) -> list[dict]:
    rows = []
    for rows_, cols in SIZES:
        numel = rows_ * cols
        for p in providers:
            ms = TIMES[p] * scale * numel / 2**20
            nbytes = 8 * numel
            rows.append({
                "op": "bias_gelu", "variant": p, "kind": "baseline" if p in ("eager", "compile") else "variant",
                "dtype": "float32", "shape": f"{rows_}x{cols}", "numel": numel, "direction": direction,
                "median_ms": ms, "bytes": nbytes, "GBps": nbytes / (ms * 1e-3) / 1e9,
                "ceiling_GBps": CEILING, "run_id": run_id, "timestamp": timestamp, "gpu": "Test GPU",
            })
    return rows


def fresh_axes():
    return Figure().add_subplot()


def line(ax, label: str):
    (match,) = [ln for ln in ax.get_lines() if ln.get_label() == label]
    return match


def test_draw_speedup_over_eager() -> None:
    ax = fresh_axes()
    _draw_speedup(ax, synthetic_rows(), op="bias_gelu", dtype="float32", direction="fwd")
    _, labels = ax.get_legend_handles_labels()
    assert labels == ["scalar", "vec4", "compile", "eager (baseline)"]
    assert ax.get_xscale() == "log"
    assert ax.get_xlabel() and "speedup over eager" in ax.get_ylabel()
    assert ax.get_title() == "bias_gelu fwd float32: speedup over eager"
    vec4 = line(ax, "vec4")
    assert list(vec4.get_xdata()) == [64 * 64, 512 * 512, 4096 * 4096]
    assert list(vec4.get_ydata()) == pytest.approx([2.0] * 3)  # eager 1.0 / vec4 0.5
    base = line(ax, "eager (baseline)")
    assert base.get_linestyle() == "--" and list(base.get_ydata()) == [1.0, 1.0]


def test_draw_speedup_over_compile() -> None:
    ax = fresh_axes()
    _draw_speedup(ax, synthetic_rows(), op="bias_gelu", dtype="float32", direction="fwd", baseline="compile")
    _, labels = ax.get_legend_handles_labels()
    assert labels == ["scalar", "vec4", "eager", "compile (baseline)"]
    assert list(line(ax, "eager").get_ydata()) == pytest.approx([0.9] * 3)
    assert ax.get_title().endswith("speedup over compile")


def test_newest_run_is_used() -> None:
    old = synthetic_rows(run_id="run1", timestamp="2025-01-01T00:00:00+00:00", scale=100.0)
    old = [r | {"variant": "retired"} if r["variant"] == "scalar" else r for r in old]
    new = synthetic_rows(run_id="run2", timestamp="2025-02-01T00:00:00+00:00")
    ax = fresh_axes()
    _draw_speedup(ax, new + old, op="bias_gelu", dtype="float32", direction="fwd")  # order irrelevant
    _, labels = ax.get_legend_handles_labels()
    assert "retired" not in labels and "scalar" in labels


def test_missing_baseline_is_a_clear_error() -> None:
    rows = synthetic_rows(providers=("scalar", "vec4"))
    with pytest.raises(ValueError, match="eager"):
        _draw_speedup(fresh_axes(), rows, op="bias_gelu", dtype="float32", direction="fwd")
    with pytest.raises(ValueError, match="no rows"):
        _draw_speedup(fresh_axes(), rows, op="other", dtype="float32", direction="fwd")


def test_draw_bandwidth_with_ceiling() -> None:
    ax = fresh_axes()
    _draw_bandwidth(ax, synthetic_rows(), op="bias_gelu", dtype="float32", direction="fwd")
    _, labels = ax.get_legend_handles_labels()
    assert labels == ["scalar", "vec4", "eager", "compile", f"copy ceiling {CEILING:.0f} GB/s"]
    ceiling = line(ax, "copy ceiling 2000 GB/s")
    assert list(ceiling.get_ydata()) == [CEILING, CEILING]
    assert ax.get_xscale() == "log"
    assert "GB/s" in ax.get_ylabel() and ax.get_xlabel()
    assert ax.get_title() == "bias_gelu fwd float32: achieved bandwidth"


def assert_png(path: pathlib.Path) -> None:
    assert path.is_file()
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 1000


def test_plot_functions_write_pngs(tmp_path: pathlib.Path) -> None:
    rows = synthetic_rows()
    out = plot_speedup(rows, tmp_path / "sub" / "s.png", op="bias_gelu", dtype="float32", direction="fwd")
    assert out == tmp_path / "sub" / "s.png"
    assert_png(out)
    out = plot_bandwidth(rows, tmp_path / "b.png", op="bias_gelu", dtype="float32", direction="fwd")
    assert_png(out)


def test_plot_all_file_names(tmp_path: pathlib.Path) -> None:
    rows = synthetic_rows() + synthetic_rows(direction="fwd+bwd", providers=("vec4", "eager"))
    paths = plot_all(rows, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == [
        "bias_gelu_fwd_float32_bandwidth.png",
        "bias_gelu_fwd_float32_speedup_vs_compile.png",
        "bias_gelu_fwd_float32_speedup_vs_eager.png",
        "bias_gelu_fwdbwd_float32_bandwidth.png",  # no compile rows -> no vs-compile plot
        "bias_gelu_fwdbwd_float32_speedup_vs_eager.png",
    ]
    for p in paths:
        assert p.parent == tmp_path
        assert_png(p)


def test_figure_draws_every_plot_in_one_figure_and_writes_nothing(tmp_path: pathlib.Path, monkeypatch) -> None:
    """BenchResult.figure() for notebooks: the panels plot_all() would save, one row per
    (op, dtype, direction), shown by Jupyter as a PNG without pyplot."""
    from workbench.plot import figure

    monkeypatch.chdir(tmp_path)
    rows = synthetic_rows() + synthetic_rows(direction="fwd+bwd", providers=("vec4", "eager"))
    fig = figure(rows)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == [
        "bias_gelu fwd float32: speedup over eager",
        "bias_gelu fwd float32: speedup over compile",
        "bias_gelu fwd float32: achieved bandwidth",
        "bias_gelu fwd+bwd float32: speedup over eager",  # no compile rows: that panel is left empty
        "bias_gelu fwd+bwd float32: achieved bandwidth",
    ]
    assert len(fig.axes) == 6
    assert fig._repr_png_()[:8] == PNG_SIGNATURE
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match="no benchmark rows"):
        figure([])


def test_rows_without_a_ceiling_draw_no_ceiling_line() -> None:
    """CPU rows carry ceiling_GBps = NaN: no 'copy ceiling nan GB/s' line."""
    rows = [r | {"ceiling_GBps": float("nan")} for r in synthetic_rows()]
    ax = fresh_axes()
    _draw_bandwidth(ax, rows, op="bias_gelu", dtype="float32", direction="fwd")
    _, labels = ax.get_legend_handles_labels()
    assert labels == ["scalar", "vec4", "eager", "compile"]


def test_bench_result_figure_and_frame() -> None:
    pytest.importorskip("pandas")
    from workbench.benchmark import TABLE_COLUMNS, BenchResult

    r = BenchResult(rows=synthetic_rows())
    assert len(r.figure().axes) == 3
    df = r.frame()
    assert list(df.columns) == list(TABLE_COLUMNS) and len(df) == len(r.rows)
    assert "run_id" in r.frame(all_columns=True).columns
