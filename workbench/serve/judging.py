"""Judging the queue: one thread per judge, each claiming the oldest queued submission, judging it
and recording its verdict. A judge is a callable judge(job, on_line) -> exercise.grade's verdict row;
the student's code runs only inside the checker that judge starts."""
from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import uuid

from .store import Store


class LocalJudge:
    """One GPU's judge (gpu None: no GPU, the GPU checks are skipped): a process of its own whose
    environment names that GPU, so every checker it starts sees that one alone."""

    def __init__(self, gpu: str | None):
        self.gpu = gpu
        self.name = f"GPU {gpu}" if gpu is not None else "CPU (no GPU: correctness, gradcheck and speed skipped)"
        self._start()

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_judge_process, args=(theirs, self.gpu), daemon=True)
        self.proc.start()
        theirs.close()

    def __call__(self, job: dict, on_line) -> dict:
        if not self.proc.is_alive():
            self._start()
        self.conn.send(job)
        while True:
            try:
                kind, value = self.conn.recv()
            except EOFError:  # the judge's process died (never the student's code: that runs in the checker)
                raise RuntimeError(f"the judge process on {self.name} ended (status {self.proc.exitcode})") from None
            if kind == "row":
                return value
            on_line(value)

    def close(self) -> None:
        self.proc.kill()


def _judge_process(conn, gpu: str | None) -> None:
    import pathlib
    import tempfile

    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    from ..exercise.grade import grade_one

    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        with tempfile.TemporaryDirectory(prefix="wb-serve-") as tmp:
            path = pathlib.Path(tmp) / job["name"]
            path.write_text(job["text"])
            row = grade_one(job["exercise"], path, seed=job["seed"], speed=job["speed"], timeout_s=job["timeout_s"],
                            on_line=lambda line: conn.send(("line", line)))
        conn.send(("row", row))


def local_judges() -> list[LocalJudge]:
    """One judge per GPU this process may use (CUDA_VISIBLE_DEVICES's list where it is set), else one
    without a GPU."""
    import torch

    n = torch.cuda.device_count()
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    ids = visible[:n] if visible else [str(i) for i in range(n)]
    return [LocalJudge(g) for g in ids] or [LocalJudge(None)]


def ray_judges(address: str) -> list:
    """One judge per worker of a Ray pool on the cluster at `address` (one per GPU, or per CPU where
    it has none). A worker grades a job whole: its lines come with the verdict, not before."""
    from ..cluster.pool import Pool, connect

    ray = connect(address)
    pool = Pool(ray, "cuda" if ray.cluster_resources().get("GPU", 0) else "cpu")

    def judge_on(member):
        def judge(job: dict, on_line) -> dict:
            try:
                return ray.get(member.handle.grade.remote(job))
            except ray.exceptions.RayActorError as e:  # the worker (or its node) is gone for good
                raise JudgeGone(f"the Ray worker {judge.name} died: {type(e).__name__}") from None
        judge.name = f"{member.info['host']}:{member.info['pid']} ({member.info.get('gpu') or 'CPU'})"
        judge.close = lambda: ray.kill(member.handle)
        return judge
    return [judge_on(m) for m in pool.members]


class JudgeGone(RuntimeError):
    """A judge that will take no more work (its Ray worker died): its submission goes to another."""


class Queue:
    """The judges at work on the store's queue. live[sid]: the lines of a submission being judged,
    as they come (the verdict page streams them)."""

    def __init__(self, store: Store, judges: list, *, timeout_s: float, tries: int = 2):
        self.store, self.judges, self.timeout_s, self.tries = store, judges, timeout_s, tries
        self.run = uuid.uuid4().hex  # this server's claims: "<run>/<judge>"
        self.live: dict[int, list[str]] = {}
        self.wake = threading.Condition()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._work, args=(j, f"{self.run}/{i}"), daemon=True,
                                         name=f"judge-{i}") for i, j in enumerate(judges)]

    def start(self) -> None:
        resumed = self.store.release()  # left judging by a server that stopped: never recorded
        if resumed:
            print(f"[serve] {resumed} submission(s) left mid-judging by the last server: queued again", file=sys.stderr)
        for t in self.threads:
            t.start()

    def notify(self) -> None:
        with self.wake:
            self.wake.notify_all()

    def stop(self) -> None:
        self.stopping.set()
        self.notify()
        for j in self.judges:
            getattr(j, "close", lambda: None)()
        self.store.release(self.run + "/")  # what was being judged goes back to the queue, for the next start

    def _work(self, judge, claim: str) -> None:
        while not self.stopping.is_set():
            sub = self.store.claim(claim)
            if sub is None:
                with self.wake:
                    self.wake.wait(1.0)
                continue
            lines = self.live[sub["id"]] = []
            job = dict(exercise=sub["exercise"], name=sub["name"], text=sub["source"], seed=sub["seed"], speed=True,
                       timeout_s=self.timeout_s)
            try:
                row = judge(job, lines.append)
            except Exception as e:  # noqa: BLE001 - the judge broke (its process, its worker), not the submission
                if self.stopping.is_set():
                    return
                print(f"[serve] judge {claim}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                if sub["attempts"] < self.tries or isinstance(e, JudgeGone):
                    self.store.release(sid=sub["id"])
                    self.live.pop(sub["id"], None)
                    if isinstance(e, JudgeGone):
                        return
                    continue
                row = dict(submission=sub["name"], status="ERROR", verdict=f"ERROR: the judge failed {self.tries} "
                           f"times on this submission ({type(e).__name__}: {e})", failure_class="judge",
                           detail=str(e)[:300], checks="", seconds=0.0, seed=sub["seed"], worker="")
            self.store.finish(sub["id"], claim, dict(row, worker=row.get("worker") or getattr(judge, "name", "")),
                              "\n".join(lines))
            self.live.pop(sub["id"], None)
