"""The long-lived worker a cluster runs, one per GPU (or per CPU on a CPU-only cluster): made once, it
keeps torch, the harness, its build cache and (on a GPU) the CUDA context warm for every task it
takes. A plain class here; pool.py makes it a Ray actor (Ray is imported there alone)."""
from __future__ import annotations

import os
import socket


def name(info: dict) -> str:
    """How a row names the worker that measured it: host and GPU (CUDA_VISIBLE_DEVICES as Ray set it), or
    host and process on a CPU."""
    where = f"gpu{info['cuda_visible_devices']}" if info["device"] == "cuda" else f"pid{info['pid']}"
    return f"{info['host']}:{where}"


class Worker:
    def __init__(self, device: str):
        import torch

        self.device = device
        if device == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError(f"a GPU worker on {socket.gethostname()} sees no GPU "
                                   f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
            torch.zeros(1, device="cuda")  # the CUDA context, made once for every task this worker takes

    def info(self) -> dict:
        """Where this worker runs: host, process, and the GPU Ray gave it (its index and name)."""
        import torch

        gpu = torch.cuda.get_device_name() if self.device == "cuda" else None
        return {"host": socket.gethostname(), "pid": os.getpid(), "device": self.device, "gpu": gpu,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def prepare(self, variants: dict) -> dict:
        """Build (or find in this node's cache) every variant the sweep times ({op: [names]}), before
        any timing: the workers of one node share its build cache, whose locks let one of them
        compile each piece while the others wait for it, so a piece is compiled once per node.
        {"op/name": built by this worker}."""
        from ..run import loader

        return {f"{op}/{name}": bool(loader.load(op, name).built) for op, names in variants.items() for name in names}

    def bench(self, bench_fn, kwargs: dict) -> dict:
        """One group of the sweep, timed by the one-process bench (bench_fn: measure.benchmark.bench,
        handed over by the caller), baselines and variants on this worker's device."""
        result = bench_fn(**kwargs)
        return {"rows": result.rows, "notes": result.notes, "worker": self.info()}

    def grade(self, job: dict) -> dict:
        """One submission's verdict (exercise.grade.grade_job: its source travels with the job, so
        any node can grade it), as the serial grader gives it, plus where it was graded."""
        from ..exercise import grade

        return dict(grade.grade_job(job), worker=f"{socket.gethostname()}:{os.getpid()}")
