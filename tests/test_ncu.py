"""Nsight Compute counters (workbench/explain/ncu.py): the CSV ncu writes is parsed into one dict per kernel
(fixtures captured on an H100 by scripts/gpu_run.sh's `ncu_fixtures` step), and where ncu is
missing or may not read the counters the error says so and how to go on. On the GPU: the counters
tell a one-read forward from a two-read one."""
from __future__ import annotations

import pathlib

import pytest

from workbench.explain import ncu

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "ncu"


@pytest.mark.parametrize("variant, loads_per_x", [("scalar", 3.0), ("vectorized", 2.0)])
def test_a_captured_report_parses_into_kernels_and_base_units(variant, loads_per_x):
    """rmsnorm fwd, 2048 x 4096 bf16: scalar loads x twice and the weight once per row (3x the
    bytes of x), vectorized x once and the weight once per row (2x)."""
    kernels = ncu.parse_csv((FIXTURES / f"rmsnorm_{variant}_fwd.csv").read_text())
    assert len(kernels) == 1 and "forward_kernel" in kernels[0]["Kernel Name"]
    x_bytes = 2048 * 4096 * 2
    assert ncu.total(kernels, ncu.LOAD_SECTORS) * 32 == pytest.approx(loads_per_x * x_bytes, rel=0.01)
    assert ncu.total(kernels, ncu.STORE_SECTORS) * 32 == pytest.approx(x_bytes, rel=0.01)
    assert ncu.total(kernels, ncu.DRAM_READ) == pytest.approx(x_bytes, rel=0.1)   # L2 catches the rest
    assert 1e3 < kernels[0][ncu.DURATION] < 1e6                                    # ns


def test_text_without_a_report_parses_to_nothing():
    assert ncu.parse_csv("==PROF== Disconnected from process 1\n") == []


def test_a_missing_ncu_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("WORKBENCH_NCU", str(tmp_path / "no-ncu"))
    assert ncu.find() is None
    with pytest.raises(ncu.NcuUnavailable, match="Nsight Compute \\(ncu\\) not found.*WORKBENCH_NCU.*wb.bench"):
        ncu.measure("rmsnorm", "cpu", (4, 8), "float32")


def test_a_permission_error_is_named_with_its_fix():
    why = ncu._permission_problem("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    assert "performance counters" in why and "NVreg_RestrictProfilingToAdminUsers=0" in why


@pytest.mark.gpu
def test_the_counters_tell_one_read_from_two():
    import torch
    if not torch.cuda.is_available() or ncu.find() is None:
        pytest.skip("needs a GPU and ncu")
    x_bytes = 2048 * 4096 * 2
    loads = {v: ncu.total(ncu.measure("rmsnorm", v, (2048, 4096), "bfloat16"), ncu.LOAD_SECTORS) * 32 / x_bytes
             for v in ("scalar", "vectorized")}
    assert loads["vectorized"] == pytest.approx(2.0, rel=0.02) and loads["scalar"] == pytest.approx(3.0, rel=0.02)


def test_the_global_loads_check_passes_fails_and_skips_by_the_counters():
    """Exercise 05's counter rule on the kernels the observed run saw in its call (judge/ncu_watch.py:
    the raw page's per-launch metrics), against x once plus the weight once per row."""
    from workbench import exercise as wbex
    from workbench.exercise import global_loads
    from workbench.judge.ncu_watch import RanKernel

    x_bytes = 2048 * 4096 * 2
    once = [RanKernel("k", metrics={ncu.LOAD_SECTORS: 2 * x_bytes / 32})]
    ok = global_loads.check(wbex.get(5), once)
    assert ok.status == "ok" and ok.detail.startswith("1.00x x + weight once per row"), ok
    bad = global_loads.check(wbex.get(5), [RanKernel("k", metrics={ncu.LOAD_SECTORS: 3 * x_bytes / 32})])
    assert bad.status == "FAIL" and "more than once" in bad.detail and any("1.50x" in ln for ln in bad.lines), bad
    skipped = global_loads.check(wbex.get(5), None, "Nsight Compute (ncu) was not found")
    assert skipped.status == "skipped" and "was not found" in skipped.detail
