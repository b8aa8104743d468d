"""Beyond one GPU (issue 29): sweeps and grading on a Ray cluster, tested on a local cluster of two CPU
workers. A sweep of rmsnorm's CPU variants through Ray gives the rows (same cells, same verdicts) and
notes of a one-process run, each row written to the results file as it arrives; a worker killed
mid-sweep loses nothing (its group is retried once on the other); grading a folder of good, bad and
crashing submissions of exercise 02 gives the serial grader's verdicts; without Ray the error says how
to install it. The GPU paths (one worker per GPU, routed by GPU type) are checked from the node
descriptions Ray gives, which is all they are built from."""
from __future__ import annotations

import csv
import pathlib
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, _child_env, describe

import workbench as wb
from workbench import cli
from workbench.cluster import grading, plan, pool, sweep
from workbench.exercise import grade
from workbench.measure import results, verify

FAULTY = pathlib.Path(__file__).parent / "faulty"
EXERCISE = REPO_ROOT / "exercises" / "02_vec4_loads"
# Small: four groups (two shapes, two directions) of four cells each, sampled for 50 ms at most. The
# tree's CPU variants by name: "all" would take in variants other test files loaded into this process
# (pytest-xdist gives a worker several files), which the cluster's fresh workers do not have.
SWEEP = dict(variants=["cpu", "pytorch"], dtypes=["float32"], shapes=[(64, 1024), (128, 256)], baselines=["eager", "F.rms_norm"],
             directions=["fwd", "bwd"], budget_s=0.05, device="cpu")
KEYS = ("op", "variant", "kind", "dtype", "shape", "direction", "numel", "bytes", "flops", "verified", "attrs")


@pytest.fixture(scope="module")
def ray():
    """A local Ray cluster of two CPUs, so two CPU workers, for the whole file."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


def _cells(rows: list[dict]) -> list[tuple]:
    return [tuple(str(r.get(k)) for k in KEYS) for r in rows]


@pytest.fixture(scope="module")
def one_process():
    return wb.bench("rmsnorm", **SWEEP)


def test_a_sweep_on_two_workers_gives_the_rows_and_notes_of_a_one_process_run(ray, one_process, tmp_path):
    path = tmp_path / "rows.jsonl"
    on_ray = wb.bench("rmsnorm", cluster="local", save=True, results_path=path, **SWEEP)
    assert _cells(on_ray.rows) == _cells(one_process.rows)          # same cells, same order, same verdicts
    assert {r["verified"] for r in on_ray.rows} == {verify.CHECKED}
    assert sorted(_cells(results.read_rows(path))) == sorted(_cells(on_ray.rows))  # every row in the file (as it came), once
    assert len({r["run_id"] for r in on_ray.rows}) == 1               # one sweep, one run id
    assert len({r["worker"] for r in on_ray.rows}) == 2 and all(r["host"] for r in on_ray.rows)  # both workers timed
    # The speedups are over the baselines timed on the same worker, within the same group.
    for r in on_ray.rows:
        same = [b for b in on_ray.rows if b["kind"] == "baseline" and b["variant"] == "eager"
                and (b["shape"], b["direction"]) == (r["shape"], r["direction"])]
        assert same[0]["worker"] == r["worker"]
        assert r["speedup_vs_eager"] == pytest.approx(same[0]["median_ms"] / r["median_ms"])
    derived = ("the output checks took", "ran on a Ray cluster")
    assert [n for n in on_ray.notes if not n.startswith(derived)] == \
        [n for n in one_process.notes if not n.startswith(derived)]
    assert any(n.startswith("ran on a Ray cluster: 2 worker(s) on 1 host(s) (CPU), 4 groups of 16 cells")
               for n in on_ray.notes), on_ray.notes
    # The table is the one-process table's, line for line, up to the times.
    lines = lambda r: [ln.split()[:4] for ln in r.table().splitlines() if ln.startswith(("fwd", "bwd"))]  # noqa: E731
    assert lines(on_ray) == lines(one_process)


def test_a_worker_killed_mid_sweep_loses_nothing(ray, one_process, tmp_path):
    """The first worker is killed right after it takes its second group: that group is retried once on
    the other worker, and every row is in the results file exactly once."""
    path, taken = tmp_path / "rows.jsonl", []

    def kill_second(member, job):
        taken.append(job.key)
        if len(taken) == 3:  # the two workers took one group each; the first to finish took this one
            ray.kill(member.handle, no_restart=True)

    from workbench.measure.benchmark import bench
    out = sweep.bench(bench, "rmsnorm", cluster="local", save=True, results_path=path, on_submit=kill_second,
                      **{k: v for k, v in SWEEP.items()})
    assert sorted(_cells(results.read_rows(path))) == sorted(_cells(one_process.rows))
    assert _cells(out.rows) == _cells(one_process.rows)
    retried = [n for n in out.notes if "retried after a worker died" in n]
    assert retried and taken[2] in retried[0], out.notes
    assert taken.count(taken[2]) == 2  # taken again, once
    assert not [n for n in out.notes if n.startswith("NOT MEASURED")]


def test_groups_whose_workers_all_die_are_reported_not_measured(ray, tmp_path):
    """Every worker killed as it takes a group: nothing hangs or raises; each group is either retried
    or said to be not measured, and no row is invented."""
    def kill(member, job):
        ray.kill(member.handle, no_restart=True)

    from workbench.measure.benchmark import bench
    out = sweep.bench(bench, "rmsnorm", cluster="local", on_submit=kill, **dict(SWEEP, directions=["fwd"]))
    assert out.rows == []
    lost = [n for n in out.notes if n.startswith("NOT MEASURED")]
    assert len(lost) == 2 and any("no live worker" in n for n in lost), out.notes


def _submissions(folder: pathlib.Path) -> pathlib.Path:
    folder.mkdir()
    for name, source in (("good.cu", EXERCISE / "solution.cu"), ("bad.cu", EXERCISE / "starter.cu"),
                         ("crash.cu", FAULTY / "static_abort.cu")):
        (folder / name).write_text(source.read_text())
    return folder


def test_grading_on_two_workers_gives_the_serial_verdicts(ray, tmp_path, cuda_buildable, capsys):
    """Good (the solution), bad (the starter: no 128-bit loads) and crashing (abort() while its library
    loads) submissions; the GPU checks are skipped on this machine, the rest decide."""
    folder = _submissions(tmp_path / "subs")
    assert cli.main(["exercise", "grade", "2", str(folder), "--seed", "1", "--out", str(tmp_path / "serial.csv")]) == 1
    printed = capsys.readouterr().out
    assert "3 submissions: 1 PASS, 2 FAIL, 0 TIMEOUT, 0 ERROR" in printed, printed
    with open(tmp_path / "serial.csv") as f:
        serial = list(csv.DictReader(f))
    on_ray = grade.grade(2, folder, seed=1, spread=grading.spread("local"))
    verdict = lambda rows: [(r["submission"], r["status"], r["verdict"], r["checks"]) for r in rows]  # noqa: E731
    assert verdict(on_ray) == verdict(serial)
    assert {r["submission"]: r["first_failure"] for r in on_ray} == {"bad.cu": "SASS rules", "crash.cu": "load",
                                                                     "good.cu": ""}
    assert "SIGABRT" in next(r["verdict"] for r in on_ray if r["submission"] == "crash.cu")


def test_a_submission_past_its_time_limit_costs_its_own_slot(tmp_path):
    """The grader's own limit (a hung build or checker): that row is TIMEOUT, and the call returns."""
    path = tmp_path / "slow.cu"
    path.write_text((EXERCISE / "solution.cu").read_text())
    row = grade.grade_one(2, path, seed=1, timeout_s=0.2)
    assert row["status"] == "TIMEOUT" and "within 0.2 s" in row["verdict"], row


def test_bad_grading_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="is not a folder"):
        grade.jobs(2, tmp_path / "nope")
    with pytest.raises(ValueError, match=r"no \.cu or \.cpp files"):
        grade.jobs(2, tmp_path)
    (tmp_path / "a.cu").write_text("")
    with pytest.raises(ValueError, match="timeout_s must be a positive"):
        grade.jobs(2, tmp_path, timeout_s=0)


def test_one_worker_per_gpu_routed_by_gpu_type():
    """From Ray's node descriptions: a node declaring gpu_type custom resources gets a worker per GPU
    asking for one GPU and one of its type; a node without them, per GPU, with the type Ray detected;
    gpu_types keeps the workers of those types; a CPU sweep has one worker per CPU."""
    nodes = [{"Alive": True, "Resources": {"CPU": 64, "GPU": 2, "gpu_type:H100": 2}},
             {"Alive": True, "Resources": {"CPU": 64, "GPU": 3, "accelerator_type:H200": 1}},
             {"Alive": False, "Resources": {"GPU": 8, "gpu_type:H100": 8}}]
    made = pool.slots(nodes, 128, "cuda")
    assert made == [("H100", {"num_gpus": 1, "resources": {"gpu_type:H100": 1}})] * 2 + \
        [("H200", {"num_gpus": 1, "accelerator_type": "H200"})] * 3
    assert [t for t, _ in pool.slots(nodes, 128, "cuda", ["H200"])] == ["H200"] * 3
    with pytest.raises(ValueError, match=r"no GPU of type \['A100'\]"):
        pool.slots(nodes, 128, "cuda", ["A100"])
    assert pool.slots(nodes, 3, "cpu") == [(None, {"num_cpus": 1})] * 3
    with pytest.raises(wb.WorkbenchError, match="has no GPU"):
        pool.slots([{"Alive": True, "Resources": {"CPU": 4}}], 4, "cuda")


def test_gpu_types_time_every_group_once_on_each():
    groups = plan.plan("rmsnorm", ["cpu"], ["float32"], [(64, 1024)], ["eager"], ["fwd"], device="cuda",
                       gpu_types=["H100", "H200"])
    assert [(g.gpu_type, g.cells) for g in groups] == [
        (t, (("eager", "float32", (64, 1024), "fwd"),)) for t in ("H100", "H200")]  # cpu is not a CUDA variant


@pytest.mark.parametrize("kwargs, message", [
    (dict(variants=[len]), "exists in this process alone"),
    (dict(variants=["nope"]), "variants must be among"),
    (dict(baselines=["nope"]), "baselines must be among"),
    (dict(directions=["up"]), "directions must be among"),
    (dict(device="tpu"), "device must be one of"),
])
def test_a_bad_sweep_is_refused_before_any_worker_starts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plan.plan("rmsnorm", **kwargs)


def test_a_bad_cluster_address_is_refused():
    with pytest.raises(ValueError, match="cluster must be 'local'"):
        pool.check_address("http://example")


@pytest.mark.parametrize("argv, address", [([], None), (["--ray"], "auto"), (["--ray", "ray://head:10001"], "ray://head:10001")])
def test_bench_ray_flag(monkeypatch, argv, address):
    seen = {}

    def fake(op, **kw):
        seen.update(kw)
        return wb.benchmark.BenchResult()

    monkeypatch.setattr("workbench.measure.benchmark.bench", fake)
    assert cli.main(["bench", "rmsnorm", "--no-save", *argv]) == 0
    assert seen["cluster"] == address


def test_bench_exits_1_where_a_group_was_not_measured(monkeypatch, capsys):
    lost = wb.benchmark.BenchResult(notes=["NOT MEASURED rmsnorm fwd float32 64x1024: its worker died twice"])
    monkeypatch.setattr("workbench.measure.benchmark.bench", lambda op, **kw: lost)
    assert cli.main(["bench", "rmsnorm", "--no-save", "--ray", "local"]) == 1
    assert "NOT MEASURED" in capsys.readouterr().err


def test_grade_ray_flag_spreads_over_the_cluster_named(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(grading, "spread", lambda address: ("spread over", address))
    monkeypatch.setattr(grade, "cli", lambda args, spread: seen.update(spread=spread, args=args) or 0)
    assert cli.main(["exercise", "grade", "2", str(tmp_path), "--ray"]) == 0
    assert seen["spread"] == ("spread over", "auto")
    assert cli.main(["exercise", "grade", "2", str(tmp_path), "--timeout", "30"]) == 0
    assert seen["spread"] is None and seen["args"].timeout == 30


def test_without_ray_the_error_says_how_to_install_it_and_the_one_process_path_never_imports_it():
    code = ("import sys; sys.modules['ray'] = None\n"  # import ray now fails, as where it is not installed
            "import workbench as wb\n"
            "r = wb.bench('rmsnorm', ['cpu'], shapes=[(8, 64)], baselines=['eager'], budget_s=0.01, device='cpu')\n"
            "assert r.rows and sys.modules['ray'] is None\n"
            "try:\n"
            "    wb.bench('rmsnorm', cluster='local', device='cpu')\n"
            "except ImportError as e:\n"
            "    print('ERROR', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=_child_env(None), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, describe(proc)
    assert 'pip install "ray[default]"' in proc.stdout and "kernel-workbench[ray]" in proc.stdout, describe(proc)


@pytest.mark.gpu
def test_on_one_gpu_the_sweep_through_ray_matches_the_direct_run_within_noise(ray):
    """One GPU worker (num_gpus=1, its own CUDA context): the same cells and verdicts as the direct
    run, each median within a quarter of the direct one's, each row naming this GPU."""
    import torch

    kw = dict(variants=["scalar", "vec4"], dtypes=["float32"], shapes=[(4096, 4096)], baselines=["eager"],
              budget_s=0.5, device="cuda")
    direct = wb.bench("bias_gelu", **kw)
    on_ray = wb.bench("bias_gelu", cluster="local", **kw)
    assert _cells(on_ray.rows) == _cells(direct.rows)
    for a, b in zip(on_ray.rows, direct.rows):
        assert 0.8 < a["median_ms"] / b["median_ms"] < 1.25, (a["variant"], a["median_ms"], b["median_ms"])
        assert a["gpu"] == torch.cuda.get_device_name() and ":gpu" in a["worker"]
