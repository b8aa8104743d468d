"""Time `import workbench; wb.load(op, variant)` from an installed wheel, with no compiler reachable.

Each measurement is a fresh interpreter (cwd a temporary folder, so no checkout shadows the installed
package) whose PATH starts with shims for nvcc, gcc, g++, c++, cc, clang, clang++ and ninja and
whose CUDA_HOME is a fake toolkit holding the nvcc shim: each shim records its call and fails, so a
load that would compile fails, and any compiler call shows up in the count.

    python scripts/wheel_check.py                         # bias_gelu/vec4 if the wheel has it, else cpu
    python scripts/wheel_check.py --op rmsnorm --variant cpu --repeats 5 --json out.json
    python scripts/wheel_check.py --check --json checks.json   # wb.check of every prebuilt variant
Prints one line per run and a summary; --json writes it. Exit status 1 on any compiler invocation,
a load that did not come from the wheel, or a failed check. The interpreter is this one (--python
for another: the one of the environment the wheel is installed in).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

SHIMMED = ("nvcc", "gcc", "g++", "c++", "cc", "clang", "clang++", "ninja")

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
cuda_init_s = None
if sys.argv[3] == "1" and torch.cuda.is_available():  # --cuda-first: CUDA's own start-up off the clock
    t = time.perf_counter(); torch.cuda.init(); cuda_init_s = time.perf_counter() - t
t1 = time.perf_counter()
import workbench as wb
t2 = time.perf_counter()
k = wb.load(sys.argv[1], sys.argv[2])
t3 = time.perf_counter()
from workbench import config
print("WHEEL_CHECK " + json.dumps({
    "import_torch_s": t1 - t0, "import_workbench_s": t2 - t1, "load_s": t3 - t2, "beyond_torch_s": t3 - t1,
    "cuda_init_s": cuda_init_s, "built": k.built, "library": str(k.library), "installed": config.INSTALLED,
    "from_wheel": config.PREBUILT_DIR in k.library.parents, "workbench": wb.__file__, "torch": torch.__version__}))
"""


CHECK_CHILD = r"""
import json, pathlib, sys, time, torch
import workbench as wb
from workbench import config
from workbench.model import registry
from workbench.build import prebuilt
kinds = sys.argv[1].split(",")
gpu = torch.cuda.is_available()
m = prebuilt.manifest() or {"libraries": {}}
prebuilt_labels = {e["label"] for e in m["libraries"].values()}
for op in wb.ops():
    for v in registry.variants(op):
        if v.kind not in kinds or (v.kind == "c++" and f"{op}/{v.name}" not in prebuilt_labels):
            continue
        row = {"op": op, "variant": v.name, "kind": v.kind, "device": v.device}
        start = time.perf_counter()
        try:
            k = wb.load(op, v.name)
            row.update(built=k.built, from_wheel=config.PREBUILT_DIR in pathlib.Path(k.library).parents)
            if v.runs_on("cpu") or gpu:
                report = wb.check(op, v.name)
                row.update(ok=report.ok, summary=report.summary())
            else:
                row.update(ok=None, summary="loaded; no GPU to run it")
        except Exception as e:
            row.update(ok=False, summary=f"{type(e).__name__}: {e}"[:2000])
        row["seconds"] = round(time.perf_counter() - start, 2)
        print("ROW " + json.dumps(row), flush=True)
"""


def check_all(python: str, kinds: str = "c++,torch", *, shims: bool = True, timeout: float = 560) -> dict:
    """wb.check, in one fresh process, of every C++ variant the installed wheel prebuilt (and the
    Python variants of `kinds`) against the float64 reference; CUDA ones where a GPU is visible."""
    with tempfile.TemporaryDirectory(prefix="wheel-check-") as tmp:
        tmp = pathlib.Path(tmp)
        shim_env, log = make_shims(tmp / "shims") if shims else (None, tmp / "none.log")
        env = child_env(python, shim_env, {"WORKBENCH_CACHE": tmp / "cache", "WORKBENCH_QUIET": "1"})
        try:
            proc = subprocess.run([python, "-c", CHECK_CHILD, kinds], cwd=tmp, env=env, capture_output=True,
                                  text=True, timeout=timeout)
            stdout, tail, rc = proc.stdout, (proc.stdout + proc.stderr)[-3000:], proc.returncode
        except subprocess.TimeoutExpired as e:
            stdout = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            tail, rc = f"timed out after {timeout} s", 124
        calls = invocations(log)
    rows = [json.loads(ln[4:]) for ln in stdout.splitlines() if ln.startswith("ROW ")]
    return {"kinds": kinds, "shims": shims, "rows": rows, "returncode": rc, "tail": tail if rc else "",
            "compiler_invocations": len(calls), "invocation_lines": calls[:20],
            "ok": rc == 0 and bool(rows) and not calls and all(
                r["ok"] is not False and (r["kind"] != "c++" or (r.get("from_wheel") and not r.get("built")))
                for r in rows)}


def make_shims(root: pathlib.Path) -> tuple[dict, pathlib.Path]:
    """Shim compilers under `root`: (environment entries PATH-prefix and CUDA_HOME, log path)."""
    log = root / "invocations.log"
    shims, cuda = root / "bin", root / "fake-cuda"
    for d in (shims, cuda / "bin", cuda / "include"):
        d.mkdir(parents=True, exist_ok=True)
    (cuda / "include" / "cuda_runtime.h").write_text("/* not a toolkit: a shim for tests */\n")
    script = f'#!/bin/sh\necho "$0 $*" >> "{log}"\necho "$0: a shim; no compiler here" >&2\nexit 1\n'
    for name in SHIMMED:
        for d in (shims, cuda / "bin") if name == "nvcc" else (shims,):
            (d / name).write_text(script)
            (d / name).chmod(0o755)
    return {"PATH_PREFIX": str(shims), "CUDA_HOME": str(cuda)}, log


def invocations(log: pathlib.Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def child_env(python: str, shim_env: dict | None, extra: dict | None = None) -> dict:
    """This environment without PYTHONPATH (the installed package only), the interpreter's bin
    folder first on PATH; with shims, those before it (they shadow every real compiler on PATH)
    and CUDA_HOME pointing at the fake toolkit."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    path = [str(pathlib.Path(python).parent), env.get("PATH", "/usr/bin:/bin")]
    if shim_env:
        path.insert(0, shim_env["PATH_PREFIX"])
        env["CUDA_HOME"] = shim_env["CUDA_HOME"]
        env.pop("CUDA_PATH", None)
    env["PATH"] = os.pathsep.join(path)
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def default_variant(python: str) -> tuple[str, str]:
    """bias_gelu/vec4 where the installed wheel prebuilt it, else bias_gelu/cpu."""
    code = ("import importlib.util, json, pathlib; s = importlib.util.find_spec('workbench'); "
            "p = pathlib.Path(s.submodule_search_locations[0]) / '_prebuilt' / 'manifest.json'; "
            "print(json.dumps([e['label'] for e in json.loads(p.read_text())['libraries'].values()] if p.exists() else []))")
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run([python, "-c", code], cwd=cwd, capture_output=True, text=True, env=child_env(python, None))
    labels = json.loads(out.stdout or "[]")
    return ("bias_gelu", "vec4") if "bias_gelu/vec4" in labels else ("bias_gelu", "cpu")


def measure(python: str, op: str, variant: str, *, repeats: int = 3, shims: bool = True,
            extra_env: dict | None = None, cuda_first: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="wheel-check-") as tmp:
        tmp = pathlib.Path(tmp)
        shim_env, log = make_shims(tmp / "shims") if shims else (None, tmp / "none.log")
        env = child_env(python, shim_env, dict({"WORKBENCH_CACHE": tmp / "cache", "HOME": tmp}, **(extra_env or {})))
        runs, errors = [], []
        for _ in range(repeats):
            proc = subprocess.run([python, "-c", CHILD, op, variant, "1" if cuda_first else "0"], cwd=tmp, env=env, capture_output=True, text=True,
                                  timeout=600)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("WHEEL_CHECK ")), None)
            if proc.returncode or line is None:
                errors.append((proc.stdout + proc.stderr)[-3000:])
                continue
            runs.append(json.loads(line[len("WHEEL_CHECK "):]))
        calls = invocations(log)
    out = {"op": op, "variant": variant, "python": python, "shims": shims, "cuda_first": cuda_first, "runs": runs, "errors": errors,
           "compiler_invocations": len(calls), "invocation_lines": calls[:20]}
    for k in ("import_torch_s", "import_workbench_s", "load_s", "beyond_torch_s"):
        values = [r[k] for r in runs]
        out[k] = {"median": statistics.median(values), "min": min(values)} if values else None
    out["ok"] = bool(runs) and not errors and not calls and all(r["from_wheel"] and not r["built"] for r in runs)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the environment the wheel is in")
    ap.add_argument("--op")
    ap.add_argument("--variant")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-shims", action="store_true", help="leave PATH and CUDA_HOME as they are")
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--cuda-first", action="store_true",
                    help="initialise CUDA before the clock starts (a load that checks the GPU's arch initialises it)")
    ap.add_argument("--timeout", type=float, default=560, help="seconds for --check's process at most")
    ap.add_argument("--check", nargs="?", const="c++,torch", metavar="KINDS",
                    help="also wb.check every variant the wheel prebuilt, and Python variants of these kinds "
                         "(default c++,torch; triton needs a C compiler for its launcher: run it with --no-shims)")
    args = ap.parse_args(argv)
    if args.check:
        c = check_all(args.python, args.check, shims=not args.no_shims, timeout=args.timeout)
        for row in c["rows"]:
            status = {True: "ok", False: "FAIL", None: "-"}[row["ok"]]
            print(f"{row['op'] + '/' + row['variant']:32s} {row['kind']:6s} {row['device']:5s} {status:4s} "
                  f"{'prebuilt' if row.get('from_wheel') else 'not from the wheel' if row['kind'] == 'c++' else 'python':18s}"
                  f" {row['seconds']:7.2f} s  {row['summary']}")
        print(f"checked {len(c['rows'])} variants: {'all passed' if c['ok'] else 'FAILURES'}; compiler invocations: "
              f"{c['compiler_invocations']}" + (f"\n{c['tail']}" if c["tail"] else ""))
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(c, indent=1))
        return 0 if c["ok"] else 1
    op, variant = (args.op, args.variant) if args.op and args.variant else default_variant(args.python)
    r = measure(args.python, args.op or op, args.variant or variant, repeats=args.repeats, shims=not args.no_shims,
                cuda_first=args.cuda_first)
    for i, run in enumerate(r["runs"]):
        print(f"run {i}: import torch {run['import_torch_s']:.3f} s, import workbench {run['import_workbench_s']:.3f} s, "
              f"load {run['load_s']:.3f} s -> {run['beyond_torch_s']:.3f} s beyond torch "
              + (f"(CUDA initialised first, {run['cuda_init_s']:.3f} s) " if run["cuda_init_s"] is not None else "")
              + f"({'prebuilt' if run['from_wheel'] else 'NOT from the wheel'}: {run['library']})")
    for err in r["errors"]:
        print(f"failed run:\n{err}")
    bt = r["beyond_torch_s"]
    print(f"{r['op']}/{r['variant']}: import workbench + load, beyond import torch: "
          + (f"median {bt['median']:.3f} s, min {bt['min']:.3f} s (target < 0.3 s)" if bt else "no successful run")
          + f"; compiler invocations: {r['compiler_invocations']}" + ("" if r["shims"] else " (no shims: not counted)"))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(r, indent=1))
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
