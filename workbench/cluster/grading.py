"""Exercise grading on a Ray cluster: each submission (its source travels with the job) graded by
a worker as the serial grader grades it; a worker that dies has its submission graded once more."""
from __future__ import annotations

import sys

from .. import config
from .pool import Job, Pool, connect


def spread(address: str, *, device: str | None = None, max_workers: int | None = None, on_submit=None):
    """A spread(jobs) -> rows for exercise.grade.grade, over the cluster at `address`: a worker per
    GPU (device "cuda", the default where the cluster has GPUs) or per CPU."""
    def run(jobs: list[dict]) -> list[dict]:
        ray = connect(address)
        where = device or ("cuda" if ray.cluster_resources().get("GPU", 0) else "cpu")
        rows = []

        def graded(job: Job, row: dict, member) -> None:
            if job.attempts:  # its first worker died while grading it: graded once more, here
                row["worker"] += f" (graded again: {'; '.join(job.errors)})"
            rows.append(row)
            if not config.quiet():
                print(f"[grade] {len(rows)}/{len(jobs)} {row['submission']}: {row['status']}", file=sys.stderr, flush=True)

        with Pool(ray, where, max_workers=max_workers) as pool:
            pool.run([Job(j["name"], j) for j in jobs], lambda h, j: h.grade.remote(j), graded, on_submit)
            lost = pool.lost
        for job in lost:  # graded nowhere: its row says why, as a hung submission's does
            rows.append(dict(submission=job.payload["name"], status="ERROR", verdict="ERROR: not graded: "
                             + "; ".join(job.errors), first_failure="", detail="", checks="", seconds=0.0,
                             seed=job.payload["seed"], worker=""))
        return rows
    return run
