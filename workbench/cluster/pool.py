"""Ray, and the pool of workers on it (one per GPU, routed by GPU type, or per CPU) handing jobs to
idle workers; a job a dead worker had in flight is retried once on another. Ray is imported here alone."""
from __future__ import annotations

import re
import sys
from collections import deque
from dataclasses import dataclass, field

from .. import config
from ..errors import WorkbenchError
from ..config import child_env
from .worker import Worker

INSTALL = 'pip install "ray[default]"   (or, with the workbench: pip install "kernel-workbench[ray]")'
START_TIMEOUT_S = 600   # a worker's start: placed by Ray, torch imported, CUDA context made
_HOST_PORT = re.compile(r"[A-Za-z0-9.\-]+:\d+")


class RayNotInstalled(WorkbenchError, ImportError):
    """cluster= (or --ray) was asked for where Ray is not importable."""


def require_ray():
    """The ray module, or an error that says how to install it."""
    try:
        import ray
    except ImportError as e:
        raise RayNotInstalled(f"running on a cluster needs Ray, which is not importable here ({e}): {INSTALL}") from None
    return ray


def check_address(address) -> str:
    if not isinstance(address, str) or not (address in ("local", "auto") or address.startswith("ray://")
                                            or _HOST_PORT.fullmatch(address)):
        raise ValueError(f"cluster must be 'local' (a Ray cluster on this machine), 'auto' (the cluster this machine "
                         f"belongs to, else a local one), 'ray://HOST:PORT' or 'HOST:PORT'; got {address!r}")
    return address


def connect(address: str):
    """The ray module, joined to the cluster at `address` (one already joined is used as it is)."""
    check_address(address)
    ray = require_ray()
    if ray.is_initialized():
        return ray
    quiet = dict(include_dashboard=False, logging_level="WARNING")
    if address == "auto":
        try:
            ray.init(address="auto", **quiet)
        except ConnectionError:  # no running cluster to join: one on this machine
            ray.init(**quiet)
    else:
        ray.init(address=address, **quiet)
    return ray


def slots(nodes: list[dict], cpus: float, device: str, gpu_types=None) -> list[tuple[str | None, dict]]:
    """(GPU type, Ray actor options) of each worker to make: one per GPU of every live node, of the
    type the node declares ("gpu_type:H100" resources, `ray start --resources='{"gpu_type:H100": 8}'`)
    or Ray detected (accelerator_type); on a CPU sweep, one per CPU."""
    if device == "cpu":
        return [(None, {"num_cpus": 1})] * int(cpus)
    out = []
    for node in nodes:
        if not node.get("Alive", True):
            continue
        res = node.get("Resources", {})
        declared = {k.split(":", 1)[1]: int(v) for k, v in res.items() if k.startswith("gpu_type:")}
        for t, n in declared.items():
            out += [(t, {"num_gpus": 1, "resources": {f"gpu_type:{t}": 1}})] * n
        if not declared and int(res.get("GPU", 0)):
            detected = next((k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")), None)
            opts = {"num_gpus": 1} | ({"accelerator_type": detected} if detected else {})
            out += [(detected, opts)] * int(res["GPU"])
    if gpu_types:
        have = {t for t, _ in out}
        missing = [t for t in gpu_types if t not in have]
        if missing:
            raise ValueError(f"gpu_types: the cluster has no GPU of type {missing} (it has {sorted(map(str, have))})")
        out = [s for s in out if s[0] in gpu_types]
    if not out:
        raise WorkbenchError("the cluster has no GPU: run a CPU sweep (device='cpu') or join a cluster with GPUs")
    return out


@dataclass
class Job:
    """One unit of work: what the worker gets, and the GPU type it must run on (None: any)."""
    key: object
    payload: object
    gpu_type: str | None = None
    attempts: int = 0
    errors: list = field(default_factory=list)


@dataclass
class Member:
    handle: object
    gpu_type: str | None
    info: dict


class Pool:
    """The workers of one run, made at once (each warms up in parallel) and ended by close()."""

    def __init__(self, ray, device: str, gpu_types=None, max_workers: int | None = None):
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ValueError(f"max_workers must be a whole number of workers, at least 1; got {max_workers!r}")
        self.ray = ray
        remote = ray.remote(Worker)
        wanted = slots(ray.nodes(), ray.cluster_resources().get("CPU", 0), device, gpu_types)[:max_workers]
        env = {"WORKBENCH_QUIET": "1"}  # the caller draws one progress bar
        if not config.INSTALLED:  # a checkout's workbench importable, as a runner's
            env["PYTHONPATH"] = child_env()["PYTHONPATH"]
        made = [(t, remote.options(max_restarts=0, runtime_env={"env_vars": env}, **opts).remote(device))
                for t, opts in wanted]
        try:
            infos = ray.get([h.info.remote() for _, h in made], timeout=START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            for _, h in made:
                ray.kill(h)
            raise WorkbenchError(f"{len(made)} worker(s) asked for ({wanted[0][1]} each) did not all start within "
                                 f"{START_TIMEOUT_S} s: is another run holding the cluster's GPUs or CPUs?") from None
        self.members = [Member(h, t, info) for (t, h), info in zip(made, infos)]
        self.retried: list[Job] = []
        self.lost: list[Job] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for m in self.members:
            self.ray.kill(m.handle)
        self.members = []

    def broadcast(self, call) -> list:
        """call(handle) on every worker at once; their results, in the workers' order."""
        return self.ray.get([call(m.handle) for m in self.members])

    def run(self, jobs: list[Job], submit, on_result, on_submit=None) -> None:
        """Hand each job to an idle worker that may take it (submit(handle, payload) -> ObjectRef);
        on_result(job, value, member) as each finishes, on_submit(member, job) after each hand-over.
        A dead worker's job goes back to the queue once; a second death loses it (self.lost). An
        error the job itself raised is raised here."""
        from ray.exceptions import RayActorError

        queue, idle, flying = deque(jobs), list(self.members), {}
        while queue or flying:
            for m in list(idle):
                job = next((j for j in queue if j.gpu_type in (None, m.gpu_type)), None)
                if job is None:
                    continue
                queue.remove(job)
                idle.remove(m)
                flying[submit(m.handle, job.payload)] = (m, job)
                if on_submit is not None:
                    on_submit(m, job)
            if not flying:  # jobs left that no live worker may take
                self.lost += [self._lose(j, "no live worker can take it") for j in queue]
                return
            (ref,), _ = self.ray.wait(list(flying), num_returns=1)
            member, job = flying.pop(ref)
            try:
                value = self.ray.get(ref)
            except RayActorError as e:
                self.members.remove(member)
                job.attempts += 1
                job.errors.append(f"{member.info['host']} pid {member.info['pid']}: {type(e).__name__}")
                if job.attempts > 1:
                    self.lost.append(self._lose(job, "its worker died twice"))
                else:
                    self.retried.append(job)
                    queue.appendleft(job)
                print(f"[cluster] a worker died ({job.errors[-1]}); "
                      f"{'retrying' if job.attempts == 1 else 'giving up on'} {job.key}", file=sys.stderr, flush=True)
                continue
            idle.append(member)
            on_result(job, value, member)

    @staticmethod
    def _lose(job: Job, why: str) -> Job:
        job.errors.append(why)
        return job

    def describe(self) -> str:
        hosts = sorted({m.info["host"] for m in self.members})
        gpus = sorted({m.info["gpu"] for m in self.members if m.info.get("gpu")})
        return (f"{len(self.members)} worker(s) on {len(hosts)} host(s)"
                + (f" ({', '.join(gpus)})" if gpus else " (CPU)"))
