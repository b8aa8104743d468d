"""Beyond one GPU (issue 29): sweeps and grading on a Ray cluster, tested on a local cluster of two CPU
workers. A sweep of rmsnorm's CPU variants through Ray gives the rows (same cells, same verdicts) and
notes of a one-process run, each row written to the results file as it arrives; a worker killed
mid-sweep loses nothing (its group is retried once on the other); grading a folder of good, bad and
crashing submissions of exercise 02 gives the serial grader's verdicts; without Ray the error says how
to install it. The GPU paths (one worker per GPU, routed by GPU type) are checked from the node
descriptions Ray gives, which is all they are built from."""
from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import zipfile

import pytest
from conftest import REPO_ROOT, _child_env, describe

import workbench as wb
from workbench import cli
from workbench.cluster import grading, plan, pool, sweep
from workbench.exercise import grade
from workbench.measure import bench_rows, verify

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
    assert sorted(_cells(bench_rows.read_rows(path))) == sorted(_cells(on_ray.rows))  # every row in the file (as it came), once
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
    assert sorted(_cells(bench_rows.read_rows(path))) == sorted(_cells(one_process.rows))
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


def _cluster_bench():
    spec = importlib.util.spec_from_file_location("cluster_bench", REPO_ROOT / "scripts" / "cluster_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_wheel(folder: pathlib.Path, name: str, blob: int) -> pathlib.Path:
    """A wheel of package `name` holding `blob` random (incompressible) bytes."""
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{name}/__init__.py", "VALUE = 42\n")
        z.writestr(f"{name}/blob.bin", os.urandom(blob))
        z.writestr(f"{name}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        z.writestr(f"{name}-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{name}-1.0.dist-info/RECORD", "")
    return path


def test_ray_travels_in_parts_one_call_each_and_installs_once_all_came(tmp_path):
    """scripts/carry_ray.sh: pack splits the big wheel into parts, one folder per call (the small wheels in
    the last), ignored by git; install, one call at a time on a machine that keeps /tmp, keeps each part,
    says what is still to come (exit 3), joins, checks and installs once all came; repeating is harmless
    and a part whose sha256 is wrong is refused, named."""
    here = tmp_path / "here"
    (here / "scripts").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "scripts" / "carry_ray.sh", here / "scripts")
    subprocess.run(["git", "init", "-q", str(here)], check=True)
    big, small = _fake_wheel(tmp_path, "fakeray", 2_500_000), _fake_wheel(tmp_path, "fakedep", 1000)
    env = dict(os.environ, WHEELS=f"{big} {small}", PART_MB="1", PYTHON=sys.executable,
               STORE=str(tmp_path / "store"), SITE=str(tmp_path / "site"))
    run = lambda where, *args: subprocess.run(["bash", str(where / "scripts" / "carry_ray.sh"), *args], env=env,  # noqa: E731
                                              capture_output=True, text=True, timeout=120)
    packed = run(here, "pack")
    assert packed.returncode == 0, describe(packed)
    folders = sorted((here / ".raycarry").iterdir())
    assert [f.name for f in folders] == ["1", "2", "3"], describe(packed)
    assert (folders[-1] / small.name).exists() and all(f.stat().st_size <= 1 << 20 for f in folders[0].iterdir())
    assert "/.raycarry/" in (here / ".git" / "info" / "exclude").read_text()
    assert subprocess.run(["git", "-C", str(here), "status", "--porcelain", ".raycarry"], capture_output=True,
                          text=True).stdout == ""
    there = tmp_path / "there"  # the device: each call brings the tree and one folder
    shutil.copytree(here / "scripts", there / "scripts")
    for k, folder in enumerate(folders, 1):
        shutil.rmtree(there / ".raycarry", ignore_errors=True)
        shutil.copytree(folder, there / ".raycarry" / folder.name)
        got = run(there, "install")
        if k < len(folders):
            assert got.returncode == 3 and f".raycarry/{k + 1}" in got.stdout, describe(got)
    assert got.returncode == 0 and "joined fakeray-1.0-py3-none-any.whl from 3 parts" in got.stdout, describe(got)
    check = "import fakeray, fakedep; print(fakeray.VALUE, len(open(fakeray.__file__[:-11] + 'blob.bin', 'rb').read()))"
    assert subprocess.run([sys.executable, "-c", check], env=dict(env, PYTHONPATH=env["SITE"]), capture_output=True,
                          text=True).stdout.split() == ["42", "2500000"]
    shutil.rmtree(there / ".raycarry")
    again = run(there, "install")  # a later call carrying nothing
    assert again.returncode == 0 and "installed already" in again.stdout, describe(again)
    bad = bytearray((folders[0] / f"{big.name}.part-00").read_bytes())
    bad[100] ^= 1
    shutil.copytree(folders[0], there / ".raycarry" / "1")
    (there / ".raycarry" / "1" / f"{big.name}.part-00").write_bytes(bytes(bad))
    refused = subprocess.run(["bash", str(there / "scripts" / "carry_ray.sh"), "install"], capture_output=True, text=True,
                             env=dict(env, STORE=str(tmp_path / "store2")), timeout=60)
    assert refused.returncode == 1 and f"{big.name}.part-00 has sha256" in refused.stderr, describe(refused)


def test_cluster_bench_sweep_kills_a_worker_and_compares_the_pair(ray, tmp_path, capsys):
    """scripts/cluster_bench.py sweep on the two CPU workers: the cold unit, a worker killed by pid as it
    takes its second group once half are handed out, that group retried once on the other, its earlier
    rows kept, none lost; the pair (one process, then Ray) with the same cells and verdicts; figures with
    provenance under --out; the same command again does nothing more; other settings are refused."""
    bench = _cluster_bench()
    args = ["sweep", "--device", "cpu", "--ops", "rmsnorm", "--variants", "cpu", "pytorch", "--shapes", "64x1024",
            "128x256", "--baselines", "eager", "--directions", "fwd", "bwd", "--budget", "0.05", "--kill-delay", "0",
            "--state", str(tmp_path / "state"), "--out", str(tmp_path / "out")]
    assert bench.main(args) == 0
    f = json.loads((tmp_path / "out" / "cluster.json").read_text())
    (cold,), (pair,) = f["sweep"]["cold"], f["sweep"]["pairs"]
    kill = cold["kill"]
    assert kill["job_retried"] and kill["handover"] == 3 and kill["job_rows_from"] != [kill["worker"]], cold
    assert kill["rows_kept_from_victim"] >= 1 and cold["lost"] == [] and cold["duplicates"] == 0, cold
    assert pair["compare"]["same_cells"] and pair["compare"]["verdicts_differ"] == [] and pair["cold_same_cells"], pair
    assert pair["compare"]["rows"] == cold["file_rows"] == 12 and len(pair["compare"]["per_worker"]) == 2, pair
    t = f["totals"]
    assert t["sweep"]["ratio"] == pytest.approx(pair["ray_s"] / pair["one_s"]) and t["target_ratio"] == 0.625 and t["done"]
    ((machine, prov),) = f["machines"].items()
    assert cold["machine"] == pair["machine"] == machine and prov["commit"] and prov["ray"] == ray.__version__
    with gzip.open(tmp_path / "out" / "cluster_rows.jsonl.gz", "rt") as z:
        assert sorted({json.loads(line)["run"] for line in z}) == ["cold", "one", "ray"]
    printed = capsys.readouterr().out
    assert "retried once yes" in printed and printed.rstrip().endswith("sweep: done"), printed
    assert bench.main(args) == 0  # again: nothing left, nothing redone
    assert json.loads((tmp_path / "out" / "cluster.json").read_text())["sweep"]["pairs"] == [pair]
    # Another machine (a later session) takes up the figures it came back with.
    assert bench.main(["table", "--resume", str(tmp_path / "out" / "cluster.json"), "--state", str(tmp_path / "s2")]) == 0
    assert capsys.readouterr().out.count("retried once yes") == 2
    with pytest.raises(SystemExit, match="other settings"):
        bench.main([*args, "--budget", "0.1"])


def test_cluster_bench_stops_what_would_not_end_before_the_deadline(ray, tmp_path, capsys):
    bench = _cluster_bench()
    assert bench.main(["sweep", "--device", "cpu", "--ops", "rmsnorm", "--state", str(tmp_path),
                       "--deadline-at", "1", "--call-s", "600"]) == 0
    printed = capsys.readouterr().out
    assert "left for the next call: sweep cold rmsnorm" in printed and "sweep: not done: run the same" in printed, printed


def test_cluster_bench_grade_identical_verdicts_and_a_worker_killed_mid_grading(ray, tmp_path, monkeypatch, capsys):
    """scripts/cluster_bench.py grade: a batch through Ray, then serially, the same verdicts; then the worker
    taking the last submission killed at once: every verdict back, equal to the serial one, that submission
    graded again on the other worker, as its row says."""
    bench = _cluster_bench()
    refused = tmp_path / "refused.cu"  # the checker refuses it before any compiler runs: a quick verdict
    refused.write_text("// no kernel here\n")
    monkeypatch.setattr(bench.judge_cases, "cases", lambda: [(2, str(refused), "build")])
    assert bench.main(["grade", "--device", "cpu", "--submissions", "2", "--kill-delay", "0", "--grade-timeout", "120",
                       "--state", str(tmp_path / "state"), "--out", str(tmp_path / "out")]) == 0
    f = json.loads((tmp_path / "out" / "cluster.json").read_text())
    g, t = f["grade"], f["totals"]["grading"]
    (batch,) = g["batches"]
    assert t["graded"] == t["identical"] == 2 and t["statuses"] == {"FAIL": 2} and t["left"] == 0 and t["kill_done"], t
    assert [r["failure_class"] for r in batch["serial"].values()] == ["build", "build"], batch
    kill = g["kill"]
    assert kill["same_as_serial"] and kill["not_graded"] == [] and kill["victim"]["handover"] == 2, kill
    ((_, where),), pid = kill["graded_again"], kill["victim"]["pid"]
    assert f"pid {pid}: " in where and where.split(" (graded again")[0] != f"{socket.gethostname()}:{pid}", kill
    assert capsys.readouterr().out.rstrip().endswith("grading: done")


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
