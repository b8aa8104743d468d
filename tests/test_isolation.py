"""isolate=True: check and gradcheck run here over the variant served from a runner process
(workbench/judge); a call that crashes the runner (tests/faulty/cpu_segfault.cpp) is that case's
FAIL, the next case runs in a fresh runner, and the caller keeps running. A runner that cannot
start (planted static initializers, tests/faulty/static_*.cu: an exit with status 0, SIGABRT, a
hang) is an IsolatedRunError that says which (wb.check's, on the GPU: test_gpu_faults.py).
wb.bench(isolate=True) calls each variant in a runner before timing it here. Also the sanitize
command's refusals, which need no GPU, and the runner's protocol additions (an NVTX range, own
memory) on the CPU."""
from __future__ import annotations

import pathlib
import sys
import time

import pytest
import torch

import workbench as wb
from workbench.judge import remote, start
from workbench.specs.bias_gelu import SPEC as spec

FAULTY = pathlib.Path(__file__).parent / "faulty"
sys.path.insert(0, str(pathlib.Path(__file__).parent / "fixtures"))
import byo_impls  # noqa: E402


@pytest.fixture(scope="module")
def segv(wb):
    return wb.load_source("bias_gelu", FAULTY / "cpu_segfault.cpp", name="segv")


def test_a_crash_fails_its_case_the_next_runs_in_a_fresh_runner_and_the_caller_survives(cpu_kernel, segv):
    """cpu_segfault.cpp writes through a null pointer when it has rows to compute: 6x9 crashes the
    runner; 0x5 launches nothing and passes, in the runner started after the crash."""
    x, b = spec.new_inputs((6, 9), torch.float32, "cpu", torch.Generator().manual_seed(0))
    before = x.clone()
    report = wb.check("bias_gelu", segv, isolate=True, shapes=[(6, 9), (0, 5)], layouts=("contiguous",),
                      backward=False)
    assert report.variant == "segv" and not report.ok, report.table()
    (crashed,) = report.failures
    assert crashed.shape == (6, 9) and "killed by SIGSEGV" in crashed.note, report.table()
    assert "likely cause: an invalid memory access in host code" in crashed.note, crashed.note
    assert "caller's process is unaffected" in crashed.note, crashed.note
    assert [c.passed for c in report.cases if c.shape == (0, 5)] == [True, True], report.table()
    assert torch.equal(x, before)
    assert wb.correctness.compare(cpu_kernel(x, b), spec.reference(x, b), torch.float32)[0]


def test_isolated_check_agrees_with_in_process(cpu_kernel):
    kwargs = dict(seed=11, shapes=[(3, 5), (17, 33)], layouts=("contiguous", "offset"))
    here = wb.check("bias_gelu", "cpu", **kwargs)
    there = wb.check("bias_gelu", "cpu", isolate=True, **kwargs)
    assert there.ok and here.ok and there.variant == "cpu"
    assert [(c.what, c.shape, c.dtype, c.layout) for c in there.cases] == \
        [(c.what, c.shape, c.dtype, c.layout) for c in here.cases]


def test_isolated_check_reports_wrong_results_as_a_report(cpu_kernel, cpu_source_text):
    """Isolation changes where it runs, not what a failure looks like: wrong numbers come back as
    a failing report, not an exception."""
    wrong = cpu_source_text.replace("wb_to_acc(x[r * cols + c]) + wb_to_acc(bias[c])", "wb_to_acc(x[r * cols + c])")
    assert wrong != cpu_source_text
    k = wb.load_inline("bias_gelu", wrong, name="nobias_isolated")
    report = wb.check("bias_gelu", k, isolate=True, seed=3, backward=False)
    assert not report.ok and report.failures


def test_isolated_gradcheck_and_bench(cpu_kernel):
    assert wb.gradcheck("bias_gelu", "cpu", isolate=True).ok
    r = wb.bench("bias_gelu", variants=["cpu"], shapes=[(16, 64)], baselines=("eager",), budget_s=0.05, isolate=True)
    assert {row["variant"] for row in r.rows} == {"eager", "cpu"}


def test_isolated_bench_of_a_crashing_variant_names_it_before_timing_anything(cpu_kernel, segv):
    with pytest.raises(wb.IsolatedRunError, match="bench of bias_gelu/segv, fwd 16x64 float32: .*SIGSEGV"):
        wb.bench("bias_gelu", variants=["cpu", segv], shapes=[(16, 64)], baselines=(), budget_s=0.05, isolate=True)


# ----------------------------------------------------------------------------- runners that never start

def _planted(stem: str):
    """A planted static initializer (tests/faulty/static_*.cu) served from a runner: its library
    runs its initializers when the runner opens it, before any CUDA call (so also without a GPU).
    check(isolate=True) starts the runner before its first case: what it raises is this."""
    return start.isolated("bias_gelu", str(FAULTY / f"{stem}.cu"))


@pytest.mark.parametrize("stem, how", [("static_exit", "exited with status 0 before answering"),
                                       ("static_abort", "was killed by SIGABRT before answering")])
def test_a_runner_that_ends_while_starting_is_an_error_even_with_status_0(cuda_buildable, cpu_kernel, stem, how):
    k = _planted(stem)
    with pytest.raises(wb.IsolatedRunError, match=how) as info:
        k.module.ensure()
    assert f"{stem}: variant" in str(info.value) and "caller's process is unaffected" in str(info.value)
    k.module.close()


def test_a_runner_that_hangs_while_starting_is_killed_at_its_time_limit_and_says_so(cuda_buildable):
    """time_limit (what profile and sanitize put in front of their runners) ends it and everything
    it started; the caller reads that end as any other."""
    k = start.isolated("bias_gelu", str(FAULTY / "static_hang.cu"), prefix=remote.time_limit(5))
    started = time.monotonic()
    with pytest.raises(wb.IsolatedRunError, match="static_hang: variant: .*was killed by SIGKILL before answering"):
        k.module.ensure()
    assert 5 <= time.monotonic() - started < 60 and k.module.runner is None
    k.module.close()


# ----------------------------------------------------------------------------- the protocol's additions

def test_an_nvtx_range_around_a_call_and_own_memory_leave_the_results_as_they_are(cpu_kernel):
    """`range`/`end` (what ncu selects) and `own-memory` (what a sanitizer runs on) in the C++
    runner and in the Python runner (tests/fixtures/byo_impls: a callable by module path)."""
    from workbench.explain import ncu

    for variant in ("cpu", byo_impls.bias_gelu_torch):
        k = start.isolated("bias_gelu", variant, own_memory=True)
        try:
            got = ncu.profiled_call("bias_gelu", k, (64, 48), "float32", "fwd")
            assert got["verified"] == "ok", got
            assert wb.check("bias_gelu", k, seed=2, shapes=[(5, 7)], dtypes=["float32"]).ok
        finally:
            k.module.close()


# ----------------------------------------------------------------------------- sanitize, without a GPU

def test_sanitize_without_compute_sanitizer_fails_loudly(run_cli, cpu_kernel):
    proc = run_cli("sanitize", "bias_gelu", "scalar", env_extra={"WORKBENCH_COMPUTE_SANITIZER": "/nonexistent/cs"})
    assert proc.returncode != 0
    assert "compute-sanitizer not found" in proc.stderr


def test_sanitize_refuses_a_cpu_variant(run_cli, cpu_kernel, tmp_path):
    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    proc = run_cli("sanitize", "bias_gelu", "cpu", env_extra={"WORKBENCH_COMPUTE_SANITIZER": str(fake)})
    assert proc.returncode != 0 and "runs on the CPU" in proc.stderr


STAND_IN_SANITIZER = """#!{python}
# A stand-in for compute-sanitizer: runs the runner, then writes its summary as the real one does,
# once the runner has ended (0 errors where it ended by itself, as a polite end makes it).
import subprocess, sys
args = sys.argv[1:]
target = args[args.index("--log-file") + 2:]
code = subprocess.run(target, pass_fds=[int(target[-1])]).returncode
with open(args[args.index("--log-file") + 1], "w") as log:
    log.write(f"========= ERROR SUMMARY: {{0 if code == 0 else 1}} errors\\n")
"""


def test_sanitize_drives_the_check_through_a_runner_behind_the_tool_and_reads_its_report(cpu_kernel, tmp_path):
    """The sanitize path on the CPU (a CPU variant, a stand-in tool): the runner starts behind the
    tool on own memory, the small check runs here, and the runner is ended politely so the tool
    writes its summary (a killed tool writes none: 'did not run')."""
    from workbench.run import sanitize

    tool = tmp_path / "compute-sanitizer"
    tool.write_text(STAND_IN_SANITIZER.format(python=sys.executable))
    tool.chmod(0o755)
    result = sanitize._run_tool("bias_gelu", "cpu", str(tool), "memcheck", 120)
    assert result.ran and result.errors == 0, result.first_errors


def test_sanitizer_summaries_are_read():
    from workbench.run import sanitize

    assert sanitize.summary_errors("========= ERROR SUMMARY: 3 errors\n") == 3
    assert sanitize.summary_errors("========= ERROR SUMMARY: 0 errors\n") == 0
    assert sanitize.summary_errors("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)") == 0
    assert sanitize.summary_errors("========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)") == 1
    assert sanitize.summary_errors("Traceback (most recent call last):\n") is None
