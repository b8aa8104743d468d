"""Beyond one GPU: benchmark sweeps (plan.py: the sweep's tasks and the merge of their results;
sweep.py: wb.bench(..., cluster=ADDRESS)) and exercise grading (grading.py) over a pool of Ray
workers, one per GPU (pool.py, worker.py). Ray is optional and imported in pool.py alone.

May import: model, build, run, measure, exercise (the rooms it spreads over workers), explain (BenchResult); Ray.
"""
from __future__ import annotations

from .pool import INSTALL, RayNotInstalled, check_address, require_ray

__all__ = ["INSTALL", "RayNotInstalled", "check_address", "require_ray"]
