"""Tests for workbench.measure.timing: the adaptive stop rule with synthetic samples and fake clocks,
the CPU timer, clear errors without a GPU, and (marked gpu) the CUDA paths."""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest
import torch

from workbench.measure.ceilings import copy_bandwidth_gbps
from workbench.measure.timing import (
    Measurement,
    peak_memory_bytes,
    sample_until_stable,
    summarize,
    time_cpu,
    time_cuda,
)

HAS_CUDA = torch.cuda.is_available()
no_gpu = pytest.mark.skipif(HAS_CUDA, reason="checks the error raised when there is no CUDA GPU")


class FakeClock:
    """A clock that only moves when told to, so budget stops are deterministic."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def frozen_clock() -> float:
    return 0.0  # the budget is never spent


# ---- the stop rule ---------------------------------------------------------------------------

def test_constant_samples_stop_stable_at_min_samples() -> None:
    m = sample_until_stable(lambda: 2.0, min_samples=10, clock=frozen_clock)
    assert m.stop_reason == "stable"
    assert m.n_samples == 10
    assert m.median_ms == 2.0 and m.p20_ms == 2.0 and m.p80_ms == 2.0
    assert m.std_ms == 0.0 and m.rel_std_err == 0.0
    assert m.method == "cpu"
    assert m.samples_ms == [2.0] * 10


def test_noisy_samples_run_longer_until_stable() -> None:
    rng = np.random.default_rng(0)
    m = sample_until_stable(
        lambda: float(rng.normal(1.0, 0.1)), min_samples=10, target_rse=0.01, clock=frozen_clock
    )
    assert m.stop_reason == "stable"
    assert m.rel_std_err <= 0.01
    # 1.2533 * 0.1 / sqrt(n) <= 0.01 needs n ~ 157; far more than min_samples, far below max.
    assert 100 < m.n_samples < 300
    assert m.rel_std_err == pytest.approx(1.2533 * m.std_ms / math.sqrt(m.n_samples) / m.median_ms)


def test_budget_stop_with_fake_clock() -> None:
    clock = FakeClock()
    rng = np.random.default_rng(1)

    def run_once() -> float:
        clock.t += 0.25  # each sample "takes" 0.25 s of wall time
        return float(rng.normal(1.0, 0.5))

    m = sample_until_stable(run_once, min_samples=10, target_rse=1e-6, budget_s=1.0, clock=clock)
    assert m.stop_reason == "budget"
    assert m.n_samples == 4  # 4 * 0.25 s = budget


def test_budget_stop_never_below_three_samples() -> None:
    clock = FakeClock()

    def run_once() -> float:
        clock.t += 100.0  # budget spent after the very first sample
        return 1.0 + clock.t * 1e-3

    m = sample_until_stable(run_once, target_rse=0.0, budget_s=0.5, clock=clock)
    assert (m.stop_reason, m.n_samples) == ("budget", 3)
    m = sample_until_stable(run_once, target_rse=0.0, budget_s=0.5, max_samples=2, clock=clock)
    assert (m.stop_reason, m.n_samples) == ("max-samples", 2)


def test_max_samples_stop() -> None:
    rng = np.random.default_rng(2)
    m = sample_until_stable(
        lambda: float(rng.uniform(1.0, 2.0)), target_rse=0.0, max_samples=50, clock=frozen_clock
    )
    assert (m.stop_reason, m.n_samples) == ("max-samples", 50)


def test_bad_arguments_rejected() -> None:
    with pytest.raises(ValueError, match="max_samples"):
        sample_until_stable(lambda: 1.0, max_samples=0)
    with pytest.raises(ValueError, match="min_samples"):
        sample_until_stable(lambda: 1.0, min_samples=0)


def test_summarize_percentiles_on_known_list() -> None:
    samples = [float(x) for x in range(10, 0, -1)]  # unsorted on purpose: 10..1
    m = summarize(samples, method="cpu", stop_reason="stable")
    assert m.median_ms == pytest.approx(5.5)
    assert m.p20_ms == pytest.approx(2.8)  # linear: index 0.2 * 9 = 1.8 -> 2 + 0.8
    assert m.p80_ms == pytest.approx(8.2)
    assert m.mean_ms == pytest.approx(5.5)
    assert m.std_ms == pytest.approx(np.std(samples, ddof=1))
    assert m.n_samples == 10
    assert m.rel_std_err == pytest.approx(1.2533 * m.std_ms / math.sqrt(10) / 5.5)
    with pytest.raises(ValueError):
        summarize([], method="cpu", stop_reason="stable")


def test_measurement_to_dict() -> None:
    m = summarize([1.0, 2.0, 3.0], method="cuda-events", stop_reason="budget")
    d = m.to_dict()
    assert "samples_ms" not in d
    assert d["method"] == "cuda-events" and d["stop_reason"] == "budget" and d["n_samples"] == 3
    assert m.to_dict(include_samples=True)["samples_ms"] == [1.0, 2.0, 3.0]
    json.dumps(d)  # plain JSON
    assert Measurement(**m.to_dict(include_samples=True)) == m


# ---- CPU timer -------------------------------------------------------------------------------

def test_time_cpu_trivial_function() -> None:
    m = time_cpu(lambda: sum(range(100)), budget_s=0.2, max_samples=500)
    assert m.method == "cpu"
    assert m.median_ms > 0
    assert m.p20_ms <= m.median_ms <= m.p80_ms
    assert m.n_samples >= 3


def test_time_cpu_warmup_outside_samples() -> None:
    calls = []
    m = time_cpu(lambda: calls.append(1), warmup=3, max_samples=5, target_rse=0.0, clock=frozen_clock)
    assert m.n_samples == 5
    assert len(calls) == 8


# ---- without a GPU: clear errors ---------------------------------------------------------------

@no_gpu
def test_time_cuda_needs_gpu() -> None:
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        time_cuda(lambda: None)


@no_gpu
def test_copy_bandwidth_needs_gpu(tmp_path: pathlib.Path) -> None:
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        copy_bandwidth_gbps(cache_dir=tmp_path)
    assert not (tmp_path / "ceilings").exists()


@no_gpu
def test_peak_memory_cpu_not_measured() -> None:
    calls = []
    assert peak_memory_bytes(lambda: calls.append(1)) == -1
    assert peak_memory_bytes(lambda: calls.append(1), device="cpu") == -1
    assert calls == []  # nothing to measure, so fn is not run
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        peak_memory_bytes(lambda: None, device="cuda")


# ---- GPU -------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_time_cuda_large_op_uses_events() -> None:
    x = torch.randn(32 * 2**20, device="cuda")  # 128 MiB: far from launch-bound
    m = time_cuda(lambda: x.mul(2.0), budget_s=1.0)
    assert m.method == "cuda-events"
    assert m.median_ms > 0.01
    assert m.p20_ms <= m.median_ms <= m.p80_ms


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_time_cuda_tiny_op_uses_graph() -> None:
    x = torch.randn(256, device="cuda")
    m = time_cuda(lambda: x.add(1.0), budget_s=1.0)
    assert m.method == "cuda-graph"
    assert 0 < m.median_ms < 0.02  # per call, launch overhead amortized by replay
    forced = time_cuda(lambda: x.add(1.0), use_graph=False, budget_s=0.5)
    assert forced.method == "cuda-events"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_time_cuda_falls_back_when_not_capturable() -> None:
    x = torch.randn(256, device="cuda")
    m = time_cuda(lambda: x.sum().item(), use_graph=True, budget_s=0.5)  # .item() syncs: no capture
    assert m.method == "cuda-events"
    assert m.median_ms > 0
    # the device is still usable afterwards
    assert torch.ones(4, device="cuda").sum().item() == 4.0


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_peak_memory_counts_allocation() -> None:
    def alloc() -> torch.Tensor:
        return torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")

    peak = peak_memory_bytes(alloc)
    assert 64 * 2**20 <= peak < 80 * 2**20
    keep = alloc()  # memory held before the call is not counted
    assert 64 * 2**20 <= peak_memory_bytes(alloc) < 80 * 2**20
    del keep


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_copy_bandwidth_measured_then_cached(tmp_path: pathlib.Path) -> None:
    first = copy_bandwidth_gbps(cache_dir=tmp_path)
    assert 10 < first["copy_GBps"] < 20_000
    assert first["device_name"] == torch.cuda.get_device_name()
    assert first["measurement"]["method"] == "cuda-events"
    files = list((tmp_path / "ceilings").glob("*.json"))
    assert len(files) == 1
    assert json.loads(files[0].read_text())["copy_GBps"] == first["copy_GBps"]
    again = copy_bandwidth_gbps(cache_dir=tmp_path)  # from the cache: identical, timestamp too
    assert again == first
    fresh = copy_bandwidth_gbps(cache_dir=tmp_path, refresh=True)
    assert fresh["copy_GBps"] > 0
