"""Course exercises: find them, and check a student's kernel against one.

    registration.py  exercises/NN_name/exercise.toml: what an exercise asks (and its validation)
    sizes.py         the sizes a check draws from its seed, for any op (an elementwise, reduction or tiled draw)
    child.py         the child process the student's library is loaded in and the GPU checks run in
    checks.py        build, load, declared dtypes, correctness, gradcheck
    speedcheck.py    speed, against the reference variant in one benchmark run
    sass.py          the SASS rules (opcodes anywhere in a kernel, or in its innermost loops)
    global_loads.py  the optional counter rule: bytes of global loads, counted by Nsight Compute
    report.py        the report the checks fill, and how it prints
    grade.py         a folder of submissions graded (each in its own process, under a time limit): CSV, summary

A torch extension written the course's way (torch/extension.h; PYBIND11_MODULE or TORCH_LIBRARY
exporting forward and backward: workbench/run/byo.py) is taken too, for the exercise whose op it fits:
built here by cpp_extension through the same cache, loaded only in the child, where its dtypes are
probed (its source declares none); the same checks and verdict rules follow.

check_exercise(n, path) builds the file as a variant of the exercise's op and runs, in order:
    build, load, declared dtypes, SASS rules        on any machine that can build CUDA
    correctness, gradcheck, [global loads,] speed   on a GPU (skipped, with the reason, elsewhere)

The student's code never runs in this process: it is built here (compiling is safe) and read as
files (its declaration from the source text, its SASS from the .so, its registers from the build
log); "load" loads it in a child process (isolate.Worker, started before the build so its start-up
overlaps it), and the GPU checks run in that child. A child that ends without handing its result
over is a FAIL; the verdict and the exit status are this process's alone.

May import: every room below the course (model, build, run, measure, explain).
"""
from __future__ import annotations

import pathlib
import re
import shlex
import sys
import time
from collections.abc import Iterator

from ..model import registry
from ..build import toolchain
from . import checks, child, global_loads, speedcheck
from .registration import (CHECKS, EXERCISES_DIR, Exercise, ExerciseConfigError, SassRule, Sizes, Speed, exercises, get, load_exercise, tomllib)
from .report import LAYOUTS, NEEDS_GPU, Check, ExerciseReport
from .sass import check_sass
from .sizes import new_seed, random_sizes, reduction_sizes, tiled_sizes

__all__ = ["CHECKS", "EXERCISES_DIR", "LAYOUTS", "NEEDS_GPU", "Check", "Exercise", "ExerciseConfigError",
           "ExerciseReport", "SassRule", "Sizes", "Speed", "check_exercise", "cli_check", "cli_list", "exercises",
           "get", "load_exercise", "new_seed", "random_sizes", "reduction_sizes", "tiled_sizes", "tomllib",
           "variant_name"]


def _student_path(ex: Exercise, path) -> pathlib.Path:
    if path is None:
        return ex.starter
    p = pathlib.Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"path: no such file: {str(path)!r}")
    if p.is_file() and p.suffix in (".cu", ".cpp") and _extension_style(p):
        return p.resolve()  # a torch extension written the course's way (byo.py): checked as it is
    if not p.is_file() or p.suffix != ".cu":
        raise ValueError(f"path must be a CUDA source file ending in .cu (or a torch extension written the "
                         f"course's way, .cu or .cpp, with PYBIND11_MODULE or TORCH_LIBRARY); got {str(path)!r}")
    return p.resolve()


def _extension_style(p: pathlib.Path) -> bool:
    from ..run.extension import is_extension_source

    try:
        return is_extension_source(p.read_text(errors="replace"))
    except OSError:
        return False


def variant_name(ex: Exercise, source: pathlib.Path) -> str:
    return f"ex{ex.number:02d}_{re.sub(r'[^A-Za-z0-9_]', '_', source.stem)}"


def _prepare(exercise, path, seed):
    """(exercise, source, report, worker): the worker (the child that loads the student's library
    and runs the GPU checks) starts first, before this process imports torch."""
    ex = get(exercise)
    source = _student_path(ex, path)
    seed = new_seed() if seed is None else int(seed)
    likely = child.gpu_likely()
    worker = child.start_worker(ex, seed)
    try:
        shown = checks.shown(source)
        command = (f"python -m workbench exercise check {ex.number}"
                   + (f" {shlex.quote(shown)}" if path is not None else "") + f" --seed {seed}")
        report = ExerciseReport(ex.slug, ex.title, shown, f"{ex.op}/{variant_name(ex, source)}", seed,
                                ex.sizes.draw(seed, registry.spec(ex.op)), command)
        if worker is not None and likely and not child.gpu_present():
            worker.close()  # it would warm up on a GPU that is not usable: one for the load alone
            worker = child.start_worker(ex, seed, gpu=False)
    except BaseException:
        if worker is not None:
            worker.close()
        raise
    return ex, source, report, worker


def _run(ex: Exercise, source: pathlib.Path, report: ExerciseReport, speed: bool, worker=None) -> Iterator[Check]:
    """Run the checks in order, appending each (with its time) to the report and yielding it."""
    started = [time.perf_counter()]

    def add(c: Check) -> Check:
        now = time.perf_counter()
        c.seconds, started[0] = now - started[0], now
        report.checks.append(c)
        return c

    try:
        kernel, built = checks.build(ex, source, variant_name(ex, source))
        yield add(built)
        if kernel is None:
            why = "the build failed" if built.status == "FAIL" else built.detail
            for name in ex.checks[1:]:
                yield add(Check(name, "skipped", why))
            return
        # The first time the student's code runs: in the child, on every machine.
        loaded = add(checks.load(ex, kernel, worker))
        yield loaded
        dtypes = add(checks.declared_dtypes(ex, kernel))
        yield dtypes
        after_sass = ex.checks[ex.checks.index("SASS rules") + 1:]
        gpu = kernel.device != "cuda" or child.gpu_present()
        sanitize = f"python -m workbench sanitize {ex.op} {kernel.name} --source {shlex.quote(report.path)}"
        # A file built for sm_90a (wgmma, TMA) runs on compute capability 9.0 alone: elsewhere its
        # launchers decline, so the GPU checks say why instead of failing every case.
        unmet = toolchain.unmet_arch(source, "cuda") if gpu and kernel.device == "cuda" else None
        # The check matrix starts in the child now; the SASS is read here meanwhile.
        run_gpu = gpu and loaded.status == "ok" and not unmet
        pending = checks.correctness(ex, kernel, report.shapes, report.seed, sanitize, worker) if run_gpu else None
        yield add(check_sass(ex, kernel))
        if not gpu:
            for name in after_sass:
                yield add(Check(name, "skipped", NEEDS_GPU))
            return
        if unmet:
            for name in after_sass:
                yield add(Check(name, "skipped", f"this file {unmet}"))
            return
        if not run_gpu:
            for name in after_sass:
                yield add(Check(name, "skipped", "the library did not load in the child process (see load)"))
            return
        correct = add(pending())
        yield correct
        grads = add(checks.gradcheck(ex, kernel, report.seed, sanitize, worker))
        yield grads
        if ex.global_loads is not None:
            if correct.status != "ok" or grads.status != "ok":
                yield add(Check("global loads", "skipped", "fix correctness first"))
            else:
                yield add(global_loads.check(ex, kernel))
        if not speed:
            yield add(Check("speed", "skipped", "not asked for (--no-speed)"))
        elif dtypes.status != "ok":
            yield add(Check("speed", "skipped", "declare the required dtypes first"))
        elif correct.status != "ok" or grads.status != "ok":
            yield add(Check("speed", "skipped", "fix correctness first"))
        else:
            yield add(speedcheck.speed(ex, kernel, worker))
    finally:
        if worker is not None:
            report.worker_ready_s = worker.ready_seconds()
            worker.close()


def check_exercise(exercise, path=None, *, seed: int | None = None, speed: bool = True) -> ExerciseReport:
    """Build `path` (default: the exercise's starter.cu) as a variant of the exercise's op and run
    its checks: build, load (in a child process), declared dtypes, SASS rules; then, on a GPU, correctness (the check matrix
    on sizes drawn from `seed`, in a child process), gradcheck, and speed against the reference
    variant (speed=False skips it). Returns an ExerciseReport: .ok, .checks, .first_failure,
    .summary(). Raises ValueError for an unknown exercise or a path that is not a .cu file."""
    ex, source, report, worker = _prepare(exercise, path, seed)
    for _ in _run(ex, source, report, speed, worker):
        pass
    return report


def cli_list(args) -> int:
    known = exercises()
    if not known:
        print(f"no exercises in {EXERCISES_DIR}")
        return 1
    width = max(len(ex.name) for ex in known)
    for ex in known:
        print(f"{ex.number:2d}  {ex.name:{width}s}  {ex.title}")
        print(f"    {'':{width}s}  speed target: {ex.target_text()}")
    print("\ncheck one: python -m workbench exercise check <number> [your_file.cu]   (README: exercises/README.md)")
    return 0


def cli_check(args) -> int:
    started = time.perf_counter()
    try:
        ex, source, report, worker = _prepare(args.exercise, args.path, args.seed)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report.header() + "\n", flush=True)
    for c in _run(ex, source, report, not args.no_speed, worker):
        print(f"  {c.line()}", flush=True)
    print(report.tail())
    print(f"({time.perf_counter() - started:.1f} s: {report.timings()})")
    return 0 if report.ok else 1
