"""Where a check's time goes: cProfile of correctness.check on a CUDA variant, over the sizes an
exercise check draws (seed 2), after one warm-up run. Usage: profile_check.py OP VARIANT [DTYPE...]"""
from __future__ import annotations

import cProfile
import pathlib
import pstats
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import workbench as wb  # noqa: E402
from workbench.exercise.sizes import random_sizes  # noqa: E402

op, variant, *dtypes = sys.argv[1:]
k = wb.load(op, variant)
sizes = random_sizes(2, k.spec)
kw = dict(shapes=sizes, dtypes=dtypes or None, layouts=("contiguous", "strided", "offset"), seed=2)
for run in ("first", "warm"):  # the first run profiled: it pays every first use
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    r = wb.check(op, k, **kw)
    prof.disable()
    print(f"{run}: {len(r.cases)} cases in {time.perf_counter() - t:.2f} s, ok={r.ok}")
    if run == "first":
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)
