"""The server's store: one SQLite file holding the class (tokens hashed), every submission and every
judgment. A submission's `state`: queued -> judging (claimed by one judge in one statement) -> done
(its verdict recorded in the transaction that checks the claim is still that judge's). `judging`
rows a stopped server left go back to the queue at the next start: nothing is lost or judged twice."""
from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import re
import secrets
import sqlite3
import threading
import time

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL,
    instructor INTEGER NOT NULL DEFAULT 0, token_hash BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL REFERENCES users,
    exercise INTEGER NOT NULL, name TEXT NOT NULL, source TEXT NOT NULL, seed INTEGER NOT NULL,
    created REAL NOT NULL, state TEXT NOT NULL DEFAULT 'queued', claim TEXT, started REAL,
    attempts INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS submissions_state ON submissions (state, id);
CREATE INDEX IF NOT EXISTS submissions_user ON submissions (user_id, created);
CREATE TABLE IF NOT EXISTS judgments (id INTEGER PRIMARY KEY, submission_id INTEGER NOT NULL REFERENCES submissions,
    row TEXT NOT NULL, lines TEXT NOT NULL, judged REAL NOT NULL);
CREATE INDEX IF NOT EXISTS judgments_submission ON judgments (submission_id, id);
"""
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}$")
# A submission's latest verdict (NULL while it has none) rides along with it.
_WITH_ROW = ("SELECT s.*, u.name AS student, (SELECT row FROM judgments j WHERE j.submission_id = s.id "
             "ORDER BY j.id DESC LIMIT 1) AS row FROM submissions s JOIN users u ON u.id = s.user_id")


def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


class Store:
    def __init__(self, path):
        # One connection for every thread, each statement under the lock: the work is small.
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.lock = threading.Lock()
        with self.lock:
            # A write-ahead log, each commit on disk before it returns: ~1 ms a commit, not ~20.
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = FULL")
            self.db.executescript(SCHEMA)

    def _all(self, sql: str, *args) -> list[dict]:
        with self.lock:
            return [dict(r) for r in self.db.execute(sql, args)]

    def _one(self, sql: str, *args) -> dict | None:
        rows = self._all(sql, *args)
        return rows[0] if rows else None

    # -- the class: names and tokens (only their hashes are kept; a token is "<user id>.<secret>")
    def add_user(self, name: str, instructor: bool = False) -> str:
        if not NAME.match(name):
            raise ValueError(f"roster: a name is 1-64 letters, digits or _.@+- (starting with a letter or digit); "
                             f"got {name!r}")
        secret = secrets.token_urlsafe(32)
        with self.lock:
            cur = self.db.execute("INSERT INTO users (name, instructor, token_hash) VALUES (?, ?, ?)",
                                  (name, int(instructor), _hash(secret)))
        return f"{cur.lastrowid}.{secret}"

    def new_token(self, user_id: int) -> str:
        """A fresh token for a user; the old one stops working."""
        secret = secrets.token_urlsafe(32)
        with self.lock:
            if not self.db.execute("UPDATE users SET token_hash = ? WHERE id = ?", (_hash(secret), user_id)).rowcount:
                raise KeyError(user_id)
        return f"{user_id}.{secret}"

    def user(self, token: str | None) -> dict | None:
        """The user a token belongs to (its hash compared in constant time), else None."""
        uid, _, secret = (token or "").partition(".")
        if not uid.isdigit() or len(uid) > 18 or not secret:
            return None
        u = self._one("SELECT * FROM users WHERE id = ?", int(uid))
        return u if u is not None and hmac.compare_digest(u["token_hash"], _hash(secret)) else None

    def users(self) -> list[dict]:
        return self._all("SELECT u.id, u.name, u.instructor, COUNT(s.id) AS submissions FROM users u "
                         "LEFT JOIN submissions s ON s.user_id = u.id GROUP BY u.id ORDER BY u.instructor DESC, u.name")

    def import_roster(self, text: str) -> list[tuple[str, str]]:
        """A roster CSV: a `name` column (or, without a header, names in the first column). Names not
        yet in the class are added; returns (name, token) of each, in order. Known names keep their tokens."""
        rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
        if rows and "name" in [c.strip().lower() for c in rows[0]]:
            col = [c.strip().lower() for c in rows[0]].index("name")
            rows = rows[1:]
        else:
            col = 0
        names = [r[col].strip() if col < len(r) else "" for r in rows]
        if not names:
            raise ValueError("roster: no names (a CSV with a `name` column, or one name per line)")
        bad = [n for n in names if not NAME.match(n)]
        if bad:
            raise ValueError(f"roster: a name is 1-64 letters, digits or _.@+- (starting with a letter or digit); "
                             f"got {', '.join(map(repr, bad[:5]))}")
        known = {u["name"] for u in self.users()}
        new = list(dict.fromkeys(n for n in names if n not in known))
        return [(n, self.add_user(n)) for n in new]

    # -- submissions and the queue
    def submit(self, user_id: int, exercise: int, name: str, source: str, seed: int) -> int:
        with self.lock:
            return self.db.execute("INSERT INTO submissions (user_id, exercise, name, source, seed, created) "
                                   "VALUES (?, ?, ?, ?, ?, ?)", (user_id, exercise, name, source, seed,
                                                                 time.time())).lastrowid

    def recent(self, user_id: int, seconds: float) -> list[float]:
        """When this user submitted within the last `seconds`."""
        return [r["created"] for r in self._all("SELECT created FROM submissions WHERE user_id = ? AND created > ?",
                                                user_id, time.time() - seconds)]

    def claim(self, claim: str) -> dict | None:
        """The oldest queued submission, now this claim's (one statement: no two claims get one)."""
        return self._one("UPDATE submissions SET state = 'judging', claim = ?, started = ?, attempts = attempts + 1 "
                         "WHERE id = (SELECT id FROM submissions WHERE state = 'queued' ORDER BY id LIMIT 1) RETURNING *",
                         claim, time.time())

    def finish(self, sid: int, claim: str, row: dict, lines: str) -> bool:
        """Record a verdict, where the submission is still this claim's; False where it is not."""
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                mine = self.db.execute("UPDATE submissions SET state = 'done', claim = NULL WHERE id = ? AND "
                                       "claim = ? AND state = 'judging'", (sid, claim)).rowcount
                if mine:
                    self.db.execute("INSERT INTO judgments (submission_id, row, lines, judged) VALUES (?, ?, ?, ?)",
                                    (sid, json.dumps(row), lines, time.time()))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return bool(mine)

    def release(self, claim_prefix: str = "", sid: int | None = None) -> int:
        """Back to the queue: the submissions being judged under claims starting with claim_prefix
        ("" = every one: what a starting server does with those its predecessor left), or one."""
        where, args = ("id = ?", (sid,)) if sid is not None else ("claim LIKE ?", (claim_prefix + "%",))
        with self.lock:
            return self.db.execute(f"UPDATE submissions SET state = 'queued', claim = NULL WHERE state = 'judging' "
                                   f"AND {where}", args).rowcount

    def requeue(self, sid: int) -> bool:
        """The instructor's re-judge: a judged submission back in the queue (its earlier verdicts stay)."""
        with self.lock:
            return bool(self.db.execute("UPDATE submissions SET state = 'queued', attempts = 0 WHERE id = ? AND "
                                        "state = 'done'", (sid,)).rowcount)

    def submission(self, sid: int) -> dict | None:
        return _decoded(self._one(f"{_WITH_ROW} WHERE s.id = ?", sid))

    def judgment(self, sid: int) -> dict | None:
        return self._one("SELECT * FROM judgments WHERE submission_id = ? ORDER BY id DESC LIMIT 1", sid)

    def history(self, user_id: int | None = None, exercise: int | None = None) -> list[dict]:
        """Submissions, newest first, with their latest verdicts: one user's, one exercise's, or all."""
        where = " AND ".join(w for w, v in (("s.user_id = ?", user_id), ("s.exercise = ?", exercise)) if v is not None)
        args = [v for v in (user_id, exercise) if v is not None]
        return [_decoded(r) for r in self._all(f"{_WITH_ROW} {'WHERE ' + where if where else ''} ORDER BY s.id DESC",
                                               *args)]

    def ahead(self, sid: int) -> int:
        return self._one("SELECT COUNT(*) AS n FROM submissions WHERE state = 'queued' AND id < ?", sid)["n"]

    def counts(self) -> dict:
        return {r["state"]: r["n"] for r in self._all("SELECT state, COUNT(*) AS n FROM submissions GROUP BY state")}


def _decoded(r: dict | None) -> dict | None:
    if r is not None:
        r["row"] = json.loads(r["row"]) if r.get("row") else None
    return r


def best(subs: list[dict]) -> dict | None:
    """A student's submission that counts: their fastest timed pass, else their latest pass, else their latest."""
    passed = [s for s in subs if s["row"] and s["row"]["status"] == "PASS"]
    timed = [s for s in passed if s["row"].get("ratio") is not None]
    return max(timed, key=lambda s: s["row"]["ratio"]) if timed else (passed or subs or [None])[0]


def leaderboard(subs: list[dict]) -> list[dict]:
    """One row per student who passed: their best, the timed ones by ratio (fastest first), then the untimed."""
    by_user: dict[str, list[dict]] = {}
    for s in subs:  # newest first, as history() gives them
        by_user.setdefault(s["student"], []).append(s)
    rows = [b for b in map(best, by_user.values()) if b and b["row"] and b["row"]["status"] == "PASS"]
    return sorted(rows, key=lambda s: (s["row"].get("ratio") is None, -(s["row"].get("ratio") or 0), s["id"]))
