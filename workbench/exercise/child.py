"""The checker's child process: where the student's library is loaded and the GPU checks run
(started early by start_worker, so its start-up overlaps the build), and how long each may take.
The checks that use it are in checks.py and speedcheck.py; tests stand in for it by replacing
these functions."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess

from ..build import toolchain
from .registration import Exercise
from .report import LAYOUTS, Check

CHILD_TIMEOUT_S = 600  # correctness and gradcheck each; a kernel that hangs fails instead of waiting forever
# Loading the student's library in the child (its static initializers run then): seconds from when
# the child is ready. WORKBENCH_LOAD_TIMEOUT_S overrides it (the tests shorten it).
LOAD_TIMEOUT_S = 60
# The layouts an exercise checks: a transposed view reaches the kernel as a contiguous copy, as a
# strided one does, so it would test the harness, not the student's kernel.
EXERCISE_LAYOUTS = ("contiguous", "strided", "offset")


def gpu_present() -> bool:
    """Whether the GPU checks can run here (one place, so tests can stand in for a GPU)."""
    return toolchain.gpu_available()


def gpu_likely() -> bool:
    """A GPU driver is installed (its control device exists): asked before torch is imported,
    to start the checks' child early. gpu_present() decides whether the GPU checks run."""
    return pathlib.Path("/dev/nvidiactl").exists()


def start_worker(ex: Exercise, seed: int, gpu: bool | None = None):
    """The child process the student's library is loaded in and the GPU checks run in, started
    before anything else (even before this process imports torch), so that its start-up overlaps
    the build instead of following it: import torch, the harness and the op's binding, and where a
    GPU is (gpu: default gpu_likely()) the CUDA context and a check of the reference variant in the
    exercise's dtypes and layouts on the smallest of the sizes the seed draws, which loads every
    kernel the student's check will use. All of it in-tree code: the student's library is loaded
    only by the first job ("load")."""
    from ..run import isolate

    if not (gpu_likely() if gpu is None else gpu):
        return isolate.Worker({"op": ex.op})
    return isolate.Worker({"op": ex.op, "variant": ex.reference, "dtypes": list(ex.dtypes),
                           "exercise_seed": seed, "layouts": list(EXERCISE_LAYOUTS), "seed": seed})


def load_timeout_s() -> float:
    return float(os.environ.get("WORKBENCH_LOAD_TIMEOUT_S") or LOAD_TIMEOUT_S)


def load_in_child(ex: Exercise, built, worker=None, timeout_s: float | None = None) -> dict:
    """Load the built library in the worker (or a fresh child where there is none) and return what
    the child read of it: {"info": its exported descriptor, "build_id", "built", "pid"}. Raises
    IsolatedRunError (ChildTimeout past timeout_s) where the child ends without reporting."""
    from ..run import isolate

    address = isolate.variant_address(ex.op, built)
    timeout_s = load_timeout_s() if timeout_s is None else timeout_s
    return worker.run("load", address, {}, timeout_s=timeout_s) if worker is not None else \
        isolate.run("load", address, {}, timeout_s=timeout_s)


def in_child(job: str, ex: Exercise, kernel, worker=None, **args):
    """A check ("check", "gradcheck": a correctness.Report) or a benchmark ("bench": a BenchResult)
    of the kernel in a child process: the worker, or a fresh child where there is none; `args`:
    the job's keyword arguments (jobs.py)."""
    from ..run import isolate
    from ..measure.bench_result import BenchResult
    from ..measure.correctness import Report

    address = isolate.variant_address(ex.op, kernel)
    out = worker.run(job, address, args, timeout_s=CHILD_TIMEOUT_S) if worker is not None else \
        isolate.run(job, address, args, timeout_s=CHILD_TIMEOUT_S)
    return BenchResult(out["rows"]) if job == "bench" else Report.from_dict(out)


def stopped(name: str, err, sanitize: str) -> Check:
    """A check whose child process raised, died (IsolatedRunError) or ran out of time. The child
    announces each case before it runs ("[case] backward 37x131 float32 offset"), so the last
    announcement is the case that was running."""
    if isinstance(err, subprocess.TimeoutExpired):
        return Check(name, "FAIL", f"timed out: not finished after {getattr(err, 'timeout_s', CHILD_TIMEOUT_S):.0f} s",
                     ["a kernel never returned: look for a loop whose index never reaches its end"])
    text = err.full_output or err.output
    cases = re.findall(r"^\[case\] (.+)$", text, flags=re.MULTILINE)
    during = f" in {cases[-1].strip()}" if cases else ""
    cuda = re.findall(r"CUDA error: ([^\n]+)", text)
    killed = re.search(r"was killed by (\w+)", str(err))
    if cuda:
        detail = f"crashed{during}: {cuda[-1].strip()}"
    elif killed:
        detail = f"crashed{during}: the process running the check was killed by {killed.group(1)}"
    else:
        raised = re.findall(r"^\w*(?:Error|Exception)\w*: (.+)$", text, flags=re.MULTILINE)
        detail = f"stopped with an error{during}: {raised[-1].strip() if raised else 'see below'}"
    output = [ln for ln in err.output.splitlines() if not ln.startswith("[case] ")]
    lines = [detail]
    if cases:
        lines.append(f"the case that was running: {cases[-1].strip()} (each input: {LAYOUTS.get(cases[-1].split()[3], '')})"
                     if len(cases[-1].split()) > 3 else f"the case that was running: {cases[-1].strip()}")
    lines += ["the last lines the check printed:", *[f"    {ln}" for ln in output[-12:]]]
    if detail.startswith("crashed"):
        lines.append(f"to find the faulting access (compute-sanitizer): {sanitize}")
    return Check(name, "FAIL", detail, lines)
