"""The speed check: the student's variant timed beside the exercise's reference in one benchmark
run at the exercise's shape, in the checker's child. Rows whose output is wrong, that the device
cannot reach, or (on a GPU) whose timed output was not verified fail it, whatever the ratio."""
from __future__ import annotations

import math

from . import child
from .checks import shown
from .registration import Exercise
from .report import Check


def _conditions(clocks) -> str:
    """A row's sampled clocks etc. (benchmark's `clocks` dict), compactly."""
    if not isinstance(clocks, dict) or not clocks:
        return ""
    return ", ".join(f"{k} {v}" for k, v in clocks.items() if not isinstance(v, (dict, list)))[:200]


def row_problems(rows, kernel_name: str, shape: str, on_gpu: bool) -> tuple[list[str], list[str]]:
    """(problems, notes) of the speed check's benchmark rows, the student's and the reference's:
    a timed output that is wrong, a result the device cannot reach, or (on a GPU) a timed output
    that was not verified are problems, whatever the ratio; a clock warning is a note. A row
    without the fields counts as not verified."""
    problems, notes = [], []
    for r in rows:
        who = "yours" if r.get("variant") == kernel_name else r.get("variant", "?")
        label = f"{who}, {r.get('direction', '?')} {r.get('dtype', '?')} {r.get('shape') or shape}"
        verified = r.get("verified") or "not checked"
        detail = (r.get("verify_detail") or "").strip()
        if verified == "wrong":
            problems.append(f"{label}: the timed output is wrong: {detail or 'no detail given'}")
        elif verified != "ok" and on_gpu:
            problems.append(f"{label}: the timed output could not be verified ({detail or verified})")
        if r.get("impossible"):
            problems.append(f"{label}: impossible: {(r.get('impossible_reason') or '').strip() or 'above what the device can do'}")
        if r.get("clock_warning"):
            notes.append(f"{label}: clocks: {str(r['clock_warning']).strip()} (a note, not a failure)")
        elif _conditions(r.get("clocks")):
            notes.append(f"{label}: conditions: {_conditions(r.get('clocks'))}")
    return problems, notes


def speed(ex: Exercise, kernel, worker=None) -> Check:
    s = ex.speed
    shape = "x".join(map(str, s.shape))
    try:
        result = child.in_child("bench", ex, kernel, worker=worker, variants=[kernel.name, ex.reference],
                          dtypes=list(s.dtypes), shapes=[list(s.shape)], baselines=[],
                          directions=list(s.directions), budget_s=0.5)
    except Exception as e:  # noqa: BLE001 - a kernel that fails under timing is a failed check, not a crash
        return Check("speed", "FAIL", f"stopped with an error at {shape}: "
                     f"{str(e).splitlines()[0] if str(e) else type(e).__name__}", str(e).splitlines())
    median = {(r["direction"], r["dtype"], r["variant"]): r["median_ms"] for r in result.rows}
    # Judged first: a row whose output is wrong is not timed at all (NaN), and none counts then.
    problems, notes = row_problems([r for r in result.rows if r.get("variant") in (kernel.name, ex.reference)],
                                   kernel.name, shape, kernel.device == "cuda")
    lines, worst = [], None
    for d in s.directions:
        for t in s.dtypes:
            mine, ref = median.get((d, t, kernel.name)), median.get((d, t, ex.reference))
            if mine is None or ref is None or math.isnan(mine) or math.isnan(ref):
                if problems:
                    ms = lambda v: "not timed" if v is None or math.isnan(v) else f"{v:.4f} ms"  # noqa: E731
                    lines.append(f"{d:7s} {t:9s} no ratio (yours {ms(mine)}, {ex.reference} {ms(ref)})")
                    continue
                return Check("speed", "FAIL", f"no timing for {d} {t} at {shape}",
                             [f"benchmark notes: {n}" for n in result.notes])
            ratio = ref / mine
            lines.append(f"{d:7s} {t:9s} {ratio:5.2f}x {ex.reference}  (yours {mine:.4f} ms, {ex.reference} {ref:.4f} ms)"
                         f"  {'ok' if ratio >= s.target else 'BELOW TARGET'}")
            if worst is None or ratio < worst[0]:
                worst = (ratio, d, t)
    lines.append(f"target: >= {s.target:.2f}x the throughput of {ex.reference} in every row, both timed in this run "
                 f"at {shape} (medians of CUDA-event timings)")
    lines += notes
    if worst is not None and worst[0] < s.target:
        from ..explain.profiling import command  # why: the GPU's counters for the slowest row, yours beside the reference's

        ratio, d, t = worst
        why = command(ex.op, [kernel.name, ex.reference], s.shape, t, d if d in ("fwd", "bwd") else "bwd",
                      source=shown(kernel.source))
        lines.append(f"why it is slower, from the GPU's counters (Nsight Compute), yours beside {ex.reference}: {why}")
    if problems:
        # Whatever the ratio: a timing of a wrong (or unchecked) output, or one the device cannot
        # reach, measures nothing.
        return Check("speed", "FAIL", problems[0], [*problems, "the timings, which do not count:", *lines])
    ratio, d, t = worst
    if ratio < s.target:
        return Check("speed", "FAIL", f"{ratio:.2f}x {ex.reference} on {d} {t} {shape}, target {s.target:.2f}x", lines)
    return Check("speed", "ok", f"at least {ratio:.2f}x {ex.reference} at {shape} (target {s.target:.2f}x)", lines,
                 show=True)
