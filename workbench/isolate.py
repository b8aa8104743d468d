"""Run a check, gradcheck or bench in a child process.

A kernel that faults (an illegal address) poisons the CUDA context of the process it runs in, and
a CPU kernel that crashes takes its process down: in a notebook, that is the user's session and
their tensors. With isolate=True the run happens in a fresh interpreter; the parent gets the
report back as JSON, or an IsolatedRunError naming what went wrong.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

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


def run(kind: str, spec: dict, kwargs: dict, *, timeout_s: float = 1800, extra_env: dict | None = None,
        prefix: list[str] | None = None) -> dict:
    """Run `kind` ("check", "gradcheck", "bench") in a child; return its JSON result."""
    with tempfile.TemporaryDirectory(prefix="workbench-child-") as tmp:
        job = pathlib.Path(tmp) / "job.json"
        result = pathlib.Path(tmp) / "result.json"
        job.write_text(json.dumps({"kind": kind, "spec": spec, "kwargs": kwargs, "result": str(result)}))
        env = dict(os.environ, **(extra_env or {}))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(config.REPO_ROOT), env.get("PYTHONPATH")]))
        cmd = [*(prefix or []), sys.executable, "-m", "workbench", "_child", str(job)]  # -> jobs.child_main
        proc = subprocess.run(cmd, env=env, cwd=config.REPO_ROOT, capture_output=True, text=True, timeout=timeout_s)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        if proc.returncode != 0 or not result.exists():
            raise IsolatedRunError(f"{kind} of {spec['op']}/{spec['name']}", proc.returncode, tail,
                                   proc.stdout + proc.stderr)
        out = json.loads(result.read_text())
        out["child_output"] = proc.stdout + proc.stderr
        return out
