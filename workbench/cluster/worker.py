"""The long-lived worker, one per GPU (or CPU), keeping torch, the harness, its build cache and the
CUDA context warm for every task; pool.py makes it a Ray actor."""
from __future__ import annotations

import os
import socket


def name(info: dict) -> str:
    """How a row names its worker: host and GPU (CUDA_VISIBLE_DEVICES), or host and process."""
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
        """Build every variant the sweep times ({op: [names]}) before any timing: the node's cache
        locks compile each piece once per node. {"op/name": built by this worker}."""
        from ..run import loader

        return {f"{op}/{name}": bool(loader.load(op, name).built) for op, names in variants.items() for name in names}

    def bench(self, bench_fn, kwargs: dict) -> dict:
        """One group of the sweep, timed by the one-process bench_fn (measure.benchmark.bench)."""
        result = bench_fn(**kwargs)
        return {"rows": result.rows, "notes": result.notes, "worker": self.info()}

    def grade(self, job: dict) -> dict:
        """One submission's verdict (exercise.grade.grade_job), plus where it was graded."""
        from ..exercise import grade

        return dict(grade.grade_job(job), worker=f"{socket.gethostname()}:{os.getpid()}")
