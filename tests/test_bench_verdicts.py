"""Verdicts a benchmark can defend (issue 23): every timed shape is a checked shape (before timing,
the last timed call, after timing, on redrawn inputs), a row beyond the device's limits is marked
impossible, work the timer cannot see is counted, the clocks of each row are recorded, and
isolate=True times here as without it. On the CPU: planted CPU variants
and the pure rules; the GPU's planted cheats are in test_gpu_verdicts.py."""
from __future__ import annotations

import math
import pathlib

import pytest

from workbench.measure import bench_rows, benchmark, conditions, timing, verify
from workbench.explain.plot import BenchResult
from workbench.measure.bench_rows import add_speedups

FAULTY = pathlib.Path(__file__).parent / "faulty"


@pytest.fixture(scope="module")
def planted(wb, cpu_kernel):
    return {"partial": wb.load_source("bias_gelu", FAULTY / "cpu_partial_at_size.cpp", name="cpu_partial_at_size"),
            "after_warmup": wb.load_source("bias_gelu", FAULTY / "cpu_wrong_after_warmup.cpp", name="cpu_wrong_after_warmup")}


@pytest.fixture(scope="module")
def planted_bench(wb, planted):
    """One bench of the honest cpu variant beside the two planted ones, at a size the check matrix
    never draws (600 rows: the partial one skips rows from 512 on)."""
    return wb.bench("bias_gelu", ["cpu", "cpu_partial_at_size", "cpu_wrong_after_warmup"], shapes=[(600, 256)],
                    budget_s=0.05, baselines=["eager"])


def _row(result: BenchResult, variant: str) -> dict:
    return next(r for r in result.rows if r["variant"] == variant)


def test_work_skipped_only_at_the_timed_size_is_wrong_and_never_a_speedup(planted, planted_bench, wb):
    # the check matrix at its own (small) sizes passes it: the hole the timed-shape check closes
    assert wb.check("bias_gelu", planted["partial"], backward=False, layouts=("contiguous",)).ok
    r = _row(planted_bench, "cpu_partial_at_size")
    assert r["verified"] == verify.WRONG
    assert r["verify_detail"].startswith("before timing: y wrong at 600x256 float32")
    assert "unwritten" in r["verify_detail"] and r["verify_where"][0] >= 450  # the last quarter of the rows
    assert math.isnan(r["median_ms"]) and math.isnan(r["speedup_vs_eager"])  # not timed, no speedup
    assert "WRONG" in planted_bench.table()
    assert any(n.startswith("WRONG cpu_partial_at_size fwd float32 600x256: before timing") for n in planted_bench.notes)


def test_a_kernel_that_goes_wrong_after_warm_up_is_caught_in_the_timed_calls(planted_bench):
    r = _row(planted_bench, "cpu_wrong_after_warmup")
    assert r["verified"] == verify.WRONG
    assert r["verify_detail"].startswith("the last timed call: y wrong"), r["verify_detail"]
    assert "largest |difference| 0.5" in r["verify_detail"]
    assert not math.isnan(r["median_ms"]) and math.isnan(r["speedup_vs_eager"])


def test_honest_rows_are_checked_against_the_float64_reference(planted_bench):
    for name in ("cpu", "eager"):
        r = _row(planted_bench, name)
        assert r["verified"] == verify.CHECKED, r["verify_detail"]
        assert r["verify_against"] == "float64 reference" and r["verify_max_abs_err"] < 1e-4
        assert math.isfinite(r["speedup_vs_eager"])
    assert any("rotated through 3 input sets" in n for n in planted_bench.notes)


def test_timed_inputs_change_in_place_between_samples(wb, planted):
    """The timed calls rotate through sets whose values change (same addresses, other values)
    before each sample, so an answer kept by pointer is an answer to other inputs."""
    import torch

    spec = wb.registry.spec("bias_gelu")
    gen = torch.Generator().manual_seed(0)
    sets = [spec.new_inputs((8, 16), "float32", torch.device("cpu"), gen) for _ in range(2)]
    group = benchmark._Group(spec, (8, 16), "float32", "fwd", {}, gen, torch.device("cpu"), sets)
    timed = group.timed(wb.load("bias_gelu", "cpu"), {})
    timed()
    x = group.live[1][0][0]
    pointer, before = x.data_ptr(), x.clone()
    timed.refresh()  # the set the next call takes
    assert x.data_ptr() == pointer and not torch.equal(x, before)
    timed()
    assert timed.index == 1 and group.check_timed(timed).ok
    group.switch(1)  # back to set 1's first version, whose trusted result is kept
    assert torch.equal(x, before)


@pytest.mark.parametrize("direction", ["bwd", "fwd+bwd"])
def test_backward_timings_are_checked_against_their_own_gradients(wb, direction):
    """The timed backward rotates through sets whose output gradients (and, for fwd+bwd, inputs)
    change between samples; every honest row still checks, torch.compile's too (its backward is
    replayed with retain_graph, so buffer donation must be off)."""
    r = wb.bench("rmsnorm", ["cpu"], shapes=[(64, 256)], budget_s=0.05, directions=[direction],
                 baselines=["eager", "compile"])
    for row in r.rows:
        assert row["verified"] == verify.CHECKED, (row["variant"], row["verify_detail"])


def test_isolated_rows_are_timed_here_with_their_speedups(wb, cpu_kernel, monkeypatch):
    """isolate=True calls each variant in a runner first (benchmark._preflight), then times it here,
    as without isolate: no runner is in the numbers."""
    preflown, real = [], benchmark._preflight

    def preflight(op, spec, names, *rest):
        preflown.append(list(names))
        return real(op, spec, names, *rest)

    monkeypatch.setattr(benchmark, "_preflight", preflight)
    r = wb.bench("bias_gelu", ["cpu"], shapes=[(64, 128)], budget_s=0.05, baselines=["eager"], isolate=True)
    assert preflown == [["cpu"]]
    eager = _row(r, "eager")["median_ms"]
    (row,) = [row for row in r.rows if row["kind"] == "variant"]
    assert row["verified"] == verify.CHECKED and row["speedup_vs_eager"] == pytest.approx(eager / row["median_ms"])


def test_speedups_leave_out_wrong_and_impossible_rows():
    def row(variant, kind, ms, **kw):
        return dict(dict(op="o", dtype="float32", shape="8x8", direction="fwd", variant=variant, kind=kind,
                         median_ms=ms, verified="ok"), **kw)
    rows = [row("eager", "baseline", 2.0), row("compile", "baseline", 1.0, impossible=True),
            row("a", "variant", 1.0), row("b", "variant", 0.5, verified="wrong")]
    add_speedups(rows)
    assert rows[2]["speedup_vs_eager"] == 2.0
    assert math.isnan(rows[2]["speedup_vs_compile"])  # its baseline is impossible
    assert math.isnan(rows[3]["speedup_vs_eager"])    # wrong


def test_physics_refuses_a_rate_beyond_the_device():
    limit = 3000 * (1 + bench_rows.BANDWIDTH_MARGIN)
    big = dict(GBps=12000.0, bytes=512 * 2**20, dtype="float32")
    why = bench_rows.judge(big, bandwidth_limit_GBps=limit, l2_bytes=50 * 2**20, flops_limit_TFLOPs=None)
    assert "4.00x the device's memory bandwidth (3000 GB/s measured)" in why
    assert bench_rows.judge(dict(big, GBps=3100.0), bandwidth_limit_GBps=limit, l2_bytes=50 * 2**20,
                         flops_limit_TFLOPs=None) == ""     # within the margin: a read-mostly op may beat a copy
    assert bench_rows.judge(big, bandwidth_limit_GBps=limit, l2_bytes=50 * 2**20, flops_limit_TFLOPs=None,
                         bytes_floor=False) == ""            # a baseline: its saved tensors are its own
    small = dict(big, bytes=16 * 2**20)                      # its data can stay in L2: not held to DRAM
    assert bench_rows.judge(small, bandwidth_limit_GBps=limit, l2_bytes=50 * 2**20, flops_limit_TFLOPs=None) == ""
    gemm = dict(GBps=10.0, bytes=1, TFLOPs=1200.0, flops=2 * 8192**3, dtype="bfloat16")
    peak = bench_rows.peak_tflops((9, 0), 132, 1980, "bfloat16")
    assert 1000 < peak < 1100
    assert "above the chip's peak for bfloat16" in bench_rows.judge(
        gemm, bandwidth_limit_GBps=limit, l2_bytes=50 * 2**20, flops_limit_TFLOPs=peak * (1 + bench_rows.FLOP_MARGIN))
    assert bench_rows.peak_tflops((7, 5), 40, 1500, "float16") is None  # unknown chip: the caller falls back


def test_work_outside_the_timed_stream_is_counted():
    # honest: the synchronised time is about max(GPU time, the host's enqueue time)
    assert timing.unseen_work_ms(median_ms=0.170, host_ms=0.010, synced_ms=0.175) == 0.0
    assert timing.unseen_work_ms(median_ms=0.002, host_ms=0.030, synced_ms=0.032) == 0.0  # host-bound
    # a kernel on a private stream: the events saw ~nothing, the device was busy 0.17 ms per call
    assert timing.unseen_work_ms(median_ms=0.003, host_ms=0.012, synced_ms=0.172) == pytest.approx(0.160)


def test_clock_conditions_are_summarised_and_warned_about():
    steady = [dict(sm_mhz=1980, mem_mhz=2619, temp_c=40 + i, power_w=300.0 + i, reasons=0x1) for i in range(5)]
    c = conditions.summarize(steady)
    assert c["sm_mhz_min"] == c["sm_mhz_max"] == 1980 and c["temp_c_max"] == 44 and c["throttle"] == ["gpu idle"]
    assert conditions.warning(c) == ""  # idle between launches is not a throttle
    hot = steady + [dict(sm_mhz=1600, mem_mhz=2619, temp_c=88, power_w=700.0, reasons=0x4 | 0x20)]
    w = conditions.warning(conditions.summarize(hot))
    assert "SM clock moved 1600-1980 MHz" in w and "software power cap" in w and "software thermal slowdown" in w
    row = dict(clocks=conditions.summarize(hot), clock_warning=w)
    assert bench_rows.clock_text(row) == "1600-1980!"
    assert conditions.summarize([]) == {} and conditions.warning({}) == ""


def test_the_table_marks_wrong_and_impossible_rows():
    def row(variant, **kw):
        base = dict(direction="fwd", dtype="float32", shape="8192x8192", variant=variant, median_ms=0.1,
                    p20_ms=0.1, p80_ms=0.1, GBps=5000.0, speedup_vs_eager=math.nan, speedup_vs_compile=math.nan)
        return dict(base, **kw)
    table = BenchResult([row("a", verified="ok", impossible=True), row("b", verified="wrong"),
                         row("c", verified="ok", impossible=False)]).table()
    lines = table.splitlines()[2:]
    assert "IMPOSSIBLE" in lines[0] and "WRONG" in lines[1] and lines[2].split()[-2] == "ok"


def test_an_element_within_pytorchs_own_error_is_not_wrong(wb):
    """At a timed shape the rounding tails grow with the element count: an element beyond the
    check matrix's bound is allowed where PyTorch's own result is as far off (verify.eager_floors),
    while skipped work (NaN) and gross errors stay wrong."""
    import torch

    spec = wb.registry.spec("bias_gelu")
    ref = torch.randn(64, 1024, dtype=torch.float64)          # enough elements that one error leaves the norm
    got = ref.to(torch.float32).clone()
    got[1, 2] += 1e-3                                           # 100x float32's absolute bound
    judge = lambda out, floors=None: verify.judge(spec, (64, 1024), "float32", "fwd", (out,), (ref,),  # noqa: E731
                                                  "float64 reference", 1, "before timing", floors)
    assert judge(got).status == verify.WRONG
    assert judge(got, floors=(4 * 1e-3,)).ok                    # PyTorch was off by 1e-3 there too
    nan = got.clone()
    nan[3, 3] = float("nan")
    assert judge(nan, floors=(4 * 1e-3,)).status == verify.WRONG
    far = got.clone()
    far[0, 0] += 1.0
    assert judge(far, floors=(4 * 1e-3,)).status == verify.WRONG
    inputs = spec.new_inputs((4, 8), "float32", torch.device("cpu"), torch.Generator().manual_seed(0))
    (floor,) = verify.eager_floors(spec, inputs, {}, "fwd", None, spec.run_reference(inputs, {}))
    assert 0 < floor < 1e-4                                      # 4x eager's float32 error: tiny
