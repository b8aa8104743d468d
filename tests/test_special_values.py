"""NaN and Inf go through every variant as they go through the float64 reference (PyTorch's own
GELU): forward and backward, every dtype the variant supports."""
from __future__ import annotations

import pytest
import torch

import workbench as wb
from workbench.model import registry
from workbench.measure.correctness import compare
from workbench.specs.bias_gelu import SPEC as spec


def special_values(dtype: torch.dtype) -> torch.Tensor:
    # huge but finite, and small enough that the float64 reference's own v**3 does not overflow
    big = min(torch.finfo(dtype).max / 2, 1e100)
    vals = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 3.0, -3.0, 20.0, -20.0, big, -big]
    return torch.tensor(vals, dtype=torch.float64).to(dtype)


def run_case(kernel, device: str, dtype: torch.dtype) -> None:
    vals = special_values(dtype).to(device)
    x = vals.reshape(-1, 1).expand(-1, 8).contiguous()        # each value in a row of 8
    bias = torch.zeros(8, dtype=dtype, device=device)
    y = kernel(x, bias)
    ok, rel, mx, where, note = compare(y, spec.reference(x, bias), dtype)
    assert ok, f"forward {dtype}: {note} at {where}: got {y[where[0]].tolist() if where else ''}"
    dy = torch.ones_like(x)
    dx, db = kernel.backward(dy, x, bias)
    rdx, rdb = spec.run_reference_backward((dy,), (x, bias), {})
    ok, rel, mx, where, note = compare(dx, rdx, dtype)
    assert ok, f"dx {dtype}: {note} at {where}"
    ok, rel, mx, where, note = compare(db, rdb, dtype, terms=x.shape[0])
    assert ok, f"dbias {dtype}: {note} at {where}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_cpu_variant_special_values(cpu_kernel, dtype):
    run_case(cpu_kernel, "cpu", dtype)


def test_reference_matches_torch_gelu_on_special_values():
    x = special_values(torch.float64)
    torch.testing.assert_close(spec.reference(x, torch.zeros(())), torch.nn.functional.gelu(x, approximate="tanh"),
                               equal_nan=True)


GPU_VARIANTS = [v.name for v in registry.variants("bias_gelu") if v.device == "cuda"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")
@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_gpu_variants_special_values(variant):
    k = wb.load("bias_gelu", variant)
    for name in k.dtypes:
        run_case(k, "cuda", getattr(torch, name))
