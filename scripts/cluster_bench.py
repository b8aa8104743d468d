"""Issue 44's figures on one machine with N GPUs: the full sweep of every op through Ray (one worker per
GPU) against the same sweep in one process on one GPU, and `exercise grade` of 64 submissions through Ray
against the serial grader, each wall time against 1.25/N; a worker killed mid-sweep and mid-grading.

    python scripts/cluster_bench.py sweep|grade|table|workers [--state /tmp/ray44] [--out DIR] [--deadline-at EPOCH]
           [--call-s 550] [--resume CLUSTER_JSON] [--fresh] [--address local] [--workers N] [--device cuda|cpu]
           [--budget 0.5] [--kill-delay 2] [--ops ...] [--variants ...] [--dtypes ...] [--shapes ...]
           [--baselines ...] [--directions ...] [--submissions 64] [--seed 1] [--grade-timeout 600]

The work is cut into units, each recorded under --state as it ends; a call does the units that fit before
--deadline-at, and the same command in the next call (the device machine keeps /tmp while it is held) goes
on from there. The table printed last says what is done and what is left. --out gets cluster.json (every
unit, each machine's provenance, the totals: --resume takes it up on another machine once this one went
back), cluster_table.txt and the rows this machine measured (cluster_rows.jsonl.gz). `workers` starts one
worker per GPU, each naming its GPU (a smoke test); `table` prints the table of --state (or --resume).

sweep: every op, every variant, float32/float16/bfloat16 (float32 on a CPU), each op's bench sizes and
benched directions, every baseline: the GPU sweep of scripts/gpu_run.sh. Two kinds of unit over the ops:
  cold  the ops through Ray from cold caches (torch.compile compiles each group afresh; inductor's caches on
        disk then serve both timed runs alike). In the first, the worker taking a group once half of them
        are handed out (and after it finished one) is killed by pid (SIGKILL) --kill-delay s into it: that
        group must be retried once on another worker, its earlier rows kept, no cell lost.
  pair  warm ops in one process on GPU 0 (a child, CUDA_VISIBLE_DEVICES=0; its time is its bench calls'),
        then through Ray (its time includes starting the workers), side by side: the ratio against 1.25/N,
        and the rows: the same cells and verdicts, the medians' spread, each naming its GPU and clocks.
grade: SUBMISSIONS files cycling through scripts/judge_cases.py's cases (the planted cheats with their
exercises, every exercise's solution and starter), each with a comment of its own so that each is built,
graded by the sandboxed judge as `exercise grade` grades (exercise.grade.grade_job; on Ray through
cluster.grading.spread). In batches that fit the call: each through Ray first (the first batch pays the
judge's per-exercise caches, so the comparison leans against Ray), then serially, one submission after
another (each recorded as it ends: the serial times add up, across calls too). Once: 2N+1 of them through
Ray with the worker taking the (N+1)-th killed mid-grading: every verdict must come back, equal to the
serial one, the killed worker's submission graded once more elsewhere.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

import judge_cases  # noqa: E402
from workbench.cluster import grading, plan as plan_, pool as pool_, sweep, worker  # noqa: E402
from workbench.exercise import grade  # noqa: E402
from workbench.measure import bench_rows  # noqa: E402
from workbench.measure.bench_rows import baselines_of  # noqa: E402
from workbench.model import registry  # noqa: E402

# Priors that size the first units, replaced by what the units measure: one process on an H100 took about
# 4 s a group of the GPU sweep, torch.compile included (results/bench.jsonl, 82d44e2's sweep of each op);
# judge_cases' 21 files took 17 s each on the H200 (results/judge/53fb502-h200); WARM: a warm group's share
# of a cold one's time (a guess); START_S: Ray's workers started (torch, CUDA) and ready.
GROUP_S, SUBMISSION_S, START_S, WARM = 4.0, 17.0, 45.0, 0.7
CELL = ("op", "variant", "kind", "dtype", "shape", "direction")


class Stop(Exception):
    """What is left does not fit this call: the next call goes on."""


def machine() -> str:
    """This boot of this machine: a later session's machine keeps the units done before, not their caches."""
    try:
        return pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return socket.gethostname()


class State:
    """The units done so far (state.json under --state), the unit under way, and this call's deadline.
    A unit begun in an earlier call that never ended there ran past its call: that kind's estimates grow.
    resume: a cluster.json an earlier machine wrote, the start of a state folder that has none; the
    units it finished stay, an unfinished batch of grading is graded again."""

    def __init__(self, folder: pathlib.Path, deadline_at: float, call_s: float, resume: pathlib.Path | None = None):
        self.folder, self.deadline_at, self.call_s = folder, deadline_at, call_s
        (folder / "rows").mkdir(parents=True, exist_ok=True)
        self.path = folder / "state.json"
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {}
        if not self.data and resume and resume.is_file():
            self.data = json.loads(resume.read_text())
            self.data.pop("totals", None)
            self.data.pop("running", None)
            if "grade" in self.data:
                self.data["grade"]["batches"] = [b for b in self.data["grade"].get("batches", [])
                                                 if len(b["serial"]) == len(b["names"])]
            print(f"[cluster_bench] going on from {resume} (machines {', '.join(self.data.get('machines', {}))})")
        cut = self.data.pop("running", None)
        if cut:
            scale = self.data.setdefault("scale", {})
            scale[cut["kind"]] = scale.get(cut["kind"], 1.0) * max(1.5, cut["ran_s"] / max(cut["estimate"], 1.0))
            print(f"[cluster_bench] the {cut['kind']} unit begun last call did not end in it: its estimates x "
                  f"{scale[cut['kind']]:.1f} from now on")
        self.save()

    def section(self, name: str, params: dict) -> dict:
        sec = self.data.setdefault(name, {"params": params})
        if sec["params"] != params:
            diff = {k: (sec["params"].get(k), v) for k, v in params.items() if sec["params"].get(k) != v}
            raise SystemExit(f"--state {self.folder} holds a {name} run with other settings (was, now: {diff}); "
                             f"pass --fresh to start over, or another --state")
        return sec

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)

    def left(self) -> float:
        return self.deadline_at - time.time()

    def cost(self, kind: str, estimate: float) -> float:
        return estimate * self.data.get("scale", {}).get(kind, 1.0)

    def largest(self, kind: str, items: list, estimate) -> list:
        """The longest prefix of items whose unit is expected to end in this call (one item at least)."""
        fit = [i for i in range(1, len(items) + 1) if self.cost(kind, estimate(items[:i])) <= self.left()]
        return items[:fit[-1] if fit else 1]

    def begin(self, kind: str, estimate: float, what: str, smallest: bool = False) -> None:
        """Go on with a unit expected to take `estimate` s, or Stop where it would not end in time; the
        smallest unit of its kind goes on anyway in a call that has nearly all of its time left."""
        estimate = self.cost(kind, estimate)
        if estimate > self.left() and not (smallest and self.left() >= 0.9 * self.call_s):
            raise Stop(f"{what}: about {estimate:.0f} s, {max(self.left(), 0):.0f} s left in this call")
        print(f"[cluster_bench] {what} (about {estimate:.0f} s)", flush=True)
        self.data["running"] = dict(kind=kind, estimate=estimate, ran_s=self.left())  # ran_s: if the call ends it
        self.save()

    def end(self) -> None:
        self.data.pop("running", None)
        self.save()


def connect(address: str):
    """(ray, whether this call started the cluster): a local one is started here with a small object store
    (the jobs are small) and Ray's memory monitor off (some GPU machines' memory starts small and grows as it
    is used: the monitor would kill workers); a cluster this process joined already is used as it is."""
    ray = pool_.require_ray()
    started = address == "local" and not ray.is_initialized()
    if started:
        os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
        ray.init(include_dashboard=False, logging_level="WARNING", object_store_memory=2 << 30)
    return pool_.connect(address), started


class Killer:
    """on_submit for a pool: the worker that takes hand-over number `at` (1-based; with `seasoned`, the first
    from then on that finished a job before) is killed `delay` s later, by pid (SIGKILL) on this host."""

    def __init__(self, ray, at: int, delay: float, seasoned: bool):
        self.ray, self.at, self.delay, self.seasoned = ray, at, delay, seasoned
        self.handed, self.taken, self.victim = 0, {}, None

    def __call__(self, member, job) -> None:
        self.handed += 1
        pid = member.info["pid"]
        self.taken[pid] = self.taken.get(pid, 0) + 1
        if self.victim or self.handed < self.at or (self.seasoned and self.taken[pid] < 2):
            return
        self.victim = dict(member.info, job=str(job.key), handover=self.handed, worker=worker.name(member.info))
        here = member.info["host"] == socket.gethostname()
        threading.Timer(self.delay, self._kill, (pid if here else member.handle,)).start()

    def _kill(self, target) -> None:
        try:
            os.kill(target, signal.SIGKILL) if isinstance(target, int) else self.ray.kill(target, no_restart=True)
        except ProcessLookupError:  # its pool ended first
            pass


def workers_of(ray, device: str, wanted: int | None) -> int:
    slots = pool_.slots(ray.nodes(), ray.cluster_resources().get("CPU", 0), device)
    return min(wanted or len(slots), len(slots))


# ---------------------------------------------------------------------------------------------- sweep


def sweep_kwargs(op: str, a, device: str) -> dict:
    """One op's part of the full sweep: plan.plan's and bench's arguments alike."""
    spec = registry.spec(op)
    return dict(variants=a.variants or "all",
                dtypes=a.dtypes or (["float32", "float16", "bfloat16"] if device == "cuda" else ["float32"]),
                shapes=[[int(d) for d in s.split("x")] for s in a.shapes] if a.shapes else None,
                baselines=a.baselines or list(baselines_of(spec)),
                directions=[d for d in (a.directions or spec.benched_directions) if d == "fwd" or spec.differentiable])


def one_process(spec: dict) -> None:
    """The child: the ops' sweep in this one process, its rows to spec["rows"]; prints its bench calls' time."""
    from workbench.measure.benchmark import bench

    info = dict(host=socket.gethostname(), pid=os.getpid(), device=spec["device"],
                cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    per_op = {}
    for op, kw in spec["ops"].items():
        started = time.perf_counter()
        r = bench(op, device=spec["device"], budget_s=spec["budget"], **kw)
        per_op[op] = time.perf_counter() - started
        bench_rows.append_rows(pathlib.Path(spec["rows"]), [dict(row, worker=worker.name(info)) for row in r.rows])
    print(json.dumps({"sweep_s": sum(per_op.values()), "per_op_s": per_op}))


def ray_sweep(ray, groups, a, device: str, n: int, rows: pathlib.Path, killer=None) -> dict:
    from workbench.measure.benchmark import bench

    started = time.perf_counter()
    out = sweep.run(bench, groups, cluster=a.address, device=device, budget_s=a.budget, save=True,
                    results_path=rows, max_workers=n, on_submit=killer)
    marker = "retried after a worker died: "
    return dict(seconds=time.perf_counter() - started, rows=len(out.rows),
                retried=[k for note in out.notes if marker in note for k in note.split(marker, 1)[1].split(", ")],
                lost=[note for note in out.notes if note.startswith("NOT MEASURED")])


def cells(rows) -> list[tuple]:
    return sorted(tuple(str(r.get(k)) for k in CELL) for r in rows)


def compare(one: list[dict], ray: list[dict], device: str) -> dict:
    """The Ray rows against the one-process rows: the same cells and verdicts, the medians' spread, and
    whether each Ray row names its GPU (its worker, host:gpuK) and the clocks it ran at."""
    by = {tuple(str(r.get(k)) for k in CELL): r for r in one}
    diffs, verdicts = [], []
    for r in ray:
        o = by.get(tuple(str(r.get(k)) for k in CELL))
        if o is None:
            continue
        if (o.get("verified"), o.get("impossible")) != (r.get("verified"), r.get("impossible")):
            verdicts.append(f"{'/'.join(str(r.get(k)) for k in CELL)}: {o.get('verified')} vs {r.get('verified')}")
        if o.get("median_ms") and r.get("median_ms"):
            diffs.append((abs(r["median_ms"] / o["median_ms"] - 1) * 100, "/".join(str(r.get(k)) for k in CELL)))
    named = [r for r in ray
             if ":gpu" in str(r.get("worker")) and r.get("gpu") and (r.get("clocks") or {}).get("sm_mhz_max")]
    per_worker = {}
    for r in ray:
        per_worker[r.get("worker")] = per_worker.get(r.get("worker"), 0) + 1
    diffs.sort()
    return dict(rows=len(ray), one_process_rows=len(one), same_cells=cells(one) == cells(ray),
                verdicts_differ=verdicts[:5],
                median_diff_pct=round(statistics.median(d for d, _ in diffs), 2) if diffs else None,
                within_10pct=round(sum(d <= 10 for d, _ in diffs) / len(diffs), 3) if diffs else None,
                worst=[round(diffs[-1][0], 1), diffs[-1][1]] if diffs else None,
                named_gpu_and_clocks=len(named) if device == "cuda" else None, per_worker=per_worker)


def run_sweep(state: State, a, ray, device: str, n: int) -> None:
    ops = a.ops or registry.ops()
    kw = {op: sweep_kwargs(op, a, device) for op in ops}
    sec = state.section("sweep", dict(ops=ops, kwargs=kw, budget=a.budget, device=device, workers=n))
    plans = {op: plan_.plan(op, **kw[op], device=device) for op in ops}
    size = {op: len(plans[op]) for op in ops}
    colds, pairs = sec.setdefault("cold", []), sec.setdefault("pairs", [])

    def rate(units, seconds, prior):  # seconds a group, from the units done
        groups = sum(sum(size[o] for o in u["ops"]) for u in units)
        return max(sum(seconds(u) for u in units), 1.0) / groups if groups else prior

    while True:
        warm = [o for u in colds if u["machine"] == machine() for o in u["ops"]]  # inductor's caches are this machine's
        paired = {o for u in pairs for o in u["ops"]}
        cold_rate = rate(colds, lambda u: u["seconds"] - START_S, GROUP_S * 1.3 / n)
        pair_rate = rate(pairs, lambda u: u["one_s"] + u["ray_s"] - START_S, cold_rate * n * WARM * (1 + 1.25 / n))
        todo = [o for o in warm if o not in paired]
        cold = [o for o in ops if o not in warm and o not in paired]
        pair_est = lambda chosen: START_S + 15 + pair_rate * sum(size[o] for o in chosen)  # noqa: E731
        kill = not colds
        eff = n - 0.5 if kill and n > 1 else n   # a worker fewer for half of the kill's unit
        cold_est = lambda chosen: START_S + cold_rate * n / eff * sum(size[o] for o in chosen)  # noqa: E731
        # The most warm ops whose pair ends in this call; else (or where no pair would fit) the next cold ops.
        if todo and (not cold or state.cost("pair", pair_est(todo[:1])) <= state.left()
                     or state.cost("cold", cold_est(cold[:1])) > state.left()):
            take = state.largest("pair", todo, pair_est)
            state.begin("pair", pair_est(take), f"sweep pair {' '.join(take)}", smallest=len(take) == 1)
            pairs.append(pair_unit(state, a, ray, device, n, take, kw, plans, len(pairs) + 1))
        elif cold:
            take = state.largest("cold", cold, cold_est)
            what = f"sweep cold {' '.join(take)}" + (" (a worker killed mid-sweep)" if kill else "")
            state.begin("cold", cold_est(take), what, smallest=len(take) == 1)
            colds.append(cold_unit(state, a, ray, device, n, take, plans, kill, len(colds) + 1))
        else:
            return
        state.end()


def cold_unit(state: State, a, ray, device, n, ops, plans, kill: bool, k: int) -> dict:
    groups = [g for op in ops for g in plans[op]]
    rows_path = state.folder / "rows" / f"cold-{k}.jsonl"
    rows_path.unlink(missing_ok=True)
    killer = Killer(ray, max(n + 1, len(groups) // 2 + 1), a.kill_delay, seasoned=True) if kill else None
    got = ray_sweep(ray, groups, a, device, n, rows_path, killer)
    rows = bench_rows.read_rows(rows_path)
    unit = dict(ops=ops, machine=machine(), groups=len(groups), **got, file_rows=len(rows),
                duplicates=len(rows) - len(set(cells(rows))))
    if killer and killer.victim:
        v = killer.victim
        retried_rows = [r for r in rows if f"{r['op']} {r['direction']} {r['dtype']} {r['shape']}" == v["job"]]
        unit["kill"] = dict(worker=v["worker"], pid=v["pid"], job=v["job"], handover=v["handover"], delay_s=a.kill_delay,
                            rows_kept_from_victim=sum(r.get("worker") == v["worker"] for r in rows),
                            job_retried=v["job"] in got["retried"],
                            job_rows_from=sorted({r.get("worker") for r in retried_rows}))
    elif kill:
        unit["kill"] = dict(worker=None, why=f"{len(groups)} groups: too few for a kill after half of them")
    return unit


def pair_unit(state: State, a, ray, device, n, ops, kw, plans, k: int) -> dict:
    one_path, ray_path = (state.folder / "rows" / f"{what}-{k}.jsonl" for what in ("one", "ray"))
    one_path.unlink(missing_ok=True)
    ray_path.unlink(missing_ok=True)
    spec = dict(ops={op: kw[op] for op in ops}, device=device, budget=a.budget, rows=str(one_path))
    env = dict(os.environ, WORKBENCH_QUIET="1", **({"CUDA_VISIBLE_DEVICES": "0"} if device == "cuda" else {}))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "one-process", json.dumps(spec)], env=env, stdout=subprocess.PIPE,
                          text=True, check=False)
    child_s = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"the one-process sweep of {ops} failed (status {proc.returncode})")
    one = json.loads(proc.stdout.strip().splitlines()[-1])
    got = ray_sweep(ray, [g for op in ops for g in plans[op]], a, device, n, ray_path)
    one_rows = bench_rows.read_rows(one_path)
    cold = [r for f in (state.folder / "rows").glob("cold-*.jsonl") for r in bench_rows.read_rows(f) if r["op"] in ops]
    return dict(ops=ops, machine=machine(), one_s=one["sweep_s"], one_child_s=child_s, one_per_op_s=one["per_op_s"],
                ray_s=got["seconds"], ray_lost=got["lost"], cold_same_cells=cells(cold) == cells(one_rows),
                compare=compare(one_rows, bench_rows.read_rows(ray_path), device))


# ---------------------------------------------------------------------------------------------- grade


def submissions(count: int) -> list[dict]:
    """`count` submissions cycling through judge_cases' cases, each named for its exercise, place and file."""
    cases = judge_cases.cases()
    out = []
    for i in range(count):
        ex, path, _ = cases[i % len(cases)]
        p = pathlib.Path(path)
        out.append(dict(name=f"e{ex:02d}_{i:03d}_{p.stem}{p.suffix}", exercise=ex, source=path))
    return out


def jobs_for(subs: list[dict], salt: str, a) -> list[dict]:
    """exercise grade's jobs (grade.jobs, one folder per exercise), each file with a comment of its own."""
    root = pathlib.Path(tempfile.mkdtemp(prefix=f"cluster-bench-{salt}-"))
    try:
        folders = {}
        for s in subs:
            folder = folders.setdefault(s["exercise"], root / f"ex{s['exercise']:02d}")
            folder.mkdir(exist_ok=True)
            (folder / s["name"]).write_text((REPO / s["source"]).read_text() + f"\n// {s['name']} ({salt})\n")
        made = {j["name"]: j for ex, f in folders.items()
                for j in grade.jobs(ex, f, seed=a.seed, timeout_s=a.grade_timeout)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return [made[s["name"]] for s in subs]


KEPT = ("submission", "status", "failure_class", "first_failure", "checks", "verdict", "seconds", "worker")


def kept(row: dict) -> dict:
    return {k: row.get(k) for k in KEPT}


def verdict(row: dict) -> tuple:
    return row["status"], row.get("failure_class") or ""


def run_grade(state: State, a, ray, device: str, n: int) -> None:
    from workbench.judge import sandbox

    if sandbox.missing():
        raise SystemExit(f"grading needs the judge's sandbox, and {sandbox.missing()} (on the GPU machine: carry .debs, "
                         f"scripts/gpu_run.sh unpacks bubblewrap into WORKBENCH_BWRAP)")
    subs = submissions(a.submissions)
    sec = state.section("grade", dict(submissions=a.submissions, seed=a.seed, timeout=a.grade_timeout, device=device,
                                      workers=n))
    batches = sec.setdefault("batches", [])
    while True:
        serial = {k: v for b in batches for k, v in b["serial"].items()}
        t = (sum(v["seconds"] for v in serial.values()) / len(serial)) if serial else SUBMISSION_S
        ray_rate = sum(b["ray_s"] - START_S for b in batches) / sum(len(b["names"]) for b in batches) \
            if batches else t / n * 1.3
        ray_rate = max(ray_rate, 1.0)
        open_ = next((b for b in batches if len(b["serial"]) < len(b["names"])), None)
        graded = [s for s in subs if s["name"] in serial]
        if open_:  # the serial half of a batch, one submission at a time
            s = next(s for s in subs if s["name"] in open_["names"] and s["name"] not in open_["serial"])
            state.begin("serial", t, f"grade serially {s['name']}", smallest=True)
            started = time.perf_counter()
            row = grade.grade_job(jobs_for([s], "serial", a)[0])
            open_["serial"][s["name"]] = dict(kept(row), seconds=time.perf_counter() - started)
        elif "kill" not in sec and len(graded) >= min(2 * n + 1, len(subs)):
            take = graded[:2 * n + 1]
            state.begin("ray_grade", START_S + ray_rate * len(take) * n / max(n - 1, 1),
                        f"grade {len(take)} through Ray, a worker killed mid-grading", smallest=True)
            sec["kill"] = kill_unit(ray, a, device, n, take, serial)
        elif sum(len(b["names"]) for b in batches) < len(subs):
            rest = [s for s in subs if not any(s["name"] in b["names"] for b in batches)]
            take = state.largest("ray_grade", rest, lambda b: START_S + len(b) * (ray_rate + t))  # its serial half too
            if len(take) < min(n, len(rest)) and state.left() < 0.9 * state.call_s:
                raise Stop(f"grading: a batch of {min(n, len(rest))} would not fit the {state.left():.0f} s left")
            state.begin("ray_grade", START_S + ray_rate * len(take), f"grade {len(take)} through Ray", smallest=True)
            jobs = jobs_for(take, f"ray-{len(batches) + 1}", a)
            started = time.perf_counter()
            rows = grading.spread(a.address, device=device, max_workers=n)(jobs)
            batches.append(dict(names=[s["name"] for s in take], machine=machine(), ray_s=time.perf_counter() - started,
                                ray={r["submission"]: kept(r) for r in rows}, serial={}))
        else:
            return
        state.end()


def kill_unit(ray, a, device: str, n: int, take: list[dict], serial: dict) -> dict:
    killer = Killer(ray, min(n + 1, len(take)), a.kill_delay, seasoned=False)
    started = time.perf_counter()
    rows = grading.spread(a.address, device=device, max_workers=n, on_submit=killer)(jobs_for(take, "kill", a))
    again = [r for r in rows if "graded again" in str(r.get("worker"))]
    victim = killer.victim and {k: killer.victim[k] for k in ("worker", "pid", "job", "handover")}
    return dict(submissions=len(take), machine=machine(), seconds=time.perf_counter() - started, victim=victim,
                delay_s=a.kill_delay, verdicts=len(rows),
                not_graded=[r["submission"] for r in rows if "not graded" in str(r.get("verdict"))],
                same_as_serial=all(verdict(r) == verdict(serial[r["submission"]]) for r in rows) and len(rows) == len(take),
                graded_again=[[r["submission"], r["worker"]] for r in again])


# ---------------------------------------------------------------------------------------------- table


def totals(data: dict, n: int, device: str) -> dict:
    """The figures the issue asks for, over the units done: wall times, ratios against 1.25/N, verdicts."""
    out = {"workers": n, "device": device, "target_ratio": 1.25 / n}
    if "sweep" in data:
        pairs = data["sweep"].get("pairs", [])
        one, on_ray = sum(p["one_s"] for p in pairs), sum(p["ray_s"] for p in pairs)
        done = [o for p in pairs for o in p["ops"]]
        out["sweep"] = dict(one_process_s=one, ray_s=on_ray, ratio=on_ray / one if one else None, ops_done=done,
                            ops_left=[o for o in data["sweep"]["params"]["ops"] if o not in done])
        out["sweep"]["done"] = not out["sweep"]["ops_left"]
    if "grade" in data:
        g = data["grade"]
        full = [b for b in g.get("batches", []) if len(b["serial"]) == len(b["names"])]
        serial, on_ray = sum(v["seconds"] for b in full for v in b["serial"].values()), sum(b["ray_s"] for b in full)
        statuses = {}
        for r in (r for b in full for r in b["ray"].values()):
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        graded = sum(len(b["names"]) for b in full)
        same = sum(verdict(b["ray"][m]) == verdict(b["serial"][m]) for b in full for m in b["names"])
        out["grading"] = dict(graded=graded, serial_s=serial, ray_s=on_ray, ratio=on_ray / serial if serial else None,
                              batches=len(full), statuses=statuses, identical=same,
                              left=g["params"]["submissions"] - graded, kill_done="kill" in g,
                              done=graded == g["params"]["submissions"] and "kill" in g)
    parts = [out[k] for k in ("sweep", "grading") if k in out]
    out["done"] = bool(parts) and all(p["done"] for p in parts)
    return out


def table(data: dict, f: dict) -> str:
    n, target = f["workers"], f["target_ratio"]
    met = lambda r: "-" if r is None else ("MET" if r <= target else "MISSED")  # noqa: E731
    lines = []
    at = (lambda u: f" @{u['machine']}") if len(data.get("machines", {})) > 1 else (lambda u: "")  # noqa: E731
    if "sweep" in f:
        s, t = data["sweep"], f["sweep"]
        lines += [f"sweep on {n} {f['device']} workers (budget {s['params']['budget']} s), target 1.25/{n} = {target:.3f}",
                  f"  {'unit':38s} {'one proc s':>10s} {'ray s':>7s} {'ratio':>6s}  rows"]
        for c in s.get("cold", []):
            k = c.get("kill") or {}
            kill = (f"; killed {k['worker']} {k['delay_s']} s into '{k['job']}': retried once "
                    f"{'yes' if k['job_retried'] else 'NO'} (rows from {', '.join(k['job_rows_from'])}), "
                    f"{k['rows_kept_from_victim']} of its rows kept") if k.get("worker") else (f"; {k['why']}" if k else "")
            lines.append(f"  cold {' '.join(c['ops'])[:33]:33s} {'':>10s} {c['seconds']:7.1f} {'':>6s}  {c['file_rows']} rows, "
                         f"{c['duplicates']} twice, {len(c['lost'])} lost{kill}{at(c)}")
        for p in s.get("pairs", []):
            c = p["compare"]
            lines.append(f"  pair {' '.join(p['ops'])[:33]:33s} {p['one_s']:10.1f} {p['ray_s']:7.1f} "
                         f"{p['ray_s'] / p['one_s']:6.3f}  {c['rows']}/{c['one_process_rows']}, same cells "
                         f"{'yes' if c['same_cells'] else 'NO'} (cold run's too: {'yes' if p['cold_same_cells'] else 'NO'}), "
                         f"verdicts differ {len(c['verdicts_differ'])}, median |diff| {c['median_diff_pct']}%, "
                         f"{c['within_10pct']} within 10%" + ("" if c["named_gpu_and_clocks"] is None else
                                                              f", GPU+clocks named {c['named_gpu_and_clocks']}") + at(p))
        lines.append(f"  {'total' + (' so far' if t['ops_left'] else ''):38s} {t['one_process_s']:10.1f} {t['ray_s']:7.1f} "
                     f"{t['ratio'] or 0:6.3f}  {met(t['ratio'])}" + (f"; left: {' '.join(t['ops_left'])}" if t["ops_left"] else ""))
    if "grading" in f:
        g, t = data["grade"], f["grading"]
        lines += [f"grading on {n} {f['device']} workers: {t['graded']} of {g['params']['submissions']} submissions graded "
                  f"both ways, {t['identical']} verdicts identical; {t['statuses']}",
                  f"  serial {t['serial_s']:.1f} s, through Ray {t['ray_s']:.1f} s (in {t['batches']} batch(es), each starting "
                  f"its workers): ratio {t['ratio'] or 0:.3f}, target {target:.3f}: {met(t['ratio'])}"]
        k = g.get("kill")
        if k:
            v = k["victim"] or {}
            lines.append(f"  kill: {k['submissions']} through Ray, {v.get('worker', 'no worker')} killed {k['delay_s']} s into "
                         f"{v.get('job')}; {k['verdicts']} verdicts back, {len(k['not_graded'])} not graded, equal to serial: "
                         f"{'yes' if k['same_as_serial'] else 'NO'}; graded again: "
                         + (", ".join(f"{a} on {b}" for a, b in k["graded_again"]) or "none"))
    parts = [f"{k}: {'done' if f[k]['done'] else 'not done'}" for k in ("sweep", "grading") if k in f]
    lines.append("; ".join(parts or ["nothing done yet"]) + ("" if f["done"] else ": run the same command again (the next call)"))
    return "\n".join(lines)


def write_out(state: State, out: pathlib.Path, f: dict) -> None:
    """cluster.json: every unit with the machines' provenance and the totals (--resume takes it up on
    another machine); cluster_table.txt; cluster_rows.jsonl.gz: the rows this machine measured."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster.json").write_text(json.dumps(dict(state.data, totals=f), indent=1))
    (out / "cluster_table.txt").write_text(table(state.data, f) + "\n")
    with gzip.open(out / "cluster_rows.jsonl.gz", "wt") as z:
        for path in sorted((state.folder / "rows").glob("*.jsonl")):
            for row in bench_rows.read_rows(path):
                z.write(json.dumps(dict(row, run=path.stem.split("-")[0], unit=path.stem)) + "\n")


def provenance(ray, device: str) -> dict:
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if device == "cuda" else []
    return dict(bench_rows.provenance(REPO), gpus=gpus, host_cpus=os.cpu_count(), ray=ray.__version__)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["sweep", "grade", "table", "workers", "one-process"])
    p.add_argument("spec", nargs="?", help=argparse.SUPPRESS)
    p.add_argument("--state", type=pathlib.Path, default=pathlib.Path("/tmp/ray44"))
    p.add_argument("--out", type=pathlib.Path)
    p.add_argument("--deadline-at", type=float, help="seconds since the epoch by which this call's units end (default: none)")
    p.add_argument("--call-s", type=float, default=550.0, help="how long a whole call is (sizes the units)")
    p.add_argument("--fresh", action="store_true", help="forget what --state holds and start over")
    p.add_argument("--resume", type=pathlib.Path, help="an earlier machine's cluster.json, where --state holds nothing")
    p.add_argument("--address", default="local")
    p.add_argument("--workers", type=int, help="N (default: every GPU of the cluster, or every CPU)")
    p.add_argument("--device", choices=["cuda", "cpu"])
    p.add_argument("--budget", type=float, default=0.5, help="seconds of sampling per row at most (the GPU sweep's)")
    p.add_argument("--kill-delay", type=float, default=2.0, help="seconds into its job a worker is killed")
    for name in ("ops", "variants", "dtypes", "shapes", "baselines", "directions"):
        p.add_argument(f"--{name}", nargs="+")
    p.add_argument("--submissions", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--grade-timeout", type=float, default=600.0, help="one submission's limit, s")
    a = p.parse_args(argv)
    if a.what == "one-process":
        one_process(json.loads(a.spec))
        return 0
    if a.workers is not None and a.workers < 1:
        p.error(f"--workers must be at least 1; got {a.workers}")
    if a.what == "workers":  # a smoke test: one worker per GPU started, each saying where it runs
        ray, started_here = connect(a.address)
        device = a.device or ("cuda" if ray.cluster_resources().get("GPU", 0) else "cpu")
        with pool_.Pool(ray, device, max_workers=workers_of(ray, device, a.workers)) as workers:
            print(workers.describe(), *(f"  {worker.name(m.info)} pid {m.info['pid']}: {m.info['gpu'] or 'CPU'}"
                                        for m in workers.members), sep="\n")
        if started_here:
            ray.shutdown()
        return 0
    if a.fresh:
        shutil.rmtree(a.state, ignore_errors=True)
    state = State(a.state, a.deadline_at or time.time() + 10 * 86400, a.call_s, a.resume)
    if a.what == "table":
        params = (state.data.get("sweep") or state.data.get("grade") or {}).get("params")
        if not params:
            raise SystemExit(f"--state {a.state} holds no units (and --resume named no cluster.json)")
        finish(state, a, params["workers"], params["device"])
        return 0
    ray, started_here = connect(a.address)
    device = a.device or ("cuda" if ray.cluster_resources().get("GPU", 0) else "cpu")
    n = workers_of(ray, device, a.workers)
    try:
        (run_sweep if a.what == "sweep" else run_grade)(state, a, ray, device, n)
    except Stop as e:
        print(f"[cluster_bench] left for the next call: {e}")
    except BaseException as e:
        if not (isinstance(e, SystemExit) and e.code == 143):  # not the call's limit: no unit was cut short
            state.end()
        raise
    finally:
        if started_here:
            ray.shutdown()
        state.data.setdefault("machines", {}).setdefault(machine(), provenance(ray, device))  # no CUDA here before
        finish(state, a, n, device)
    return 0


def finish(state: State, a, n: int, device: str) -> None:
    state.save()
    f = totals(state.data, n, device)
    if a.out:
        write_out(state, a.out, f)
    print(table(state.data, f))


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a call's limit: finally-blocks end the cluster
    sys.exit(main())
