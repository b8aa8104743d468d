"""python -m workbench serve (workbench/serve/): the HTTP API through Starlette's test client, with a
stub judge (the queue, limits and who-sees-what do not depend on what judges), the local and the
Ray judges on a file the checker refuses, and a server killed mid-queue and started again. The pages
in a browser, with a real submission through the real judge: test_serve_browser.py."""
from __future__ import annotations

import csv
import io
import os
import pathlib
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

for _mod in ("starlette", "uvicorn", "jinja2", "markdown", "python_multipart", "httpx2"):
    pytest.importorskip(_mod, reason='the serve extra is not installed (pip install -e ".[serve]" httpx2)')

from starlette.testclient import TestClient  # noqa: E402

from workbench import cli  # noqa: E402
from workbench.exercise.grade import COLUMNS  # noqa: E402
from workbench.serve import serve  # noqa: E402
from workbench.serve.app import make_app  # noqa: E402
from workbench.serve.judging import JudgeGone, LocalJudge, Queue, ray_judges  # noqa: E402
from workbench.serve.store import Store  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent


def stub_judge(job, on_line):
    """A verdict from the source's first line: '// PASS 1.25' (a pass at 1.25x), '// FAIL', '// BREAK'
    (the judge itself fails); each step of a check printed as it goes."""
    word, *ratio = job["text"].split("\n")[0].lstrip("/ ").split()
    if word == "BREAK":
        raise RuntimeError("stub judge broke")
    for line in (f"Exercise {job['exercise']}: {job['name']}", "  build ... ok", f"  speed ... {word}"):
        on_line(line)
    return dict(submission=job["name"], status=word, verdict=word if word == "PASS" else "FAIL: speed — too slow",
                first_failure="" if word == "PASS" else "speed", failure_class="", detail="", seconds=0.01,
                checks=f"build=ok; speed={'ok' if word == 'PASS' else 'FAIL'}", seed=job["seed"], worker="",
                ratio=float(ratio[0]) if ratio else None, gpu="stub GPU", clocks="sm 1980 MHz",
                measured_at="2026-01-01T00:00:00", timeout_s=job["timeout_s"])


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def cls(tmp_path):
    """A served class: its client, store, the instructor's token and alice's, bob's and carol's."""
    store = Store(tmp_path / "class.sqlite3")
    boss = store.add_user("instructor", instructor=True)
    queue = Queue(store, [stub_judge, stub_judge], timeout_s=42)
    with TestClient(make_app(store, queue, max_upload_kb=4, per_minute=3)) as client:
        r = client.post("/admin/roster", headers=bearer(boss), files={"roster": ("c.csv", b"name\nalice\nbob\ncarol\n")})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv"), r.text
        tokens = dict(list(csv.reader(io.StringIO(r.text)))[1:])
        yield client, store, dict(tokens, instructor=boss)


def submit(client, token, text, name="k.cu", exercise=2, **kw):
    return client.post("/submit", headers=bearer(token), data={"exercise": str(exercise)},
                       files={"file": (name, text.encode() if isinstance(text, str) else text)},
                       follow_redirects=False, **kw)


def verdict(client, token, sid, timeout=20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sub = client.get(f"/submissions/{sid}.json", headers=bearer(token)).json()
        if sub["state"] == "done":
            return sub
        time.sleep(0.05)
    raise AssertionError(f"submission {sid} not judged within {timeout} s: {sub}")


def submitted(r) -> int:
    assert r.status_code == 303, r.text
    return int(r.headers["location"].rsplit("/", 1)[1])


def test_the_roster_gives_each_student_a_token_kept_hashed(cls, tmp_path):
    client, store, tok = cls
    assert set(tok) == {"alice", "bob", "carol", "instructor"}
    again = client.post("/admin/roster", headers=bearer(tok["instructor"]), files={"roster": ("c.csv", b"alice\ndave\n")})
    assert [r[0] for r in csv.reader(io.StringIO(again.text))] == ["name", "dave"]  # alice keeps hers
    raw = (tmp_path / "class.sqlite3").read_bytes()
    assert not any(t.split(".", 1)[1].encode() in raw for t in tok.values())
    assert client.get("/", headers=bearer(tok["alice"])).status_code == 200
    assert client.get("/", headers=bearer(tok["alice"] + "x")).status_code == 401
    assert client.get("/", headers=bearer("9" * 40 + ".x")).status_code == 401
    assert client.get("/", headers=bearer("1.nope")).json() == {"error": "log in with the token your instructor "
                                                                         "gave you (/login)"}
    login = client.post("/login", data={"token": tok["bob"]}, follow_redirects=False)
    assert login.status_code == 303 and "httponly" in login.headers["set-cookie"].lower()
    assert "bob" in client.get("/").text  # the cookie now
    client.cookies.clear()
    assert client.get("/admin", headers=bearer(tok["bob"])).status_code == 403
    bad = client.post("/admin/roster", headers=bearer(tok["instructor"]), files={"roster": ("c.csv", b"name\nx y\n")})
    assert bad.status_code == 400 and "'x y'" in bad.json()["error"]
    fresh = client.post(f"/admin/token/{tok['bob'].split('.')[0]}", headers=bearer(tok["instructor"]))
    assert client.get("/", headers=bearer(tok["bob"])).status_code == 401  # the old one no longer works
    assert client.get("/", headers=bearer(fresh.text.split("\n")[1].split(",")[1].strip())).status_code == 200


def test_a_submission_is_stored_judged_and_streamed(cls):
    client, store, tok = cls
    sid = submitted(submit(client, tok["alice"], "// PASS 1.25\n__global__ void k() {}\n", name="../../etc/mine.cu"))
    sub = verdict(client, tok["alice"], sid)
    assert sub["name"] == "mine.cu" and sub["row"]["status"] == "PASS" and sub["row"]["ratio"] == 1.25
    assert sub["row"]["timeout_s"] == 42  # the judge time limit travels with the job
    assert sub["lines"].split("\n") == ["Exercise 2: mine.cu", "  build ... ok", "  speed ... PASS"]
    events = client.get(f"/submissions/{sid}/events", headers=bearer(tok["alice"])).text
    assert events.split("\n\n")[:4] == ["event: line\ndata: Exercise 2: mine.cu", "event: line\ndata:   build ... ok",
                                        "event: line\ndata:   speed ... PASS", "event: done\ndata: PASS"]
    page = client.get(f"/submissions/{sid}", headers=bearer(tok["alice"])).text
    assert 'id="verdict" class="PASS"' in page and "1.25x" in page and "stub GPU" in page
    pasted = client.post("/submit", headers=bearer(tok["alice"]), data={"exercise": "2", "source": "// FAIL\n"},
                         follow_redirects=False)
    assert verdict(client, tok["alice"], submitted(pasted))["name"] == "pasted.cu"
    history = client.get("/history", headers=bearer(tok["alice"])).text
    assert "mine.cu" in history and "pasted.cu" in history


def test_bad_submissions_and_the_limits_say_what_is_wrong(cls):
    client, store, tok = cls
    cases = [(dict(text="x" * 5000), 413, "over 4 KiB"), (dict(text="// x", name="k.py"), 400, "must end in .cu or .cpp"),
             (dict(text=" \n"), 400, "no source"), (dict(text=b"\xff\xfe"), 400, "not UTF-8"),
             (dict(text="// x", exercise=99), 400, "exercise must be one of: 1 (01_fp16_support)")]
    for kw, status, says in cases:
        r = submit(client, tok["carol"], **kw)
        assert r.status_code == status and says in r.json()["error"], (kw, r.text)
    huge = client.post("/submit", headers=dict(bearer(tok["carol"]), **{"content-length": str(10 ** 7)}), content=b"")
    assert huge.status_code == 413
    for _ in range(3):
        submitted(submit(client, tok["bob"], "// FAIL\n"))
    r = submit(client, tok["bob"], "// FAIL\n")
    assert r.status_code == 429 and "at most 3 submissions a minute" in r.json()["error"]
    assert 1 <= int(r.headers["retry-after"]) <= 61
    html = client.post("/submit", headers=dict(bearer(tok["bob"]), accept="text/html"), data={"exercise": "2"},
                       files={"file": ("k.cu", b"// FAIL\n")})
    assert html.status_code == 429 and "<p class=\"error\">at most 3 submissions a minute" in html.text


def test_a_student_sees_only_their_own_sources(cls):
    client, store, tok = cls
    sid = submitted(submit(client, tok["alice"], "// PASS 1.0\nsecret sauce <b>\n"))
    verdict(client, tok["alice"], sid)
    assert "secret sauce &lt;b&gt;" in client.get(f"/submissions/{sid}", headers=bearer(tok["alice"])).text
    for path in (f"/submissions/{sid}", f"/submissions/{sid}.json", f"/submissions/{sid}/events"):
        r = client.get(path, headers=bearer(tok["bob"]))
        assert r.status_code == 404 and "secret sauce" not in r.text, path
    assert client.get("/students/alice", headers=bearer(tok["bob"])).status_code == 403
    assert "secret sauce" not in client.get("/exercises/2", headers=bearer(tok["bob"])).text
    assert "secret sauce" in client.get(f"/submissions/{sid}", headers=bearer(tok["instructor"])).text
    assert f"/submissions/{sid}" in client.get("/students/alice", headers=bearer(tok["instructor"])).text


def test_the_leaderboard_ranks_each_students_best_pass_by_ratio(cls):
    client, store, tok = cls
    for who, first in (("alice", "// PASS 1.10"), ("alice", "// PASS 0.90"), ("bob", "// PASS 1.30"),
                       ("carol", "// FAIL"), ("bob", "// PASS")):
        verdict(client, tok[who], submitted(submit(client, tok[who], first + "\n")))
    board = client.get("/exercises/2/leaderboard.json", headers=bearer(tok["carol"])).json()
    assert [(b["rank"], b["student"], b["ratio"]) for b in board] == [(1, "bob", 1.3), (2, "alice", 1.1)]
    assert board[0]["gpu"] == "stub GPU" and board[0]["clocks"] == "sm 1980 MHz" and board[0]["measured_at"]
    page = client.get("/exercises/2", headers=bearer(tok["carol"])).text
    assert page.index("bob") < page.index("alice") < page.index("Submit") and "1.30x" in page
    assert "<h1>" in page and "<code>" in page  # the README, rendered


def test_the_instructor_downloads_grades_and_rejudges(cls):
    client, store, tok = cls
    sid = submitted(submit(client, tok["alice"], "// PASS 1.2\n"))
    verdict(client, tok["alice"], sid)
    verdict(client, tok["bob"], submitted(submit(client, tok["bob"], "// FAIL\n")))
    r = client.get("/admin/grades/2.csv", headers=bearer(tok["instructor"]))
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert tuple(csv.reader(io.StringIO(r.text)).__next__()) == COLUMNS
    assert [(x["submission"], x["status"]) for x in rows] == [(f"alice/{sid}_k.cu", "PASS"), (f"bob/{sid + 1}_k.cu", "FAIL"),
                                                              ("carol/", "")]
    assert rows[2]["verdict"] == "no submission"
    assert client.get("/admin/grades/2.csv", headers=bearer(tok["alice"])).status_code == 403
    assert client.post(f"/admin/rejudge/{sid}", headers=bearer(tok["alice"])).status_code == 403
    assert client.post(f"/admin/rejudge/{sid}", headers=bearer(tok["instructor"]), follow_redirects=False).status_code == 303
    verdict(client, tok["alice"], sid)
    assert len(store._all("SELECT * FROM judgments WHERE submission_id = ?", sid)) == 2
    assert "Re-judge" in client.get(f"/submissions/{sid}", headers=bearer(tok["instructor"])).text
    assert "Re-judge" not in client.get(f"/submissions/{sid}", headers=bearer(tok["alice"])).text


def test_a_broken_judge_gives_the_submission_back_then_says_so(cls):
    client, store, tok = cls
    sub = verdict(client, tok["carol"], submitted(submit(client, tok["carol"], "// BREAK\n")))
    assert sub["attempts"] == 2 and sub["row"]["status"] == "ERROR" and "stub judge broke" in sub["row"]["verdict"]


def test_a_judge_that_is_gone_hands_its_submission_to_another(tmp_path):
    tried = threading.Event()

    def gone(job, on_line):
        tried.set()
        raise JudgeGone("its Ray worker died")

    def after_gone(job, on_line):  # holds its first submission until the gone judge has claimed one
        assert tried.wait(30), "the gone judge never got a submission"
        return stub_judge(job, on_line)

    store = Store(tmp_path / "class.sqlite3")
    token = store.add_user("alice")
    queue = Queue(store, [gone, after_gone], timeout_s=60)
    with TestClient(make_app(store, queue)) as client:
        sids = [submitted(submit(client, token, "// PASS 1.0\n")) for _ in range(3)]  # queued together
        subs = [verdict(client, token, sid, timeout=60) for sid in sids]
        # The other judge may finish the handed-over submission before the gone one's thread returns.
        queue.threads[0].join(timeout=30)
        assert tried.is_set() and not queue.threads[0].is_alive()
    assert [s["row"]["status"] for s in subs] == ["PASS"] * 3


@pytest.mark.slow
def test_judges_on_a_ray_cluster(tmp_path):
    """--ray: one judge per worker of the pool (workbench/cluster), each grading as exercise grade does."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=1, include_dashboard=False, logging_level="WARNING")
    try:
        judges = ray_judges("local")
        assert len(judges) == 1 and "CPU" in judges[0].name
        store = Store(tmp_path / "class.sqlite3")
        token = store.add_user("alice")
        with TestClient(make_app(store, Queue(store, judges, timeout_s=300))) as client:
            sub = verdict(client, token, submitted(submit(client, token, "int x;\n", name="plain.cpp")), 300)
    finally:
        ray.shutdown()
    assert sub["row"]["status"] == "ERROR" and "must be a CUDA source file" in sub["row"]["verdict"], sub["row"]
    assert sub["row"]["worker"].split(":")[1].isdigit()  # host:pid of the Ray worker that graded it


def test_serve_without_the_extra_says_what_to_install(monkeypatch, capsys, tmp_path):
    import workbench.serve as serve_pkg

    monkeypatch.setattr(serve_pkg, "NEEDS", serve_pkg.NEEDS + ("no_such_module_xyz",))
    assert cli.main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "serve needs no_such_module_xyz" in err and 'pip install "kernel-workbench[serve]"' in err
    monkeypatch.undo()
    assert cli.main(["serve", "--per-minute", "0"]) == 2
    assert "--per-minute must be a positive number" in capsys.readouterr().err
    assert cli.main(["serve", "--port", "70000"]) == 2
    assert "--port must be a positive number below 65536" in capsys.readouterr().err
    assert cli.main(["serve", "--db", str(tmp_path / "no" / "such" / "folder.db")]) == 2
    assert "--db " in capsys.readouterr().err


def test_one_server_per_database(tmp_path):
    import fcntl

    db = tmp_path / "class.sqlite3"
    with open(f"{db}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(SystemExit, match="another server is serving"):
            serve(db, [])


RESTARTABLE = """
import sys, time
from workbench.serve import serve
db, log, port = sys.argv[1:]
def judge(job, on_line):
    with open(log, "a") as f:
        f.write(f"start {job['name']}\\n")
    time.sleep(0.02)
    with open(log, "a") as f:
        f.write(f"end {job['name']}\\n")
    return dict(submission=job["name"], status="PASS", verdict="PASS", first_failure="", failure_class="",
                detail="", checks="", seconds=0.02, seed=job["seed"], worker="")
serve(db, [judge, judge], port=int(port), log_level="warning")
"""


def test_a_server_killed_mid_queue_loses_nothing_and_judges_nothing_twice(tmp_path):
    """200 submissions queued; the server judging them is killed (SIGKILL) mid-way and started again:
    every submission ends with exactly one verdict, and only those being judged at the kill are judged again."""
    db, log = tmp_path / "class.sqlite3", tmp_path / "judged.log"
    store = Store(db)
    token = store.add_user("alice")
    with TestClient(make_app(store, Queue(store, [], timeout_s=60), per_minute=1000)) as client:
        sids = [submitted(client.post("/submit", headers=bearer(token), data={"exercise": "2", "name": f"s{i}.cu",
                                                                              "source": "// x\n"}, follow_redirects=False))
                for i in range(200)]
    store.db.close()
    peek = sqlite3.connect(db, timeout=30)
    judged = lambda: peek.execute("SELECT COUNT(*) FROM judgments").fetchone()[0]  # noqa: E731

    def start():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        return subprocess.Popen([sys.executable, "-c", RESTARTABLE, str(db), str(log), str(port)], cwd=REPO,
                                env=dict(os.environ, PYTHONPATH=str(REPO)), stderr=subprocess.PIPE, text=True)

    def wait_for(n: int, proc) -> None:
        deadline = time.monotonic() + 60
        while judged() < n:
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, f"{judged()} judged"
            time.sleep(0.01)

    first = start()
    wait_for(60, first)
    first.send_signal(signal.SIGKILL)
    first.wait()
    at_kill = judged()
    in_flight = {r[0] for r in peek.execute("SELECT name FROM submissions WHERE state = 'judging'")}
    assert 60 <= at_kill < 200, at_kill
    second = start()
    wait_for(200, second)
    second.send_signal(signal.SIGTERM)
    assert second.wait(20) in (0, -signal.SIGTERM)  # uvicorn ends by the signal it stopped for
    states = dict(peek.execute("SELECT state, COUNT(*) FROM submissions GROUP BY state").fetchall())
    per_sub = dict(peek.execute("SELECT submission_id, COUNT(*) FROM judgments GROUP BY submission_id").fetchall())
    assert states == {"done": 200} and sorted(per_sub) == sids and set(per_sub.values()) == {1}
    ends: dict[str, int] = {}
    for line in log.read_text().split("\n"):
        if line.startswith("end "):
            ends[line[4:]] = ends.get(line[4:], 0) + 1
    assert len(ends) == 200 and all(n == 1 for name, n in ends.items() if name not in in_flight), in_flight


def test_a_local_judge_runs_the_checker_in_a_process_of_its_own(tmp_path):
    """The judge a GPU gets (here the one without a GPU): its process runs exercise.grade.grade_one on
    the stored source. A file the checker refuses costs seconds; the real build, load and SASS checks
    of a real submission run in the browser test (test_serve_browser.py)."""
    judge = LocalJudge(None)
    try:
        row = judge(dict(exercise=2, name="plain.cpp", text="int x;\n", seed=5, speed=True, timeout_s=120), print)
        assert row["status"] == "ERROR" and "must be a CUDA source file" in row["verdict"] and row["seed"] == 5, row
        judge.proc.kill()
        judge.proc.join()
        again = judge(dict(exercise=2, name="again.cpp", text="int x;\n", seed=6, speed=True, timeout_s=120), print)
        assert again["submission"] == "again.cpp"  # a judge whose process died starts another
    finally:
        judge.close()
