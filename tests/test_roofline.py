"""The roofline (workbench/explain/roofline.py) and the compute-bound benchmark table: points come from
benchmark rows alone (intensity = FLOPs / bytes the op must move, height = achieved TFLOP/s), each
op's best variant per dtype by default or every variant; the ceilings come from the rows (copy rate,
cuBLAS matmul rate per dtype); matmul-like rows print TFLOP/s and % of that peak."""
from __future__ import annotations

import math

import pytest

from workbench.explain import roofline
from workbench.explain.plot import BenchResult


def _row(op, variant, ms, *, flops, nbytes, dtype="float32", shape="1x1", kind="variant", ts="2026-01-01", **kw):
    return dict(op=op, variant=variant, kind=kind, dtype=dtype, shape=shape, direction="fwd", median_ms=ms,
                p20_ms=ms, p80_ms=ms, flops=flops, bytes=nbytes, TFLOPs=flops / (ms * 1e-3) / 1e12,
                GBps=nbytes / (ms * 1e-3) / 1e9, pct_of_ceiling=50.0, ceiling_GBps=3000.0, timestamp=ts,
                speedup_vs_eager=math.nan, speedup_vs_compile=math.nan, **kw)


ROWS = [
    _row("bias_gelu", "scalar", 1.0, flops=12e6, nbytes=8e6),
    _row("bias_gelu", "vec4", 0.5, flops=12e6, nbytes=8e6),
    _row("bias_gelu", "vec4", 0.4, flops=12e6, nbytes=8e6, ts="2025-01-01"),   # older: does not count
    _row("bias_gelu", "eager", 0.1, flops=12e6, nbytes=8e6, kind="baseline"),   # baselines are not placed
    _row("matmul", "naive", 10.0, flops=2 * 4096**3, nbytes=3 * 4096**2 * 4, shape="4096x4096x4096",
         matmul_ceiling_TFLOPs=51.0, pct_of_matmul_ceiling=0.0),
    _row("matmul", "warptile", 3.0, flops=2 * 4096**3, nbytes=3 * 4096**2 * 4, shape="4096x4096x4096",
         matmul_ceiling_TFLOPs=51.0, pct_of_matmul_ceiling=0.0),
]


def test_each_op_gets_its_best_variant_placed_by_intensity():
    pts = {p["op"]: p for p in roofline.points(ROWS)}
    assert set(pts) == {"bias_gelu", "matmul"}
    assert pts["bias_gelu"]["variant"] == "vec4" and pts["bias_gelu"]["intensity"] == pytest.approx(1.5)
    assert pts["bias_gelu"]["TFLOPs"] == pytest.approx(12e6 / 0.5e-3 / 1e12)
    assert pts["matmul"]["variant"] == "warptile" and pts["matmul"]["intensity"] == pytest.approx(4096 / 6)


def test_every_variant_on_request_and_an_op_filter():
    pts = roofline.points(ROWS, every=True, ops=["matmul"])
    assert sorted(p["variant"] for p in pts) == ["naive", "warptile"]


def test_the_ceilings_come_from_the_rows_and_fill_in():
    copy, tops = roofline.ceilings(ROWS, peaks={"bfloat16": 700.0})
    assert copy == 3000.0 and tops == {"bfloat16": 700.0, "float32": 51.0}


def test_the_figure_draws_the_roofs_and_the_points():
    fig = roofline.figure(ROWS)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(s.startswith("memory roof: copy rate 3000") for s in labels)
    assert any("cuBLAS float32 51 TFLOP/s (TF32 off)" in s for s in labels)
    assert sum("/" in s and "roof" not in s for s in labels) == 2
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def test_no_rows_with_flops_is_a_clear_error():
    with pytest.raises(ValueError, match="no benchmark rows with FLOPs"):
        roofline.figure([_row("x", "v", 1.0, flops=0, nbytes=8)])


def test_compute_bound_rows_print_tflops_and_percent_of_peak():
    r = BenchResult([dict(row, pct_of_matmul_ceiling=100 * row["TFLOPs"] / 51.0) for row in ROWS[4:]])
    head, _, naive, warp = r.table().splitlines()[:4]
    assert "TFLOP/s" in head and "%peak" in head and "GB/s" not in head
    assert f"{ROWS[5]['TFLOPs']:8.1f}" in warp and f"{100 * ROWS[5]['TFLOPs'] / 51.0:6.1f}" in warp
    assert "GB/s" in BenchResult(ROWS[:2]).table().splitlines()[0]


@pytest.mark.gpu
def test_the_matmul_ceiling_is_measured_once_and_cached(tmp_path):
    import torch

    from workbench.measure import ceilings
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    tf32 = torch.backends.cuda.matmul.allow_tf32
    first = ceilings.matmul_ceiling_tflops(dtype="float32", cache_dir=tmp_path)
    assert first["TFLOPs"] > 1 and first["tf32"] is False and first["size"] == 8192
    assert torch.backends.cuda.matmul.allow_tf32 == tf32, "the caller's TF32 setting is restored"
    assert ceilings.matmul_ceiling_tflops(dtype="float32", cache_dir=tmp_path) == first   # from the cache
    bf16 = ceilings.matmul_ceiling_tflops(dtype="bfloat16", cache_dir=tmp_path)
    assert bf16["TFLOPs"] > 4 * first["TFLOPs"]   # tensor cores against CUDA cores
