"""The judge against its planted cheats and the exercises' own files, each graded as `exercise
grade` grades a submission (a judge process of its own, the verdict on its pipe): the verdict, the
class of failure and the wall time of each, as a table, with the rows as JSONL under --out.

    python scripts/judge_cases.py [--out DIR] [--only SUBSTRING ...] [--part K/N] [--seed N]

--part K/N keeps every N-th case from the K-th (1-based), so N GPUs can grade the cases at once.

Without a GPU the GPU checks are skipped (the verdicts then say so) and the expected classes that
need one are not held to.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from workbench.build import toolchain  # noqa: E402
from workbench.exercise import exercises, grade  # noqa: E402
from workbench.measure import bench_rows  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
# (exercise, file, the class of failure expected on a GPU: "" for PASS), the planted cheats first.
PLANTED = [
    (2, "tests/faulty/ex02_patch_timing.cu", "speed-target"),
    (2, "tests/faulty/ex02_forge_reports.cu", "correctness"),
    (2, "tests/faulty/ex02_forge_verdict.cu", "load"),
    (2, "tests/faulty/ex02_partial_unverified.cu", "speed-wrong"),
    (2, "tests/faulty/ex02_dead_vec4.cu", "rules"),
    (2, "tests/faulty/ex02_swap_library.cu", "rules"),
    (4, "tests/faulty/ex04_rolled_barriers.cu", "rules"),
]


def cases() -> list[tuple[int, str, str]]:
    out = list(PLANTED)
    for ex in exercises():
        out.append((ex.number, str(ex.solution.relative_to(ROOT)), ""))
        fails = {"declared dtypes": "dtypes", "SASS rules": "rules", "global loads": "global-loads",
                 "speed": "speed-target"}.get(ex.starter_fails_at, ex.starter_fails_at)
        out.append((ex.number, str(ex.starter.relative_to(ROOT)), fails))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=pathlib.Path, default=None)
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--part", default="1/1", help="K/N: every N-th case from the K-th (1-based)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    try:
        part, parts = (int(x) for x in a.part.split("/"))
        assert 1 <= part <= parts
    except (ValueError, AssertionError):
        p.error(f"--part: expected K/N with 1 <= K <= N, got {a.part!r}")
    gpu = toolchain.gpu_available()
    rows, misses = [], 0
    for i, (number, path, expected) in enumerate(cases()):
        if i % parts != part - 1 or a.only and not any(s in path for s in a.only):
            continue
        started = time.perf_counter()
        row = grade.grade_one(number, ROOT / path, seed=a.seed, timeout_s=600)
        row.update(exercise=number, file=path, expected=expected or "PASS", wall_s=round(time.perf_counter() - started, 1))
        got = row.get("failure_class") or row["status"]
        row["as_expected"] = got == (expected or "PASS") if gpu else None
        misses += row["as_expected"] is False
        rows.append(row)
        print(f"[judge] ex{number:02d} {path}: {row['status']} [{got}] in {row['wall_s']} s: {row['verdict'][:160]}",
              flush=True)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        prov = bench_rows.provenance()
        with open(a.out / "judge_cases.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps({**prov, **r}) + "\n")
    print(f"\n{'exercise':8s} {'file':45s} {'expected':16s} {'verdict':16s} {'s':>6s}")
    for r in rows:
        got = r.get("failure_class") or r["status"]
        mark = "" if r["as_expected"] is None else ("  ok" if r["as_expected"] else "  MISSED")
        print(f"ex{r['exercise']:02d}     {r['file'][-45:]:45s} {r['expected']:16s} {got:16s} {r['wall_s']:6.1f}{mark}")
    print(f"{len(rows)} cases; {'on a GPU' if gpu else 'no GPU: the GPU checks were skipped'}; "
          f"{misses} not as expected")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
