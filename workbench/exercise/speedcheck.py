"""The speed check: the student's variant and the exercise's reference timed side by side at the
exercise's shape on the judge's clock (workbench/judge/clock.py: each in a runner, every counted
call's output verified by the judge). A side whose output was wrong, or a time the device cannot
reach, fails it whatever the ratio."""
from __future__ import annotations

import math
import time

from .. import config
from ..judge import clock
from ..measure import bench_rows, conditions
from ..model import registry
from .submission import Submission, shown
from .registration import Exercise
from .report import Check


def speed(ex: Exercise, sub: Submission, reference) -> Check:
    """`reference`: the reference variant's judge.remote.Remote."""
    import torch

    s, spec = ex.speed, registry.spec(ex.op)
    shape = "x".join(map(str, s.shape))
    mine = sub.kernel(sub.built.dtypes).module
    limits = bench_rows.Limits(torch.device("cuda", torch.cuda.current_device()), config.cache_dir(), list(s.dtypes))
    lines, worst, problems, overheads = [], None, [], []
    reading = conditions.read(torch.cuda.current_device()) if not conditions.unavailable() else {}
    for d in s.directions:
        for t in s.dtypes:
            try:
                race = clock.race(ex.op, {ex.reference: reference, "yours": mine}, d, t, s.shape)
            except Exception as e:  # noqa: BLE001 - a kernel that fails under timing fails this check, named
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                return Check("speed", "FAIL", f"stopped with an error at {d} {t} {shape}: {first}", str(e).splitlines())
            yours, ref = race.sides["yours"], race.sides[ex.reference]
            overheads.append(race)
            for who, side in (("yours", yours), (ex.reference, ref)):
                if side.wrong:
                    problems.append(f"{who}, {d} {t} {shape}: the timed output is wrong: {side.wrong}")
                row = {"dtype": t, "bytes": spec.bytes(s.shape, t, d), "flops": spec.flop_count(s.shape, d)}
                ms = side.median_ms
                row["GBps"] = row["bytes"] / (ms * 1e-3) / 1e9 if ms > 0 else math.nan
                row["TFLOPs"] = row["flops"] / (ms * 1e-3) / 1e12 if ms > 0 else math.nan
                impossible = limits.judge(row)
                if impossible:
                    problems.append(f"{who}, {d} {t} {shape}: impossible: {impossible}")
            ratio = ref.median_ms / yours.median_ms
            lines.append(f"{d:7s} {t:9s} {ratio:5.2f}x {ex.reference}  (yours {yours.median_ms:.4f} ms, {ex.reference} "
                         f"{ref.median_ms:.4f} ms a call)  {'ok' if ratio >= s.target else 'BELOW TARGET'}")
            if worst is None or ratio < worst[0]:
                worst = (ratio, d, t)
    first = overheads[0]
    lines.append(f"target: >= {s.target:.2f}x the throughput of {ex.reference} in every row, both timed in this run "
                 f"at {shape} {first.describe()}")
    lines += [f"note: {n}" for race in overheads for n in race.notes]
    if reading:
        lines.append(f"conditions: {', '.join(f'{k} {v}' for k, v in reading.items() if not isinstance(v, (dict, list)))[:200]}")
    ratio, d, t = worst
    measured = {"ratio": round(ratio, 4), "gpu": torch.cuda.get_device_name(),
                "clocks": ", ".join(f"{k} {v}" for k, v in reading.items() if "mhz" in k.lower())[:120],
                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if ratio < s.target:
        from ..explain.profiling import command  # why: the GPU's counters for the slowest row, yours beside the reference's

        why = command(ex.op, [sub.built.name, ex.reference], s.shape, t, d if d in ("fwd", "bwd") else "bwd",
                      source=shown(sub.built.source))
        lines.append(f"why it is slower, from the GPU's counters (Nsight Compute), yours beside {ex.reference}: {why}")
    if problems:
        return Check("speed", "FAIL", problems[0], [*problems, "the timings, which do not count:", *lines],
                     measured=measured)
    if ratio < s.target:
        return Check("speed", "FAIL", f"{ratio:.2f}x {ex.reference} on {d} {t} {shape}, target {s.target:.2f}x", lines,
                     measured=measured)
    return Check("speed", "ok", f"at least {ratio:.2f}x {ex.reference} at {shape} (target {s.target:.2f}x)", lines,
                 show=True, measured=measured)
