"""The student's code never runs in the exercise checker (issue 23, item 5). Planted variants
(tests/faulty/static_*.cu) whose libraries do something while being loaded - a static initializer
that calls exit(0), one that calls abort(), one that never returns, one that writes the id of its
process to a file - are checked with `python -m workbench exercise check 1 FILE`: each is a clear
FAIL line with exit status 1, and the file shows a process that is not the checker's. The checker
builds without loading (loader.build_source), and loads in a child with a time limit (isolate).

Each planted file is built once per session (the shared cache, tests/conftest.py); the hanging one
runs under WORKBENCH_LOAD_TIMEOUT_S=3 so that it costs seconds."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, _child_env, describe

FAULTY = pathlib.Path(__file__).parent / "faulty"


def _check(run_cli, name: str, **env) -> subprocess.CompletedProcess:
    return run_cli("exercise", "check", "1", str(FAULTY / name), "--seed", "1", env_extra=env or None, timeout=600)


def _line(stdout: str, check: str) -> str:
    m = re.search(rf"^  {re.escape(check)} \.+ (.+)$", stdout, re.MULTILINE)
    assert m, stdout
    return m.group(1)


@pytest.fixture(scope="module")
def exits(cuda_buildable):
    from conftest import run_cli
    return _check(run_cli, "static_exit.cu")


@pytest.fixture(scope="module")
def aborts(cuda_buildable):
    from conftest import run_cli
    return _check(run_cli, "static_abort.cu")


@pytest.fixture(scope="module")
def hangs(cuda_buildable):
    from conftest import run_cli
    return _check(run_cli, "static_hang.cu", WORKBENCH_LOAD_TIMEOUT_S="3")


def test_an_initializer_that_calls_exit0_is_a_fail_with_status_1(exits):
    """exit(0) in the checker's process used to end it with status 0 and no verdict."""
    assert exits.returncode == 1, describe(exits)
    assert _line(exits.stdout, "load") == \
        "FAIL (the child process loading your library exited with status 0 before reporting)", exits.stdout
    assert "\nFAIL: load — the child process loading your library exited with status 0 before reporting" in exits.stdout
    assert "exited with status 0 before reporting its result" in exits.stdout      # isolate's own words
    assert "[load] bias_gelu/ex01_static_exit" in exits.stdout                       # its last lines
    assert _line(exits.stdout, "declared dtypes").startswith("ok")                   # read from the source


def test_an_initializer_that_aborts_is_a_fail_naming_sigabrt(aborts):
    assert aborts.returncode == 1, describe(aborts)
    assert _line(aborts.stdout, "load") == \
        "FAIL (the child process loading your library was killed by SIGABRT before reporting)", aborts.stdout
    assert "\nFAIL: load — " in aborts.stdout


def test_an_initializer_that_never_returns_is_a_fail_after_the_load_limit(hangs):
    assert hangs.returncode == 1, describe(hangs)
    assert _line(hangs.stdout, "load") == \
        "FAIL (hung: loading your library did not finish within 3 s (the child was killed))", hangs.stdout
    assert "did not finish within 3 s and was killed" in hangs.stdout
    took = re.search(r"load ([\d.]+) s", hangs.stdout.splitlines()[-1])
    assert took and float(took.group(1)) < 30, hangs.stdout                         # the limit, not forever


def test_an_initializer_runs_in_a_child_never_in_the_checker(cuda_buildable, tmp_path):
    pid_file = tmp_path / "pids.txt"
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "exercise", "check", "1",
                             str(FAULTY / "static_writes_file.cu"), "--seed", "1"], cwd=REPO_ROOT,
                            env=_child_env({"WB_PLANTED_PID_FILE": str(pid_file)}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, f"exit {proc.returncode}\n{out}\n{err}"
    pids = [int(p) for p in pid_file.read_text().split()] if pid_file.exists() else []
    assert pids, f"the initializer never ran (no {pid_file})\n{out}\n{err}"       # it was loaded, somewhere
    assert proc.pid not in pids, (pids, proc.pid)                                  # never in the checker
    child = re.search(r"loaded in a child process \(pid (\d+)\)", out)
    assert _line(out, "load").startswith("ok (in a child process"), out
    assert _line(out, "declared dtypes") == "FAIL (missing float16, bfloat16)", out
    assert "\nFAIL: declared dtypes — missing float16, bfloat16" in out
    assert child is None or int(child.group(1)) in pids


def test_check_exercise_in_this_process_never_loads_the_library(cuda_buildable, tmp_path, monkeypatch):
    """The same from Python: the initializer writes a pid that is not this process's, and the
    built library is not among this process's mappings."""
    from workbench import exercise as wbex

    pid_file = tmp_path / "pids.txt"
    monkeypatch.setenv("WB_PLANTED_PID_FILE", str(pid_file))
    report = wbex.check_exercise(1, FAULTY / "static_writes_file.cu", seed=1)
    assert report.check("load").status == "ok" and not report.ok, report.summary()
    pids = [int(p) for p in pid_file.read_text().split()]
    assert pids and os.getpid() not in pids
    maps = pathlib.Path("/proc/self/maps").read_text()
    assert "ex01_static_writes_file" not in maps


def test_build_source_builds_without_loading(run_python, cuda_buildable):
    """loader.build_source of the exit(0) initializer: the building process goes on (a load would
    have ended it with status 0 before it printed)."""
    proc = run_python(
        "import pathlib, sys\n"
        "from workbench.run import loader\n"
        f"b = loader.build_source('bias_gelu', {str(FAULTY / 'static_exit.cu')!r}, 'ex01_static_exit')\n"
        "maps = pathlib.Path('/proc/self/maps').read_text()\n"
        "print('survived', b.library.is_file(), str(b.library) in maps, b.dtypes, b.device, b.build_id)\n",
        timeout=600)
    assert proc.returncode == 0 and "survived True False ('float32', 'float16', 'bfloat16') cuda" in proc.stdout, \
        describe(proc)
    # A process that builds this way can still load other libraries afterwards (the patch is undone).
    import torch
    from torch.utils import cpp_extension

    from workbench.run import loader
    with loader.built_not_loaded():
        with pytest.raises(Exception, match="builds without loading"):
            torch.ops.load_library("/nonexistent.so")
    assert "load_library" not in vars(torch.ops) and cpp_extension._import_module_from_library.__name__ == \
        "_import_module_from_library"


def test_a_descriptor_that_differs_from_the_source_fails_load(cuda_buildable, monkeypatch):
    """What the child reads from the library is compared with what the checks here went by (the
    source's text): a mask the text does not show (a macro) is a FAIL that says so."""
    from workbench import exercise as wbex

    monkeypatch.setattr(wbex.child, "load_in_child", lambda ex, built, worker=None, timeout_s=None: {
        "info": {"op": ex.op, "device": "cuda", "dtypes": ["float32", "float16", "bfloat16"]},
        "build_id": built.build_id, "built": False, "pid": 1})
    report = wbex.check_exercise(1, FAULTY / "static_writes_file.cu", seed=1)
    load = report.check("load")
    assert load.status == "FAIL" and load.detail == ("the library exports cuda; float32, float16, bfloat16; "
                                                     "its source declares cuda; float32"), report.summary()
    assert report.verdict().startswith("FAIL: load — ")
