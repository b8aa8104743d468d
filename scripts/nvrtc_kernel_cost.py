"""What one kernel's NVRTC compile costs on this host: the floor under issue 27's edit loop.

The NVRTC tier compiles a kernel when it is first launched (workbench/build/nvrtc_kernels.py), so an
edit's first call waits for at least one whole compile of the kernel it launches. This script builds a
variant's NVRTC unit (its front end only), then compiles each chosen kernel alone in a fresh process
(NVRTC may keep an in-process cache: the H100 machine's returned repeat compiles in 0.02 s), once per
option set, and reports wall, user and system seconds:
  tier          the tier's own options (what an edit's first call waits for)
  ptx           the same to PTX only (the optimizer without ptxas: how the two split the time)
  fast-mid      --Ofast-compile=mid (not used by the tier: it compiles other code, which is
                what gets timed and checked)
and every kernel of the unit in one program, one process (the least CPU time for all of them: one
front end). Needs no GPU.

  python3 scripts/nvrtc_kernel_cost.py matmul/warptile rmsnorm/vectorized --kernels 2
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OPTION_SETS = {"tier": [], "ptx": None, "fast-mid": ["--Ofast-compile=mid"]}  # None: the arch as compute_XX

# Run in a fresh interpreter: one NVRTC program, its resource use printed as JSON.
CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from workbench.build import nvrtc, nvrtc_kernels
u = nvrtc_kernels.unit(sys.argv[2])
options, expressions = json.loads(sys.argv[3]), json.loads(sys.argv[4])
ptx = any(o.startswith("-arch=compute_") for o in options)
nvrtc.library()
before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
nvrtc.compile_program(u.main, u.texts, options, expressions, ptx=ptx)
wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": wall, "user_s": after.ru_utime - before.ru_utime, "sys_s": after.ru_stime - before.ru_stime}))
"""


def unit_of(qualified: str, arch: str):
    from workbench.build import BuildOptions, nvrtc_kernels
    from workbench.build import get_or_build, variant_piece
    from workbench.model import registry

    op, _, variant = qualified.partition("/")
    r = registry.resolve(op)
    built = get_or_build(variant_piece(r, variant, r.variant_source(variant), BuildOptions(compiler="nvrtc", arch=arch)))
    key = built.record.get("nvrtc_unit")
    if not key:
        raise SystemExit(f"{qualified}: its build has no NVRTC unit (the tier fell back to nvcc for it)")
    return nvrtc_kernels.unit(key)


def compile_once(unit, options: list[str], expressions: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), unit.key, json.dumps(options), json.dumps(expressions)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{unit.label}: the compile failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", metavar="OP/VARIANT")
    ap.add_argument("--kernels", type=int, default=2, help="kernels per variant compiled alone, in the unit's order (default 2)")
    ap.add_argument("--arch", default="sm_90a", help="the arch compiled for (default sm_90a, the H100's)")
    ap.add_argument("--out", default="artifacts/nvrtc_kernel_cost", help="folder for kernel_cost.jsonl and kernel_cost.txt")
    args = ap.parse_args()
    if args.kernels < 1:
        ap.error(f"--kernels must be at least 1; got {args.kernels}")
    machine = f"{platform.node()} ({len(os.sched_getaffinity(0))} cores)"
    rows, lines = [], [f"NVRTC compile cost on {machine}, {args.arch}, each in a fresh process: wall / user / sys seconds",
                       f"{'variant':20s} {'kernel':58s} {'options':9s} {'wall':>6s} {'user':>6s} {'sys':>6s}"]
    for qualified in args.variants:
        u = unit_of(qualified, args.arch)
        expressions = sorted(u.kernels.values())
        for expression in expressions[:args.kernels]:
            for name, extra in OPTION_SETS.items():
                options = (u.options + extra if extra is not None else  # PTX: no cubin, so no ptxas report either
                           [o.replace("-arch=sm_", "-arch=compute_") for o in u.options if not o.startswith("--ptxas")])
                r = compile_once(u, options, [expression])
                rows.append({"variant": qualified, "kernel": expression, "options": name, **r, "machine": machine, "arch": args.arch})
                lines.append(f"{qualified:20s} {expression[-58:]:58s} {name:9s} {r['wall_s']:6.3f} {r['user_s']:6.3f} {r['sys_s']:6.3f}")
        r = compile_once(u, u.options, expressions)
        rows.append({"variant": qualified, "kernel": f"all {len(expressions)}, one program", "options": "tier", **r,
                     "machine": machine, "arch": args.arch})
        lines.append(f"{qualified:20s} {'all ' + str(len(expressions)) + ' kernels, one program':58s} {'tier':9s} "
                     f"{r['wall_s']:6.3f} {r['user_s']:6.3f} {r['sys_s']:6.3f}")
    from workbench.measure import bench_rows

    bench_rows.write_report(args.out, "kernel_cost", rows, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
