"""wb.bench(..., cluster=ADDRESS): the plan's groups over the pool's workers, each group's rows
appended as it arrives (a worker that dies later loses nothing measured), one progress bar; the
merged result is a one-process run's."""
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
    """One bar over the whole sweep: redrawn on a terminal, a line per step in a log."""
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
    """The sweep bench_fn (measure.benchmark.bench, which each worker runs per group) would do, on
    the cluster at `cluster`. device: "cuda" (a worker per GPU; the default where the cluster has
    one) or "cpu". gpu_types: run every group once on each. run_kw: run()'s."""
    started = time.perf_counter()
    ray = connect(cluster)
    if device is None:
        device = "cuda" if ray.cluster_resources().get("GPU", 0) else "cpu"
    device = str(device).split(":")[0]
    groups = plan_.plan(op, variants, dtypes, shapes, baselines, directions, device=device, gpu_types=gpu_types)
    return run(bench_fn, groups, cluster=cluster, device=device, attrs=attrs, started=started, **run_kw)


def run(bench_fn, groups: list, *, cluster: str, device: str, attrs=None, budget_s: float = 1.0,
        target_rse: float = 0.01, save: bool = False, results_path=None, isolate: bool = False,
        max_workers: int | None = None, on_submit=None, started: float | None = None) -> BenchResult:
    """Any plan's groups (several ops' plans, concatenated) on the cluster's workers: every variant
    built first on every node, then each group timed by one worker."""
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
