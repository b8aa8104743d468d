"""Build-time targets for one op, measured the way a user meets them (prints JSON):
  usage: build_timings.py OP [VARIANT]   (VARIANT: the one loaded cold and warm; default scalar)
  cold      : harness + first variant in an empty cache, in a fresh process (excludes import torch)
  edit      : a variant rebuilt after a one-line kernel edit, in the same process
  warm      : a load from the cache in a fresh process, beyond import torch
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import workbench as wb
op = sys.argv[1]
k = wb.load(op, sys.argv[2])
t2 = time.perf_counter()
out = {"import_torch_s": t1 - t0, "load_s": t2 - t1, "built": k.built}
if len(sys.argv) > 3:  # the edit loop: each variant's text, edited by one line, reloaded
    out["edit_rebuild_s"] = {}
    for v in sys.argv[3].split(","):
        src = wb.registry.variant_source(op, v).read_text()
        wb.load_inline(op, src, name="edit_" + v)
        edited = src.replace("#include", "// edited: one line\n#include", 1)
        t3 = time.perf_counter()
        e = wb.load_inline(op, edited, name="edit_" + v)
        assert e.built
        out["edit_rebuild_s"][v] = time.perf_counter() - t3
print("RESULT " + json.dumps(out))
"""


def run(op: str, variant: str, cache: str, *extra: str) -> dict:
    env = dict(os.environ, WORKBENCH_CACHE=cache, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-c", CHILD, op, variant, *extra], capture_output=True, text=True, env=env, cwd=REPO)
    if p.returncode:
        raise SystemExit(p.stdout + p.stderr)
    return json.loads(next(l for l in p.stdout.splitlines() if l.startswith("RESULT "))[7:])


def main() -> None:
    sys.path.insert(0, str(REPO))
    from workbench.model import registry

    if len(sys.argv) < 2:
        raise SystemExit(f"usage: build_timings.py OP [VARIANT]; ops: {registry.ops()}")
    op = sys.argv[1]
    variant = sys.argv[2] if len(sys.argv) > 2 else "scalar"
    # every C++ variant of the op, edited by one line (a Python variant is imported, not built)
    edited = ",".join(n for n, p in registry.variant_sources(op).items() if p.suffix in (".cu", ".cpp"))
    with tempfile.TemporaryDirectory() as cache:
        cold = run(op, variant, cache, edited)
        warm = [run(op, variant, cache) for _ in range(3)]
    result = {
        "op": op,
        "variant": variant,
        "cold_harness_plus_variant_s": cold["load_s"],
        "edit_rebuild_same_process_s": cold["edit_rebuild_s"],
        "edit_rebuild_worst_s": max(cold["edit_rebuild_s"].values()),
        "warm_load_beyond_import_torch_s": sorted(w["load_s"] for w in warm)[1],
        "warm_built_flags": [w["built"] for w in warm],
        "import_torch_s": sorted(w["import_torch_s"] for w in warm)[1],
        "targets": {"cold_s": 10.0, "edit_s": 1.5, "warm_s": 0.3},
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
