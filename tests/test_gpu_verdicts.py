"""Planted cheats and bugs on the GPU (issue 23), each caught by the benchmark: partial work at one
large shape, an answer replayed by pointer, work on a private stream, a kernel that goes wrong after
its tenth call, a speed claim above the device's ceiling; the honest vec4 beside them is checked,
possible, and carries its clocks. Exercise 02's speed check fails the partial-work cheat naming the
shape."""
from __future__ import annotations

import math
import pathlib

import pytest
import torch

from workbench.measure import conditions, verify
from workbench.model.opspec import OpSpec

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")]
FAULTY = pathlib.Path(__file__).parent / "faulty"
SHAPE = (8192, 8192)   # 512 MiB moved per float32 forward: far beyond any L2
PLANTED = ("partial_at_timed_shape", "replay_by_pointer", "private_stream", "wrong_after_ten")


@pytest.fixture(scope="module")
def verdicts(wb):
    planted = [wb.load_source("bias_gelu", FAULTY / f"{name}.cu", name=name).name for name in PLANTED]
    result = wb.bench("bias_gelu", ["vec4", *planted], dtypes=["float32"], shapes=[SHAPE], baselines=["eager"],
                      budget_s=0.3)
    print(result.table())
    return {r["variant"]: r for r in result.rows}


def _untrusted(row) -> bool:
    return row["verified"] == verify.WRONG or row["impossible"]


def test_the_honest_variant_is_checked_possible_and_carries_its_clocks(verdicts):
    r = verdicts["vec4"]
    assert r["verified"] == verify.CHECKED and not r["impossible"], (r["verify_detail"], r.get("impossible_reason"))
    assert r["GBps"] <= r["bandwidth_limit_GBps"] and math.isfinite(r["speedup_vs_eager"])
    assert r["unseen_ms"] == 0.0
    if not conditions.unavailable():
        c = r["clocks"]
        assert c["samples"] >= 1 and 0 < c["sm_mhz_min"] <= c["sm_mhz_max"] and c["temp_c_max"] > 0


def test_partial_work_at_the_timed_shape_is_wrong(verdicts):
    r = verdicts["partial_at_timed_shape"]
    assert r["verified"] == verify.WRONG and r["verify_detail"].startswith("before timing: y wrong at 8192x8192")
    assert r["verify_where"][0] >= SHAPE[0] // 4          # the rows it skipped
    assert math.isnan(r["speedup_vs_eager"])


def test_an_answer_replayed_by_pointer_is_wrong_in_the_timed_calls(verdicts):
    """Caught where it replays: on the check before timing (the benchmark's warm-up call on the same
    inputs came first, so the poisoned output is left NaN), or on the timed calls' inputs, whose
    values change between samples."""
    r = verdicts["replay_by_pointer"]
    assert r["verified"] == verify.WRONG, r
    assert (r["verify_detail"].startswith("the last timed call") or
            r["verify_detail"].startswith("before timing") and "unwritten" in r["verify_detail"]), r["verify_detail"]


def test_work_on_a_private_stream_does_not_look_fast(verdicts):
    r = verdicts["private_stream"]
    assert _untrusted(r), r
    assert math.isnan(r["speedup_vs_eager"])


def test_a_kernel_wrong_after_its_tenth_call_is_caught(verdicts):
    r = verdicts["wrong_after_ten"]
    assert r["verified"] == verify.WRONG
    assert r["verify_detail"].startswith(("the last timed call", "after timing")), r["verify_detail"]


def test_a_rate_above_the_ceiling_is_impossible(wb, monkeypatch):
    """The op claims 8x the bytes it moves: an honest kernel then runs 'faster than the memory'."""
    real = OpSpec.bytes
    monkeypatch.setattr(OpSpec, "bytes", lambda self, *a, **kw: 8 * real(self, *a, **kw))
    r = wb.bench("bias_gelu", ["vec4"], dtypes=["float32"], shapes=[SHAPE], baselines=[], budget_s=0.2)
    row = r.rows[0]
    assert row["verified"] == verify.CHECKED and row["impossible"], row
    assert "the device's memory bandwidth" in row["impossible_reason"]
    assert "IMPOSSIBLE" in r.table()


def test_the_exercise_speed_check_fails_the_partial_work_cheat_naming_the_shape(wb):
    from workbench.exercise import check_exercise

    report = check_exercise(2, FAULTY / "ex02_partial_at_speed_shape.cu", seed=1)
    assert report.check("correctness").status == "ok"         # every checked size passes
    speed = report.check("speed")
    assert speed.status == "FAIL" and "8192x8192" in speed.detail + " ".join(speed.lines), speed
    assert not report.ok
