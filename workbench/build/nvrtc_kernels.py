"""The NVRTC tier's kernels: one NVRTC program per kernel, compiled on its first launch or, before
that, in the background.

A build only runs NVRTC's front end (tens of ms); its optimizer and ptxas cost ~45 ms per kernel, and
a variant may instantiate 60. A *unit* is every kernel of one device view (its texts, options, and
the host symbol -> name expression of each kernel), stored as nvrtc-kernels/<unit key>.json, keyed
by the device view's tokens alone: a launcher or comment edit reuses every kernel. A kernel is
nvrtc-kernels/<kernel key>.cubin, .log (ptxas's report) and .name (written last: the mark it is
done). `provide` is what a launch asks for (run/nvrtc_routes.py); a unit's first launch queues its
other kernels for background threads, and `drain` (the timers call it) waits for them, so no
measurement shares the CPU with a compile. The cache folder is private, so a cubin there is ours.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import pathlib
import threading

from . import cache, nvrtc
from .cache import RecordError
from .piece import tokens


def _folder() -> pathlib.Path:
    return cache.subdir("nvrtc-kernels")


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
    """The unit, keyed by the device texts' tokens (their bytes and the main file's name where
    -lineinfo compiles line numbers in), options, NVRTC and our system headers; not the label."""
    exact = "-lineinfo" in options
    named = {("" if n == main and not exact else n): (t if exact else tokens(t)) for n, t in texts.items()}
    blob = json.dumps([sorted(named.items()), options, nvrtc.version(), nvrtc.headers_digest(),
                       sorted(set(kernels.values()))])
    return Unit(hashlib.sha256(blob.encode()).hexdigest()[:32], label, main, texts, options, kernels)


def saved(unit: Unit) -> bool:
    """Whether the unit is stored (its front end passed), by this process or another."""
    return (_folder() / f"{unit.key}.json").is_file()


def save(unit: Unit) -> None:
    path = _folder() / f"{unit.key}.json"
    if not path.is_file():
        with cache.writing(f"writing the NVRTC unit of {unit.label}"):
            cache.write_text(path, json.dumps(dataclasses.asdict(unit)))
    _units[unit.key] = unit


_units: dict[str, Unit] = {}


def unit_named_by(build_dir: pathlib.Path) -> str | None:
    """The key of the unit a build's record names (nvrtc_unit), else None."""
    try:
        return cache.load_checked(build_dir / "meta.json", cache.RECORD).get("nvrtc_unit")
    except RecordError:
        return None


def unit(key: str) -> Unit:
    """The unit of that key (this process's, else the stored one)."""
    if key not in _units:
        path = _folder() / f"{key}.json"
        try:
            _units[key] = _read_unit(key)
        except RecordError as e:
            raise KernelCompileError(f"the NVRTC unit {path} cannot be read ({e}); rebuild the variant "
                                     f"(`python -m workbench clean` removes its build)") from None
    return _units[key]


def _read_unit(key: str) -> Unit:
    """The stored unit of that key, checked against cache.UNIT and its file's name (RecordError)."""
    path = _folder() / f"{key}.json"
    data = cache.load_checked(path, cache.UNIT)
    if data["key"] != key:
        raise RecordError(f"{path}: key must be its file's name {key!r}, not {data['key']!r}")
    return Unit(**{f.name: data[f.name] for f in dataclasses.fields(Unit)})


def unit_files(key: str) -> list[pathlib.Path]:
    """Every file of a stored unit (its kernels', then its own), for `clean`; [] for a foreign file."""
    try:
        u = _read_unit(key)
    except RecordError:
        return []
    return [_folder() / f"{u.kernel_key(n)}{ext}" for n in u.kernels for ext in (".name", ".log", ".cubin")] + [
        _folder() / f"{key}.json"]


class KernelCompileError(Exception):
    """NVRTC could not compile one kernel past the front end (e.g. ptxas: too much shared memory)."""


def compiled(u: Unit, name: str) -> tuple[pathlib.Path, str] | None:
    """(cubin, NVRTC's name) of a kernel already compiled (by any process), else None."""
    stem = _folder() / u.kernel_key(name)
    try:
        return stem.with_suffix(".cubin"), stem.with_suffix(".name").read_text()
    except FileNotFoundError:
        return None


def _compile(u: Unit, name: str) -> None:
    """One NVRTC program for one kernel of the unit: its .cubin, .log and .name (the mark, written last)."""
    expression, stem = u.kernels[name], _folder() / u.kernel_key(name)
    try:
        cubin, lowered, log = nvrtc.compile_program(u.main, u.texts, u.options, [expression])
    except nvrtc.NvrtcError as e:
        lines = e.args[0].strip().splitlines() or ["?"]
        first = next((ln for ln in lines if "error" in ln.lower()), lines[0])  # not a warning before it
        raise KernelCompileError(f"{u.label}: NVRTC could not compile {expression[1:]}: {first.strip()}") from None
    cache.write_text(stem.with_suffix(".cubin"), cubin)
    cache.write_text(stem.with_suffix(".log"), f"{expression}\n{log}")
    cache.write_text(stem.with_suffix(".name"), lowered[expression])


class _Queue:
    """Kernels to compile in the background, in order, and those being compiled now. A background
    kernel starts only while no launch compiles its own (15 compiles at once made each 3-4x
    slower); the kernels a label's launches asked for first go first when its next build starts."""

    REMEMBERED = 8  # kernels per label whose first launches are remembered

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.queued: collections.OrderedDict[tuple[str, str], Unit] = collections.OrderedDict()
        self.running: set[tuple[str, str]] = set()
        self.launching = 0                          # launches compiling their own kernel now
        self.latest: dict[str, str] = {}            # label -> its newest unit's key
        self.launched: dict[str, list[str]] = {}    # label -> the kernels its launches asked for first
        self.launched_units: set[str] = set()       # units a launch has asked for a kernel
        self.threads: list[threading.Thread] = []
        self.errors: dict[tuple[str, str], str] = {}

    @staticmethod
    def workers() -> int:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:
            cores = os.cpu_count() or 1
        return max(1, cores // 2)

    def submit(self, u: Unit, names=None, *, first: bool = False) -> int:
        """Queue the unit's kernels (`names`, else all) not yet on disk, at the front where `first`;
        a previous unit of its label leaves the queue (an edit supersedes it)."""
        with self.cond:
            old = self.latest.get(u.label)
            for item in [k for k in self.queued if old and old != u.key and k[0] == old]:
                del self.queued[item]
            self.latest[u.label] = u.key
            queued = 0
            for name in reversed(names) if first else sorted(u.kernels) if names is None else names:
                item = (u.key, name)
                if name in u.kernels and item not in self.running and compiled(u, name) is None:
                    queued += item not in self.queued
                    self.queued[item] = u
                    self.queued.move_to_end(item, last=not first)
            while len(self.threads) < min(self.workers(), len(self.queued)):
                t = threading.Thread(target=self._work, name=f"wb-nvrtc-{len(self.threads)}", daemon=True)
                self.threads.append(t)
                t.start()
            self.cond.notify_all()
            return queued

    def _take(self) -> tuple[Unit, str] | None:
        """The first queued kernel, now running (call with the lock held), or None."""
        if not self.queued:
            return None
        (key, name), u = self.queued.popitem(last=False)
        self.running.add((key, name))
        return u, name

    def _run(self, u: Unit, name: str) -> None:
        try:
            _compile(u, name)
        except Exception as e:  # noqa: BLE001 - kept for the launch that asks for this kernel
            with self.cond:
                self.errors[(u.key, name)] = str(e) if isinstance(e, KernelCompileError) else \
                    f"{u.label}: {type(e).__name__}: {e}"
        finally:
            with self.cond:
                self.running.discard((u.key, name))
                self.cond.notify_all()

    def _work(self) -> None:
        while True:
            with self.cond:
                while self.launching or (taken := self._take()) is None:
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
            if done := compiled(u, name):
                return done
            if item in self.errors:
                raise KernelCompileError(self.errors.pop(item))
            self.queued.pop(item, None)
            self.running.add(item)  # ours now
            self.launching += 1
        try:
            self._run(u, name)
        finally:
            with self.cond:
                self.launching -= 1
                self.cond.notify_all()
        with self.cond:
            if item in self.errors:
                raise KernelCompileError(self.errors.pop(item))
        return compiled(u, name)

    def provide(self, u: Unit, name: str) -> tuple[pathlib.Path, str]:
        """The kernel (_provide); the unit's first launch then queues the unit's other kernels."""
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
                taken = self._take()
            if taken is None:
                break
            self._run(*taken)
        with self.cond:
            while self.queued or self.running:
                self.cond.wait()


_queue = _Queue()


def prefetch(u: Unit) -> int:
    """Queue first the kernels this label's launches asked for first last time; returns how many."""
    names = _queue.launched.get(u.label)
    return _queue.submit(u, names, first=True) if names else 0


def provide(unit_key: str, name: str) -> tuple[pathlib.Path, str]:
    """(cubin, NVRTC's name) of the unit's kernel `name` (its host symbol), compiled now if need be."""
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
    return len(_queue.queued) + len(_queue.running)


def compile_all(unit_key: str) -> None:
    """Every kernel of the unit compiled now, in parallel; KernelCompileError names those that failed."""
    _queue.submit(unit(unit_key))
    _queue.drain()
    failed = sorted(message for (key, _), message in _queue.errors.items() if key == unit_key)
    if failed:
        raise KernelCompileError(f"{len(failed)} kernel(s) did not compile: " + "; ".join(failed))
