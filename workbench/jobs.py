"""The child side of isolate.run: `python -m workbench _child JOB` runs one check, gradcheck or
bench and writes its result as JSON. Kept apart from isolate.py, which only starts children, so
that correctness and benchmark can call isolate without an import cycle."""
from __future__ import annotations

import json
import pathlib
import sys

from . import correctness, isolate


def _announce(what: str) -> None:
    # The case about to run, on its own line: if the kernel then crashes the process, the parent
    # finds the case in the child's last lines (exercise checker: "crashed in backward 7x9 ...").
    print(f"[case] {what}", file=sys.stderr, flush=True)


def child_main(job_path: str) -> int:
    job = json.loads(pathlib.Path(job_path).read_text())
    kernel = isolate.resolve(job["spec"])
    kind, kwargs, op = job["kind"], dict(job["kwargs"]), job["spec"]["op"]
    announce = kwargs.pop("announce", False)
    if kind == "check":
        out = correctness.check(op, kernel, on_case=_announce if announce else None, **kwargs).to_dict()
    elif kind == "gradcheck":
        out = correctness.gradcheck(op, kernel, **kwargs).to_dict()
    elif kind == "bench":
        from .benchmark import bench
        out = {"rows": bench(op, variants=[kernel.name], **kwargs).rows}
    else:
        raise ValueError(f"unknown job kind {kind!r}")
    import torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # surface an asynchronous fault here, as a failure of the child
    tmp = pathlib.Path(job["result"] + ".tmp")
    tmp.write_text(json.dumps(out))
    tmp.replace(job["result"])
    return 0
