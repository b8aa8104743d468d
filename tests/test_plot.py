"""Tests for workbench.explain.plot: what is drawn (labels, scales, ceiling) and which files are written."""

from __future__ import annotations

import pathlib

import pytest
from matplotlib.figure import Figure

from workbench.explain.plot import ladder_figure, plot_all, plot_bandwidth, plot_ladder, plot_speedup
from workbench.explain.plot_axes import draw_bandwidth, draw_ladder, draw_speedup

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SIZES = [(64, 64), (512, 512), (4096, 4096)]
# median ms at each size: vec4 fastest, then scalar, compile, eager
TIMES = {"scalar": 0.8, "vec4": 0.5, "eager": 1.0, "compile": 0.9}
CEILING = 2000.0


def synthetic_rows(run_id: str = "run2", timestamp: str = "2025-02-01T00:00:00+00:00",
                   direction: str = "fwd", providers: tuple[str, ...] = ("scalar", "vec4", "eager", "compile"),
                   scale: float = 1.0, *, op: str = "bias_gelu", dtype: str = "float32",
                   times: dict[str, float] = TIMES, sizes=SIZES,
                   baselines: tuple[str, ...] = ("eager", "compile")) -> list[dict]:
    rows = []
    for rows_, cols in sizes:
        numel = rows_ * cols
        for p in providers:
            ms = times[p] * scale * numel / 2**20
            nbytes = 8 * numel
            rows.append({
                "op": op, "variant": p, "kind": "baseline" if p in baselines else "variant",
                "dtype": dtype, "shape": f"{rows_}x{cols}", "numel": numel, "direction": direction,
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
    draw_speedup(ax, synthetic_rows(), op="bias_gelu", dtype="float32", direction="fwd")
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
    draw_speedup(ax, synthetic_rows(), op="bias_gelu", dtype="float32", direction="fwd", baseline="compile")
    _, labels = ax.get_legend_handles_labels()
    assert labels == ["scalar", "vec4", "eager", "compile (baseline)"]
    assert list(line(ax, "eager").get_ydata()) == pytest.approx([0.9] * 3)
    assert ax.get_title().endswith("speedup over compile")


def test_newest_run_is_used() -> None:
    old = synthetic_rows(run_id="run1", timestamp="2025-01-01T00:00:00+00:00", scale=100.0)
    old = [r | {"variant": "retired"} if r["variant"] == "scalar" else r for r in old]
    new = synthetic_rows(run_id="run2", timestamp="2025-02-01T00:00:00+00:00")
    ax = fresh_axes()
    draw_speedup(ax, new + old, op="bias_gelu", dtype="float32", direction="fwd")  # order irrelevant
    _, labels = ax.get_legend_handles_labels()
    assert "retired" not in labels and "scalar" in labels


def test_missing_baseline_is_a_clear_error() -> None:
    rows = synthetic_rows(providers=("scalar", "vec4"))
    with pytest.raises(ValueError, match="eager"):
        draw_speedup(fresh_axes(), rows, op="bias_gelu", dtype="float32", direction="fwd")
    with pytest.raises(ValueError, match="no rows"):
        draw_speedup(fresh_axes(), rows, op="other", dtype="float32", direction="fwd")


def test_draw_bandwidth_with_ceiling() -> None:
    ax = fresh_axes()
    draw_bandwidth(ax, synthetic_rows(), op="bias_gelu", dtype="float32", direction="fwd")
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


def test_plot_all_file_names(tmp_path: pathlib.Path, ladders) -> None:
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
    from workbench.explain.plot import figure

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
    draw_bandwidth(ax, rows, op="bias_gelu", dtype="float32", direction="fwd")
    _, labels = ax.get_legend_handles_labels()
    assert labels == ["scalar", "vec4", "eager", "compile"]


def test_bench_result_figure_and_frame() -> None:
    pytest.importorskip("pandas")
    from workbench.explain.plot import TABLE_COLUMNS, BenchResult

    r = BenchResult(rows=synthetic_rows())
    assert len(r.figure().axes) == 3
    df = r.frame()
    assert list(df.columns) == list(TABLE_COLUMNS) and len(df) == len(r.rows)
    assert "run_id" in r.frame(all_columns=True).columns


# --- the ladder plot: a spec's variants in teaching order, GB/s per rung and each step's speedup ---

LADDER = ("naive", "coalesced", "vec4", "fast")
# median ms per rung: each step 1.80x, 2.00x, 1.25x faster; first to last 4.50x. synthetic_rows
# moves 8 bytes per element, so GB/s = 8.39 / this: naive 2.3, coalesced 4.2, vec4 8.4, fast 10.
LADDER_TIMES = {"naive": 3.6, "coalesced": 2.0, "vec4": 1.0, "fast": 0.8, "eager": 1.25, "compile": 0.9,
                "cub": 0.85, "extra": 0.7}
LADDER_PROVIDERS = ("naive", "coalesced", "vec4", "fast", "eager", "compile")


def ladder_rows(providers: tuple[str, ...] = LADDER_PROVIDERS, **kw) -> list[dict]:
    return synthetic_rows(providers=providers, op="toy_ladder", times=LADDER_TIMES,
                          baselines=("eager", "compile", "cub"), **kw)


def drawn_ladder(rows: list[dict], **kw):
    ax = fresh_axes()
    draw_ladder(ax, rows, op="toy_ladder", dtype="float32", direction="fwd", ladder=LADDER, **kw)
    return ax


def tick_labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_xticklabels()]


def bar_texts(ax) -> list[str]:
    """The bar labels, left to right (rungs, then baselines)."""
    return [t.get_text() for t in ax.texts if "GB/s" in t.get_text()]


@pytest.fixture
def ladders(monkeypatch):
    """workbench.model.registry.spec answering for made-up ops: toy_ladder declares LADDER, flat declares
    none, every other op is unknown (ValueError) as an op missing from this checkout would be."""
    import types

    import workbench.model.registry

    known = {"toy_ladder": LADDER, "flat": ()}

    def spec(op):
        if op not in known:
            raise ValueError(f"op must be one of {sorted(known)}; got {op!r}")
        return types.SimpleNamespace(name=op, ladder=known[op])

    monkeypatch.setattr(workbench.model.registry, "spec", spec)


def test_ladder_bars_follow_the_ladder_not_the_rows() -> None:
    rows = ladder_rows(providers=("compile", "fast", "eager", "vec4", "naive", "coalesced"))[::-1]
    ax = drawn_ladder(rows)
    assert tick_labels(ax) == ["naive", "coalesced", "vec4", "fast", "eager", "compile"]
    rungs, _ = ax.containers
    at_top = {r["variant"]: r["GBps"] for r in rows if r["shape"] == "4096x4096"}  # the largest size
    assert [b.get_height() for b in rungs] == pytest.approx([at_top[v] for v in LADDER])
    assert ax.get_title() == "toy_ladder fwd float32 4096x4096: the ladder"
    assert ax.get_ylabel() == "achieved GB/s"


def test_ladder_speedup_labels_come_from_the_medians() -> None:
    rows = ladder_rows()
    ax = drawn_ladder(rows)
    assert bar_texts(ax) == ["2.3 GB/s", "4.2 GB/s\nx1.80", "8.4 GB/s\nx2.00", "10 GB/s\nx1.25",
                             "6.7 GB/s", "9.3 GB/s"]
    assert any(t.get_text() == "naive -> fast: x4.50 overall" for t in ax.texts)


def test_ladder_skips_a_rung_without_rows() -> None:
    rows = ladder_rows(providers=("naive", "vec4", "fast", "eager"))
    ax = drawn_ladder(rows)
    assert tick_labels(ax) == ["naive", "vec4", "fast", "eager"]
    # vec4's step is over naive, the bar before it: 3.6 / 1.0
    assert bar_texts(ax)[1] == "8.4 GB/s\nx3.60"


def test_ladder_baselines_come_after_the_rungs_outside_the_chain() -> None:
    rows = ladder_rows(providers=("cub", "naive", "compile", "fast", "eager"))
    ax = drawn_ladder(rows)
    assert tick_labels(ax) == ["naive", "fast", "eager", "compile", "cub"]
    rungs, baselines = ax.containers
    assert len(rungs) == 2 and len(baselines) == 3
    assert all(b.get_hatch() == "//" for b in baselines) and not any(b.get_hatch() for b in rungs)
    # fast's step is over naive; the baselines carry no speedups
    assert bar_texts(ax) == ["2.3 GB/s", "10 GB/s\nx4.50", "6.7 GB/s", "9.3 GB/s", "9.9 GB/s"]


def test_ladder_ceiling_line_only_when_finite() -> None:
    ax = drawn_ladder(ladder_rows())
    (ceiling,) = ax.get_lines()
    assert ceiling.get_label() == f"memory ceiling: copy rate {CEILING:.0f} GB/s (bytes read + written)"
    assert list(ceiling.get_ydata()) == [CEILING, CEILING] and ceiling.get_linestyle() == "--"
    ax = drawn_ladder([r | {"ceiling_GBps": float("nan")} for r in ladder_rows()])
    assert not ax.get_lines()


def test_ladder_default_size_is_the_largest_with_two_rungs_and_a_size_can_be_named() -> None:
    rows = ladder_rows() + ladder_rows(providers=("naive", "eager"), sizes=[(8192, 8192)])
    assert drawn_ladder(rows).get_title().endswith(" 4096x4096: the ladder")
    assert drawn_ladder(rows, shape="64x64").get_title().endswith(" 64x64: the ladder")


def test_ladder_errors() -> None:
    one_rung = ladder_rows(providers=("naive", "eager", "compile"))
    with pytest.raises(ValueError, match="two or more of its ladder variants"):
        drawn_ladder(one_rung)
    rows = ladder_rows() + ladder_rows(providers=("naive", "eager"), sizes=[(8192, 8192)])
    with pytest.raises(ValueError, match="rows for 1 of its ladder variants"):
        drawn_ladder(rows, shape="8192x8192")
    with pytest.raises(ValueError, match="no rows .* at shape '1x1'"):
        drawn_ladder(rows, shape="1x1")


def test_plot_ladder_writes_a_png_and_names_an_op_without_a_ladder(tmp_path: pathlib.Path, ladders) -> None:
    out = plot_ladder(ladder_rows(), tmp_path / "l.png", op="toy_ladder", dtype="float32", direction="fwd")
    assert_png(out)
    flat = [r | {"op": "flat"} for r in ladder_rows()]
    for op, rows in (("flat", flat), ("bias_gelu", synthetic_rows())):
        with pytest.raises(ValueError, match=f"op '{op}' declares no ladder"):
            plot_ladder(rows, tmp_path / "x.png", op=op, dtype="float32", direction="fwd")


def test_plot_all_writes_ladders_for_ops_that_declare_one(tmp_path: pathlib.Path, ladders) -> None:
    # Without baselines the other ops get a bandwidth plot only: fewer PNGs to write.
    rows = (ladder_rows() + ladder_rows(direction="bwd", providers=("naive",))        # one rung: no ladder
            + [r | {"op": "flat"} for r in ladder_rows(providers=("naive", "vec4"))]  # declares no ladder
            + synthetic_rows(providers=("scalar", "vec4")))   # unknown to the registry: no ladder
    paths = plot_all(rows, tmp_path)
    assert sorted(p.name for p in paths if p.name.endswith("_ladder.png")) == ["toy_ladder_fwd_float32_ladder.png"]
    assert_png(tmp_path / "toy_ladder_fwd_float32_ladder.png")


def test_ladder_figure_one_panel_per_dtype_and_direction(tmp_path: pathlib.Path, ladders, monkeypatch) -> None:
    pytest.importorskip("pandas")
    from workbench.explain.plot import BenchResult

    monkeypatch.chdir(tmp_path)
    rows = (ladder_rows() + ladder_rows(dtype="float16") + ladder_rows(direction="fwd+bwd")
            + ladder_rows(direction="bwd", providers=("naive", "eager")))  # one rung: left out
    fig = ladder_figure(rows, op="toy_ladder")
    assert [ax.get_title() for ax in fig.axes] == [
        "toy_ladder fwd float16 4096x4096: the ladder",
        "toy_ladder fwd float32 4096x4096: the ladder",
        "toy_ladder fwd+bwd float32 4096x4096: the ladder",
    ]
    assert fig._repr_png_()[:8] == PNG_SIGNATURE
    assert not list(tmp_path.iterdir())
    fig = BenchResult(rows=rows).ladder_figure(dtype="float32", direction="fwd", shape="64x64")
    assert [ax.get_title() for ax in fig.axes] == ["toy_ladder fwd float32 64x64: the ladder"]
    with pytest.raises(ValueError, match="two or more"):
        ladder_figure(rows, op="toy_ladder", direction="bwd", dtype="float32")


def compute_bound_rows() -> list[dict]:
    """matmul-like rows: TFLOP/s against the GEMM ceiling (benchmark.py adds these to a
    compute-bound op's rows) beside the bytes every row has."""
    rows = synthetic_rows(op="gemmish", providers=("naive", "tiled", "eager", "compile"),
                          times={"naive": 40.0, "tiled": 1.25, "eager": 1.0, "compile": 1.0})
    for r in rows:
        r["flops"] = 2 * r["numel"] * 1024
        r["TFLOPs"] = r["flops"] / (r["median_ms"] * 1e-3) / 1e12
        r["matmul_ceiling_TFLOPs"] = 50.0
    return rows


def test_a_compute_bound_ladder_shows_tflops_and_the_gemm_ceiling() -> None:
    ax = fresh_axes()
    draw_ladder(ax, compute_bound_rows(), op="gemmish", dtype="float32", direction="fwd", ladder=("naive", "tiled"))
    assert ax.get_ylabel() == "achieved TFLOP/s"
    (ceiling,) = [ln for ln in ax.get_lines() if "ceiling" in ln.get_label()]
    assert list(ceiling.get_ydata()) == [50.0, 50.0] and "cuBLAS" in ceiling.get_label()
    heights = [p.get_height() for p in ax.patches]
    r = [x for x in compute_bound_rows() if x["shape"] == "4096x4096"]
    assert heights == pytest.approx([x["TFLOPs"] for v in ("naive", "tiled", "eager", "compile")
                                     for x in r if x["variant"] == v])
    assert "GB/s" not in " ".join(t.get_text() for t in ax.texts)


def test_plot_all_draws_throughput_not_bandwidth_for_a_compute_bound_op(tmp_path: pathlib.Path) -> None:
    names = {p.name for p in plot_all(compute_bound_rows(), tmp_path)}
    assert "gemmish_fwd_float32_throughput.png" in names
    assert not any(n.endswith("_bandwidth.png") for n in names)
    names = {p.name for p in plot_all(synthetic_rows(), tmp_path / "b")}
    assert "bias_gelu_fwd_float32_bandwidth.png" in names and not any(n.endswith("_throughput.png") for n in names)
