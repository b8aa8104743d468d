"""The serve check on a GPU machine: `python -m workbench serve` started as a class starts it (a
roster, one judge per GPU), the exercises' solutions, starters and the planted cheats of
tests/faulty/ submitted by three students (solver, starter, cheater) over HTTP, every verdict
followed on its event stream, then each exercise's leaderboard checked: it must hold exactly the
solver's solution, timed (a ratio, the GPU, its clocks, when). Also measured: how long after its
judge finished each verdict page was complete (the target: within 1 s).

    python scripts/serve_check.py [--out DIR] [--exercises 1,2] [--timeout 600]

Writes under --out: serve_check.log (the table, printed last), serve_check.json (every submission
with its verdict, the leaderboards, the instructor's grades CSVs) and server.log. Exit 0 when every
leaderboard is right. Needs the serve extra (starlette, uvicorn, jinja2, markdown, python-multipart).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from workbench.exercise import exercises  # noqa: E402
from workbench.exercise.grade import COLUMNS  # noqa: E402


def planted(numbers: set[int]) -> list[tuple[int, pathlib.Path]]:
    """Each cheat of tests/faulty/ with the exercise it is for: exNN_ in its name, else the exercise its
    opening comment names, else the first exercise of the op whose header it includes."""
    out = []
    for path in sorted((REPO / "tests" / "faulty").glob("*.cu")):
        text = path.read_text()
        named = re.match(r"ex(\d\d)_", path.name) or re.search(r"exercise (\d+)", text[:600], re.I)
        op = re.search(r'#include "(\w+)\.h"', text)
        n = int(named.group(1)) if named else next((e.number for e in exercises() if op and e.op == op.group(1)), None)
        if n in numbers:
            out.append((n, path))
    return out


def call(base: str, path: str, token: str, data: dict | None = None):
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    req = urllib.request.Request(base + path, body, {"Authorization": f"Bearer {token}"})
    try:
        return urllib.request.build_opener(NoRedirect).open(req, timeout=60)
    except urllib.error.HTTPError as e:
        if e.code == 303:  # a submission's page: where it went
            return e
        raise SystemExit(f"{path}: HTTP {e.code}: {e.read().decode()[:300]}") from None


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args):
        return None


def follow(base: str, token: str, sub: dict) -> None:
    """Read the submission's event stream to its end (again where it broke); note when the verdict came."""
    while "done_at" not in sub:
        try:
            with call(base, f"/submissions/{sub['id']}/events", token) as stream:
                for raw in stream:
                    if raw.startswith(b"event: done"):
                        sub["done_at"] = time.time()
                        return
        except OSError:
            time.sleep(1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT", "artifacts/serve"))
    p.add_argument("--exercises", help="comma-separated numbers (default: every exercise)")
    p.add_argument("--timeout", type=float, default=180.0, help="the judge's limit for one submission, in seconds")
    p.add_argument("--deadline", type=float, default=540.0, help="seconds to wait for every verdict; then the table "
                                                                 "says which did not come")
    a = p.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    numbers = {int(n) for n in a.exercises.split(",")} if a.exercises else {e.number for e in exercises()}
    todo = ([("solver", e.number, e.solution) for e in exercises() if e.number in numbers]
            + [("starter", e.number, e.starter) for e in exercises() if e.number in numbers]
            + [("cheater", n, path) for n, path in planted(numbers)])
    work = pathlib.Path(tempfile.mkdtemp(prefix="serve-check-"))  # the class's database, roster and tokens
    (work / "roster.csv").write_text("name\nsolver\nstarter\ncheater\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    log = open(out / "server.log", "w")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.setdefault("WORKBENCH_LOAD_TIMEOUT_S", "30")  # the planted hang costs this, not the default
    server = subprocess.Popen([sys.executable, "-m", "workbench", "serve", "--db", str(work / "serve.sqlite3"),
                               "--port", str(port), "--roster", str(work / "roster.csv"), "--per-minute", "1000",
                               "--judge-timeout", str(a.timeout)], cwd=REPO, env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    started = time.time()
    try:
        while True:
            try:
                urllib.request.urlopen(base + "/login", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.time() - started > 120:
                    print((out / "server.log").read_text())
                    return 2
                time.sleep(0.5)
        tokens = dict(line.split(",") for line in (work / "roster-tokens.csv").read_text().split())
        boss = re.search(r"instructor's token .*: (\S+)", (out / "server.log").read_text()).group(1)
        subs = []
        for who, n, path in todo:
            r = call(base, "/submit", tokens[who], dict(exercise=n, name=path.name, source=path.read_text()))
            subs.append(dict(id=int(r.headers["location"].rsplit("/", 1)[1]), student=who, exercise=n, file=path.name))
        threads = [threading.Thread(target=follow, args=(base, tokens[s["student"]], s), daemon=True) for s in subs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, started + a.deadline - time.time()))
        for s in subs:
            s.update(json.load(call(base, f"/submissions/{s['id']}.json", tokens[s["student"]])))
            if s["row"] and "done_at" in s:
                s["page_after_judge_s"] = s["done_at"] - s["started"] - s["row"]["seconds"]
        boards = {n: json.load(call(base, f"/exercises/{n}/leaderboard.json", boss)) for n in sorted(numbers)}
        grades = {n: call(base, f"/admin/grades/{n}.csv", boss).read().decode() for n in sorted(numbers)}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    return report(out, subs, boards, grades, time.time() - started)


def report(out: pathlib.Path, subs: list[dict], boards: dict, grades: dict, wall: float) -> int:
    (out / "serve_check.json").write_text(json.dumps(dict(submissions=subs, leaderboards=boards, grades=grades),
                                                     indent=1, default=str))
    lines = [f"{'id':>3} {'student':8s} {'ex':>2} {'file':34s} {'status':7s} {'ratio':>6} {'judge s':>7} "
             f"{'page +s':>7}  verdict"]
    late = [s for s in subs if not s["row"] or "page_after_judge_s" not in s]
    subs = [s for s in subs if s not in late]
    for s in subs:
        r = s["row"]
        ratio = f"{r['ratio']:.2f}" if isinstance(r.get("ratio"), (int, float)) else "-"
        lines.append(f"{s['id']:3d} {s['student']:8s} {s['exercise']:2d} {s['file'][:34]:34s} {r['status']:7s} "
                     f"{ratio:>6} {r['seconds']:7.1f} {s['page_after_judge_s']:7.2f}  {r['verdict'][:90]}")
    problems = [f"not judged within --deadline: {s['student']} {s['file']} (exercise {s['exercise']})" for s in late]
    for n, board in boards.items():
        solution = next((s for s in subs if s["student"] == "solver" and s["exercise"] == n), {})
        entry = [(b["student"], b["submission"]) for b in board]
        if entry != [("solver", solution.get("id"))]:
            problems.append(f"exercise {n}: the leaderboard holds {entry}, not the solution alone")
        elif not (isinstance(board[0]["ratio"], (int, float)) and board[0]["gpu"] and board[0]["measured_at"]):
            problems.append(f"exercise {n}: the solution is on the board untimed: {board[0]}")
    for n, text in grades.items():  # the instructor's CSV: the columns of `exercise grade`, the solver's PASS
        rows = list(csv.reader(io.StringIO(text)))
        if tuple(rows[0]) != COLUMNS or not any(r[0].startswith("solver/") and r[1] == "PASS" for r in rows[1:]):
            problems.append(f"exercise {n}: the grades CSV is not right: {rows[:2]}")
    passed = [f"{s['student']} {s['file']}" for s in subs if s["student"] != "solver" and s["row"]["status"] == "PASS"]
    problems += [f"passed but must not: {p}" for p in passed]
    worst = max((s["page_after_judge_s"] for s in subs), default=0.0)
    gpus = sorted({str(s["row"].get("gpu")) for s in subs if s["row"].get("gpu")})
    lines += ["", f"{len(subs)} submissions judged in {wall:.0f} s on {', '.join(gpus) or 'no GPU'}; "
              f"verdict pages complete at most {worst:.2f} s after their judge (target 1 s)"]
    lines += [f"PROBLEM: {p}" for p in problems] or [f"every leaderboard ({len(boards)}) holds exactly the solution, timed; "
                                                    f"no starter or planted cheat passed"]
    (out / "serve_check.log").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if problems or worst > 1.0 else 0


if __name__ == "__main__":
    sys.exit(main())
