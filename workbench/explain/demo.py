"""`python -m workbench demo`: the newcomer's first run, every op (or one) built, checked,
gradchecked, timed against its baselines and plotted; on a machine without a GPU, the CPU path at
small sizes, and it says so."""
from __future__ import annotations

import pathlib

from ..build import toolchain
from .plot import BenchResult
from ..measure.benchmark import bench
from ..measure.correctness import check
from ..measure.gradients import gradcheck
from ..model import registry
from ..run import loader


def main(only: str | None, out: str, budget: float, variants_for) -> int:
    """For each op (or the one named): build every variant this machine can run (variants_for: the
    command line's choice), check and gradcheck each, time them against the op's baselines, print
    the table and draw the plots. Exit status 0 when every check passed."""
    gpu = toolchain.gpu_available()
    print(f"Kernel Workbench demo on {'the GPU' if gpu else 'the CPU (no GPU visible: CPU path, small sizes)'}")
    ok, everything = True, BenchResult()
    for op in [only] if only else registry.ops():
        spec = registry.spec(op)
        print(f"\n== {op}: {spec.doc}")
        names = variants_for(op, [], runnable_only=True)
        for name in names:
            k = loader.load(op, name)
            print(f"\n{op}/{name}: {'built' if k.built else 'loaded from cache'} in {k.seconds:.2f} s - {k.description}")
            for report in (check(op, k), gradcheck(op, k)):
                print("  " + report.summary().replace("\n", "\n  "))
                ok &= report.ok
        # On the CPU: the op's two smallest CPU bench sizes, so the demo stays quick there.
        shapes = None if gpu else spec.bench_sizes["cpu"][:2]
        directions = ["fwd", "bwd"] if spec.differentiable else ["fwd"]
        result = bench(op, variants=names, dtypes=["float32", "bfloat16"] if gpu else ["float32"], shapes=shapes,
                       directions=directions, budget_s=budget)
        print()
        print(result.table())
        everything.rows += result.rows
        everything.notes += result.notes
    folder = pathlib.Path(out)
    everything.save(folder / "bench.jsonl")
    for p in everything.plot(folder / "plots"):
        print(f"plot: {p}")
    print(f"\nrows saved to {folder / 'bench.jsonl'}; " + ("all checks passed" if ok else "SOME CHECKS FAILED"))
    return 0 if ok else 1
