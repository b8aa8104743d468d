"""Grading a folder of submissions: every file's verdict from the same checks as `exercise check`
(build, load in a child, dtypes, SASS, then on a GPU correctness, gradcheck, speed), as a CSV and a
printed summary.

Each submission is checked in a process of its own (python -m workbench.exercise.grade), under a
time limit: one that crashes or hangs the checker itself, or a build that never ends, costs its own
slot (TIMEOUT or ERROR) and the others are graded. The submission travels as a job (its name and
text, written into a folder of its own where it is graded), so the serial grader here and the
cluster's workers (workbench/cluster/grading.py) grade the same thing the same way.

    python -m workbench exercise grade EX SUBMISSIONS_DIR [--ray ADDRESS] [--out CSV]
"""
from __future__ import annotations

import csv
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time

from ..config import child_env
from .registration import get
from .sizes import new_seed

SUFFIXES = (".cu", ".cpp")
TIMEOUT_S = 1800.0   # one submission, every check included (the checks' own child limits are 600 s each)
COLUMNS = ("submission", "status", "verdict", "first_failure", "failure_class", "detail", "checks", "seconds",
           "seed", "worker")
# Besides the columns, what a verdict may carry for a leaderboard: the speed check's worst ratio, the
# GPU and its clocks, and when the speed was measured.
EXTRA_FIELDS = ("ratio", "gpu", "clocks", "measured_at", "timings")


def submissions(folder) -> list[pathlib.Path]:
    """The submission files in `folder` (.cu, .cpp), by name."""
    d = pathlib.Path(folder).expanduser()
    if not d.is_dir():
        raise ValueError(f"submissions: {str(folder)!r} is not a folder")
    found = sorted(p for p in d.iterdir() if p.is_file() and p.suffix in SUFFIXES)
    if not found:
        raise ValueError(f"submissions: no {' or '.join(SUFFIXES)} files in {str(folder)!r}")
    return found


def jobs(exercise, folder, *, seed: int | None = None, speed: bool = True, timeout_s: float = TIMEOUT_S) -> list[dict]:
    """One job per submission, all with the same seed (drawn once here where none is given), so every
    submission is checked on the same shapes and inputs wherever it is graded."""
    if not timeout_s or timeout_s <= 0:
        raise ValueError(f"timeout_s must be a positive number of seconds; got {timeout_s!r}")
    ex = get(exercise)
    seed = new_seed() if seed is None else int(seed)
    return [dict(exercise=ex.number, name=p.name, text=p.read_text(errors="replace"), seed=seed, speed=speed,
                 timeout_s=float(timeout_s)) for p in submissions(folder)]


def grade_job(job: dict) -> dict:
    """A job's CSV row: its source written under its own name in a fresh folder, then checked there
    (grade_one)."""
    with tempfile.TemporaryDirectory(prefix="wb-grade-") as tmp:
        path = pathlib.Path(tmp) / job["name"]
        path.write_text(job["text"])
        return grade_one(job["exercise"], path, seed=job["seed"], speed=job["speed"], timeout_s=job["timeout_s"])


def grade_one(exercise, path, *, seed: int, speed: bool = True, timeout_s: float = TIMEOUT_S,
              on_line=None) -> dict:
    """`exercise check` of one file in a child process (the checker), killed with everything it
    started past timeout_s. Never raises for what the submission does: PASS, FAIL, TIMEOUT or ERROR.
    The verdict comes over a pipe of its own that only the checker holds (the student's code runs
    in the checker's sandbox, which inherits no descriptor of it); what the checker prints is only
    shown (on_line(line) for each line, as it comes), never read for a verdict. A checker that
    ends without writing its verdict, killed or not, is an ERROR."""
    path = pathlib.Path(path)
    row = dict(submission=path.name, status="ERROR", verdict="", first_failure="", failure_class="", detail="",
               checks="", seconds=0.0, seed=seed, worker="")
    read_fd, write_fd = os.pipe()
    cmd = [sys.executable, "-m", "workbench.exercise.grade", str(exercise), str(path), "--seed", str(seed),
           "--verdict-fd", str(write_fd)] + ([] if speed else ["--no-speed"])
    started = time.perf_counter()
    # A session of its own: on a timeout the whole group goes (the checker's own children included).
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, errors="replace", env=child_env(), start_new_session=True,
                                pass_fds=(write_fd,))
    finally:
        os.close(write_fd)
    verdict: list[bytes] = []
    reader = threading.Thread(target=lambda: verdict.append(_read_all(read_fd)), daemon=True)
    reader.start()
    lines: list[str] = []
    timed_out: list[bool] = []
    timer = threading.Timer(timeout_s, lambda: (timed_out.append(True), _kill_group(proc)))
    timer.start()
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if on_line is not None:
                on_line(line.rstrip("\n"))
        proc.wait()
    finally:
        timer.cancel()
        _kill_group(proc)  # whatever the checker left running
        reader.join(10)
    row["seconds"] = time.perf_counter() - started
    if timed_out:
        return dict(row, status="TIMEOUT", verdict=f"TIMEOUT: not graded within {timeout_s:g} s",
                    failure_class="timeout", detail=f"the check did not finish within {timeout_s:g} s")
    try:
        result = json.loads(verdict[0].decode()) if verdict and verdict[0] else None
    except ValueError:
        result = None
    if not isinstance(result, dict) or proc.returncode != 0:
        tail = " | ".join(lines[-3:])
        how = f"status {proc.returncode}" if proc.returncode >= 0 else f"killed by signal {-proc.returncode}"
        return dict(row, verdict=f"ERROR: the checker ended ({how}) without a verdict", failure_class="checker",
                    detail=tail[-300:])
    return dict(row, **{k: v for k, v in result.items() if k in row or k in EXTRA_FIELDS})


def _read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as f:
        return f.read(1 << 20)


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _report_fields(report) -> dict:
    bad = report.first_failure
    measured = next((c.measured for c in report.checks if c.name == "speed" and c.measured), {})
    return dict(status="PASS" if report.ok else "FAIL", verdict=report.verdict(),
                first_failure=bad.name if bad else "", failure_class=report.failure_class,
                detail=bad.detail if bad else "",
                checks="; ".join(f"{c.name}={c.status}" for c in report.checks), timings=report.timings(), **measured)


def grade(exercise, folder, *, seed: int | None = None, speed: bool = True, timeout_s: float = TIMEOUT_S,
          spread=None) -> list[dict]:
    """Every submission's row, by name. spread(jobs) -> rows grades them elsewhere (a cluster's
    workers: workbench/cluster/grading.py); None grades them here, one after another."""
    from . import _sandboxed

    _sandboxed(required=True)
    todo = jobs(exercise, folder, seed=seed, speed=speed, timeout_s=timeout_s)
    rows = spread(todo) if spread is not None else [grade_job(j) for j in todo]
    return sorted(rows, key=lambda r: r["submission"])


def write_csv(rows: list[dict], path) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(dict(r, seconds=f"{r['seconds']:.1f}"))
    return path


def summary(rows: list[dict]) -> str:
    """One line per submission, then the counts."""
    width = max(len(r["submission"]) for r in rows)
    lines = [f"{r['submission']:{width}s}  {r['status']:7s}  "
             f"{('[' + r['failure_class'] + '] ') if r.get('failure_class') else ''}{r['verdict']}" for r in rows]
    counts = {s: sum(r["status"] == s for r in rows) for s in ("PASS", "FAIL", "TIMEOUT", "ERROR")}
    return "\n".join(lines + [f"{len(rows)} submissions: " + ", ".join(f"{n} {s}" for s, n in counts.items())])


def cli(args, spread=None) -> int:
    """exercise grade: the summary printed, the CSV written; exit 0 when every submission passed."""
    try:
        rows = grade(args.exercise, args.folder, seed=args.seed, speed=not args.no_speed,
                     timeout_s=TIMEOUT_S if args.timeout is None else args.timeout,
                     spread=spread)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary(rows))
    out = write_csv(rows, args.out or pathlib.Path(args.folder) / "grades.csv")
    print(f"verdicts: {out}")
    return 0 if all(r["status"] == "PASS" for r in rows) else 1


def _child(argv: list[str]) -> int:
    """The process one submission is checked in: its verdict, as JSON, on the pipe --verdict-fd."""
    import argparse

    from . import check_exercise

    p = argparse.ArgumentParser(prog="python -m workbench.exercise.grade")
    p.add_argument("exercise")
    p.add_argument("path")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--verdict-fd", type=int, required=True)
    a = p.parse_args(argv)
    channel = os.fdopen(a.verdict_fd, "w")
    os.set_inheritable(a.verdict_fd, False)  # nothing this process starts holds the verdict's pipe
    _die_with(os.getppid())
    try:
        fields = _report_fields(check_exercise(a.exercise, a.path, seed=a.seed, speed=not a.no_speed,
                                               require_sandbox=True, out=lambda line: print(line, flush=True)))
    except Exception as e:  # noqa: BLE001 - a submission the checker refuses (not a kernel file) is its verdict
        fields = dict(status="ERROR", verdict=f"ERROR: {type(e).__name__}: {e}", detail=str(e)[:300])
    channel.write(json.dumps(fields))
    channel.close()
    return 0


def _die_with(parent: int) -> None:
    """A checker whose grader is gone (killed) ends with everything it started: its verdict would
    reach no one, and its runners would hold the GPU the next judge measures on."""
    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
