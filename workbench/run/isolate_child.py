"""The isolated child process's entry point (isolate.py starts it; it is never the CLI):

    python -m workbench.run.isolate_child JOB_FILE        run the one job in JOB_FILE, write its result
    python -m workbench.run.isolate_child --worker WARM   an isolate.Worker: warm up, then serve jobs

A job (isolate.job_message) names a function of jobs.BY_NAME, the variant's address and the
function's keyword arguments, and where to write the result as JSON: written whole or not at all,
since a result written is the only sign of success the parent trusts. A job that raises ends the
process with status 1, its traceback on stderr.

The Worker's protocol: it prints "ready" on stdout once warmed up (jobs.warm_up(**WARM)), then
reads one job per line on stdin and prints "done" after each; everything else anything prints goes
to stderr, never into the protocol.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys
import time

from .. import bytecode

bytecode.use_private_cache()  # before jobs imports the rest (torch among it): see bytecode.py

from . import jobs  # noqa: E402


def run_job(job: dict) -> None:
    """Run jobs.BY_NAME[job["job"]] and write its result to job["result"]."""
    name = job["job"]
    if name not in jobs.BY_NAME:
        raise ValueError(f"job must be one of {sorted(jobs.BY_NAME)}; got {name!r}")
    out = jobs.BY_NAME[name](job["address"], **job["args"])
    import torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # surface an asynchronous fault here, as a failure of the child
    tmp = pathlib.Path(job["result"] + ".tmp")
    tmp.write_text(json.dumps(out))
    tmp.replace(job["result"])


def run_job_file(path: str) -> int:
    run_job(json.loads(pathlib.Path(path).read_text()))
    return 0


def serve(warm: dict) -> int:
    """The Worker: warm up, print "ready", then for each job line on stdin run it and print "done"
    (the module's docstring)."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever a job prints goes to stderr, never into the protocol
    started = time.perf_counter()
    jobs.warm_up(**warm)
    print(f"[worker] ready in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    print("ready", file=protocol)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        started = time.perf_counter()
        run_job(job)
        print(f"[worker] {job['job']} in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        print("done", file=protocol)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"] and len(argv) == 2:
        return serve(json.loads(argv[1]))
    if len(argv) == 1 and not argv[0].startswith("-"):
        return run_job_file(argv[0])
    print("usage: python -m workbench.run.isolate_child JOB_FILE | --worker WARM_JSON (started by workbench/run/isolate.py)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
