"""The NVRTC tier's kernels: one NVRTC program per kernel, compiled when first launched or, before
that, in the background (issue 27's edit loop).

A build (nvrtc_tier.compile_nvrtc) only checks the device view: NVRTC's front end with every kernel
instantiated (-fdevice-syntax-only; tens of ms), so a device error is still a BuildError naming
file:line. Almost all of NVRTC's time is its optimizer and ptxas, per kernel (rmsnorm/vectorized
instantiates 60 kernels, about 45 ms each on the 2-core machine). So each kernel is its own program:

- A *unit* is what compiles every kernel of one device view: its texts, options and the kernels
  (nvcc's canonical name -> name expression), stored once as nvrtc-kernels/<unit key>.json. Its key
  covers the device view alone: an edit of a launcher reuses every compiled kernel.
- A compiled kernel is nvrtc-kernels/<kernel key>.name (its cubin's file, which the kernels compiled
  in one program share, and NVRTC's name for it) and .log (ptxas's registers and spills), each
  written atomically, the cubin first. Another process finds it there; a missing one is compiled
  again (a process that exited mid-way loses nothing but time).
- `provide` is what a launch asks for (through the routed library's provider, run/nvrtc_routes.py):
  a kernel on disk is returned at once; one queued is taken off the queue and compiled in the
  caller's thread; one being compiled is waited for. A unit's first launch queues its other kernels
  for the background (not its build: between a build and its first launch the background would
  take every core). The kernels a label's launches asked for first are remembered: its next build
  (an edit) starts on them beside the front end (`prefetch`).
- The background: daemon threads, half the cores this process may use (at least one), compile the
  queued kernels, hot ones first (_Queue says which and why); a newer unit of the same label drops
  the older unit's queued kernels (an edit supersedes them). `drain` waits for the queue: the
  timers call it, so no measurement shares the CPU with a compile.

The cache folder is private (store.subdir), so a cubin found there is this user's own.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import threading
import time

from . import nvrtc, schema, store


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


def unit_named_by(build_dir: pathlib.Path) -> str | None:
    """The key of the unit a build's record names (an NVRTC tier build's nvrtc_unit), or None: no
    such build, or no readable record."""
    try:
        return schema.load(build_dir / "meta.json", schema.RECORD).get("nvrtc_unit")
    except schema.RecordError:
        return None


def unit(key: str) -> Unit:
    """The unit of that key (this process's, else the stored one)."""
    if key not in _units:
        path = _folder() / f"{key}.json"
        try:
            _units[key] = _read_unit(key)
        except schema.RecordError as e:
            raise KernelCompileError(f"the NVRTC unit {path} cannot be read ({e}); rebuild the variant "
                                     f"(`python -m workbench clean` removes its build)") from None
    return _units[key]


def _read_unit(key: str) -> Unit:
    """The stored unit of that key, checked (schema.UNIT, its key its file's name): RecordError else."""
    path = _folder() / f"{key}.json"
    data = schema.load(path, schema.UNIT)
    if data["key"] != key:
        raise schema.RecordError(f"{path}: key must be its file's name {key!r}, not {data['key']!r}")
    return Unit(**{f.name: data[f.name] for f in dataclasses.fields(Unit)})


def unit_files(key: str) -> list[pathlib.Path]:
    """Every file of a stored unit in nvrtc-kernels/ (its kernels' records and cubins, then the unit
    itself), for `python -m workbench clean`; none for a file that is not a unit of the workbench's."""
    try:
        u = _read_unit(key)
    except schema.RecordError:
        return []
    folder, files = _folder(), []
    for name in u.kernels:
        done = compiled(u, name)
        files += [folder / f"{u.kernel_key(name)}.name", folder / f"{u.kernel_key(name)}.log"] + ([done[0]] if done else [])
    return files + [folder / f"{key}.json"]


class KernelCompileError(Exception):
    """NVRTC could not compile one kernel (past the front end the build checked: the optimizer's or
    ptxas's error, e.g. too much shared memory); args[0] says which and why."""


def compiled(u: Unit, name: str) -> tuple[pathlib.Path, str] | None:
    """(cubin, lowered name) of a kernel already compiled (by any process), else None."""
    try:
        cubin, lowered = (_folder() / f"{u.kernel_key(name)}.name").read_text().split("\n", 1)
    except (FileNotFoundError, ValueError):
        return None
    return (_folder() / cubin, lowered) if re.fullmatch(r"[0-9a-f]{32}\.cubin", cubin) else None  # ours: never elsewhere


def _compile(u: Unit, names: list[str]) -> None:
    """One NVRTC program for these kernels of the unit: its cubin, and per kernel its .name (the cubin
    and NVRTC's name, written last: it marks the kernel done) and .log."""
    expressions = [u.kernels[n] for n in names]
    start = time.perf_counter()
    try:
        cubin, lowered, log = nvrtc.compile_program(u.main, u.texts, u.options, expressions)
    except nvrtc.NvrtcError as e:
        which = expressions[0][1:] if len(names) == 1 else f"{len(names)} kernels"
        lines = e.args[0].strip().splitlines() or ["?"]
        first = next((ln for ln in lines if "error" in ln.lower()), lines[0])  # not a warning before it
        raise KernelCompileError(f"{u.label}: NVRTC could not compile {which}: {first.strip()}") from None
    name = hashlib.sha256("\n".join(u.kernel_key(n) for n in names).encode()).hexdigest()[:32] + ".cubin"
    store.write_text(_folder() / name, cubin)
    seconds = time.perf_counter() - start
    for n, expression in zip(names, expressions):
        compile_seconds[(u.key, n)] = seconds
        store.write_text(_folder() / f"{u.kernel_key(n)}.log", f"{expression}\n{log}")
        store.write_text(_folder() / f"{u.kernel_key(n)}.name", f"{name}\n{lowered[expression]}")


compile_seconds: dict[tuple[str, str], float] = {}  # (unit key, kernel) -> its program's compile, this process


class _Queue:
    """Kernels to compile, hot or cold, and those being compiled now.

    Hot: a launch waits for it, or will (the kernels this label's last build launched first, queued as
    an edit's build starts, so they compile beside NVRTC's front end). Cold: the rest, for later. A
    cold kernel starts only while nothing hot is queued or compiling and no launch is compiling its
    own: on the H100's host, 15 compiles at once made each 3-4x slower, the launch's own among them.
    Workers take one kernel a program (a launch waiting on one waits for no others); a thread that
    drains the queue takes several a program (one front end for them all: the most kernels per CPU
    second)."""

    BATCH = 8
    REMEMBERED = 8  # kernels per label whose first launches are remembered

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.hot: collections.OrderedDict[tuple[str, str], Unit] = collections.OrderedDict()
        self.cold: collections.OrderedDict[tuple[str, str], Unit] = collections.OrderedDict()
        self.running: dict[tuple[str, str], bool] = {}  # -> hot
        self.launching = 0                              # launches compiling their own kernel now
        self.latest: dict[str, str] = {}                # label -> its newest unit's key
        self.launched: dict[str, list[str]] = {}        # label -> the kernels its launches asked for first
        self.launched_units: set[str] = set()           # units a launch has asked for a kernel
        self.threads: list[threading.Thread] = []
        self.errors: dict[tuple[str, str], str] = {}

    @staticmethod
    def workers() -> int:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:
            cores = os.cpu_count() or 1
        return max(1, cores // 2)

    def _queued(self, item) -> bool:
        return item in self.hot or item in self.cold or item in self.running

    def submit(self, u: Unit, names=None, *, hot: bool = False) -> int:
        """Queue the unit's kernels (`names`, else all) not yet on disk; a previous unit of its label
        leaves the queue (an edit supersedes it)."""
        with self.cond:
            old = self.latest.get(u.label)
            if old and old != u.key:
                for queue in (self.hot, self.cold):
                    for item in [k for k in queue if k[0] == old]:
                        del queue[item]
            self.latest[u.label] = u.key
            queued = 0
            for name in sorted(u.kernels) if names is None else names:
                item = (u.key, name)
                if hot and item in self.cold:
                    del self.cold[item]
                if name in u.kernels and not self._queued(item) and compiled(u, name) is None:
                    (self.hot if hot else self.cold)[item] = u
                    queued += 1
            while len(self.threads) < min(self.workers(), len(self.hot) + len(self.cold)):
                t = threading.Thread(target=self._work, name=f"wb-nvrtc-{len(self.threads)}", daemon=True)
                self.threads.append(t)
                t.start()
            self.cond.notify_all()
            return queued

    def _take(self, most: int, *, cold_now: bool) -> tuple[Unit, list[str]] | None:
        """Up to `most` queued kernels of one unit, hot first, now running (call with the lock held);
        a cold one only where cold_now (else None while only cold ones wait)."""
        queue = self.hot if self.hot else self.cold if cold_now else None
        if not queue:
            return None
        (key, name), u = queue.popitem(last=False)
        names = [name]
        for item in [k for k in queue if k[0] == key][:most - 1]:
            del queue[item]
            names.append(item[1])
        self.running.update({(key, n): queue is self.hot for n in names})
        return u, names

    def _quiet(self) -> bool:
        """Nothing hot queued or compiling, no launch compiling: a cold kernel may start."""
        return not self.hot and not self.launching and not any(self.running.values())

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
                for n in names:
                    self.running.pop((u.key, n), None)
                self.cond.notify_all()

    def _work(self) -> None:
        while True:
            with self.cond:
                while (taken := self._take(1, cold_now=self._quiet())) is None:
                    self.cond.wait()
            self._run(*taken)

    def _provide(self, u: Unit, name: str) -> tuple[pathlib.Path, str]:
        item = (u.key, name)
        with self.cond:
            seen = self.launched.setdefault(u.label, [])
            if name not in seen and len(seen) < self.REMEMBERED:
                seen.append(name)
            while item in self.running:  # a thread has it: wait for it
                self.cond.wait()
            done = compiled(u, name)
            if done:
                return done
            if item in self.errors:
                raise KernelCompileError(self.errors.pop(item))
            self.hot.pop(item, None)
            self.cold.pop(item, None)
            self.running[item] = True  # ours now
            self.launching += 1
        try:
            self._run(u, [name])
        finally:
            with self.cond:
                self.launching -= 1
                self.cond.notify_all()
        with self.cond:
            if item in self.errors:
                raise KernelCompileError(self.errors.pop(item))
        return compiled(u, name)

    def provide(self, u: Unit, name: str) -> tuple[pathlib.Path, str]:
        """The kernel (_provide); the unit's first launch then queues the unit's other kernels, cold."""
        try:
            return self._provide(u, name)
        finally:
            if u.key not in self.launched_units:
                self.launched_units.add(u.key)
                self.submit(u)

    def drain(self) -> None:
        """Help the workers until the queue is empty, then wait for the kernels still compiling."""
        while True:
            with self.cond:
                share = (len(self.hot) + len(self.cold)) // (len(self.threads) + 1)
                taken = self._take(max(1, min(self.BATCH, share)), cold_now=True)
            if taken is None:
                break
            self._run(*taken)
        with self.cond:
            while self.hot or self.cold or self.running:
                self.cond.wait()


_queue = _Queue()


def prefetch(u: Unit) -> int:
    """Start on the kernels this label's launches asked for first last time (an edit's first call
    will likely ask again), beside the build's front end; returns how many were queued."""
    names = _queue.launched.get(u.label)
    return _queue.submit(u, names, hot=True) if names else 0


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
    if pending():
        _queue.drain()


def pending() -> int:
    return len(_queue.hot) + len(_queue.cold) + len(_queue.running)


def compile_all(unit_key: str) -> None:
    """Every kernel of the unit compiled now, in parallel; KernelCompileError names those that failed."""
    _queue.submit(unit(unit_key))
    _queue.drain()
    failed = sorted(message for (key, _), message in _queue.errors.items() if key == unit_key)
    if failed:
        raise KernelCompileError(f"{len(failed)} kernel(s) did not compile: " + "; ".join(failed))
