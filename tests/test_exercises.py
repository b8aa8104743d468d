"""Exercises (exercises/NN_name/): each folder is complete and its registration valid; every starter
compiles and fails its checker at the check, and for the reason, its exercise.toml states; every
solution passes (without a GPU: the checks that can run pass and the rest say why they were
skipped; on a GPU, everything including speed). Also the command line, the randomized shapes, a
compile error, and the GPU half of the report (first failing case, crash, speed ratio) driven on
the CPU through stand-ins for check, gradcheck and bench."""
from __future__ import annotations

import json
import re

import pytest
from conftest import HAS_GPU, describe

from workbench import correctness, ptxas, registry
from workbench import exercise as wbex
from workbench.benchmark import BenchResult
from workbench.errors import IsolatedRunError
from workbench.specs.bias_gelu import SPEC as BIAS_GELU

EXERCISES = wbex.exercises()
IDS = [ex.slug for ex in EXERCISES]
GPU_CHECKS = ("correctness", "gradcheck", "speed")
CPU_PASS = "PASS (what this machine can run; skipped: correctness, gradcheck, speed — they need a GPU)"


def _needs_cuobjdump(ex):
    if ex.sass and ptxas.cuobjdump() is None:
        pytest.skip("cuobjdump not found: the SASS rules cannot be read here")


# ----------------------------------------------------------------------------- registration

def test_the_three_course_exercises_are_there():
    assert [ex.slug for ex in EXERCISES][:3] == ["01_fp16_support", "02_vec4_loads", "03_fused_backward"]


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_folder_is_complete(ex):
    for name in ("README.md", "starter.cu", "solution.cu", "exercise.toml"):
        assert (ex.folder / name).is_file(), f"{ex.slug}: {name} is missing"
    raw = wbex.tomllib.loads((ex.folder / "exercise.toml").read_text())
    for key in ("title", "op", "dtypes", "reference", "speed", "starter"):
        assert key in raw, f"{ex.slug}/exercise.toml: no {key!r}"
    assert {"directions", "dtypes", "shape", "target"} <= set(raw["speed"])
    assert {"fails_at", "reason"} <= set(raw["starter"])
    # The reference exists and can be timed in every dtype the speed section names.
    ref = {v.name: v for v in registry.variants(ex.op)}[ex.reference]
    assert set(ex.speed.dtypes) <= set(ref.dtypes) and set(ex.speed.dtypes) <= set(ex.dtypes)
    # Both kernels declare the op; the solution declares every required dtype (read without a build).
    solution = registry.static_variant(ex.op, ex.solution)
    assert set(ex.dtypes) <= set(solution.dtypes), f"{ex.slug}: the solution declares {solution.dtypes}"
    registry.static_variant(ex.op, ex.starter)
    assert "TODO" in ex.starter.read_text() and "TODO" not in ex.solution.read_text()
    readme = ex.readme.read_text()
    assert f"python -m workbench exercise check {ex.number}" in readme
    assert f"{ex.speed.target:.2f}x" in readme and f"`{ex.reference}`" in readme


def test_the_index_lists_every_exercise():
    index = (wbex.EXERCISES_DIR / "README.md").read_text()
    for ex in EXERCISES:
        assert f"({ex.slug}/README.md)" in index


@pytest.mark.parametrize("key", [2, "2", "02", "02_vec4_loads", "vec4_loads", " 2 "])
def test_an_exercise_is_named_by_number_or_name(key):
    assert wbex.get(key).slug == "02_vec4_loads"


@pytest.mark.parametrize("key", [9, "9", "vec4", "", None, True, 2.0])
def test_an_unknown_exercise_is_refused_with_the_list(key):
    with pytest.raises(ValueError, match=r"exercise must be one of: 1 \(01_fp16_support\), 2 \(02_vec4_loads\)"):
        wbex.get(key)


def test_a_malformed_registration_names_the_file_and_field(tmp_path):
    folder = tmp_path / "07_broken"
    folder.mkdir()
    (folder / "exercise.toml").write_text('title = "t"\nop = "bias_gelu"\ndtypes = ["float32"]\n')
    with pytest.raises(wbex.ExerciseConfigError, match=r"07_broken/exercise.toml: missing field 'reference'"):
        wbex.load_exercise(folder)


# ----------------------------------------------------------------------------- shapes

def test_shapes_are_reproducible_per_seed_and_differ_across_seeds():
    assert wbex.random_sizes(11, BIAS_GELU) == wbex.random_sizes(11, BIAS_GELU)
    assert len({tuple(wbex.random_sizes(s, BIAS_GELU)) for s in range(20)}) == 20


@pytest.mark.parametrize("seed", range(0, 400, 7))
def test_every_run_covers_the_edges(seed):
    shapes = wbex.random_sizes(seed, BIAS_GELU)
    full = [s for s in shapes if 0 not in s]
    assert len(full) == 8 and any(0 in s for s in shapes)
    assert {s[-1] % 8 for s in full} == set(range(8))          # every residue: some rows are not whole float4s
    assert any(s[-1] % 4 != 0 for s in full)
    assert any(s[-1] < 8 for s in full) and any(s[-1] >= 2000 for s in full)
    assert any(len(s) == 3 for s in full) and any(len(s) == 1 for s in full)
    assert any(len(s) == 2 and s[0] == 1 for s in full)
    assert all(1 <= s[0] <= 300 for s in full if len(s) == 2)


# ----------------------------------------------------------------------------- starters and solutions (CPU)

@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_starter_compiles_and_fails_for_its_stated_reason(ex, cuda_buildable):
    _needs_cuobjdump(ex)
    report = wbex.check_exercise(ex.number, seed=1, speed=False)
    assert report.path.endswith(f"{ex.slug}/starter.cu")
    assert report.check("build").status == "ok", report.summary()
    bad = report.first_failure
    assert bad is not None and bad.name == ex.starter_fails_at, report.summary()
    assert ex.starter_reason in bad.detail, report.summary()
    assert not report.ok
    assert report.verdict() == f"FAIL: {bad.name} — {bad.detail}"
    assert report.summary().endswith(report.verdict())


@pytest.mark.skipif(HAS_GPU, reason="with a GPU, test_solution_passes_everything_on_the_gpu checks the solutions")
@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_solution_passes_what_this_machine_can_run(ex, cuda_buildable):
    _needs_cuobjdump(ex)
    report = wbex.check_exercise(ex.number, ex.solution, seed=1)
    assert report.ok and not report.complete, report.summary()
    status = {c.name: c for c in report.checks}
    assert [c.name for c in report.checks] == list(wbex.CHECKS)
    assert status["build"].status == "ok" and "no spills" in status["build"].detail, status["build"]
    assert status["declared dtypes"].status == "ok" and status["SASS rules"].status == "ok"
    for name in GPU_CHECKS:
        assert (status[name].status, status[name].detail) == ("skipped", wbex.NEEDS_GPU)
    assert report.verdict() == CPU_PASS
    d = json.loads(json.dumps(report.to_dict()))
    assert d["ok"] is True and d["first_failure"] is None and d["seed"] == 1


def test_a_compile_error_fails_at_build_with_file_line_and_message(tmp_path, cuda_buildable):
    text = wbex.get(2).starter.read_text()
    good = "const int64_t n = a->rows * a->cols;\n  // TODO 2"
    assert text.count(good) == 1
    path = tmp_path / "broken.cu"
    path.write_text(text.replace(good, "const int64_t n = a->rows * a->colz;\n  // TODO 2"))
    line = text[:text.index(good)].count("\n") + 1
    report = wbex.check_exercise(2, path, seed=1)
    build = report.first_failure
    assert build is not None and build.name == "build", report.summary()
    assert f"broken.cu:{line}" in build.detail and "colz" in build.detail, build.detail
    assert any(ln.startswith("full compiler log: ") for ln in build.lines)
    assert all(c.status == "skipped" and c.detail == "the build failed" for c in report.checks[1:])
    assert report.verdict().startswith("FAIL: build — ") and "colz" in report.summary()


def test_a_missing_or_non_cuda_path_is_refused(tmp_path):
    with pytest.raises(ValueError, match="path: no such file"):
        wbex.check_exercise(2, tmp_path / "nope.cu")
    other = tmp_path / "kernel.py"
    other.write_text("")
    with pytest.raises(ValueError, match=r"must be a CUDA source file ending in \.cu"):
        wbex.check_exercise(2, other)


# ----------------------------------------------------------------------------- the GPU half, with stand-ins

@pytest.fixture
def pretend_gpu(monkeypatch, cuda_buildable):
    """Run check_exercise's GPU steps on this machine: the GPU is 'there', and the child runs of
    check and gradcheck, and bench, are replaced by stand-ins the test sets (attributes of the
    returned namespace; check and gradcheck take (op, kernel, **kwargs) like correctness's)."""
    class Fakes:
        check = None
        gradcheck = None
        bench = None

    fakes = Fakes()
    monkeypatch.setattr(wbex.checks, "gpu_present", lambda: True)
    monkeypatch.setattr(wbex.checks, "start_worker", lambda ex: None)
    monkeypatch.setattr(wbex.checks, "in_child",
                        lambda kind, ex, kernel, worker=None, **k: getattr(fakes, kind)(ex.op, kernel, **k))
    fakes.gradcheck = lambda op, kernel, **k: correctness.Report(
        op, kernel.name, "cuda", [correctness.Case("grad x", (3, 5), "float32", "contiguous", True)],
        method="gradients vs the float64 reference")
    return fakes


def _passing_check(op, kernel, **kwargs):
    return correctness.Report(op, kernel.name, "cuda", [correctness.Case("forward", (3, 5), "float32", "contiguous", True)])


def test_a_correctness_failure_names_the_case(pretend_gpu):
    seen = {}

    def check(op, kernel, **kwargs):
        seen.update(kwargs)
        return correctness.Report(op, kernel.name, "cuda", [
            correctness.Case("forward", (37, 131), "float32", "offset", True),
            correctness.Case("backward dbias", (37, 131), "float32", "offset", False, 0.31, 2.5, (130,),
                             "3 elements beyond atol"),
            correctness.Case("forward", (5, 7), "float32", "contiguous", False, 0.2, 1.0, (4, 6))])

    pretend_gpu.check = check
    report = wbex.check_exercise(2, wbex.get(2).solution, seed=42)
    assert seen["shapes"] == [list(s) for s in wbex.random_sizes(42, BIAS_GELU)] and seen["seed"] == 42
    assert seen["dtypes"] == ["float32"] and seen["backward"] is True
    assert seen["layouts"] == ["contiguous", "strided", "offset"]  # a transposed view reaches the kernel as a copy
    bad = report.first_failure
    assert bad.name == "correctness", report.summary()
    assert bad.detail == "backward dbias, 37x131 float32 offset; 2 of 3 cases failed"
    text = report.summary()
    for expected in ("shape   37x131", "dtype   float32", "layout  offset: views that start one element",
                     "relative 3.10e-01 (allowed 1e-05)", "at index [130]",
                     "same shapes and inputs again: python -m workbench exercise check 2 ", "--seed 42"):
        assert expected in text, text
    assert report.check("speed").detail == "fix correctness first"


def test_a_crash_is_reported_with_the_cuda_error_and_its_case(pretend_gpu):
    def check(op, kernel, **kwargs):
        assert kwargs["announce"] is True  # the child names each case before it runs it
        raise IsolatedRunError("check of bias_gelu/ex02_solution", 1, "torch.AcceleratorError: CUDA error: "
                               "misaligned address\nSearch for `cudaErrorMisalignedAddress'",
                               "[case] forward 203x634 float32 contiguous\n[case] backward 203x634 float32 contiguous\n"
                               "[case] forward 192x7 float32 offset\ntorch.AcceleratorError: CUDA error: misaligned "
                               "address\nSearch for `cudaErrorMisalignedAddress'")

    pretend_gpu.check = check
    report = wbex.check_exercise(2, wbex.get(2).solution, seed=1)
    bad = report.first_failure
    assert (bad.name, bad.detail) == ("correctness", "crashed in forward 192x7 float32 offset: misaligned address"), \
        report.summary()
    assert any("the case that was running: forward 192x7 float32 offset (each input: views that start one element"
               in ln for ln in bad.lines), bad.lines
    assert any("python -m workbench sanitize bias_gelu ex02_solution --source" in ln for ln in bad.lines)
    assert not any(ln.strip().startswith("[case]") for ln in bad.lines)  # the markers are not shown as output
    assert report.check("gradcheck").status == "ok"     # the next checks still ran; the report printed


def _bench_rows(student: str, reference: str, mine_ms: float, ref_ms: float):
    def bench(op, kernel, variants, dtypes, shapes, baselines, directions, budget_s):
        assert kernel.name == student and variants == [student, reference] and list(baselines) == []
        rows = []
        for d in directions:
            for t in dtypes:
                for name, ms in ((student, mine_ms), (reference, ref_ms)):
                    rows.append({"direction": d, "dtype": t, "variant": name, "median_ms": ms})
        return BenchResult(rows)
    return bench


def test_speed_is_the_reference_median_over_yours(pretend_gpu):
    pretend_gpu.check = _passing_check
    pretend_gpu.bench = _bench_rows("ex02_solution", "vec4", 1.0, 0.8)
    slow = wbex.check_exercise(2, wbex.get(2).solution, seed=1)
    assert (slow.first_failure.name, slow.first_failure.detail) == ("speed", "0.80x vec4 on fwd float32, target 0.85x")
    assert "yours 1.0000 ms, vec4 0.8000 ms)" in slow.summary()
    pretend_gpu.bench = _bench_rows("ex02_solution", "vec4", 0.9, 0.8)
    fast = wbex.check_exercise(2, wbex.get(2).solution, seed=1)
    assert fast.complete and fast.verdict() == "PASS", fast.summary()
    assert "0.89x vec4" in fast.summary()               # the timings print on a pass too
    assert wbex.check_exercise(2, wbex.get(2).solution, seed=1, speed=False).check("speed").status == "skipped"


# ----------------------------------------------------------------------------- command line

def test_cli_list(run_cli):
    proc = run_cli("exercise", "list")
    assert proc.returncode == 0, describe(proc)
    for ex in EXERCISES:
        assert ex.name in proc.stdout and ex.title in proc.stdout and ex.target_text() in proc.stdout


def test_cli_check_a_solution(run_cli, cuda_buildable):
    ex = wbex.get(2)
    _needs_cuobjdump(ex)
    proc = run_cli("exercise", "check", "2", str(ex.solution), "--seed", "5", "--no-speed")
    assert proc.returncode == 0, describe(proc)
    assert re.search(r"^  build \.+ ok \(", proc.stdout, re.MULTILINE) and "(seed 5)" in proc.stdout
    assert "\nPASS" in proc.stdout, proc.stdout


def test_cli_check_a_starter_fails_with_status_1(run_cli, cuda_buildable):
    ex = wbex.get(3)
    _needs_cuobjdump(ex)
    proc = run_cli("exercise", "check", "03_fused_backward", "--no-speed")
    assert proc.returncode == 1, describe(proc)
    assert "FAIL: SASS rules — dbias uses global atomics" in proc.stdout


@pytest.mark.parametrize("argv, message", [
    (["exercise", "check", "9"], "exercise must be one of: 1 (01_fp16_support), 2 (02_vec4_loads), 3 (03_fused_backward)"),
    (["exercise", "check", "2", "no/such/file.cu"], "path: no such file: 'no/such/file.cu'"),
    (["exercise", "check", "2", "README.md"], "path must be a CUDA source file ending in .cu"),
])
def test_cli_bad_usage_exits_2(run_cli, argv, message):
    proc = run_cli(*argv)
    assert proc.returncode == 2 and message in proc.stderr, describe(proc)


# ----------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_solution_passes_everything_on_the_gpu(ex):
    report = wbex.check_exercise(ex.number, ex.solution)
    assert report.complete and report.verdict() == "PASS", report.summary()
    print(report.summary())


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_starter_fails_for_its_stated_reason_on_the_gpu(ex):
    _needs_cuobjdump(ex)
    report = wbex.check_exercise(ex.number, speed=False)
    bad = report.first_failure
    assert bad is not None and bad.name == ex.starter_fails_at and ex.starter_reason in bad.detail, report.summary()
    print(report.summary())


@pytest.mark.gpu
@pytest.mark.slow
def test_a_planted_bug_in_the_tail_path_fails_correctness_with_the_case(tmp_path):
    text = wbex.get(2).solution.read_text()
    tail = "y[i] = wb_gelu_tanh(x[i] + bias[i % cols]);"
    assert text.count(tail) == 1
    path = tmp_path / "tail_bug.cu"
    path.write_text(text.replace(tail, "y[i] = wb_gelu_tanh(x[i] + bias[(i + 1) % cols]);"))
    report = wbex.check_exercise(2, path, seed=7, speed=False)
    bad = report.first_failure
    assert bad is not None and bad.name == "correctness", report.summary()
    case = re.match(r"forward, (\d+(?:x\d+)*) float32 (\w+);", bad.detail)
    assert case, bad.detail
    shape = tuple(int(d) for d in case.group(1).split("x"))
    assert shape[-1] % 4 != 0 or case.group(2) == "offset"      # only the tail path is broken
    assert any("at index [" in ln for ln in bad.lines) and any("dtype   float32" in ln for ln in bad.lines)
    assert "--seed 7" in report.summary()
