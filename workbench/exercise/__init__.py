"""Course exercises: find them, and judge a student's kernel against one.

    registration.py  exercises/NN_name/exercise.toml: what an exercise asks (and its validation)
    sizes.py         the sizes a check draws from its seed, for any op (an elementwise, reduction or tiled draw)
    submission.py    the student's file built (the build check) and the judge's hold on it (Submission: its
                     hashed copy, its sandboxed runner), the reference variant's runner
    checks.py        the checks that run it: load, declared dtypes, correctness, gradcheck
    sass.py          the SASS rules, on the kernels that ran (observed by Nsight Compute) or, without a GPU,
                     on the machine code as built
    rule_calls.py    the checked calls the rules judge, and what ran during them, observed by Nsight Compute (the student's, the starter's)
    global_loads.py  the optional counter rule: bytes of global loads of the kernels that ran
    speedcheck.py    speed against the reference variant, on the judge's clock (workbench/judge/clock.py)
    report.py        the report the checks fill, and how it prints
    grade.py         a folder of submissions graded (each by a judge process of its own): CSV, summary

A torch extension written the course's way (torch/extension.h; PYBIND11_MODULE or TORCH_LIBRARY
exporting forward and backward: workbench/run/byo.py) is taken too, for the exercise whose op
it fits: built by cpp_extension, run by the Python runner; the same checks and verdict rules follow.

check_exercise(n, path) builds the file as a variant of the exercise's op and runs, in order:
    build, load, declared dtypes, SASS rules        on any machine that can build CUDA
    correctness, gradcheck, [global loads,] speed   on a GPU (skipped, with the reason, elsewhere)

Nothing the student's process says becomes a verdict. The library is built here (compiling is safe)
and copied, hashed, into the judge's own folder; a runner loads that copy in a sandbox (bubblewrap:
judge/sandbox.py) and makes the calls this process asks for on memory this process owns; every
output, every time and every rule's evidence is read by this process. The runner can only make its
own checks fail. `exercise check` without bubblewrap says so and goes on unsandboxed; grading
refuses (grade.py).

May import: every room below the course (model, build, run, measure, explain, judge).
"""
from __future__ import annotations

import pathlib
import re
import shlex
import sys
import time
from collections.abc import Iterator

from concurrent.futures import ThreadPoolExecutor

from ..model import registry
from ..build import toolchain
from ..judge import ncu_watch, sandbox
from . import checks, global_loads, rule_calls, speedcheck, submission
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
        return p.resolve()  # a torch extension written the course's way (run/byo.py): checked as it is
    if not p.is_file() or p.suffix != ".cu":
        raise ValueError(f"path must be a CUDA source file ending in .cu (or a torch extension written the "
                         f"course's way, .cu or .cpp, with PYBIND11_MODULE or TORCH_LIBRARY); got {str(path)!r}")
    return p.resolve()


def _extension_style(p: pathlib.Path) -> bool:
    from ..run.byo import is_extension_source

    try:
        return is_extension_source(p.read_text(errors="replace"))
    except OSError:
        return False


def variant_name(ex: Exercise, source: pathlib.Path) -> str:
    return f"ex{ex.number:02d}_{re.sub(r'[^A-Za-z0-9_]', '_', source.stem)}"


def _prepare(exercise, path, seed):
    ex = get(exercise)
    source = _student_path(ex, path)
    seed = new_seed() if seed is None else int(seed)
    shown = submission.shown(source)
    command = (f"python -m workbench exercise check {ex.number}"
               + (f" {shlex.quote(shown)}" if path is not None else "") + f" --seed {seed}")
    report = ExerciseReport(ex.slug, ex.title, shown, f"{ex.op}/{variant_name(ex, source)}", seed,
                            ex.sizes.draw(seed, registry.spec(ex.op)), command)
    return ex, source, report


def _sandboxed(required: bool) -> bool:
    """Whether runners start in the sandbox: always where bubblewrap is here; without it, grading
    refuses (ValueError naming what is missing) and a check for oneself goes on, saying so."""
    missing = sandbox.missing()
    if missing and required:
        raise ValueError(f"grading needs the sandbox the student's code runs in, and {missing}")
    return not missing


def _run(ex: Exercise, source: pathlib.Path, report: ExerciseReport, speed: bool, sandboxed: bool) -> Iterator[Check]:
    """Run the checks in order, appending each (with its time) to the report and yielding it."""
    def add(c: Check) -> Check:
        report.checks.append(c)
        return c

    def timed(fn, *args, **kw) -> Check:
        started = time.perf_counter()
        c = fn(*args, **kw)
        c.seconds = time.perf_counter() - started
        return c

    pool = ThreadPoolExecutor(max_workers=2)
    # While the student's file builds: the in-tree pieces the checks need, built (or found), and this
    # process's CUDA context and kernels warmed up (the checker owns the memory every check uses).
    warm = pool.submit(_warm_up, ex, report.seed)
    started = time.perf_counter()
    built, check = submission.build(ex, source, variant_name(ex, source))
    check.seconds = time.perf_counter() - started
    yield add(check)
    if built is None:
        why = "the build failed" if check.status == "FAIL" else check.detail
        for name in ex.checks[1:]:
            yield add(Check(name, "skipped", why))
        pool.shutdown(wait=False, cancel_futures=True)
        return
    sub = submission.Submission(ex, built, sandboxed)
    try:
        loaded = add(timed(checks.load, ex, sub))
        yield loaded
        dtypes = add(checks.declared_dtypes(ex, built))
        yield dtypes
        after_sass = ex.checks[ex.checks.index("SASS rules") + 1:]
        gpu = built.device != "cuda" or toolchain.gpu_available()
        sanitize = f"python -m workbench sanitize {ex.op} {built.name} --source {shlex.quote(report.path)}"
        # A file built for sm_90a (wgmma, TMA) runs on compute capability 9.0 alone: elsewhere its
        # launchers decline, so the GPU checks say why instead of failing every case.
        unmet = toolchain.unmet_arch(source, "cuda") if gpu and built.device == "cuda" else None
        run_gpu = gpu and loaded.status == "ok" and not unmet
        not_seen = ncu_watch.unavailable(run_gpu and built.device == "cuda")
        watch = None
        if not not_seen and (ex.sass or ex.global_loads):  # observed beside the correctness checks
            watch = pool.submit(_observe, ex, sub, report.seed)
        if not run_gpu:
            yield add(timed(check_sass, ex, sub, static_why=not_seen))
            why = (NEEDS_GPU if not gpu else f"this file {unmet}" if unmet
                   else "the library did not load in the runner (see load)")
            for name in after_sass:
                yield add(Check(name, "skipped", why))
            return
        warm.result()
        correct = timed(checks.correctness, ex, sub, report.shapes, report.seed, sanitize)
        grads = timed(checks.gradcheck, ex, sub, report.seed)
        observed, starter, why, said, watched_s = None, None, not_seen, [], 0.0
        waited = time.perf_counter()
        if watch is not None:
            try:
                observed, starter, watched_s = watch.result()
            except Exception as e:  # noqa: BLE001 - the observed run failing is the rules' failure, named
                said = (str(e) or type(e).__name__).splitlines()
                why = f"the observed run stopped: {said[0]}"
        if watch is not None and observed is None:
            rules = Check("SASS rules", "FAIL", why, said)
        else:
            rules = timed(check_sass, ex, sub, observed, starter, static_why=why)
        if watch is not None:  # the observed run went on beside correctness and gradcheck: its own time
            rules.seconds = watched_s if observed is not None else time.perf_counter() - waited
        yield add(rules)
        yield add(correct)
        yield add(grads)
        if ex.global_loads is not None:
            if correct.status != "ok" or grads.status != "ok":
                yield add(Check("global loads", "skipped", "fix correctness first"))
            else:
                calls = observed.calls[-1] if observed is not None and observed.calls else None
                yield add(timed(global_loads.check, ex, calls, why))
        if not speed:
            yield add(Check("speed", "skipped", "not asked for (--no-speed)"))
        elif dtypes.status != "ok":
            yield add(Check("speed", "skipped", "declare the required dtypes first"))
        elif correct.status != "ok" or grads.status != "ok":
            yield add(Check("speed", "skipped", "fix correctness first"))
        else:
            reference = submission.reference(ex, python=built.style == "extension")
            try:
                yield add(timed(speedcheck.speed, ex, sub, reference))
            finally:
                reference.close()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        sub.close()


def _warm_up(ex: Exercise, seed: int) -> None:
    """The runner and the op's binding built (or found); on a GPU, this process's CUDA context, and
    the kernels its checks use (CUDA loads each on first use) loaded by a small check of the op's
    eager math on the smallest sizes the seed draws, in the exercise's dtypes and layouts."""
    from ..judge.start import runner_executable

    runner_executable()
    submission.binding_library(ex.op)
    if not toolchain.gpu_available():
        return
    from ..measure import correctness
    from ..run import byo

    spec = registry.spec(ex.op)
    shapes = sorted((s for s in ex.sizes.draw(seed, spec) if 0 not in s), key=sum)[:2]
    try:
        eager = byo.variant(lambda *a, **k: spec.eager(*a, **k), ex.op, dtypes=ex.dtypes, device="cuda",
                            name="the checker's warm-up")
        correctness.check(ex.op, eager, dtypes=list(ex.dtypes), shapes=shapes, layouts=checks.EXERCISE_LAYOUTS,
                          seed=seed)
    except Exception:  # noqa: BLE001 - a warm-up: whatever it meets, the checks meet again and report
        pass


def _observe(ex: Exercise, sub: submission.Submission, seed: int):
    """(what ran in the student's runner, the starter's where a counting rule needs it)."""
    started = time.perf_counter()
    seen = rule_calls.observe_rules(ex, lambda prefix: sub.start(prefix=prefix, network=True), seed)
    starter = rule_calls.observe_starter(ex, seed) if any(r.kind == "fewer_than_starter" for r in ex.sass) else None
    return seen, starter, time.perf_counter() - started


def check_exercise(exercise, path=None, *, seed: int | None = None, speed: bool = True,
                   require_sandbox: bool = False, out=None) -> ExerciseReport:
    """Build `path` (default: the exercise's starter.cu) as a variant of the exercise's op and judge
    it: build, load (in a sandboxed runner), declared dtypes, SASS rules; then, on a GPU, correctness
    (the check matrix on sizes drawn from `seed`), gradcheck, and speed against the reference
    variant on the judge's clock (speed=False skips it). out(line): the report as it is made (the
    header, a line per check as it ends, the tail), as `exercise check` prints it. Returns an
    ExerciseReport: .ok, .checks, .first_failure, .summary(). Raises ValueError for an unknown
    exercise, a path that is not a .cu file, or (require_sandbox) a machine without the sandbox."""
    sandboxed = _sandboxed(require_sandbox)
    ex, source, report = _prepare(exercise, path, seed)
    say = out or (lambda line: None)
    started = time.perf_counter()
    if not sandboxed:
        say(f"note: not sandboxed: {sandbox.missing()}; your code runs in a runner process of its own, as you "
            f"(grading refuses without the sandbox)")
    say(report.header() + "\n")
    for c in _run(ex, source, report, speed, sandboxed):
        say(f"  {c.line()}")
    say(report.tail())
    say(f"({time.perf_counter() - started:.1f} s: {report.timings()})")
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
    try:
        report = check_exercise(args.exercise, args.path, seed=args.seed, speed=not args.no_speed,
                                out=lambda line: print(line, flush=True))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0 if report.ok else 1
