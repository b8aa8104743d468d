"""A benchmark sweep on a Ray cluster: wb.bench(..., cluster=ADDRESS) comes here. The plan's groups
go to the pool's workers (one per GPU); each group's rows are appended to the results file as it
arrives, so a worker that dies later loses nothing already measured; one progress bar covers the
whole sweep; the merged result has the rows and notes, table and plots, of a one-process run."""
from __future__ import annotations

import dataclasses
import sys
import time
import uuid

from .. import config
from ..measure import bench_rows
from ..explain.plot import BenchResult
from . import plan as plan_
from . import worker
from .pool import Job, Pool, connect


def progress(done: int, total: int, what: str) -> None:
    """One bar over the whole sweep: cells done of all planned, redrawn on a terminal, a line per
    step in a log."""
    if config.quiet():
        return
    width = 24
    filled = width * done // max(total, 1)
    line = f"[cluster] [{'#' * filled}{'.' * (width - filled)}] {done}/{total} cells  {what}"
    if sys.stderr.isatty():
        print("\r" + line.ljust(110), end="\n" if done >= total else "", file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr, flush=True)


def bench(bench_fn, op: str, variants="all", dtypes=("float32",), shapes=None, baselines=None, directions=("fwd",),
          *, cluster: str, attrs=None, device=None, gpu_types=None, **run_kw) -> BenchResult:
    """The sweep bench_fn (measure.benchmark.bench, the one-process sweep each worker runs per group)
    would do here, on the cluster at `cluster` (pool.connect). device: "cuda" (a worker per GPU),
    "cpu" (a worker per CPU: the CPU variants), default "cuda" where the cluster has a GPU.
    gpu_types: run every group once on each of these GPU types (rows carry each one's GPU).
    run_kw: run()'s (budget_s, target_rse, save, results_path, isolate, max_workers, on_submit)."""
    started = time.perf_counter()
    ray = connect(cluster)
    device = cluster_device(ray, device)
    groups = plan_.plan(op, variants, dtypes, shapes, baselines, directions, device=device, gpu_types=gpu_types)
    return run(bench_fn, groups, cluster=cluster, device=device, attrs=attrs, started=started, **run_kw)


def cluster_device(ray, device) -> str:
    """"cuda" or "cpu": the device asked for, else "cuda" where the cluster has a GPU."""
    if device is None:
        return "cuda" if ray.cluster_resources().get("GPU", 0) else "cpu"
    return str(device).split(":")[0]


def run(bench_fn, groups: list, *, cluster: str, device: str, attrs=None, budget_s: float = 1.0,
        target_rse: float = 0.01, save: bool = False, results_path=None, isolate: bool = False,
        max_workers: int | None = None, on_submit=None, started: float | None = None) -> BenchResult:
    """Any plan's groups on the cluster's workers (a full sweep: several ops' plans, concatenated, all
    sharing the workers): every variant built first on every node, then each group timed by one
    worker, its rows appended to the results file (save) as they arrive. on_submit(member, job):
    called as each group is handed over."""
    started = time.perf_counter() if started is None else started
    ray = connect(cluster)
    groups = [dataclasses.replace(g, index=i) for i, g in enumerate(groups)]
    gpu_types = sorted({g.gpu_type for g in groups if g.gpu_type}) or None
    path = (results_path or config.output_dir() / "bench.jsonl") if save else None
    run_id = uuid.uuid4().hex[:12]
    total = sum(len(g.cells) for g in groups)
    got: dict[int, dict] = {}
    with Pool(ray, device, gpu_types, max_workers) as pool:
        workers = pool.describe()
        wanted = {}
        for g in groups:
            wanted.setdefault(g.op, [n for n in g.variants if _runs(g.op, n, device)])
        pool.broadcast(lambda h: h.prepare.remote(wanted))

        def arrived(job: Job, value: dict, member) -> None:
            group = job.payload
            for row in value["rows"]:  # one run: the sweep's id; each row keeps its own worker's provenance
                row.update(run_id=run_id, worker=worker.name(value["worker"]))
            if path is not None:
                bench_rows.append_rows(path, value["rows"])
            got[group.index] = value
            progress(sum(len(groups[i].cells) for i in got), total, group.label())

        pool.run([Job(g.label(), g, g.gpu_type) for g in groups],
                 lambda h, g: h.bench.remote(bench_fn, g.bench_kwargs(attrs, device, budget_s, target_rse, isolate)),
                 arrived, on_submit)
        retried, lost = pool.retried, pool.lost
    ordered = [got[g.index] for g in groups if g.index in got]
    out = BenchResult(rows=[r for v in ordered for r in v["rows"]])
    out.notes = plan_.merged_notes([v["notes"] for v in ordered], out.rows, time.perf_counter() - started)
    out.notes.append(f"ran on a Ray cluster: {workers}, {len(groups)} groups of {total} cells"
                     + (f"; retried after a worker died: {', '.join(str(j.key) for j in retried)}" if retried else ""))
    out.notes += [f"NOT MEASURED {j.key}: {'; '.join(j.errors)}" for j in lost]
    if path is not None and not config.quiet():
        print(f"[cluster] rows appended to {path} as they arrived", file=sys.stderr)
    return out


def _runs(op: str, name: str, device: str) -> bool:
    from ..model import registry

    return next(v for v in registry.variants(op) if v.name == name).runs_on(device)
