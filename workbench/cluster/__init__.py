"""Beyond one GPU: benchmark sweeps and exercise grading on a Ray cluster.

    plan.py     a sweep's cells from wb.bench's arguments, grouped into tasks (one (dtype, shape,
                direction) each, its baselines with it), and the merge of their results
    worker.py   the long-lived worker, one per GPU (or CPU): warm torch, harness, build cache, CUDA context
    pool.py     Ray: joining a cluster, making the workers (one per GPU, routed by GPU type), handing
                out jobs, retrying once what a dead worker had in flight
    sweep.py    wb.bench(..., cluster=ADDRESS): rows written as they arrive, one progress bar
    grading.py  python -m workbench exercise grade EX DIR --ray ADDRESS: submissions over the workers

Ray is optional (pip install "kernel-workbench[ray]"): it is imported in pool.py alone, on these
paths alone; without it, require_ray() says how to install it.

May import: model, build, run, measure, exercise (the rooms it spreads over workers), explain (BenchResult); Ray.
"""
from __future__ import annotations

from .pool import INSTALL, RayNotInstalled, check_address, require_ray

__all__ = ["INSTALL", "RayNotInstalled", "check_address", "require_ray"]
