"""The NVRTC tier's kernels: one NVRTC program per kernel, compiled when first launched or, before
that, in the background (issue 27's edit loop).

A build (nvrtc_tier.compile_nvrtc) only checks the device view: NVRTC's front end with every kernel
instantiated (-fdevice-syntax-only; tens of ms), so a device error is still a BuildError naming
file:line. Almost all of NVRTC's time is its optimizer and ptxas, per kernel (rmsnorm/vectorized
instantiates 60 kernels, about 45 ms each on the 2-core machine). So each kernel is its own program:

- A *unit* is what compiles every kernel of one device view: its texts, options and the kernels
  (nvcc's canonical name -> name expression), stored once as nvrtc-kernels/<unit key>.json. Its key
  covers the device view alone: an edit of a launcher reuses every compiled kernel.
- A kernel's cubin is nvrtc-kernels/<kernel key>.cubin, with NVRTC's lowered name (.name) and log
  (.log, ptxas's registers and spills) beside it, each written atomically. Another process finds it
  there; a missing one is compiled again (a process that exited mid-way loses nothing but time).
- `provide` is what a launch asks for (through the routed library's provider, run/nvrtc_routes.py):
  a kernel on disk is returned at once; one queued is taken off the queue and compiled in the
  caller's thread (the first call's kernels first); one being compiled is waited for.
- The background: daemon threads, one fewer than the cores this process may use (at least one),
  compile the queued kernels; a newer unit of the same label drops the older unit's queued kernels
  (an edit supersedes them). `drain` waits for the queue: the timers call it, so no measurement
  shares the CPU with a compile.

The cache folder is private (store.subdir), so a cubin found there is this user's own.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import pathlib
import threading

from . import nvrtc, store


def _folder() -> pathlib.Path:
    return store.subdir("nvrtc-kernels")


@dataclasses.dataclass(frozen=True)
class Unit:
    """Every kernel of one device view: NVRTC compiles `texts[main]` (the others are its headers)."""
    key: str
    label: str
    main: str
    texts: dict[str, str]
    options: list[str]
    kernels: dict[str, str]  # nvcc's canonical name -> name expression

    def kernel_key(self, name: str) -> str:
        return hashlib.sha256(f"{self.key}\n{self.kernels[name]}".encode()).hexdigest()[:32]


def make_unit(label: str, main: str, texts: dict[str, str], options: list[str], kernels: dict[str, str]) -> Unit:
    """The unit, its key over the device texts, options, NVRTC version and our system headers (the
    label is not in it: two copies of one file share their kernels)."""
    blob = json.dumps([main, sorted(texts.items()), options, nvrtc.version(), nvrtc.headers_digest(),
                       sorted(set(kernels.values()))])
    return Unit(hashlib.sha256(blob.encode()).hexdigest()[:32], label, main, texts, options, kernels)


def save(unit: Unit) -> None:
    path = _folder() / f"{unit.key}.json"
    if not path.is_file():
        with store.writing(f"writing the NVRTC unit of {unit.label}"):
            store.write_text(path, json.dumps(dataclasses.asdict(unit)))
    _units[unit.key] = unit


_units: dict[str, Unit] = {}


def unit(key: str) -> Unit:
    """The unit of that key (this process's, else the stored one)."""
    if key not in _units:
        path = _folder() / f"{key}.json"
        try:
            _units[key] = Unit(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as e:
            raise KernelCompileError(f"the NVRTC unit {path} cannot be read ({e}); rebuild the variant "
                                     f"(`python -m workbench clean` removes its build)") from None
    return _units[key]


class KernelCompileError(Exception):
    """NVRTC could not compile one kernel (past the front end the build checked: the optimizer's or
    ptxas's error, e.g. too much shared memory); args[0] says which and why."""


def compiled(u: Unit, name: str) -> tuple[pathlib.Path, str] | None:
    """(cubin, lowered name) of a kernel already compiled (by any process), else None."""
    try:
        cubin, lowered = (_folder() / f"{u.kernel_key(name)}.name").read_text().split("\n", 1)
    except (FileNotFoundError, ValueError):
        return None
    return _folder() / cubin, lowered


def _compile(u: Unit, names: list[str]) -> None:
    """One NVRTC program for these kernels of the unit: its cubin, and per kernel its .name (the cubin
    and NVRTC's name, written last: it marks the kernel done) and .log."""
    expressions = [u.kernels[n] for n in names]
    try:
        cubin, lowered, log = nvrtc.compile_program(u.main, u.texts, u.options, expressions)
    except nvrtc.NvrtcError as e:
        which = expressions[0][1:] if len(names) == 1 else f"{len(names)} kernels"
        lines = e.args[0].strip().splitlines() or ["?"]
        first = next((ln for ln in lines if "error" in ln.lower()), lines[0])  # not a warning before it
        raise KernelCompileError(f"{u.label}: NVRTC could not compile {which}: {first.strip()}") from None
    name = hashlib.sha256("\n".join(u.kernel_key(n) for n in names).encode()).hexdigest()[:32] + ".cubin"
    tmp = _folder() / f".{name}-{os.getpid()}-{threading.get_ident()}"
    tmp.write_bytes(cubin)
    os.replace(tmp, _folder() / name)
    for n, expression in zip(names, expressions):
        store.write_text(_folder() / f"{u.kernel_key(n)}.log", f"{expression}\n{log}")
        store.write_text(_folder() / f"{u.kernel_key(n)}.name", f"{name}\n{lowered[expression]}")


class _Queue:
    """The background's queue of (unit key, kernel) and the kernels being compiled now. Workers take
    one kernel a program (a launch waiting on one waits for no others); a thread that drains the
    queue takes several a program (one front end for them all: the most kernels per CPU second)."""

    BATCH = 8

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.waiting: collections.OrderedDict[tuple[str, str], Unit] = collections.OrderedDict()
        self.running: set[tuple[str, str]] = set()
        self.latest: dict[str, str] = {}  # label -> its newest unit's key
        self.threads: list[threading.Thread] = []
        self.errors: dict[tuple[str, str], str] = {}

    @staticmethod
    def workers() -> int:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:
            cores = os.cpu_count() or 1
        return max(1, cores - 1)  # a core stays free for the launch that needs a kernel now

    def submit(self, u: Unit) -> int:
        """Queue the unit's kernels not yet on disk; a previous unit of its label leaves the queue."""
        with self.cond:
            old = self.latest.get(u.label)
            if old and old != u.key:
                for item in [k for k in self.waiting if k[0] == old]:
                    del self.waiting[item]
            self.latest[u.label] = u.key
            queued = 0
            for name in sorted(u.kernels):
                item = (u.key, name)
                if item not in self.waiting and item not in self.running and compiled(u, name) is None:
                    self.waiting[item] = u
                    queued += 1
            while len(self.threads) < min(self.workers(), len(self.waiting)):
                t = threading.Thread(target=self._work, name=f"wb-nvrtc-{len(self.threads)}", daemon=True)
                self.threads.append(t)
                t.start()
            self.cond.notify_all()
            return queued

    def _take(self, most: int) -> tuple[Unit, list[str]] | None:
        """Up to `most` waiting kernels of the first waiting unit, now running (call with the lock held)."""
        if not self.waiting:
            return None
        (key, name), u = self.waiting.popitem(last=False)
        names = [name]
        for item in [k for k in self.waiting if k[0] == key][:most - 1]:
            del self.waiting[item]
            names.append(item[1])
        self.running.update((key, n) for n in names)
        return u, names

    def _run(self, u: Unit, names: list[str]) -> None:
        try:
            _compile(u, names)
        except KernelCompileError as e:
            if len(names) > 1:  # which kernel: each alone
                for n in names:
                    self._run(u, [n])
                return
            with self.cond:
                self.errors[(u.key, names[0])] = str(e)
        except Exception as e:  # noqa: BLE001 - kept for the launch that asks for this kernel
            with self.cond:
                self.errors.update({(u.key, n): f"{u.label}: {type(e).__name__}: {e}" for n in names})
        finally:
            with self.cond:
                self.running.difference_update((u.key, n) for n in names)
                self.cond.notify_all()

    def _work(self) -> None:
        while True:
            with self.cond:
                while not self.waiting:
                    self.cond.wait()
                taken = self._take(1)
            self._run(*taken)

    def provide(self, u: Unit, name: str) -> tuple[pathlib.Path, str]:
        item = (u.key, name)
        with self.cond:
            while item in self.running:  # a thread has it: wait for it
                self.cond.wait()
            done = compiled(u, name)
            if done:
                return done
            if item in self.errors:
                raise KernelCompileError(self.errors.pop(item))
            self.waiting.pop(item, None)
            self.running.add(item)  # ours now
        self._run(u, [name])
        with self.cond:
            if item in self.errors:
                raise KernelCompileError(self.errors.pop(item))
        return compiled(u, name)

    def drain(self) -> None:
        """Help the workers until the queue is empty, then wait for the kernels still compiling."""
        while True:
            with self.cond:
                taken = self._take(max(1, min(self.BATCH, len(self.waiting) // (len(self.threads) + 1))))
            if taken is None:
                break
            self._run(*taken)
        with self.cond:
            while self.waiting or self.running:
                self.cond.wait()


_queue = _Queue()


def submit(u: Unit) -> int:
    """Compile the unit's kernels in the background (those not on disk); returns how many were queued."""
    return _queue.submit(u)


def provide(unit_key: str, name: str) -> tuple[pathlib.Path, str]:
    """(cubin, lowered name) of nvcc's kernel `name` (canonical) of that unit, compiled now if need be.
    Raises KernelCompileError."""
    u = unit(unit_key)
    if name not in u.kernels:
        raise KernelCompileError(f"{u.label}: kernel {name} is not among the {len(u.kernels)} its host build "
                                 f"launches (the host library and its unit disagree: rebuild it)")
    return _queue.provide(u, name)


def drain() -> None:
    """Wait until the background has compiled every queued kernel (at once when nothing is queued)."""
    if _queue.waiting or _queue.running:
        _queue.drain()


def pending() -> int:
    return len(_queue.waiting) + len(_queue.running)


def compile_all(unit_key: str) -> None:
    """Every kernel of the unit compiled now, in parallel; KernelCompileError names those that failed."""
    _queue.submit(unit(unit_key))
    _queue.drain()
    failed = sorted(message for (key, _), message in _queue.errors.items() if key == unit_key)
    if failed:
        raise KernelCompileError(f"{len(failed)} kernel(s) did not compile: " + "; ".join(failed))
