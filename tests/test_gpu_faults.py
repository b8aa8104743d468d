"""GPU faults: a variant that hits an illegal address, checked with isolate=True, fails that case with
the CUDA error while the caller's CUDA context and tensors survive; a runner whose library ends
while loading (tests/faulty/static_*.cu) is an IsolatedRunError; compute-sanitizer finds a
planted one-past-the-end write and passes the shipped kernels, over a runner on memory of its own
(and the test that settles why: memcheck over the caller's CUDA IPC arena)."""
from __future__ import annotations

import pathlib
import tempfile

import pytest
import torch

import workbench as wb
from workbench.judge import start
from workbench.run import sanitize
from workbench.specs.bias_gelu import SPEC as spec

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")]
FAULTY = pathlib.Path(__file__).parent / "faulty"
needs_sanitizer = pytest.mark.skipif(sanitize.find() is None, reason="compute-sanitizer not installed")


def test_an_illegal_address_fails_its_case_and_the_caller_survives():
    x, b = spec.new_inputs((512, 1024), torch.float32, "cuda", torch.Generator("cuda").manual_seed(0))
    before = x.clone()
    bad = wb.load_source("bias_gelu", FAULTY / "illegal_address.cu", name="illegal_address")
    report = wb.check("bias_gelu", bad, isolate=True, shapes=[(64, 64), (0, 64)], layouts=("contiguous",),
                      backward=False)
    assert report.variant == "illegal_address" and report.device.startswith("cuda"), report.table()
    (faulted,) = report.failures
    assert faulted.shape == (64, 64) and "an illegal memory access was encountered" in faulted.note, report.table()
    assert "likely cause: a read or write outside the tensors" in faulted.note, faulted.note
    assert all(c.passed for c in report.cases if c.shape == (0, 64)), report.table()  # in a fresh runner
    with pytest.raises(wb.IsolatedRunError, match="bench of bias_gelu/illegal_address.*illegal memory access"):
        wb.bench("bias_gelu", variants=[bad], shapes=[(256, 256)], baselines=(), budget_s=0.05, isolate=True)
    torch.cuda.synchronize()                       # the context is healthy
    assert torch.equal(x, before)                  # and the caller's tensors are intact
    k = wb.load("bias_gelu", "vec4")
    assert wb.correctness.compare(k(x, b), spec.reference(x, b), torch.float32)[0]


@pytest.mark.parametrize("stem, how", [("static_exit", "exited with status 0 before answering"),
                                       ("static_abort", "was killed by SIGABRT before answering")])
def test_a_runner_whose_library_ends_while_loading_is_an_isolated_run_error(stem, how):
    """Not a case's failure: check(isolate=True) starts the runner before its first case."""
    with pytest.raises(wb.IsolatedRunError, match=how) as info:
        wb.check("bias_gelu", str(FAULTY / f"{stem}.cu"), isolate=True, shapes=[(3, 5)])
    assert f"{stem}: variant" in str(info.value)
    assert wb.check("bias_gelu", "vec4", isolate=True, seed=1, shapes=[(3, 5)]).ok


@needs_sanitizer
def test_sanitizer_finds_a_one_past_the_end_write():
    bad = wb.load_source("bias_gelu", FAULTY / "off_by_one.cu", name="off_by_one")
    (memcheck,) = sanitize.run("bias_gelu", bad, tools=["memcheck"])
    assert memcheck.ran and memcheck.errors > 0, memcheck.first_errors
    assert "Invalid __global__ write" in memcheck.first_errors


@needs_sanitizer
@pytest.mark.parametrize("variant", ["vec4", "half"])
def test_sanitizer_passes_the_vector_variants(variant):
    results = sanitize.run("bias_gelu", variant)
    for r in results:
        assert r.ran and r.errors == 0, f"{r.tool}: {r.errors} errors\n{r.first_errors}"


@needs_sanitizer
def test_sanitizer_runs_a_triton_variant_in_the_python_runner():
    """A variant that needs Python is served by the Python runner, on tensors of its own there."""
    (memcheck,) = sanitize.run("rmsnorm", "triton", tools=["memcheck"])
    assert memcheck.ran and memcheck.errors == 0, memcheck.first_errors


def _memcheck(variant, own_memory: bool) -> tuple[int | None, str]:
    with tempfile.TemporaryDirectory() as tmp:
        log = pathlib.Path(tmp) / "memcheck.log"
        k = start.isolated("bias_gelu", variant, own_memory=own_memory,
                            prefix=[sanitize.find(), "--tool", "memcheck", "--log-file", str(log)])
        try:
            wb.check("bias_gelu", k, seed=0, shapes=[(37, 131)], layouts=("contiguous",), backward=False)
        finally:
            k.module.close()
        text = log.read_text(errors="replace") if log.is_file() else ""
    return sanitize.summary_errors(text), text


@needs_sanitizer
def test_memcheck_over_the_callers_cuda_ipc_arena_and_why_sanitize_uses_memory_of_its_own():
    """Settles what sanitize relies on: a kernel's accesses to memory its process mapped by CUDA IPC
    (cudaIpcOpenMemHandle: the caller's arena) are accepted, so a clean variant reads 0 errors
    there; but the arena is one allocation, so the write one past y's end lands inside it and
    memcheck cannot see it. On the runner's own allocations (own_memory) it does."""
    clean, text = _memcheck("vec4", own_memory=False)
    assert clean == 0, f"memcheck reports a clean kernel's accesses to CUDA IPC memory:\n{text[-3000:]}"
    bad = FAULTY / "off_by_one.cu"
    inside, text = _memcheck(str(bad), own_memory=False)
    assert inside == 0, text[-3000:]
    found, text = _memcheck(str(bad), own_memory=True)
    assert found and "Invalid __global__ write" in text, text[-3000:]
