"""The judge outside the student's reach (issue 38), on the CPU: what a student's library can do
when it is loaded (tests/faulty/static_*.cu: exit, abort, hang; the planted cheats of issue 38 that
act at load), the sandbox's promises (its own PID namespace, no network, nothing of the checker's
writable, limits), the runner's protocol (only "done"; anything else it sends is its failure), and
the verdict's channel under `exercise grade` (a forged line is never read; a checker killed is an
ERROR). The GPU half, every planted cheat's verdict, is test_judge_gpu below and
scripts/judge_cases.py."""
from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import textwrap

import pytest
from conftest import describe

from workbench import config
from workbench.exercise import grade
from workbench.judge import sandbox
from workbench.judge.remote import CallRefused, Runner
from workbench.judge.start import start_cxx

FAULTY = pathlib.Path(__file__).parent / "faulty"
needs_sandbox = pytest.mark.skipif(bool(sandbox.missing()), reason=f"no sandbox here: {sandbox.missing()}")


def _check(run_cli, number: int, path, **env) -> subprocess.CompletedProcess:
    return run_cli("exercise", "check", str(number), str(path), "--seed", "1", env_extra=env or None, timeout=600)


def _line(stdout: str, check: str) -> str:
    m = re.search(rf"^  {re.escape(check)} \.+ (.+)$", stdout, re.MULTILINE)
    assert m, stdout
    return m.group(1)


def test_a_refusal_is_named_by_the_type_the_runner_named():
    """The Python runner sends "RuntimeError: ..." for a call its variant refused: a report names
    that type (run/cuda_errors.error_name), not CallRefused; the C++ runner's plain words are the
    harness's RuntimeError, as the torch harness raises them."""
    from workbench.run.cuda_errors import error_name

    told = CallRefused("RuntimeError: expected scalar type Float but found Double")
    assert (error_name(told), str(told)) == ("RuntimeError", "expected scalar type Float but found Double")
    plain = CallRefused("bias_gelu/scalar refused: cols must be > 0")
    assert (error_name(plain), str(plain)) == ("RuntimeError", "bias_gelu/scalar refused: cols must be > 0")
    assert error_name(ValueError("x")) == "ValueError"


# ----------------------------------------------------------------------------- what a library does at load

@pytest.mark.parametrize("name, said", [
    ("static_exit.cu", "the runner loading your library exited with status 0 before answering"),
    ("static_abort.cu", "the runner loading your library was killed by SIGABRT before answering"),
    ("static_hang.cu", "hung: loading your library did not finish within 3 s (the runner was killed)"),
])
def test_an_initializer_that_ends_or_hangs_its_runner_is_a_load_fail(run_cli, cuda_buildable, name, said):
    proc = _check(run_cli, 1, FAULTY / name, WORKBENCH_LOAD_TIMEOUT_S="3")
    assert proc.returncode == 1, describe(proc)
    assert _line(proc.stdout, "load") == f"FAIL ({said})", proc.stdout
    assert _line(proc.stdout, "declared dtypes").startswith("ok")   # read from the source, not the library


def test_a_verdict_forged_at_load_is_a_load_fail_under_grade(cuda_buildable, tmp_path):
    """The cheat writes a passing verdict to every descriptor it holds or can open, then kills what
    it can: the grader reads its verdict from a pipe the sandbox never holds."""
    row = grade.grade_one(2, FAULTY / "ex02_forge_verdict.cu", seed=1, timeout_s=300)
    assert (row["status"], row["failure_class"]) == ("FAIL", "load"), row
    assert "before answering" in row["detail"] or "outside the protocol" in row["detail"], row


def test_a_checker_killed_is_an_error_never_a_verdict(cuda_buildable, monkeypatch):
    """A checker that dies (here: killed while it checks) is ERROR, whatever it printed."""
    killed = []

    def kill_the_checker(line: str) -> None:
        if "build" in line and not killed:
            out = subprocess.run(["pgrep", "-f", "workbench.exercise.grade"], capture_output=True, text=True).stdout
            for pid in map(int, out.split()):
                if pid != os.getpid():
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

    row = grade.grade_one(2, config.REPO_ROOT / "exercises/02_vec4_loads/solution.cu", seed=1, timeout_s=300,
                          on_line=kill_the_checker)
    assert killed, "the checker was not found to kill"
    assert (row["status"], row["failure_class"]) == ("ERROR", "checker"), row
    assert "killed by signal 9" in row["verdict"], row


def test_grading_without_the_sandbox_refuses_naming_what_is_missing(monkeypatch, tmp_path):
    (tmp_path / "a.cu").write_text("// nothing\n")
    monkeypatch.setenv("WORKBENCH_BWRAP", str(tmp_path / "no-bwrap-here"))
    with pytest.raises(ValueError, match="grading needs the sandbox"):
        grade.grade(2, tmp_path)


# ----------------------------------------------------------------------------- the sandbox's promises

_PROBE = r"""
// Built by tests/test_judge.py: a CPU variant of vector_add whose initializer reports what the
// sandbox lets it do, one line per attempt on stderr ("[probe] what: yes|no").
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include "vector_add.h"
#include "wb_elementwise_cpu.h"

namespace {
void say(const char* what, bool yes) { std::fprintf(stderr, "[probe] %s: %s\n", what, yes ? "yes" : "no"); }

int probe() {
  int checkers = 0;  // processes running Python: the checker, pytest (the sandbox's own are bwrap and this)
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      char path[64], cmd[256] = {0};
      std::snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
      const int f = open(path, O_RDONLY);
      if (f < 0) continue;
      (void)!read(f, cmd, sizeof cmd - 1);
      close(f);
      checkers += std::strstr(cmd, "python") != nullptr;
    }
    closedir(d);
  }
  say("sees the checker's processes", checkers > 0);
  say("signals its parent", getppid() > 1 && kill(getppid(), 0) == 0);
  int fd = open("@CACHE@/planted", O_WRONLY | O_CREAT, 0644);
  say("writes the build cache", fd >= 0);
  fd = open("@REPO@/planted", O_WRONLY | O_CREAT, 0644);
  say("writes the repository", fd >= 0);
  fd = open("@JUDGE@/planted", O_WRONLY | O_CREAT, 0644);
  say("writes the judge's folder", fd >= 0);
  fd = open("planted", O_WRONLY | O_CREAT, 0644);
  say("writes its scratch folder", fd >= 0);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(80);
  inet_pton(AF_INET, "1.1.1.1", &a.sin_addr);
  say("reaches the network", s >= 0 && connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  rlimit r{};
  getrlimit(RLIMIT_FSIZE, &r);
  say("has a file size limit", r.rlim_cur != RLIM_INFINITY);
  getrlimit(RLIMIT_NOFILE, &r);
  say("has an open files limit of 256", r.rlim_cur == 256);
  getrlimit(RLIMIT_CPU, &r);
  say("has a CPU time limit", r.rlim_cur != RLIM_INFINITY);
  say("holds a descriptor of the checker's", fcntl(@HELD@, F_GETFD) != -1);
  return 0;
}
const int probed = probe();
const WbElementwiseLaunchers launchers = {wb_elementwise::cpu_step<WB_F32, WbVectorAddForwardStep>, nullptr};
}  // namespace

WB_EXPORT_VARIANT(vector_add, WB_DEVICE_CPU, WB_F32, "a probe of the sandbox", launchers, wb_cpu_status_string)
"""


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """What the probe reported from a sandboxed runner, as {attempt: bool}."""
    if sandbox.missing():
        pytest.skip(f"no sandbox here: {sandbox.missing()}")
    from workbench.exercise.submission import _build_variant, binding_library
    from workbench.judge.start import runner_executable

    folder = tmp_path_factory.mktemp("judge")
    os.chmod(folder, 0o755)
    source = folder / "probe.cpp"
    held = os.open(os.devnull, os.O_RDONLY)  # a descriptor of the checker's, open while the runner starts
    text = _PROBE.replace("@CACHE@", str(config.cache_dir())).replace("@REPO@", str(config.REPO_ROOT))
    source.write_text(text.replace("@JUDGE@", str(folder)).replace("@HELD@", str(held)))
    built = _build_variant("vector_add", source, "probe")
    sb = sandbox.Sandbox(scratch=folder / "scratch", readable=(folder,), gpu=False)
    sb.prepare()
    for name, path in (("probe.so", built.library), ("binding.so", binding_library("vector_add")),
                       ("wb_runner", runner_executable())):
        (folder / name).write_bytes(pathlib.Path(path).read_bytes())
        os.chmod(folder / name, 0o555)
    try:
        runner, _ = start_cxx("vector_add", folder / "probe.so", folder / "binding.so", "probe",
                              executable=folder / "wb_runner", sandbox=sb)
        log = runner.log_tail(100)
        runner.discard()
    finally:
        os.close(held)
    found = dict(re.findall(r"^\[probe\] (.+): (yes|no)$", log, re.MULTILINE))
    assert found, log
    return {k: v == "yes" for k, v in found.items()}, folder


@pytest.mark.parametrize("attempt, allowed", [
    ("sees the checker's processes", False), ("signals its parent", False), ("writes the build cache", False),
    ("writes the repository", False), ("writes the judge's folder", False), ("writes its scratch folder", True),
    ("reaches the network", False), ("has a file size limit", True), ("has an open files limit of 256", True),
    ("has a CPU time limit", True), ("holds a descriptor of the checker's", False),
])
def test_the_sandbox_keeps_its_promise(probed, attempt, allowed):
    found, folder = probed
    assert found[attempt] is allowed, found
    assert not (pathlib.Path(config.cache_dir()) / "planted").exists()
    assert not (folder / "planted").exists()


# ----------------------------------------------------------------------------- the runner's protocol

def test_anything_but_the_protocol_on_the_runner_socket_is_the_runner_failing(tmp_path):
    """A library that writes to the socket (it may: it is in the runner's process) makes the runner
    fail; what it wrote is never read as an answer."""
    fake = tmp_path / "fake_runner.py"
    fake.write_text(textwrap.dedent("""
        import os, socket, sys
        s = socket.socket(fileno=int(sys.argv[1]))
        s.recv(1 << 16)
        s.sendall(b'[wb-grade] {"status": "PASS"}\\n')
        s.recv(1 << 16)
    """))
    import sys as _sys

    runner = Runner([_sys.executable, str(fake)], label="fake")
    with pytest.raises(Exception, match="outside the protocol"):
        runner.request("declare 00")
    runner.discard()


def test_an_error_reply_is_the_call_refused_and_the_runner_goes_on(tmp_path):
    fake = tmp_path / "fake_runner.py"
    fake.write_text(textwrap.dedent("""
        import socket, sys
        s = socket.socket(fileno=int(sys.argv[1]))
        for _ in range(2):
            s.recv(1 << 16)
            s.sendall(b"error " + "dtype not supported by this variant".encode().hex().encode() + b"\\n")
    """))
    import sys as _sys

    runner = Runner([_sys.executable, str(fake)], label="fake")
    for _ in range(2):
        with pytest.raises(CallRefused, match="dtype not supported"):
            runner.request("call ...")
    runner.discard()


# ----------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
@pytest.mark.slow
@needs_sandbox
def test_every_planted_cheat_is_caught_on_the_gpu():
    """Each class of issue 38, planted in tests/faulty/, gets its verdict; every solution passes and
    every starter fails for its stated reason (scripts/judge_cases.py, as `exercise grade`)."""
    proc = subprocess.run([os.sys.executable, str(config.REPO_ROOT / "scripts/judge_cases.py")], capture_output=True,
                          text=True, timeout=1800, cwd=config.REPO_ROOT)
    assert proc.returncode == 0 and "0 not as expected" in proc.stdout, describe(proc)



# ----------------------------------------------------------------------------- the judge's clock, on the host

@pytest.mark.parametrize("variant, wrong", [("cpu", ""), (str(FAULTY / "cpu_partial_at_size.cpp"), "wrong"),
                                            (str(FAULTY / "cpu_wrong_after_warmup.cpp"), "wrong"),
                                            (str(FAULTY / "cpu_deferred.cpp"), "work left running")],
                         ids=["honest", "partial-at-size", "wrong-after-warmup", "deferred"])
def test_the_clock_verifies_every_timed_call(variant, wrong):
    """judge/clock.py with CPU variants in runners (host arenas): each side's calls are timed on
    the caller's clock, each output checked; a variant that skips work at the timed size or goes
    wrong after its first calls is wrong there, whatever its time."""
    from workbench.judge import clock
    from workbench.judge.start import isolated

    reference = isolated("bias_gelu", "cpu").module
    mine = isolated("bias_gelu", variant).module
    try:
        race = clock.race("bias_gelu", {"cpu": reference, "yours": mine}, "fwd", "float32", (600, 256),
                          rounds=2, batch_s=0.002)
    finally:
        reference.close()
        mine.close()
    assert race.calls >= 2 and race.rounds == 2 and race.sides["cpu"].wrong == ""
    yours = race.sides["yours"]
    assert len(yours.per_call_ms) == 2 and race.protocol_ms > 0
    if wrong == "work left running":
        # Caught not holding its outputs at "done" (then wrong, or right later: work left running),
        # or, on a busy machine checked late, its work inside the timed window (20 ms each batch).
        assert yours.wrong or min(yours.per_call_ms) * race.calls >= 20, yours
    else:
        assert (wrong in yours.wrong) if wrong else yours.wrong == "", yours


def test_an_observation_splits_at_the_markers_and_pairs_each_launch_with_its_code():
    """judge/ncu_watch.py on ncu's pages as they come: a block of instructions per launch (paired in
    order), or per function (found by name, its counts shared by its launches); what ran before the
    first marker (the library's load) is not counted."""
    from workbench.judge.ncu_watch import Executed, RanKernel, observation

    def block(name, warps):
        return RanKernel(name, [Executed(0x10, "LDG.E.128", None, warps, 32 * warps, "Global", "Load", 128)])

    marker, kernel = "wb_runner_marker(int *)", "void <unnamed>::k<float>(const float *, float *)"
    rows = [{"Kernel Name": n} for n in ("void decoy()", marker, kernel, marker, kernel)]
    per_launch = observation(rows, [block("void decoy()", 9), block(marker, 1), block(kernel, 2), block(marker, 1),
                                    block(kernel, 3)])
    assert (per_launch.at_load, per_launch.markers, len(per_launch.calls)) == (1, 2, 2)
    assert [k.code[0].warps for k in per_launch.kernels] == [2, 3]   # each launch's own counts; no decoy
    # ncu's source page may spell a function otherwise than its raw page (template arguments, namespaces)
    spelled = "k<float>(float const *, float *)"
    per_function = observation(rows, [block("void decoy()", 9), block(marker, 2), block(spelled, 5)])
    assert [k.name for k in per_function.kernels] == [spelled] and per_function.kernels[0].code[0].warps == 5
    assert len(per_function.calls) == 2 and per_function.at_load == 1
