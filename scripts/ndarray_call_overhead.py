"""The host cost of one call through the NumPy front end (issue 26, item 4): tiny arrays and CPU
variants, so the time is the call path's (argument parsing, the call contract's checks, the
output allocation, the empty-tensor guard, the run through the module) and not the kernel's.

Each row is the median over --repeats loops of --calls calls, in microseconds per call:
  vector_add      f(a, b)                 a new output each call
  vector_add_out  f(a, b, c)              the output given (written in place)
  bias_gelu       f(x, bias)              a broadcast dims pattern ([..., n] and [n])
  bias_gelu_bwd   f.backward(g, x, bias)  the backward step, two gradients
  scale_bias_relu f(x, bias, scale=2.0)   an attribute by name, checked against its bounds
  numpy_add       np.add(a, b)            NumPy's own call of the same sum, for scale
One JSON row per call kind goes to --out (with the commit and machine); a table is printed.

  python3 scripts/ndarray_call_overhead.py --out results/cpu/<commit>/ndarray_call.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from workbench.ship import ndarray as wbn  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def per_call_us(fn, calls: int, repeats: int) -> float:
    """Median over `repeats` loops of `calls` calls of fn, in microseconds per call."""
    for _ in range(max(calls // 10, 20)):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def calls(n: int) -> dict:
    """call kind -> (what it runs, a no-argument function making one call)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    c = np.empty_like(a)
    x, bias = rng.standard_normal((4, n // 4)).astype(np.float32), rng.standard_normal(n // 4).astype(np.float32)
    g = np.ones_like(x)
    add, gelu, sbr = (wbn.load(op, "cpu") for op in ("vector_add", "bias_gelu", "scale_bias_relu"))
    return {
        "vector_add": ("f(a, b)", lambda: add(a, b)),
        "vector_add_out": ("f(a, b, c)", lambda: add(a, b, c)),
        "bias_gelu": ("f(x, bias)", lambda: gelu(x, bias)),
        "bias_gelu_bwd": ("f.backward(g, x, bias)", lambda: gelu.backward(g, x, bias)),
        "scale_bias_relu": ("f(x, bias, scale=2.0)", lambda: sbr(x, bias, scale=2.0)),
        "numpy_add": ("np.add(a, b)", lambda: np.add(a, b)),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="JSON lines file to write (one row per call kind)")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--elements", type=int, default=64, help="elements per array (tiny: the host's time)")
    args = p.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "bindings", "workbench/ship"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip())
    machine = f"{platform.node()} ({os.cpu_count()} cores)"
    rows = []
    for kind, (what, fn) in calls(args.elements).items():
        us = per_call_us(fn, args.calls, args.repeats)
        rows.append({"kind": kind, "call": what, "us_per_call": round(us, 2), "elements": args.elements,
                     "calls": args.calls, "repeats": args.repeats, "commit": commit,
                     "front_end_edited": dirty, "machine": machine})
    print(f"NumPy front end, CPU variants, {args.elements} elements, median of {args.repeats} loops of "
          f"{args.calls} calls, commit {commit}{' + edits' if dirty else ''}, {machine}")
    print(f"{'kind':<16} {'call':<24} {'us/call':>8}")
    for r in rows:
        print(f"{r['kind']:<16} {r['call']:<24} {r['us_per_call']:>8.2f}")
    if args.out:
        out = pathlib.Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
