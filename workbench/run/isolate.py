"""The exercise checker's child process (exercise/child.py), and nothing else's: isolate=True,
wb.profile and sanitize serve a variant from a runner (workbench/judge). This file, jobs.py and
isolate_child.py go with exercise/child.py.

run() starts a child per job. A Worker is a child started ahead of its jobs, which imports torch,
initializes CUDA and warms up while the caller does something else (the exercise checker builds
the student's file meanwhile), then runs several jobs in turn; a job that fails ends it, exactly
as it would end run()'s child, and the next job starts a fresh one.

A child is `python -m workbench.run.isolate_child` (child_command, worker_command). What it runs is
in jobs.py, one function per job ("load", "check", "gradcheck", "bench"); the variant travels as
its address (variant_address: the runner's, judge.pyrunner.address_of).
"""
from __future__ import annotations

import json
import pathlib
import selectors
import shutil
import subprocess
import sys
import tempfile
import time

from .. import config
from ..config import child_env
from ..errors import IsolatedRunError

STARTUP_TIMEOUT_S = 600  # a Worker's warm-up (import torch, CUDA, a check of a reference variant)
CHILD_MODULE = "workbench.run.isolate_child"
JOBS = ("load", "check", "gradcheck", "bench")  # jobs.BY_NAME's names (not imported here: torch)


def variant_address(op: str, variant) -> dict:
    """How a child finds the same variant: a runner's address of it (imported here: torch)."""
    from ..judge.pyrunner import address_of

    return address_of(op, variant)


def child_command(job_file) -> list[str]:
    """The command line of a child that runs the job in `job_file` (isolate_child.run_job_file)."""
    return [sys.executable, "-m", CHILD_MODULE, str(job_file)]


def worker_command(warm: dict) -> list[str]:
    """The command line of a Worker's child (isolate_child.serve), warming up with jobs.warm_up(**warm)."""
    return [sys.executable, "-m", CHILD_MODULE, "--worker", json.dumps(warm)]


def job_message(job: str, address: dict, args: dict, result) -> dict:
    """A job as a child reads it: run jobs.BY_NAME[job](address, **args), write its result as
    JSON to the path `result`."""
    return {"job": _known(job), "address": address, "args": args, "result": str(result)}


def _known(job: str) -> str:
    if job not in JOBS:
        raise ValueError(f"job must be one of {list(JOBS)}; got {job!r}")
    return job


def _what(job: str, address: dict) -> str:
    return f"{job} of {address['op']}/{address['name']}"


class ChildTimeout(IsolatedRunError, subprocess.TimeoutExpired):
    """A child that did not finish within its time: killed, and reported as an IsolatedRunError
    (also a subprocess.TimeoutExpired, for callers that catch that). `timeout_s`: the limit."""

    def __init__(self, what: str, timeout_s: float, output: str, full_output: str = "", *, starting: bool = False):
        IsolatedRunError.__init__(self, what, -9, output, full_output)
        self.cmd, self.timeout, self.timeout_s, self.stderr, self.starting = what, timeout_s, timeout_s, None, starting
        doing = "did not get ready (start-up: import torch, warm-up)" if starting else "did not finish"
        self.args = (f"{what}: the child process {doing} within {timeout_s:g} s and was killed; "
                     f"the caller's process is unaffected.\n{output}",)

    def __str__(self) -> str:
        return str(self.args[0])


def _failed(what: str, returncode: int, output: str, full_output: str = "", *, before: str = "") -> IsolatedRunError:
    """The error for a child that ended without handing over its result: exited (any status, 0
    included: only a result received counts) or was killed by a signal."""
    return IsolatedRunError(what, returncode, output, full_output, before=before or "before reporting its result")


def _tail(text: str, n: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def run(job: str, address: dict, args: dict, *, timeout_s: float = 1800) -> dict:
    """Run `job` ("load", "check", "gradcheck", "bench": jobs.BY_NAME) of the variant
    at `address` with the keyword arguments `args` in a fresh child; return its JSON result. A
    child that exits (with any status, 0 included) or dies without writing its result raises
    IsolatedRunError; one still running after timeout_s is killed (ChildTimeout)."""
    with tempfile.TemporaryDirectory(prefix="workbench-child-") as tmp:
        job_file = pathlib.Path(tmp) / "job.json"
        result = pathlib.Path(tmp) / "result.json"
        job_file.write_text(json.dumps(job_message(job, address, args, result)))
        what = _what(job, address)
        proc = subprocess.Popen(child_command(job_file), env=child_env(), cwd=config.REPO_ROOT,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace")
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            raise ChildTimeout(what, timeout_s, _tail(stdout + stderr), stdout + stderr) from None
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if proc.returncode != 0 or not result.exists():
            raise _failed(what, proc.returncode, _tail(stdout + stderr), stdout + stderr)
        out = json.loads(result.read_text())
        out["child_output"] = stdout + stderr
        return out


class Worker:
    """A child interpreter started ahead of its jobs (see the module's docstring). `warm`: {"op":
    ..., "variant": ...} to declare that op, load that variant and run a small check of it before
    the first job, so the kernels a check uses are loaded by then."""

    def __init__(self, warm: dict | None = None):
        self.warm = dict(warm or {})
        self._dir = pathlib.Path(tempfile.mkdtemp(prefix="workbench-worker-"))
        self._proc: subprocess.Popen | None = None
        self._log = None
        self._jobs = 0
        self.start()

    def start(self) -> None:
        if self._log is not None:
            self._log.close()
        self._jobs += 1
        self._log_path = self._dir / f"stderr-{self._jobs}.log"
        self._log = open(self._log_path, "w+")
        self._ready = False  # until the child prints "ready" (wait() reads it)
        self._proc = subprocess.Popen(
            worker_command(self.warm), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
            cwd=config.REPO_ROOT, env=child_env())

    def _size(self) -> int:
        """Bytes the child has written to its log so far: where a new job's output will start."""
        return self._log_path.stat().st_size

    def _after_warmup(self) -> int:
        """Where the log's warm-up ends: after the child's "[worker] ready in" line (the job may
        have started printing by the time "ready" is read)."""
        data = self._log_path.read_bytes()
        at = data.rfind(b"[worker] ready in ")
        end = data.find(b"\n", at) if at >= 0 else -1
        return end + 1 if end >= 0 else 0

    def _output(self, since: int = 0) -> str:
        return self._log_path.read_bytes()[since:].decode(errors="replace")

    def submit(self, job: str, address: dict, args: dict) -> dict:
        """Hand the child a job (as run() takes it) and return at once with a ticket; wait(ticket)
        collects its result. Jobs run in the order submitted."""
        _known(job)  # before a child is started for it
        if self._proc is None or self._proc.poll() is not None:
            self.start()
        self._jobs += 1
        ticket = {"what": _what(job, address), "result": self._dir / f"result-{self._jobs}.json",
                  "since": self._size(), "proc": self._proc}
        try:
            self._proc.stdin.write(json.dumps(job_message(job, address, args, ticket["result"])) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the child is gone: wait() reports how it ended
        return ticket

    def wait(self, ticket: dict, *, timeout_s: float = 1800, startup_s: float = STARTUP_TIMEOUT_S) -> dict:
        """The JSON result of the job submit() gave this ticket for, with the child's output for it
        as "child_output". timeout_s counts from when the child is ready for jobs (its warm-up has its own limit,
        startup_s). A child that ends without reporting the result (an exit with any status, 0
        included, or a signal) raises IsolatedRunError; one past its time is killed (ChildTimeout)."""
        proc = ticket["proc"]
        if proc is not self._proc:  # an earlier job ended that child: this one never ran
            raise _failed(ticket["what"], proc.returncode if proc.returncode is not None else -1,
                          "the child ended before this job ran", before="before this job ran")
        deadline = time.monotonic() + (timeout_s if self._ready else max(startup_s, timeout_s))
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(timeout=left):
                    starting = not self._ready
                    self._kill()
                    out = self._output(0 if starting else ticket["since"])
                    raise ChildTimeout(ticket["what"], max(startup_s, timeout_s) if starting else timeout_s,
                                       _tail(out), out, starting=starting)
                line = proc.stdout.readline()
                if not line:  # EOF: the job raised (the child exits 1), it exited, or it was killed
                    code = proc.wait()
                    out = self._output(0 if not self._ready else ticket["since"])
                    raise _failed(ticket["what"], code, _tail(out), out,
                                  before="" if self._ready else "while starting up, before it ran this job")
                if line.strip() == "ready":
                    self._ready = True
                    deadline = time.monotonic() + timeout_s  # the job's time starts now
                    ticket["since"] = max(ticket["since"], self._after_warmup())  # its output: after the warm-up's
                elif line.strip() == "done":
                    break
        finally:
            sel.close()
        try:
            out = json.loads(ticket["result"].read_text())
        except (OSError, ValueError) as e:
            err = IsolatedRunError(ticket["what"], 0, str(e))
            err.args = (f"{ticket['what']}: the child process said it was done, but its result could not be read "
                        f"({e}); the caller's process is unaffected.",)
            raise err from None
        out["child_output"] = self._output(ticket["since"])
        return out

    def run(self, job: str, address: dict, args: dict, *, timeout_s: float = 1800) -> dict:
        """Run one job and wait for it."""
        return self.wait(self.submit(job, address, args), timeout_s=timeout_s)

    def _kill(self) -> None:
        """End the current child at once (it may be stuck in a loop: no polite close)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def _stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()

    def ready_seconds(self) -> float | None:
        """How long the current child took from its start to ready (its "[worker] ready in" line)."""
        import re

        m = re.search(r"^\[worker\] ready in ([\d.]+) s", self._output(), flags=re.MULTILINE)
        return float(m.group(1)) if m else None

    def close(self) -> None:
        self._stop()
        if self._log is not None:
            self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
