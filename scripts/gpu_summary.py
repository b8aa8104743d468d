"""The short table printed last by scripts/gpu_run.sh: build timings against their targets, the
GPU test tally, and the headline benchmark rows (largest shape) against the copy ceiling."""
from __future__ import annotations

import json
import pathlib
import re
import sys


_COUNTS = ("passed", "failed", "errors", "skipped", "deselected")


def chunk_counts(text: str) -> dict | None:
    """pytest's closing tally of one log ({"passed": 130, ...}, "seconds"), or None where the run
    ended without one (killed at the call's limit)."""
    tail = [l for l in text.splitlines() if re.search(r"\d+ (passed|failed|errors?)\b.* in [\d.]+s", l)]
    if not tail:
        return None
    found = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected)", tail[-1])}
    counts = {k: found.get(k, 0) + (found.get("error", 0) if k == "errors" else 0) for k in _COUNTS}
    counts["seconds"] = float(re.search(r" in ([\d.]+)s", tail[-1]).group(1))
    return counts


def chunks(*dirs: pathlib.Path) -> None:
    """The GPU test chunks found in the output folders (gpu_tests_chunk<K>of<N>.log; an older
    single gpu_tests.log counts as 1 of 1), one line each, then their sum and which are missing."""
    logs = {}
    for d in dirs:
        for log in sorted(d.glob("gpu_tests_chunk*of*.log")) + sorted(d.glob("gpu_tests.log")):
            m = re.search(r"chunk(\d+)of(\d+)", log.name)
            logs[(int(m.group(1)), int(m.group(2))) if m else (1, 1)] = log
    if not logs:
        return
    total = dict.fromkeys(_COUNTS, 0)
    total["seconds"] = 0.0
    for (k, n), log in sorted(logs.items()):
        c = chunk_counts(log.read_text(errors="replace"))
        if c is None:
            print(f"gpu tests chunk {k}/{n}: NO TALLY (cut off?) in {log}")
            continue
        print(f"gpu tests chunk {k}/{n}: " + ", ".join(f"{c[x]} {x}" for x in _COUNTS if c[x]) + f" in {c['seconds']:.0f} s")
        for x in total:
            total[x] += c[x]
    sizes = {n for _, n in logs}
    missing = [f"{k}/{n}" for n in sizes for k in range(1, n + 1) if (k, n) not in logs]
    print("gpu tests, all chunks: " + ", ".join(f"{total[x]} {x}" for x in _COUNTS[:4] if total[x] or x == "failed")
          + f" in {total['seconds']:.0f} s" + (f"; MISSING chunks {', '.join(missing)}" if missing else ""))


def main(out: pathlib.Path, *more: pathlib.Path) -> None:
    t = out / "build_timings.json"
    if t.exists():
        try:
            d = json.loads(t.read_text()[t.read_text().index("{"):])
            edits = ", ".join(f"{k} {v:.2f}" for k, v in d["edit_rebuild_same_process_s"].items())
            print(f"build: cold {d['cold_harness_plus_variant_s']:.2f} s (<= 10), edit rebuild [{edits}] s "
                  f"(<= 1.5), warm {d['warm_load_beyond_import_torch_s']:.3f} s (<= 0.3) beyond import torch "
                  f"{d['import_torch_s']:.2f} s")
        except (ValueError, KeyError) as e:
            print(f"build timings unreadable: {e}")
    chunks(out, *more)
    exercises = out / "exercises.log"
    if exercises.exists():  # "### exercise check NAME FILE", the report, its verdict line, "### exit N"
        header = verdict = None
        for line in exercises.read_text().splitlines():
            if line.startswith("### exercise check "):
                header, verdict = line[len("### exercise check "):], None
            elif line.startswith(("PASS", "FAIL")):
                verdict = line
            elif line.startswith("### exit ") and header:
                print(f"exercise {header}: {verdict or 'no verdict (exit ' + line[9:] + ')'}")
    timing = out / "exercise_timing.log"
    if timing.exists():  # "### exercise timing NAME", the report with its "(N s: check times)" line, "### wall N s"
        name = checks = None
        for line in timing.read_text().splitlines():
            if line.startswith("### exercise timing "):
                name, checks = line[len("### exercise timing "):], None
            elif re.match(r"^\([\d.]+ s: ", line):
                checks = line.strip("()")
            elif line.startswith("### wall ") and name:
                print(f"exercise verdict {name}: wall {line[9:]} ({checks or 'no timings line'})")
    for nb in sorted(out.glob("*.ipynb")):
        try:
            run = json.loads(nb.read_text())["metadata"].get("workbench", {}).get("execution", {})
            print(f"notebook {nb.name}: {'ok' if run.get('ok') else 'FAILED'} ({run.get('path', '?')} path, "
                  f"{run.get('seconds', float('nan')):.0f} s)")
        except (ValueError, KeyError) as e:
            print(f"notebook {nb.name}: unreadable ({e})")
    bench = out / "bench.jsonl"
    if not bench.exists():
        return
    rows = [json.loads(l) for l in bench.read_text().splitlines() if l.strip()]
    if not rows:
        return
    repeat = out / "bench_repeat.jsonl"
    if repeat.exists():
        again = {(r["op"], r["variant"], r["dtype"], r["shape"], r["direction"]): r["median_ms"]
                 for r in map(json.loads, filter(str.strip, repeat.read_text().splitlines()))}
        diffs = []
        for r in rows:
            key = (r["op"], r["variant"], r["dtype"], r["shape"], r["direction"])
            if key in again and r["numel"] * (4 if r["dtype"] == "float32" else 2) >= 8 * 2**20:
                diffs.append((abs(again[key] / r["median_ms"] - 1), key))
        if diffs:
            worst = max(diffs)
            within = sum(d <= 0.03 for d, _ in diffs)
            print(f"repeat: {within}/{len(diffs)} rows of >= 8 MiB within 3%; median |diff| "
                  f"{sorted(d for d, _ in diffs)[len(diffs) // 2]:.2%}, worst {worst[0]:.2%} at {worst[1]}")
    _verdicts(rows)
    print(f"bench: {rows[0]['gpu']}, copy ceiling {rows[0]['ceiling_GBps']:.0f} GB/s; each op's largest size")
    print(f"{'op':16s} {'dir':4s} {'dtype':9s} {'provider':8s} {'ms':>8s} {'GB/s':>7s} {'%ceil':>6s} {'x eager':>8s} "
          f"{'x compile':>9s}")
    ladders = {}
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = [r for r in rows if r["op"] == op]
        ladder = _ladder(op)
        if ladder:  # the ladder table below instead: eight variants per row would drown this one
            ladders[op] = (ladder, mine)
            continue
        biggest = max(r["numel"] for r in mine)
        for r in mine:
            if r["numel"] == biggest:
                f = lambda v, s: format(v, s) if isinstance(v, (int, float)) else "-"  # noqa: E731
                print(f"{op:16s} {r['direction']:4s} {r['dtype']:9s} {r['variant']:8s} {f(r['median_ms'], '8.4f')} "
                      f"{f(r['GBps'], '7.0f')} {f(r['pct_of_ceiling'], '6.1f')} {f(r['speedup_vs_eager'], '8.2f')} "
                      f"{f(r['speedup_vs_compile'], '9.2f')}")

    for op, (ladder, mine) in ladders.items():
        _ladder_table(op, ladder, mine)
    _slower_than_compile(rows)


def _untrusted(r: dict) -> bool:
    return r.get("verified") == "wrong" or bool(r.get("impossible"))


def _verdicts(rows: list) -> None:
    """How the rows' outputs were checked, how many were wrong or impossible (each named), the SM
    clock range over the run, and the rows whose clocks moved or throttled."""
    tally: dict[str, int] = {}
    for r in rows:
        status = "wrong" if r.get("verified") == "wrong" else "impossible" if r.get("impossible") else \
            r.get("verified", "no check recorded")
        tally[status] = tally.get(status, 0) + 1
    print("bench rows: " + ", ".join(f"{n} {k}" for k, n in sorted(tally.items())))
    for r in rows:
        if _untrusted(r):
            why = r.get("verify_detail") if r.get("verified") == "wrong" else r.get("impossible_reason")
            print(f"  {'WRONG' if r.get('verified') == 'wrong' else 'IMPOSSIBLE'} {r['op']}/{r['variant']} "
                  f"{r['direction']} {r['dtype']} {r['shape']}: {why}")
    clocks = [r["clocks"] for r in rows if r.get("clocks")]
    if clocks:
        warned = [r for r in rows if r.get("clock_warning")]
        print(f"clocks: SM {min(c['sm_mhz_min'] for c in clocks)}-{max(c['sm_mhz_max'] for c in clocks)} MHz, "
              f"memory {min(c['mem_mhz_min'] for c in clocks)}-{max(c['mem_mhz_max'] for c in clocks)} MHz, "
              f"up to {max(c['temp_c_max'] for c in clocks)} C and {max(c['power_w_max'] for c in clocks):.0f} W over "
              f"{len(clocks)} rows; {len(warned)} rows with a clock warning"
              + "".join(f"\n  {r['op']}/{r['variant']} {r['dtype']} {r['shape']}: {r['clock_warning']}" for r in warned[:10]))
    elif rows:
        print("clocks: not recorded in these rows")


def _ladder(op: str) -> tuple:
    try:
        from workbench.model import registry
        return tuple(registry.spec(op).ladder)
    except (ImportError, ValueError):
        return ()


def _ladder_table(op: str, ladder: tuple, rows: list) -> None:
    """Per shape and dtype (forward): the ladder's first rung beside its fastest, each as a share of
    eager's rate (x eager: cuBLAS's for matmul, torch.sum's for reduce_sum), the speedup between
    them, the baselines, and the fastest rung's rate: TFLOP/s and % of the matmul ceiling for a
    compute-bound op, GB/s and % of the copy ceiling otherwise; and whether each rung beats the one before."""
    print(f"{op} ladder (fwd): {' > '.join(ladder)}")
    print(f"{'dtype':9s} {'shape':>16s} {'first':>12s} {'ms':>10s} {'x eager':>7s} {'fastest':>12s} {'ms':>9s} "
          f"{'x eager':>7s} {'speedup':>8s} {'eager ms':>9s} {'compile':>9s} {'rate':>12s} {'%ceil':>6s} each faster")
    fwd = [r for r in rows if r["direction"] == "fwd"]
    for dtype in dict.fromkeys(r["dtype"] for r in fwd):
        for shape in dict.fromkeys(r["shape"] for r in fwd if r["dtype"] == dtype):
            at = {r["variant"]: r for r in fwd if r["dtype"] == dtype and r["shape"] == shape}
            rungs = [at[v] for v in ladder if v in at and not _untrusted(at[v])]
            if not rungs:
                continue
            first, best = rungs[0], min(rungs, key=lambda r: r["median_ms"])
            eager, comp = at.get("eager"), at.get("compile")
            share = lambda r: eager["median_ms"] / r["median_ms"] if eager else float("nan")  # noqa: E731
            if "pct_of_matmul_ceiling" in best:
                rate, ceil = f"{best['TFLOPs']:.1f} TFLOP/s", best["pct_of_matmul_ceiling"]
            else:
                rate, ceil = f"{best['GBps']:.0f} GB/s", best["pct_of_ceiling"]
            # whether every rung beats the one before it (the ladder's promise)
            rising = all(b["median_ms"] < a["median_ms"] for a, b in zip(rungs, rungs[1:]))
            print(f"{dtype:9s} {shape:>16s} {first['variant'][:12]:>12s} {first['median_ms']:10.4f} {share(first):7.2f} "
                  f"{best['variant'][:12]:>12s} {best['median_ms']:9.4f} {share(best):7.2f} "
                  f"{first['median_ms'] / best['median_ms']:7.1f}x {eager['median_ms'] if eager else float('nan'):9.4f} "
                  f"{comp['median_ms'] if comp else float('nan'):9.4f} {rate:>12s} {ceil:6.1f} "
                  f"{('yes' if rising else 'NO') if len(rungs) > 1 else '-'}")


def _slower_than_compile(rows: list) -> None:
    """Rows where an op's preferred (fast) variant trails torch.compile by more than 3%."""
    try:
        from workbench.model import registry
    except ImportError:
        return
    slow = []
    for r in rows:
        try:
            preferred = registry.spec(r["op"]).preferred.get(("cuda", r["dtype"]), [])
        except ValueError:
            continue
        if preferred and r["variant"] == preferred[0] and r.get("speedup_vs_compile", 1.0) < 0.97:
            slow.append(f"{r['op']}/{r['variant']} {r['direction']} {r['dtype']} {r['shape']} "
                        f"{r['speedup_vs_compile']:.2f}x")
    print(f"fast variants below 0.97x torch.compile: {len(slow)}" + "".join(f"\n  {s}" for s in slow))


if __name__ == "__main__":
    main(*(pathlib.Path(a) for a in sys.argv[1:]))
