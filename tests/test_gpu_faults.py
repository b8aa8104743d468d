"""GPU faults: a variant that hits an illegal address, run with isolate=True, is reported and the
caller's CUDA context and tensors survive; compute-sanitizer finds a planted one-past-the-end
write and passes the shipped kernels."""
from __future__ import annotations

import pathlib

import pytest
import torch

import workbench as wb
from workbench.run import sanitize
from workbench.specs.bias_gelu import SPEC as spec

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")]
FAULTY = pathlib.Path(__file__).parent / "faulty"


def test_illegal_address_is_isolated_and_the_caller_survives():
    x, b = spec.new_inputs((512, 1024), torch.float32, "cuda", torch.Generator("cuda").manual_seed(0))
    before = x.clone()
    bad = wb.load_source("bias_gelu", FAULTY / "illegal_address.cu", name="illegal_address")
    with pytest.raises(wb.IsolatedRunError, match="illegal memory access"):
        wb.check("bias_gelu", bad, isolate=True)
    with pytest.raises(wb.IsolatedRunError, match="illegal memory access"):
        wb.bench("bias_gelu", variants=[bad], shapes=[(256, 256)], baselines=(), budget_s=0.05, isolate=True)
    torch.cuda.synchronize()                       # the context is healthy
    assert torch.equal(x, before)                  # and the caller's tensors are intact
    k = wb.load("bias_gelu", "vec4")
    assert wb.correctness.compare(k(x, b), spec.reference(x, b), torch.float32)[0]


@pytest.mark.skipif(sanitize.find() is None, reason="compute-sanitizer not installed")
def test_sanitizer_finds_a_one_past_the_end_write():
    bad = wb.load_source("bias_gelu", FAULTY / "off_by_one.cu", name="off_by_one")
    (memcheck,) = sanitize.run("bias_gelu", bad, tools=["memcheck"])
    assert memcheck.ran and memcheck.errors > 0, memcheck.first_errors
    assert "Invalid __global__ write" in memcheck.first_errors


@pytest.mark.skipif(sanitize.find() is None, reason="compute-sanitizer not installed")
@pytest.mark.parametrize("variant", ["vec4", "half"])
def test_sanitizer_passes_the_vector_variants(variant):
    results = sanitize.run("bias_gelu", variant)
    for r in results:
        assert r.ran and r.errors == 0, f"{r.tool}: {r.errors} errors\n{r.first_errors}"
