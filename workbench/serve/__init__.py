"""`python -m workbench serve`: a class's own kernel leaderboard on its own GPUs. Students submit
from a browser and watch the checker's report as it comes; each exercise has a leaderboard of the
passing submissions by measured speed; the instructor imports the roster, hands out tokens,
downloads grades and re-judges. Needs the serve extra (pip install "kernel-workbench[serve]").

    store.py      the SQLite store: the class (tokens hashed), submissions, judgments, the queue's claims
    judging.py    the judges (one per local GPU, or one per Ray worker) working on the queue
    app.py        the pages and the HTTP API (Starlette; templates/ rendered by Jinja2)

May import: exercise, judge, cluster (and what they import).
"""
from __future__ import annotations

import fcntl
import importlib.util
import os
import pathlib
import sys

EXTRA = 'pip install "kernel-workbench[serve]"   (from a checkout: pip install -e ".[serve]")'
NEEDS = ("starlette", "uvicorn", "jinja2", "markdown", "python_multipart")


def serve(db, judges: list, *, host: str = "127.0.0.1", port: int = 8000, timeout_s: float = 600.0,
          max_upload_kb: int = 256, per_minute: int = 6, log_level: str = "info") -> None:
    """Serve the store at `db` until stopped, the judges working on its queue. One server per store:
    a second one is refused (a starting server takes back what the last one left mid-judging)."""
    import uvicorn

    from .app import make_app
    from .judging import Queue
    from .store import Store

    lock = open(f"{db}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"error: another server is serving {db}: stop it first (one server per database)") from None
    store = Store(db)
    app = make_app(store, Queue(store, judges, timeout_s=timeout_s), max_upload_kb=max_upload_kb, per_minute=per_minute)
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=3)


def cli(args) -> int:
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        print(f"error: serve needs {', '.join(missing)}, not importable here: {EXTRA}", file=sys.stderr)
        return 2
    from ..judge import sandbox

    if sandbox.missing():  # every verdict would be ERROR: the judge grades only in its sandbox
        print(f"error: serve judges submissions in the exercise judge's sandbox, and {sandbox.missing()}",
              file=sys.stderr)
        return 2
    for name in ("judge_timeout", "max_upload_kb", "per_minute", "port"):
        if not 0 < getattr(args, name) < (65536 if name == "port" else float("inf")):
            print(f"error: --{name.replace('_', '-')} must be a positive number{' below 65536' if name == 'port' else ''}; "
                  f"got {getattr(args, name)}", file=sys.stderr)
            return 2
    import sqlite3

    from .judging import local_judges, ray_judges
    from .store import Store

    try:
        store = Store(args.db)
    except sqlite3.Error as e:
        print(f"error: --db {args.db}: not a database this server can open ({e})", file=sys.stderr)
        return 2
    instructor = next((u for u in store.users() if u["instructor"]), None)
    if instructor is None or args.new_instructor_token:
        token = store.new_token(instructor["id"]) if instructor else store.add_user("instructor", instructor=True)
        print(f"[serve] the instructor's token (shown once; --new-instructor-token makes another): {token}")
    if args.roster:
        try:
            added = store.import_roster(pathlib.Path(args.roster).read_text(encoding="utf-8-sig"))
        except (OSError, ValueError) as e:
            print(f"error: --roster: {e}", file=sys.stderr)
            return 2
        out = pathlib.Path(args.roster).with_name(pathlib.Path(args.roster).stem + "-tokens.csv")
        with os.fdopen(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a") as f:
            f.writelines(f"{n},{t}\n" for n, t in added)
        print(f"[serve] roster: {len(added)} new student(s); their tokens appended to {out}")
    store.db.close()
    judges = ray_judges(args.ray) if args.ray else local_judges()
    print(f"[serve] judges: {', '.join(getattr(j, 'name', '?') for j in judges)}; "
          f"open http://{args.host}:{args.port}/ and log in with a token")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print("[serve] listening beyond this machine: put HTTPS in front (tokens travel in a cookie)")
    serve(args.db, judges, host=args.host, port=args.port, timeout_s=args.judge_timeout,
          max_upload_kb=args.max_upload_kb, per_minute=args.per_minute)
    return 0
