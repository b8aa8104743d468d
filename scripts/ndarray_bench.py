"""vector_add through the NumPy front end on a GPU, torch never imported (issue 14's target: the
kernel at >= 90% of the copy bandwidth counting three arrays, staging reported apart).

For each variant: a few plain calls f(a, b, c) (each stages a and b in, launches once, stages c
out: their CUDA-event times give the H2D and D2H medians), then f.time(...) (staged once, the
kernel launched warmup + repeat times: the median kernel time). GB/s counts a and b read and c
written (3 * 4 * n bytes); the copy rate is a device-to-device cudaMemcpy (read + written bytes).
Usage: python scripts/ndarray_bench.py --out results.json [--log2n 26] [--variants scalar vec4]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from workbench.ship import ndarray as wbn  # noqa: E402

OP = "vector_add"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--log2n", type=int, default=26)
    p.add_argument("--variants", nargs="+", default=["scalar", "vec4"])
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--staging-calls", type=int, default=5)
    args = p.parse_args()
    count, why = wbn.extension().device_count()
    if count == 0:
        print(f"no CUDA device visible to the NumPy front end: {why}")
        return 2
    device = wbn.devices()[0]
    n = 1 << args.log2n
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    want = a + b
    copy = wbn.copy_bandwidth_gbps()
    rows = []
    for name in args.variants:
        start = time.perf_counter()
        f = wbn.load(OP, name)
        load_s = time.perf_counter() - start
        c = np.empty_like(a)
        staged = []
        for _ in range(args.staging_calls):
            c.fill(np.nan)
            f(a, b, c)
            staged.append(f.last_timing)
        correct = bool(np.array_equal(c, want))
        t = f.time(a, b, c, repeat=args.repeat, warmup=args.warmup)
        h2d = statistics.median(s.h2d_ms for s in staged)
        d2h = statistics.median(s.d2h_ms for s in staged)
        gbps = 3 * 4 * n / t.kernel_ms / 1e6
        rows.append({
            "variant": name, "n": n, "dtype": "float32", "correct": correct,
            "kernel_ms_median": t.kernel_ms, "kernel_ms_min": min(t.kernel_ms_all),
            "kernel_ms_p80": sorted(t.kernel_ms_all)[int(0.8 * (len(t.kernel_ms_all) - 1))],
            "GBps": gbps, "pct_of_copy": 100 * gbps / copy,
            "h2d_ms_median": h2d, "h2d_bytes": staged[0].h2d_bytes, "h2d_GBps": staged[0].h2d_bytes / h2d / 1e6,
            "d2h_ms_median": d2h, "d2h_bytes": staged[0].d2h_bytes, "d2h_GBps": staged[0].d2h_bytes / d2h / 1e6,
            "alloc_ms_median": statistics.median(s.alloc_ms for s in staged),
            "call_wall_ms_median": statistics.median(s.wall_ms for s in staged),
            "built": f.built, "load_s": load_s, "repeat": args.repeat, "warmup": args.warmup,
        })
    report = {"op": OP, "front_end": "workbench.ship.ndarray (pybind11 + NumPy, no torch)", "device": device,
              "copy_GBps": copy, "arch_list": wbn.arch_list(), "rows": rows,
              "torch_imported": "torch" in sys.modules}
    pathlib.Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"{OP} 2^{args.log2n} float32 on {device['name']} through the NumPy front end "
          f"(copy {copy:.0f} GB/s, device-to-device cudaMemcpy; torch imported: {report['torch_imported']})")
    print(f"{'variant':8} {'kernel ms':>10} {'GB/s':>7} {'%copy':>6} {'h2d ms':>8} {'h2d GB/s':>9} "
          f"{'d2h ms':>8} {'d2h GB/s':>9} {'correct':>8}")
    for r in rows:
        print(f"{r['variant']:8} {r['kernel_ms_median']:10.4f} {r['GBps']:7.0f} {r['pct_of_copy']:6.1f} "
              f"{r['h2d_ms_median']:8.2f} {r['h2d_GBps']:9.1f} {r['d2h_ms_median']:8.2f} {r['d2h_GBps']:9.1f} "
              f"{str(r['correct']):>8}")
    return 0 if all(r["correct"] for r in rows) and not report["torch_imported"] else 1


if __name__ == "__main__":
    sys.exit(main())
