"""How long a torch extension (style="extension") takes to build, with and without the precompiled
torch/extension.h (workbench/build/torch_pch.py), on this machine. Each build runs in a fresh
process against a cache of its own, on a copy of the source edited by one comment line (so nothing
is found in a cache), and is timed on the wall clock and by its compilers' CPU time (user + sys of
every process it waited for: a number the other load on the machine changes less than the wall
clock); the load average before each is recorded.

    python3 scripts/extension_build_time.py [--out results/cpu/<commit>/extension_builds.json] [--skip-cuda]

Builds: the CPU twin of the course's bias + GELU extension (notebooks/course/bias_gelu_ext_cpu.cpp)
without precompiled headers, then the headers precompiled once, then the same file and Day 10's
binding (tests/fixtures/course) with them; and Day 10's two files (binding .cpp + kernels .cu) with
them, where nvcc is found (--skip-cuda: not). Prints a table last."""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHILD = r"""
import json, os, resource, sys, time
what, paths = sys.argv[1], json.loads(sys.argv[2])
from workbench.build import torch_pch
from workbench.run import byo
start = time.perf_counter()  # the build's time, not the imports'
if what == "pch":  # made where missing, for the flags an extension's C++ files are built with
    from workbench.build import CPU_FLAGS
    built = torch_pch.folder(CPU_FLAGS) is not None
else:
    built = byo.build_extension("bias_gelu", paths).built
wall = time.perf_counter() - start
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("RESULT " + json.dumps({"wall_s": wall, "cpu_s": r.ru_utime + r.ru_stime, "built": built}))
"""


def edited_copy(sources: list[pathlib.Path], folder: pathlib.Path, tag: str) -> list[str]:
    """The sources copied into `folder`, each with a first comment line of its own (a new content key)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for s in sources:
        dst = folder / s.name
        dst.write_text(f"// {tag}\n" + s.read_text())
        out.append(str(dst))
    return out


def run(what: str, paths: list[str], cache: pathlib.Path, pch: bool) -> dict:
    env = dict(os.environ, WORKBENCH_CACHE=str(cache), WORKBENCH_PCH="1" if pch else "0", WORKBENCH_QUIET="1",
               PYTHONPATH=str(REPO))
    load = os.getloadavg()[0]
    p = subprocess.run([sys.executable, "-c", CHILD, what, json.dumps(paths)], capture_output=True, text=True,
                       env=env, cwd=REPO)
    if p.returncode:
        raise SystemExit(f"{what} failed:\n{p.stdout}{p.stderr}")
    result = json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    return {"build": what, "files": [pathlib.Path(x).name for x in paths], "precompiled_headers": pch,
            "load_average_before": round(load, 2), **result}


def main() -> None:
    from workbench.build import toolchain
    from workbench import __version__
    from workbench.measure import bench_rows

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="JSON file (default results/cpu/<commit>/extension_builds.json)")
    ap.add_argument("--skip-cuda", action="store_true", help="leave out the build with a .cu file")
    args = ap.parse_args()
    twin = [REPO / "notebooks" / "course" / "bias_gelu_ext_cpu.cpp"]
    day10 = REPO / "tests" / "fixtures" / "course" / "day10_bias_gelu"
    rows = []
    with tempfile.TemporaryDirectory(prefix="wb-ext-times-") as tmp:
        tmp = pathlib.Path(tmp)
        cold, warm = tmp / "cache-cold", tmp / "cache-warm"
        for c in (cold, warm):
            c.mkdir(mode=0o700)
        rows.append(run("cold headers: CPU twin", edited_copy(twin, tmp / "a", "cold"), cold, pch=False))
        rows.append(run("pch", [str(twin[0])], warm, pch=True))
        rows[-1]["build"] = "precompile torch/extension.h (once per compiler and torch)"
        rows.append(run("warm headers: CPU twin", edited_copy(twin, tmp / "b", "warm"), warm, pch=True))
        rows.append(run("warm headers: Day 10 binding alone", edited_copy([day10 / "fused_bias_gelu.cpp"], tmp / "c",
                                                                          "warm"), warm, pch=True))
        if not args.skip_cuda and toolchain.can_build_cuda():
            rows.append(run("warm headers: Day 10 binding + kernels (.cu)",
                            edited_copy([day10 / "fused_bias_gelu.cpp", day10 / "fused_bias_gelu_cuda.cu"], tmp / "d",
                                        "warm"), warm, pch=True))
    prov = bench_rows.provenance(REPO, __version__)
    out = pathlib.Path(args.out) if args.out else REPO / "results" / "cpu" / prov["commit"] / "extension_builds.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"provenance": prov, "cpus": os.cpu_count(), "machine": platform.processor() or
                               platform.machine(), "rows": rows}, indent=1) + "\n")
    print(f"{'build':52s} {'wall s':>8s} {'CPU s':>8s} {'load before':>12s}")
    for r in rows:
        print(f"{r['build']:52s} {r['wall_s']:8.1f} {r['cpu_s']:8.1f} {r['load_average_before']:12.2f}")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
