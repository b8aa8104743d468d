"""Issue 29's targets, measured: a full sweep's wall time on N workers against one process, and grading
exercise 02's submissions on N workers against the serial grader, each ratio against 1.25/N.

  python scripts/cluster_bench.py [--address local|auto|ray://HOST:PORT] [--workers N] [--device cuda|cpu]
         [--ops OP ...] [--dtypes ...] [--directions ...] [--no-compile] [--budget S] [--submissions 64]
         [--skip-sweep] [--skip-grading] [--json OUT]

On a machine with N GPUs (a local cluster: one worker per GPU) the defaults are the issue's full sweep
(every op, every variant, float32 and bfloat16, the GPU bench sizes, fwd and bwd where the op has a
backward, every baseline) and 64 submissions. On a CPU-only machine the sweep is the CPU variants at the
CPU bench sizes, one worker per CPU: figures of that machine's CPUs, not of GPUs.

The sweep: every variant is built first (untimed), then timed three ways: one process (wb.bench per op,
today's path), the cluster with one worker, the cluster with N. Grading: SUBMISSIONS files (three
solutions to one starter, each with a comment of its own, so each is built, as a course's are), graded
serially, then on N workers, each pass with its own comments so that neither finds the other's builds.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("WORKBENCH_QUIET", "1")

from workbench.cluster import grading, plan, pool, sweep  # noqa: E402
from workbench.exercise import grade, get  # noqa: E402
from workbench.measure.bench_rows import baselines_of  # noqa: E402
from workbench.measure.benchmark import bench  # noqa: E402
from workbench.model import registry  # noqa: E402
from workbench.run import loader  # noqa: E402


def _sweep_args(op: str, args, device: str) -> dict:
    """One op's part of the full sweep: its variants and baselines, its directions."""
    spec = registry.spec(op)
    baselines = [b for b in baselines_of(spec) if not (args.no_compile and b == "compile")]
    directions = [d for d in args.directions if d == "fwd" or spec.differentiable]
    return dict(variants="all", dtypes=args.dtypes or (["float32", "bfloat16"] if device == "cuda" else ["float32"]),
                baselines=baselines, directions=directions)


def measure_sweep(args, device: str, workers: int) -> dict:
    ops = args.ops or registry.ops()
    for op in ops:  # every build first, untimed: the runs below time benchmarks, not compilers
        for v in registry.variants(op):
            if v.runs_on(device):
                loader.load(op, v.name)
    per_op = {op: _sweep_args(op, args, device) for op in ops}
    started = time.perf_counter()
    rows = sum(len(bench(op, budget_s=args.budget, device=device, **kw).rows) for op, kw in per_op.items())
    one_process = time.perf_counter() - started
    out = {"ops": ops, "rows": rows, "one_process_s": one_process}
    # The cluster takes the whole sweep as one plan: every op's groups share the workers.
    groups = [g for op, kw in per_op.items() for g in plan.plan(op, device=device, **kw)]
    out["groups"] = len(groups)
    for n in sorted({1, workers}):
        started = time.perf_counter()
        got = len(sweep.run(bench, groups, cluster=args.address, device=device, budget_s=args.budget,
                            max_workers=n).rows)
        out[f"ray_{n}_workers_s"] = time.perf_counter() - started
        if got != rows:
            raise SystemExit(f"the sweep on {n} workers gave {got} rows, the one-process run {rows}")
    out["ratio_vs_one_process"] = out[f"ray_{workers}_workers_s"] / one_process
    out["ratio_vs_ray_1_worker"] = out[f"ray_{workers}_workers_s"] / out["ray_1_workers_s"]
    return out


def _folder(root: pathlib.Path, salt: str, count: int) -> pathlib.Path:
    ex = get(2)
    folder = root / salt
    folder.mkdir()
    for i in range(count):
        source = ex.starter if i % 4 == 3 else ex.solution
        (folder / f"s{i:03d}.cu").write_text(source.read_text() + f"\n// submission {i} ({salt})\n")
    return folder


def measure_grading(args, workers: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        started = time.perf_counter()
        serial = grade.grade(2, _folder(root, "serial", args.submissions), seed=1)
        serial_s = time.perf_counter() - started
        started = time.perf_counter()
        spread = grading.spread(args.address, max_workers=workers)
        on_ray = grade.grade(2, _folder(root, "ray", args.submissions), seed=1, spread=spread)
        ray_s = time.perf_counter() - started
    same = [(r["submission"], r["status"]) for r in serial] == [(r["submission"], r["status"]) for r in on_ray]
    return {"submissions": args.submissions, "serial_s": serial_s, f"ray_{workers}_workers_s": ray_s,
            "ratio": ray_s / serial_s, "same_verdicts": same,
            "statuses": {s: sum(r["status"] == s for r in on_ray) for s in ("PASS", "FAIL", "TIMEOUT", "ERROR")}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", default="local")
    p.add_argument("--workers", type=int, help="N (default: every GPU of the cluster, or every CPU)")
    p.add_argument("--device", choices=["cuda", "cpu"])
    p.add_argument("--ops", nargs="+")
    p.add_argument("--dtypes", nargs="+")
    p.add_argument("--directions", nargs="+", default=["fwd", "bwd"])
    p.add_argument("--no-compile", action="store_true", help="leave out the torch.compile baseline")
    p.add_argument("--budget", type=float, default=1.0, help="seconds of sampling per row at most")
    p.add_argument("--submissions", type=int, default=64)
    p.add_argument("--skip-sweep", action="store_true")
    p.add_argument("--skip-grading", action="store_true")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    ray = pool.connect(args.address)
    resources = ray.cluster_resources()
    device = args.device or ("cuda" if resources.get("GPU", 0) else "cpu")
    slots = pool.slots(ray.nodes(), resources.get("CPU", 0), device)
    workers = min(args.workers or len(slots), len(slots))
    out = {"device": device, "workers": workers, "target_ratio": 1.25 / workers,
           "host_cpus": os.cpu_count(), "gpus": int(resources.get("GPU", 0))}
    if not args.skip_sweep:
        out["sweep"] = measure_sweep(args, device, workers)
    if not args.skip_grading:
        out["grading"] = measure_grading(args, workers)
    print(json.dumps(out, indent=1))
    for what in ("sweep", "grading"):
        if what in out:
            ratio = out[what]["ratio_vs_one_process" if what == "sweep" else "ratio"]
            verdict = "meets" if ratio <= out["target_ratio"] else "misses"
            print(f"{what}: {ratio:.3f} of the one-process time on {workers} {device} workers; "
                  f"target 1.25/{workers} = {out['target_ratio']:.3f}: {verdict}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
