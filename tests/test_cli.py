"""`python -m workbench ...` in fresh processes against the session's cache."""
from __future__ import annotations

import json
import pathlib

import pytest

from conftest import CACHE_DIR, describe, private_cache, wait_for_line


def _ok(proc):
    assert proc.returncode == 0, describe(proc)
    return proc.stdout


def test_list(run_cli):
    from workbench.model import registry

    out = _ok(run_cli("list"))
    lines = out.splitlines()
    assert [ln for ln in lines if not ln.startswith("  ")] == registry.ops()  # every op, none named here
    block = lines[lines.index("bias_gelu") + 1:]
    rows = {ln.split()[0]: ln for ln in block[:next((i for i, ln in enumerate(block) if not ln.startswith("  ")),
                                                     len(block))]}
    assert rows["cpu"].split()[1] == "cpu" and rows["scalar"].split()[1] == "cuda", out
    for name in ("cpu", "scalar"):  # both declare all four dtypes, and say what they are
        assert all(d in rows[name] for d in ("float32", "float64", "float16", "bfloat16")), rows[name]
    assert "one element per thread" in rows["scalar"]


def test_list_columns_line_up_for_long_names(run_cli):
    out = _ok(run_cli("list", "reduce_sum"))     # a ladder: rung names longer than the default column
    rows = out.splitlines()[1:]
    starts = {ln.index(ln.split()[1], len(ln.split()[0]) + 2) for ln in rows}   # where the device column starts
    assert len(rows) > 3 and len(starts) == 1, out


def test_list_one_op_and_unknown_op(run_cli):
    assert _ok(run_cli("list", "bias_gelu")).startswith("bias_gelu")
    proc = run_cli("list", "no_such_op")
    assert proc.returncode == 1 and "op must be one of" in proc.stderr, describe(proc)


def test_build_cpu(run_cli, cpu_kernel):
    out = _ok(run_cli("build", "bias_gelu", "cpu"))
    assert f"bias_gelu/cpu@{cpu_kernel.build_id}" in out and "cached" in out, out
    assert str(cpu_kernel.library) in out


def test_build_unknown_variant(run_cli, cpu_kernel):
    proc = run_cli("build", "bias_gelu", "no_such_variant")
    assert proc.returncode == 1, describe(proc)
    assert "no variant 'no_such_variant'" in proc.stderr and "cpu" in proc.stderr


def test_build_tries_every_variant_and_reports_each(run_cli, cpu_kernel):
    """A variant that fails does not stop the ones after it; each is reported, the status says so."""
    proc = run_cli("build", "bias_gelu", "no_such_variant", "cpu")
    assert proc.returncode == 1, describe(proc)
    assert "bias_gelu/no_such_variant: FAILED" in proc.stderr and "1 variant(s) of bias_gelu failed" in proc.stderr
    assert f"bias_gelu/cpu@{cpu_kernel.build_id}" in proc.stdout, describe(proc)


def test_check_cpu(run_cli, cpu_kernel):
    out = _ok(run_cli("check", "bias_gelu", "cpu", "--seed", "3"))
    assert "bias_gelu/cpu on cpu" in out and "passed" in out, out
    assert "FAIL" not in out


def test_check_json_and_dtypes(run_cli, cpu_kernel):
    out = _ok(run_cli("check", "bias_gelu", "cpu", "--dtypes", "float64", "--json"))
    summary = json.loads(out[out.index("["):])
    assert summary == [{"variant": "cpu", "ok": True, "method": "", "failures": []}]


def test_check_without_gpu_runs_cpu_variants(run_cli, cpu_kernel):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: every variant runs")
    proc = run_cli("check", "bias_gelu", "--dtypes", "float32")
    assert proc.returncode == 0, describe(proc)
    assert "no GPU visible" in proc.stderr and "bias_gelu/cpu" in proc.stdout
    assert "scalar" not in proc.stdout
    # named, a CUDA variant is skipped saying why, not a FAIL
    proc = run_cli("check", "bias_gelu", "cpu", "vec4", "--dtypes", "float32")
    assert proc.returncode == 0, describe(proc)
    assert "bias_gelu/vec4: skipped: a CUDA variant, and no GPU is visible here" in proc.stdout, describe(proc)
    assert "FAIL" not in proc.stdout, describe(proc)


def test_gradcheck_cpu(run_cli, cpu_kernel):
    out = _ok(run_cli("gradcheck", "bias_gelu", "cpu"))
    assert "passed" in out and "float64" in out, out


def test_doctor(run_cli, cpu_kernel):
    out = _ok(run_cli("doctor"))
    rows = {}
    for ln in out.splitlines():
        if " : " in ln:
            k, v = ln.split(" : ", 1)
            rows[k.strip()] = v.strip()
    import torch

    assert rows["torch"].startswith(torch.__version__), out
    assert "nvcc" in rows and "ninja" in rows and "gpu" in rows, out
    assert str(CACHE_DIR) in rows["cache"] and "builds" in rows["cache"], out
    assert "build locks held" in rows


def test_clean_requires_an_option(run_cli):
    proc = run_cli("clean")
    assert proc.returncode == 2, describe(proc)
    assert "--all" in proc.stderr


LOAD_AND_WAIT = r"""
import sys
import workbench as wb
k = wb.load("bias_gelu", "cpu")
print("loaded", k.library, flush=True)
sys.stdin.readline()
"""


def test_clean_all_keeps_builds_in_use(run_cli, spawn_python, tmp_path, cpu_kernel):
    # A private copy of the cache, so that cleaning it costs the other tests nothing.
    root = private_cache(tmp_path / "cache")
    env = {"WORKBENCH_CACHE": str(root)}
    idle = root / "builds" / "bias_gelu-idle-00000000000000000000"
    idle.mkdir()
    (idle / "meta.json").write_text("{}")
    (idle / ".workbench-build").write_text("bias_gelu/idle\n")  # the workbench's marker: clean removes only those
    (idle / "lib.so").write_bytes(b"\0" * 1024)

    holder = spawn_python(LOAD_AND_WAIT, env_extra=env)
    line = wait_for_line(holder, "loaded")
    in_use = pathlib.Path(line.split(" ", 1)[1]).parent
    assert in_use.parent == root / "builds", line
    harness_dirs = list((root / "builds").glob("harness-*"))

    out = _ok(run_cli("clean", "--all", env_extra=env))
    assert not idle.exists(), out
    assert in_use.is_dir() and (in_use / "meta.json").exists(), out
    assert f"kept (in use by a running process): {in_use}" in out
    assert any(d.is_dir() for d in harness_dirs), "the harness the live process loaded was removed"
    assert "removed" in out

    holder.stdin.write("\n")
    holder.stdin.flush()
    holder.wait(60)
    out = _ok(run_cli("clean", "--all", env_extra=env))
    assert not in_use.exists(), out
    assert not [d for d in (root / "builds").iterdir() if not d.name.startswith(".")]


def test_bench_on_cpu(run_cli, cpu_kernel, tmp_path):
    proc = run_cli("bench", "bias_gelu", "--shapes", "32x64", "--budget", "0.05", "--baselines", "eager",
                   "--no-save", env_extra={"MPLCONFIGDIR": str(tmp_path)})
    out = _ok(proc)
    rows = [ln.split() for ln in out.splitlines()]
    providers = {r[3] for r in rows if len(r) > 3 and r[0] == "fwd"}
    assert {"eager", "cpu"} <= providers, out
    assert "median ms" in out
    assert "rows appended" not in out  # --no-save


@pytest.mark.parametrize("argv, message", [
    (["bench", "bias_gelu", "--shapes", "12xq"], "a shape is sizes joined by 'x'"),
    (["bench", "bias_gelu", "--shapes=-3x4"], "non-negative"),
    (["bench", "bias_gelu", "--budget", "soon"], "--budget"),
    (["check", "bias_gelu", "--dtypes", "int8"], "invalid choice"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
    # Old children's entry points: runners start through their own (judge/python_runner.py, wb_runner).
    (["_child", "job.json"], "invalid choice: '_child'"),
    (["_worker", "{}"], "invalid choice: '_worker'"),
], ids=["bad-shape", "negative-shape", "bad-budget", "bad-dtype", "bad-command", "no-command", "no-child-command",
        "no-worker-command"])
def test_bad_arguments(run_cli, argv, message):
    proc = run_cli(*argv)
    assert proc.returncode != 0, describe(proc)
    assert message in proc.stderr, describe(proc)
    assert "Traceback" not in proc.stderr


def _digests(folder: pathlib.Path) -> dict:
    import hashlib

    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_bench_and_plot_write_under_the_users_folder_never_the_committed_results(run_cli, cpu_kernel, tmp_path,
                                                                                 monkeypatch):
    """The quickstart's r.plot(); r.save() and the CLI's bench and `plot OP`: rows and plots go to
    ./workbench-results (or $WORKBENCH_RESULTS), and the committed results/ stay as they were."""
    import workbench as wb
    from workbench import config

    committed = _digests(config.RESULTS_DIR)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    monkeypatch.delenv("WORKBENCH_RESULTS", raising=False)
    r = wb.bench("bias_gelu", ["cpu"], shapes=[(32, 64)], baselines=["eager"], budget_s=0.05)
    assert r.save() == tmp_path / "workbench-results" / "bench.jsonl"
    plots = r.plot()
    assert plots and all(p.parent == tmp_path / "workbench-results" / "plots" for p in plots), plots
    env = {"WORKBENCH_RESULTS": str(tmp_path / "cli"), "MPLCONFIGDIR": str(tmp_path / "mpl")}
    out = _ok(run_cli("bench", "bias_gelu", "--shapes", "32x64", "--budget", "0.05", "--baselines", "eager",
                      env_extra=env))
    assert f"rows appended to {tmp_path / 'cli' / 'bench.jsonl'}" in out, out
    out = _ok(run_cli("plot", "bias_gelu", env_extra=env))
    drawn = [pathlib.Path(ln.split("plot: ", 1)[1]) for ln in out.splitlines() if ln.startswith("plot: ")]
    assert drawn and all(p.parent == tmp_path / "cli" / "plots" for p in drawn), out
    assert any(p.name.startswith("bias_gelu_fwd_float32_") for p in drawn), out
    proc = run_cli("plot", "swiglu", env_extra=env)
    assert proc.returncode == 1 and "no rows for swiglu in" in proc.stderr, describe(proc)
    assert _digests(config.RESULTS_DIR) == committed      # nothing committed was written
