"""isolate=True: check, gradcheck and bench in a child process. A planted crashing variant
(tests/faulty/cpu_segfault.cpp) is reported as IsolatedRunError; the caller keeps running. Also
the sanitize command's refusals, which need no GPU, and children that never report (planted static
initializers, tests/faulty/static_*.cu): an exit with status 0, SIGABRT, a hang, each an
IsolatedRunError that says which."""
from __future__ import annotations

import pathlib

import pytest
import torch

import workbench as wb
from workbench.specs.bias_gelu import SPEC as spec

FAULTY = pathlib.Path(__file__).parent / "faulty"


def test_isolated_check_reports_a_crash_and_the_caller_survives(cpu_kernel):
    k = wb.load_source("bias_gelu", FAULTY / "cpu_segfault.cpp", name="segv")
    x, b = spec.new_inputs((6, 9), torch.float32, "cpu", torch.Generator().manual_seed(0))
    before = x.clone()
    with pytest.raises(wb.IsolatedRunError, match="SIGSEGV") as info:
        wb.check("bias_gelu", k, isolate=True)
    assert "caller's process is unaffected" in str(info.value) and info.value.returncode < 0
    assert torch.equal(x, before)
    assert wb.correctness.compare(cpu_kernel(x, b), spec.reference(x, b), torch.float32)[0]


def test_isolated_check_agrees_with_in_process(cpu_kernel):
    kwargs = dict(seed=11, shapes=[(3, 5), (17, 33)], layouts=("contiguous", "offset"))
    here = wb.check("bias_gelu", "cpu", **kwargs)
    there = wb.check("bias_gelu", "cpu", isolate=True, **kwargs)
    assert there.ok and here.ok
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


def test_isolated_bench_of_a_crashing_variant_names_it(cpu_kernel):
    k = wb.load_source("bias_gelu", FAULTY / "cpu_segfault.cpp", name="segv")
    with pytest.raises(wb.IsolatedRunError, match="bench of bias_gelu/segv"):
        wb.bench("bias_gelu", variants=[k], shapes=[(16, 64)], baselines=(), budget_s=0.05, isolate=True)


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


def test_sanitizer_summaries_are_read():
    from workbench.run import sanitize

    assert sanitize.summary_errors("========= ERROR SUMMARY: 3 errors\n") == 3
    assert sanitize.summary_errors("========= ERROR SUMMARY: 0 errors\n") == 0
    assert sanitize.summary_errors("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)") == 0
    assert sanitize.summary_errors("========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)") == 1
    assert sanitize.summary_errors("Traceback (most recent call last):\n") is None


def test_a_worker_runs_jobs_in_turn_and_survives_a_crash_by_restarting(cpu_kernel):
    """isolate.Worker (the exercise checker's child): several jobs in one warm child; a crashing
    job ends it with the same error as a one-shot child, and the next job starts a fresh one."""
    from workbench.run import isolate

    segv = wb.load_source("bias_gelu", FAULTY / "cpu_segfault.cpp", name="segv_worker")
    kwargs = dict(seed=1, shapes=[[3, 5]], layouts=["contiguous"])
    with isolate.Worker({"op": "bias_gelu", "variant": "cpu"}) as worker:
        first = worker.run("check", isolate.variant_address("bias_gelu", "cpu"), kwargs)
        assert wb.correctness.Report.from_dict(first).ok
        pid = worker._proc.pid
        again = worker.run("gradcheck", isolate.variant_address("bias_gelu", "cpu"), {"seed": 1})
        assert wb.correctness.Report.from_dict(again).ok and worker._proc.pid == pid  # the same child
        with pytest.raises(wb.IsolatedRunError, match="SIGSEGV"):
            worker.run("check", isolate.variant_address("bias_gelu", segv), kwargs)
        after = worker.run("check", isolate.variant_address("bias_gelu", "cpu"), kwargs)
        assert wb.correctness.Report.from_dict(after).ok and worker._proc.pid != pid
        assert "[worker] ready in" in first["child_output"] or "[worker] check in" in after["child_output"]


def test_a_child_starts_through_its_own_entry_point_never_the_cli(cpu_kernel, tmp_path):
    """isolate's children run `python -m workbench.run.isolate_child`, behind a tool where one is
    given; the CLI module is never imported in them (PYTHONVERBOSE names every module loaded)."""
    import re
    import sys

    from workbench.run import isolate

    job_file = tmp_path / "job.json"
    assert isolate.child_command(job_file, ["ncu", "--nvtx"]) == \
        ["ncu", "--nvtx", sys.executable, "-m", "workbench.run.isolate_child", str(job_file)]
    assert isolate.worker_command({"op": "bias_gelu"})[1:4] == ["-m", "workbench.run.isolate_child", "--worker"]
    out = isolate.run("check", isolate.variant_address("bias_gelu", "cpu"), dict(seed=1, shapes=[[3, 5]]),
                      extra_env={"PYTHONVERBOSE": "1"})
    assert wb.correctness.Report.from_dict(out).ok
    imported = set(re.findall(r"^import '([\w.]+)' #", out["child_output"], flags=re.MULTILINE))
    assert {"workbench.run.jobs", "workbench.measure.correctness"} <= imported, sorted(imported)
    assert not {"workbench.cli", "workbench.__main__"} & imported
    with isolate.Worker({"op": "bias_gelu"}) as worker:
        worker.run("gradcheck", isolate.variant_address("bias_gelu", "cpu"), {"seed": 1})
        assert worker._proc.args[1:3] == ["-m", "workbench.run.isolate_child"]


def test_a_job_that_is_not_one_is_refused_before_a_child_starts():
    from workbench.run import isolate, jobs

    assert isolate.JOBS == tuple(jobs.BY_NAME)  # the parent's list of names is the child's
    with pytest.raises(ValueError, match=r"job must be one of \['load', 'check', 'gradcheck', 'bench', 'measure'\]; "
                                         r"got 'chek'"):
        isolate.run("chek", isolate.variant_address("bias_gelu", "cpu"), {})


# ----------------------------------------------------------------------------- children that never report

def _planted(stem: str):
    """A planted static initializer (tests/faulty/static_*.cu), built as the checker builds it
    (not loaded here), and its address (how a child finds it)."""
    from workbench.run import isolate, loader

    built = loader.build_source("bias_gelu", FAULTY / f"{stem}.cu", f"ex01_{stem}")  # the names the CLI tests use
    return isolate.variant_address("bias_gelu", built)


@pytest.mark.parametrize("stem, how", [("static_exit", "exited with status 0 before reporting its result"),
                                       ("static_abort", "was killed by SIGABRT before reporting its result")])
def test_a_child_that_ends_before_reporting_is_an_error_even_with_status_0(cuda_buildable, cpu_kernel, stem, how):
    """A one-shot child and a Worker alike: only a result received counts, never an exit status;
    the Worker's next job runs in a fresh child."""
    from workbench.run import isolate

    address = _planted(stem)
    with pytest.raises(wb.IsolatedRunError, match=how) as info:
        isolate.run("load", address, {}, timeout_s=300)
    assert "[load] bias_gelu/ex01_" in info.value.output  # its last words
    with isolate.Worker({"op": "bias_gelu"}) as worker:
        with pytest.raises(wb.IsolatedRunError, match=how):
            worker.run("load", address, {}, timeout_s=300)
        again = worker.run("check", isolate.variant_address("bias_gelu", "cpu"), dict(seed=1, shapes=[[3, 5]]))
        assert wb.correctness.Report.from_dict(again).ok


def test_a_child_that_hangs_is_killed_and_says_so(cuda_buildable, cpu_kernel):
    import subprocess

    from workbench.run import isolate

    address = _planted("static_hang")
    with pytest.raises(isolate.ChildTimeout, match=r"did not finish within 15 s and was killed") as info:
        isolate.run("load", address, {}, timeout_s=15)  # a one-shot child's time includes its start-up
    assert isinstance(info.value, subprocess.TimeoutExpired) and isinstance(info.value, wb.IsolatedRunError)
    with isolate.Worker({"op": "bias_gelu"}) as worker:
        # The job's time counts from when the child is ready: its start-up (import torch) is not in the 2 s.
        with pytest.raises(isolate.ChildTimeout, match=r"did not finish within 2 s and was killed") as info:
            worker.run("load", address, {}, timeout_s=2)
        assert not info.value.starting and "[load] bias_gelu/ex01_static_hang" in info.value.output
        again = worker.run("check", isolate.variant_address("bias_gelu", "cpu"), dict(seed=1, shapes=[[3, 5]]))
        assert wb.correctness.Report.from_dict(again).ok


def test_the_exercise_checkers_worker_warms_up_on_the_smallest_sizes_its_seed_draws(cpu_kernel):
    """jobs.warm_up with exercise_seed (the checker's Worker where a GPU is likely): a check of the
    reference on the three smallest non-empty sizes of the seed's draw and its empty ones
    (exercise/sizes.warmup_shapes), in the exercise's dtypes and layouts."""
    from workbench.run import jobs
    from workbench.exercise import sizes

    shapes = sizes.warmup_shapes(7, spec)
    drawn = sizes.random_sizes(7, spec)
    assert [s for s in shapes if 0 not in s] == sorted((s for s in drawn if 0 not in s), key=sum)[:3]
    assert [s for s in shapes if 0 in s] == [s for s in drawn if 0 in s] != []
    jobs.warm_up("bias_gelu", "cpu", dtypes=["float32", "int8"], layouts=["contiguous", "offset"], seed=7,
                 exercise_seed=7)  # a dtype the variant lacks is left out, as the checker's are
