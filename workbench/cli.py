"""python -m workbench list | build | check | gradcheck | bench | profile | plot | demo | sanitize | doctor | clean |
export | exercise | serve: the command line, and only that (runners start through their own entry
points: bindings/runner/wb_runner.cu, workbench/judge/python_runner.py)."""
from __future__ import annotations

import argparse
import json
import sys

from . import config
from .dtypes import NAMES as DTYPE_NAMES


def _variants_for(op: str, names: list[str], *, runnable_only: bool) -> list[str]:
    """The named variants, or all that this machine can run (CPU variants where no GPU is visible)."""
    from .model import registry
    from .build import toolchain

    if names:
        return names
    all_v = registry.variants(op)
    if not runnable_only:  # a CUDA C++ variant needs nvcc; a Python one, torch with CUDA (and Triton)
        return [v.name for v in all_v if v.runs_on("cpu") or (toolchain.torch_has_cuda() if v.python
                                                                else toolchain.can_build_cuda())]
    gpu = toolchain.gpu_available()
    chosen = [v.name for v in all_v if v.runs_on("cpu") or gpu]
    if not gpu:
        print(f"no GPU visible: running the CPU variants of {op} ({', '.join(chosen)})", file=sys.stderr)
    return chosen


def cmd_list(args) -> int:
    from .model import registry

    failed = 0
    for op in [args.op] if args.op else registry.ops():
        print(op)
        try:  # one op whose spec or variant does not read never hides the others
            found = registry.variants(op)
        except Exception as e:  # noqa: BLE001  (reported, and the exit status says so)
            print(f"  cannot list {op}: {type(e).__name__}: {e}", file=sys.stderr)
            failed += 1
            continue
        widths = [max([w] + [len(f(v)) for v in found]) for w, f in
                  ((10, lambda v: v.name), (5, lambda v: v.device), (36, lambda v: ", ".join(v.dtypes)))]
        for v in found:  # columns as wide as the op's longest entry: a ladder's rungs have long names
            print(f"  {v.name:{widths[0]}s} {v.device:{widths[1]}s} {', '.join(v.dtypes):{widths[2]}s} {v.description}")
    return 1 if failed else 0


def cmd_build(args) -> int:
    """Every variant asked for is tried; one that fails is reported and the exit status is 1."""
    from .explain.sass_diff import cli_report as sass_diff
    from .run import loader

    failed = []
    for name in _variants_for(args.op, args.variants, runnable_only=False):
        if args.compiler or args.sass_diff:
            failed += (sass_diff if args.sass_diff else _build_only)(args.op, name, args.compiler, args.arch)
            continue
        try:
            k = loader.load(args.op, name)
        except Exception as e:  # noqa: BLE001 - reported, and the exit status says so
            failed.append(name)
            print(f"{args.op}/{name}: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        print(f"{args.op}/{k.qualified:22s} {'built' if k.built else 'cached':6s} {k.seconds:6.2f} s  {k.library}")
    if failed:
        print(f"{len(failed)} variant(s) of {args.op} failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _build_only(op: str, name: str, compiler: str, arch: str | None) -> list[str]:
    """Build one variant with the tier asked for, loading nothing (no GPU needed); [name] if it failed."""
    import time

    from .build import BuildOptions, build_variant

    try:
        start = time.perf_counter()
        name, b = build_variant(op, name, BuildOptions(compiler=compiler, arch=arch))
        if b is None:
            print(f"{op}/{name:22s} a Python variant: nothing to compile")
            return []
    except Exception as e:  # noqa: BLE001 - reported, and the exit status says so
        print(f"{op}/{name}: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return [name]
    why = f" (nvcc fallback: {b.record['nvrtc_fallback']})" if b.record.get("nvrtc_fallback") else ""
    kernels = f", {b.record['kernels']} kernels" if b.record.get("nvrtc_unit") else ""
    print(f"{op}/{name:22s} {'built' if b.built else 'cached':6s} {time.perf_counter() - start:6.2f} s  "
          f"device code: {b.record.get('device_compiler', 'nvcc')}{kernels}{why}  {b.library}")
    return []


def _as_variant(op: str, name: str):
    """A variant's name, or a path to a source file anywhere (a kernel being edited, not in the tree)."""
    import pathlib

    from .run import loader
    from .model import registry

    path = pathlib.Path(name)
    if path.suffix in registry.SUFFIXES and path.is_file():
        return loader.load_source(op, path)
    return name


def _run_reports(args, fn) -> int:
    """Each variant's report; one whose check raised is a failure with its message, the others still run."""
    from .build import toolchain
    from .model import registry

    ok = True
    out = []
    devices = {v.name: v.device for v in registry.variants(args.op)}
    for name in _variants_for(args.op, args.variants, runnable_only=True):
        if devices.get(name) == "cuda" and not toolchain.gpu_available():  # named, and not for this machine
            print(f"{args.op}/{name}: skipped: a CUDA variant, and no GPU is visible here")
            out.append({"variant": name, "ok": True, "method": "", "failures": [], "skipped": "no GPU visible"})
            continue
        try:
            report = fn(args, _as_variant(args.op, name))
        except Exception as e:  # noqa: BLE001 - reported, exit status 1
            ok = False
            print(f"{args.op}/{name}: FAIL: {type(e).__name__}: {e}".rstrip())
            out.append({"variant": name, "ok": False, "method": "", "failures": [f"{type(e).__name__}: {e}"]})
            continue
        ok &= report.ok
        print(report.table() if args.verbose else report.summary())
        out.append({"variant": name, "ok": report.ok, "method": report.method, "failures": [c.line() for c in report.failures]})
    if args.json:
        print(json.dumps(out, indent=1))
    return 0 if ok else 1


def cmd_check(args) -> int:
    if args.command == "gradcheck":
        from .measure.gradients import gradcheck

        return _run_reports(args, lambda a, name: gradcheck(a.op, name, seed=a.seed))
    from .measure.correctness import check

    return _run_reports(args, lambda a, name: check(a.op, name, dtypes=a.dtypes or None, seed=a.seed))


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is sizes joined by 'x', like 4096x4096; got {text!r}") from None
    if not dims or any(d < 0 for d in dims):
        raise argparse.ArgumentTypeError(f"a shape needs non-negative sizes; got {text!r}")
    return dims


def cmd_bench(args) -> int:
    from .measure.benchmark import bench

    result = bench(args.op, variants=args.variants or "all", dtypes=args.dtypes or ["float32"],
                   shapes=args.shapes or None, baselines=args.baselines, directions=args.directions,
                   budget_s=args.budget, save=not args.no_save, results_path=args.results, cluster=args.ray)
    print(result.table())
    if not args.no_save:
        print(f"rows appended to {args.results or config.output_dir() / 'bench.jsonl'}")
    if args.plot:
        for p in result.plot(args.plot_dir):
            print(f"plot: {p}")
    from .measure.bench_rows import trusted
    bad = [r for r in result.rows if not trusted(r)]
    bad += [n for n in result.notes if n.startswith("NOT MEASURED")]  # --ray: a group whose workers died twice
    if bad:  # a script reading the status must not take a wrong or impossible row for a result
        print(f"{len(bad)} row(s) WRONG, IMPOSSIBLE or NOT MEASURED (the notes above say why); exit status 1", file=sys.stderr)
        return 1
    return 0


def cmd_profile(args) -> int:
    """Nsight Compute on one call of each named variant: the table, a verdict per kernel, the deltas."""
    from .run import loader
    from .explain import ncu
    from .explain import profiling as profile_

    variants: list = list(args.variants)
    ncu.require()  # before building anything: say at once where ncu is missing
    if args.source:  # the file is built as the first variant named (an exercise's kernel, a planted one)
        variants[0] = loader.load_source(args.op, args.source, args.variants[0])
    p = profile_.profile(args.op, variants, shape=args.shape, dtype=args.dtype, direction=args.direction,
                         timeout_s=args.timeout, keep_csv=args.csv_dir, lines=not args.no_lines)
    print(p.table())
    if args.roofline:
        p.roofline(args.roofline)
        print(f"roofline: {args.roofline}")
    return 1 if p.wrong() else 0  # a call that computed the wrong thing is no profile to act on


def cmd_plot(args) -> int:
    from .explain import plot
    from .measure import bench_rows

    path = args.results or config.output_dir() / "bench.jsonl"
    rows = [r for r in bench_rows.read_rows(path) if args.op in (None, r.get("op"))]
    if not rows:
        print(f"no rows{' for ' + args.op if args.op else ''} in {path}: run `python -m workbench bench "
              f"{args.op or 'OP'}` first, or name a file with --results (the committed H100 rows: "
              f"--results {config.RESULTS_DIR / 'bench.jsonl'})", file=sys.stderr)
        return 1
    for p in plot.plot_all(rows, args.plot_dir or config.output_dir() / "plots"):
        print(f"plot: {p}")
    return 0


def cmd_demo(args) -> int:
    from .explain import demo

    return demo.main(args.op, args.out, args.budget, _variants_for)


def cmd_sanitize(args) -> int:
    from .run import loader, sanitize

    variant = loader.load_source(args.op, args.source, args.variant) if args.source else args.variant
    return sanitize.main(args.op, variant, args.tools)


def cmd_doctor(args) -> int:
    from .explain import doctor

    return doctor.main()


def cmd_clean(args) -> int:
    from .build import cache, clean

    if not (args.all or args.older_than is not None or args.max_size is not None):
        print("clean: say what to remove: --all, --older-than DAYS or --max-size GB", file=sys.stderr)
        return 2
    try:
        res = clean.clean(everything=args.all,
                          older_than_s=None if args.older_than is None else args.older_than * 86400,
                          max_bytes=None if args.max_size is None else int(args.max_size * 2**30))
    except cache.CacheError as e:
        print(f"clean: {e}", file=sys.stderr)
        return 1
    for d in res["removed"]:
        print(f"removed: {d}")
    print(f"removed {len(res['removed'])} builds and files ({res['freed_bytes'] / 2**20:.1f} MiB) from "
          f"{config.cache_dir()}")
    for d in res["in_use"]:
        print(f"kept (in use by a running process): {d}")
    for d, why in res["skipped"]:
        print(f"left alone ({why}): {d}")
    return 0


def _amount(text: str) -> float:
    """A finite number >= 0: clean's --older-than DAYS and --max-size GB."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0; got {text!r}")
    return value


def cmd_exercise(args) -> int:
    """exercise list | check | grade."""
    if args.exercise_command == "grade":
        from .cluster import grading  # Ray itself is imported only where --ray is given
        from .exercise import grade
        return grade.cli(args, None if args.ray is None else grading.spread(args.ray))
    from . import exercise

    return (exercise.cli_list if args.exercise_command == "list" else exercise.cli_check)(args)


def cmd_serve(args) -> int:
    from . import serve  # starlette, uvicorn & co. are imported there (the serve extra)
    return serve.cli(args)


def cmd_export(args) -> int:
    """Write the op and the named variants as a package of its own (workbench/ship/export.py)."""
    from .ship.export import export

    out = export(args.op, ",".join(args.variants), args.out, name=args.name, namespace=args.namespace, force=args.force)
    print(f"wrote {out}\n  pip install --no-build-isolation {out}\n  cd {out} && pytest tests/")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workbench", description="Kernel Workbench: build, check and time CUDA kernel variants for PyTorch.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("list", help="ops and their variants")
    s.add_argument("op", nargs="?")
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("build", help="build (or fetch from the cache) variants of an op")
    s.add_argument("op")
    s.add_argument("variants", nargs="*", help="default: every variant this machine can build")
    s.add_argument("--compiler", choices=["nvrtc", "nvcc"], help="build with this tier, loading nothing (no GPU needed); "
                   "nvrtc: device code by NVRTC, nvcc's host library reused while unchanged")
    s.add_argument("--arch", help="--compiler nvrtc's arch, e.g. sm_90a (default: this GPU's, else the arch list's newest)")
    s.add_argument("--sass-diff", action="store_true", help="with --compiler nvrtc: each kernel's SASS, NVRTC's vs nvcc's, for one arch (--arch)")
    s.set_defaults(fn=cmd_build)

    for name, helptext in (("check", "correctness matrix against the float64 reference"),
                           ("gradcheck", "gradcheck in float64, or gradients vs the reference")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("op")
        s.add_argument("variants", nargs="*", help="default: every variant this machine can run; a path to a "
                                                   ".cu/.cpp/.py file checks that file as a variant")
        if name == "check":
            s.add_argument("--dtypes", nargs="+", choices=DTYPE_NAMES)
        s.add_argument("--seed", type=int)
        s.add_argument("--verbose", "-v", action="store_true", help="print every case")
        s.add_argument("--json", action="store_true", help="also print a JSON summary")
        s.set_defaults(fn=cmd_check)

    s = sub.add_parser("bench", help="time variants against eager and torch.compile")
    s.add_argument("op")
    s.add_argument("--variants", nargs="+", help="default: every variant that runs on this device")
    s.add_argument("--dtypes", nargs="+", choices=DTYPE_NAMES)
    s.add_argument("--shapes", nargs="+", type=_shape, help="e.g. 4096x4096 16384x16384")
    s.add_argument("--baselines", nargs="*", default=None,
                   help="eager, compile, and any the op's spec adds (default: all of them)")
    s.add_argument("--directions", nargs="+", default=["fwd"], choices=["fwd", "bwd", "fwd+bwd"])
    s.add_argument("--budget", type=float, default=1.0, help="seconds of sampling per row at most")
    s.add_argument("--results", help="JSONL file to append to (default workbench-results/bench.jsonl, or "
                                     "$WORKBENCH_RESULTS/bench.jsonl)")
    s.add_argument("--no-save", action="store_true", help="print only; append nothing")
    s.add_argument("--plot", action="store_true", help="also draw plots")
    s.add_argument("--plot-dir", help="default workbench-results/plots")
    s.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS", help="spread the sweep over a Ray cluster, "
                   "one worker per GPU: local, auto (the default), ray://HOST:PORT (needs Ray)")
    s.set_defaults(fn=cmd_bench)

    s = sub.add_parser("profile", help="why is it slow: Nsight Compute's counters for one call of each variant, "
                                       "a verdict per kernel, and the differences between variants")
    s.add_argument("op")
    s.add_argument("variants", nargs="+", help="one variant, or several to compare side by side (the first is the base)")
    s.add_argument("--shape", type=_shape, help="a size of the op, e.g. 8192x8192 (default: a middle bench size)")
    s.add_argument("--dtype", default="float32", choices=DTYPE_NAMES)
    s.add_argument("--direction", default="fwd", choices=["fwd", "bwd"])
    s.add_argument("--source", help="build this file as the first VARIANT named (default: kernels/OP/VARIANT.*)")
    s.add_argument("--timeout", type=float, default=300.0, help="seconds for each variant's profiled run at most")
    s.add_argument("--csv-dir", help="keep ncu's raw CSV of each variant in this folder")
    s.add_argument("--roofline", metavar="PNG", help="also draw the profiled variants on the roofline, as a PNG")
    s.add_argument("--no-lines", action="store_true", help="leave out the source lines with the most stalls (they "
                                                             "need a build with nvcc -lineinfo and PC sampling)")
    s.set_defaults(fn=cmd_profile)

    s = sub.add_parser("plot", help="redraw plots from saved results")
    s.add_argument("op", nargs="?", help="default: every op with rows in the file")
    s.add_argument("--results", help="the rows (default workbench-results/bench.jsonl, where `bench` saves them)")
    s.add_argument("--plot-dir", help="default workbench-results/plots")
    s.set_defaults(fn=cmd_plot)

    s = sub.add_parser("demo", help="build, check, gradcheck, bench and plot every op's variants (or one op's)")
    s.add_argument("op", nargs="?", help="default: every op")
    s.add_argument("--out", default="workbench-demo", help="where the demo writes rows and plots")
    s.add_argument("--budget", type=float, default=0.3, help="seconds of sampling per row at most")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("sanitize", help="compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over a small check")
    s.add_argument("op")
    s.add_argument("variant")
    s.add_argument("--source", help="a variant source file to build as VARIANT (default: kernels/OP/VARIANT.*)")
    s.add_argument("--tools", nargs="+", default=["memcheck", "racecheck", "initcheck", "synccheck"],
                   choices=["memcheck", "racecheck", "initcheck", "synccheck"])
    s.set_defaults(fn=cmd_sanitize)

    s = sub.add_parser("doctor", help="toolchain, GPU, cache and lock report")
    s.set_defaults(fn=cmd_doctor)

    s = sub.add_parser("clean", help="remove cached builds (only folders with a workbench build record, never one "
                                     "in use, never through a link); prints each one removed")
    s.add_argument("--all", action="store_true")
    s.add_argument("--older-than", type=_amount, metavar="DAYS")
    s.add_argument("--max-size", type=_amount, metavar="GB")
    s.set_defaults(fn=cmd_clean)

    s = sub.add_parser("export", help="write an op and some of its C++ variants as a self-contained PyTorch "
                                      "extension package (pip-installable; no workbench needed)")
    s.add_argument("op")
    s.add_argument("--variants", nargs="+", required=True,
                   help="comma-separated (or space-separated), in order of preference, e.g. vec4,scalar,cpu")
    s.add_argument("--out", required=True, help="the package's folder: new or empty (else --force)")
    s.add_argument("--name", help="the Python package's name (default wb_OP)")
    s.add_argument("--namespace", help="the torch.ops namespace (default: the package's name)")
    s.add_argument("--force", action="store_true",
                   help="write into a non-empty --out (replaces an earlier export's files, keeps others)")
    s.set_defaults(fn=cmd_export)

    s = sub.add_parser("exercise", help="course exercises (exercises/): list them, check your kernel against one")
    ex = s.add_subparsers(dest="exercise_command", required=True)
    e = ex.add_parser("list", help="the exercises, with their speed targets")
    e.set_defaults(fn=cmd_exercise)
    e = ex.add_parser("check", help="build your .cu file and run the exercise's checks: build, declared dtypes, "
                                    "SASS rules, correctness, gradcheck, speed (exit 0 pass, 1 fail, 2 bad usage)")
    e.add_argument("exercise", help="number or name: 2, 02, 02_vec4_loads or vec4_loads")
    e.add_argument("path", nargs="?", help="your kernel (.cu); default: the exercise's starter.cu")
    e.add_argument("--seed", type=int, help="draw the same shapes and inputs as an earlier run")
    e.add_argument("--no-speed", action="store_true", help="skip the speed check")
    e.set_defaults(fn=cmd_exercise)
    e = ex.add_parser("grade", help="check every submission in a folder as `check` does: a CSV and a summary")
    e.add_argument("exercise")
    e.add_argument("folder", help="the submissions (.cu / .cpp files)")
    e.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS", help="over a Ray cluster: local, auto, ray://H:P")
    e.add_argument("--out", help="the CSV (default FOLDER/grades.csv)")
    e.add_argument("--seed", type=int, help="the shapes and inputs every submission is checked on")
    e.add_argument("--timeout", type=float, help="seconds per submission at most (default 1800)")
    e.add_argument("--no-speed", action="store_true", help="skip the speed check")
    e.set_defaults(fn=cmd_exercise)

    s = sub.add_parser("serve", help="a class's own kernel leaderboard: students submit from a browser, the "
                                     "exercises' checker judges (needs: pip install \"kernel-workbench[serve]\")")
    s.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: this machine only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--db", default="workbench-serve.sqlite3", help="the SQLite store (made where absent)")
    s.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS", help="judge on a Ray cluster's workers, one "
                   "per GPU: local, auto, ray://H:P (default: one judge per local GPU)")
    s.add_argument("--roster", metavar="CSV", help="import these students (a name column); their new tokens go to "
                                                   "CSV's folder as <name>-tokens.csv")
    s.add_argument("--judge-timeout", type=float, default=600.0, help="seconds a submission's judging may take")
    s.add_argument("--max-upload-kb", type=int, default=256, help="the largest source accepted, in KiB")
    s.add_argument("--per-minute", type=int, default=6, help="submissions a student may make a minute")
    s.add_argument("--new-instructor-token", action="store_true", help="print a new instructor token (the old one stops working)")
    s.set_defaults(fn=cmd_serve)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    from .errors import WorkbenchError

    try:
        return args.fn(args)
    except (WorkbenchError, ValueError, FileExistsError) as e:  # FileExistsError: export's --out not empty
        print(f"error: {e}", file=sys.stderr)
        return 1
