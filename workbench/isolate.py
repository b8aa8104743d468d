"""Run a check, gradcheck or bench in a child process.

A kernel that faults (an illegal address) poisons the CUDA context of the process it runs in, and
a CPU kernel that crashes takes its process down: in a notebook, that is the user's session and
their tensors. With isolate=True the run happens in a fresh interpreter; the parent gets the
report back as JSON, or an IsolatedRunError naming what went wrong.

run() starts a child per job. A Worker is a child started ahead of its jobs, which imports torch,
initializes CUDA and warms up while the caller does something else (the exercise checker builds
the student's file meanwhile), then runs several jobs in turn; a job that fails ends it, exactly
as it would end run()'s child, and the next job starts a fresh one. The children's code is in
jobs.py.
"""
from __future__ import annotations

import json
import os
import pathlib
import selectors
import shutil
import subprocess
import sys
import tempfile
import time

from . import config
from .errors import IsolatedRunError


def variant_spec(op: str, variant) -> dict:
    """How a child finds the same variant: by name for kernels/<op>/, by source path otherwise."""
    from . import loader, registry

    if isinstance(variant, loader.Kernel):
        in_tree = registry.variant_sources(op).get(variant.name)
        if in_tree is not None and in_tree.resolve() == variant.source.resolve():
            return {"op": op, "name": variant.name}
        return {"op": op, "name": variant.name, "source": str(variant.source)}
    return {"op": op, "name": variant}


def resolve(spec: dict):
    from . import loader

    if "source" in spec:
        return loader.load_source(spec["op"], spec["source"], spec["name"])
    return loader.load(spec["op"], spec["name"])


def _child_env(extra_env: dict | None = None) -> dict:
    env = dict(os.environ, **(extra_env or {}))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(config.REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def run(kind: str, spec: dict, kwargs: dict, *, timeout_s: float = 1800, extra_env: dict | None = None,
        prefix: list[str] | None = None) -> dict:
    """Run `kind` ("check", "gradcheck", "bench") in a child; return its JSON result."""
    with tempfile.TemporaryDirectory(prefix="workbench-child-") as tmp:
        job = pathlib.Path(tmp) / "job.json"
        result = pathlib.Path(tmp) / "result.json"
        job.write_text(json.dumps({"kind": kind, "spec": spec, "kwargs": kwargs, "result": str(result)}))
        env = _child_env(extra_env)
        cmd = [*(prefix or []), sys.executable, "-m", "workbench", "_child", str(job)]  # -> jobs.child_main
        proc = subprocess.run(cmd, env=env, cwd=config.REPO_ROOT, capture_output=True, text=True, timeout=timeout_s)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        if proc.returncode != 0 or not result.exists():
            raise IsolatedRunError(f"{kind} of {spec['op']}/{spec['name']}", proc.returncode, tail,
                                   proc.stdout + proc.stderr)
        out = json.loads(result.read_text())
        out["child_output"] = proc.stdout + proc.stderr
        return out


class Worker:
    """A child interpreter started ahead of its jobs (see the module's docstring). `warm`: {"op":
    ..., "variant": ...} to declare that op, load that variant and run a small check of it before
    the first job, so the kernels a check uses are loaded by then."""

    def __init__(self, warm: dict | None = None, *, extra_env: dict | None = None):
        self.warm = dict(warm or {})
        self.extra_env = extra_env
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
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "workbench", "_worker", json.dumps(self.warm)],  # -> jobs.worker_main
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
            cwd=config.REPO_ROOT, env=_child_env(self.extra_env))

    def _size(self) -> int:
        """Bytes the child has written to its log so far: where a new job's output will start."""
        return self._log_path.stat().st_size

    def _output(self, since: int = 0) -> str:
        return self._log_path.read_bytes()[since:].decode(errors="replace")

    def submit(self, kind: str, spec: dict, kwargs: dict) -> dict:
        """Hand the child a job and return at once; wait(job) collects its result. Jobs run in
        the order submitted."""
        if self._proc is None or self._proc.poll() is not None:
            self.start()
        self._jobs += 1
        job = {"what": f"{kind} of {spec['op']}/{spec['name']}", "result": self._dir / f"result-{self._jobs}.json",
               "since": self._size(), "proc": self._proc}
        try:
            self._proc.stdin.write(json.dumps({"kind": kind, "spec": spec, "kwargs": kwargs,
                                               "result": str(job["result"])}) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the child is gone: wait() reports how it ended
        return job

    def wait(self, job: dict, *, timeout_s: float = 1800) -> dict:
        """The submitted job's JSON result, with the child's output for it as "child_output"."""
        proc = job["proc"]
        if proc is not self._proc:  # an earlier job ended that child: this one never ran
            raise IsolatedRunError(job["what"], proc.returncode or -1, "the child ended before this job ran")
        deadline = time.monotonic() + timeout_s
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(timeout=left):
                    self._stop()
                    raise subprocess.TimeoutExpired(job["what"], timeout_s)
                line = proc.stdout.readline()
                if not line:  # EOF: the job raised (the child exits 1) or the child was killed
                    code = proc.wait()
                    out = self._output(job["since"])
                    tail = "\n".join(out.strip().splitlines()[-25:])
                    raise IsolatedRunError(job["what"], code, tail, out)
                if line.strip() == "done":
                    break
        finally:
            sel.close()
        out = json.loads(job["result"].read_text())
        out["child_output"] = self._output(job["since"])
        return out

    def run(self, kind: str, spec: dict, kwargs: dict, *, timeout_s: float = 1800) -> dict:
        """Run one job and wait for it."""
        return self.wait(self.submit(kind, spec, kwargs), timeout_s=timeout_s)

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
