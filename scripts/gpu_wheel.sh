#!/usr/bin/env bash
# The workbench as a wheel on the GPU machine (issue 14, part 1):
#   1. build the full wheel (harness, bindings, every CPU and CUDA variant; MAX_JOBS=16), cold, timed;
#   2. install it into a fresh venv that sees the system torch (--system-site-packages, no network);
#   3. hide every compiler (PATH shims for nvcc/gcc/g++/c++/cc/clang/ninja that record and fail, and a
#      fake CUDA_HOME) and wb.check every prebuilt variant, CUDA and CPU, against the float64 reference;
#      then the Triton variants with the compilers back (Triton builds its launcher with a C compiler);
#   4. time `import workbench; wb.load("bias_gelu", "vec4")` in fresh processes (target < 0.3 s beyond
#      import torch, zero compiler invocations).
# Writes under $OUT (default artifacts/gpu): wheel_build.log, wheel.json (everything), wheel_checks.json,
# wheel_triton.json, wheel_timing.json, wheel_summary.txt (the table printed at the end).
# Usage (device tool):  bash scripts/gpu_wheel.sh
#                       STEPS="checks timing summary" bash scripts/gpu_wheel.sh   # reuse the build and venv
#   (they live in .wheel-work/, ignored by git and kept between calls while the machine stays warm)
#   Needs setuptools (>= 68) and wheel importable; where they are not, carry them as wheels in .whl/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/artifacts/gpu}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
WORK=${WHEEL_WORK:-$PWD/.wheel-work}
STEPS=${STEPS:-"build install checks triton timing summary"}
VPY="$WORK/venv/bin/python"
# The wheel's default arch list (workbench/build/toolchain.py, SHIPPED), named here for the log's line below.
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$($PY -c 'from workbench.build.toolchain import SHIPPED; print(SHIPPED)')}
export WORKBENCH_WHEEL_DEVICES=cpu,cuda
unset PYTHONPATH
has() { [[ " $STEPS " == *" $1 "* ]]; }

echo "=== env ($(date -u +%H:%M:%S))"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $PY -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  nvcc --version | tail -1; nproc
  $PY -c "import setuptools, sys; print('setuptools', setuptools.__version__)" || true
  $PY -c "import wheel; print('wheel', wheel.__version__)" || true; } 2>&1 | tee "$OUT/wheel_env.txt"
if ! $PY -c "import setuptools, wheel" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --target "$WORK/site" .whl/*.whl && export PYTHONPATH="$WORK/site"
fi

if has build; then
rm -rf "$WORK"
mkdir -p "$WORK/src" "$WORK/dist"
echo "=== build ($(date -u +%H:%M:%S)): MAX_JOBS=$MAX_JOBS TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST"
# A copy of the tree (the working tree as carried here), so nothing is left in the repo and the build is cold.
cp -r setup.py pyproject.toml MANIFEST.in README.md workbench kernels bindings exercises "$WORK/src/"
find "$WORK/src" -name __pycache__ -prune -exec rm -rf {} +
start=$(date +%s.%N)
(cd "$WORK/src" && timeout 560 $PY -m pip wheel . -v --no-build-isolation --no-deps --no-index -w "$WORK/dist") \
  > "$OUT/wheel_build.log" 2>&1
build_rc=$?
build_s=$($PY -c "print(round($(date +%s.%N) - $start, 1))")
echo "$build_s" > "$WORK/build_seconds"
WHEEL=$(ls "$WORK"/dist/*.whl 2>/dev/null | head -1)
grep -E "^\s*\[workbench\]|error" "$OUT/wheel_build.log" | head -20
echo "build exit $build_rc in $build_s s: ${WHEEL:-no wheel}"
unset PYTHONPATH
if [ "$build_rc" != 0 ] || [ -z "$WHEEL" ]; then tail -40 "$OUT/wheel_build.log"; exit 1; fi
fi
unset PYTHONPATH
WHEEL=$(ls "$WORK"/dist/*.whl 2>/dev/null | head -1)
[ -n "$WHEEL" ] || { echo "no wheel in $WORK/dist: run the build step"; exit 1; }

if has install; then
echo "=== install ($(date -u +%H:%M:%S))"
rm -rf "$WORK/venv" "$WORK/site"
if $PY -m venv --system-site-packages --without-pip "$WORK/venv"; then
  # The system python may itself be a venv (the GPU image's is): --system-site-packages then reaches
  # its base, not its torch. A .pth with the host's site-packages does (pip comes from there too).
  purelib=$("$VPY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  $PY -c "import site; print('\\n'.join(site.getsitepackages()))" > "$purelib/_host_packages.pth"
  "$VPY" -m pip install -q --no-deps --no-index --ignore-installed "$WHEEL" || exit 1
else  # no venv module: a --target folder ahead of the system packages stands in for one
  echo "python3 -m venv unavailable; installing with --target" >&2
  $PY -m pip install -q --no-deps --no-index --target "$WORK/site" "$WHEEL" || exit 1
  mkdir -p "$WORK/venv/bin" && printf '#!/bin/sh\nPYTHONPATH="%s" exec %s "$@"\n' "$WORK/site" "$(command -v $PY)" > "$VPY"
  chmod +x "$VPY"
fi
(cd /tmp && "$VPY" -c "import workbench, sys; from workbench import config; print('installed:', workbench.__file__, 'INSTALLED', config.INSTALLED); sys.exit(0 if config.INSTALLED else 1)") || exit 1
fi

if has checks; then
  echo "=== checks, compilers hidden ($(date -u +%H:%M:%S))"
  timeout 520 $PY scripts/wheel_check.py --python "$VPY" --check c++,torch --timeout 480 --json "$OUT/wheel_checks.json"
fi
if has triton; then
  echo "=== Triton variants, compilers visible ($(date -u +%H:%M:%S))"
  timeout 300 $PY scripts/wheel_check.py --python "$VPY" --check triton --no-shims --timeout 260 --json "$OUT/wheel_triton.json"
fi
if has timing; then
  echo "=== import + load time, compilers hidden ($(date -u +%H:%M:%S))"
  timeout 200 $PY scripts/wheel_check.py --python "$VPY" --op bias_gelu --variant vec4 --repeats 5 --json "$OUT/wheel_timing.json"
  # The same with CUDA initialised before the clock: how much of the load is CUDA's own start-up
  timeout 200 $PY scripts/wheel_check.py --python "$VPY" --op bias_gelu --variant vec4 --repeats 5 --cuda-first \
    --json "$OUT/wheel_timing_cuda_first.json"
fi
has summary || exit 0
build_s=$(cat "$WORK/build_seconds" 2>/dev/null || echo nan)
$PY - "$OUT" "$WHEEL" "$build_s" <<'EOF' | tee "$OUT/wheel_summary.txt"
import json, pathlib, sys, zipfile
out, wheel, build_s = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), float(sys.argv[3])
load = lambda name: json.loads((out / name).read_text()) if (out / name).exists() else {}
with zipfile.ZipFile(wheel) as z:
    manifest = json.loads(z.read("workbench/_prebuilt/manifest.json"))
    libs_bytes = sum(i.file_size for i in z.infolist() if i.filename.startswith("workbench/_prebuilt/"))
checks, triton, timing = load("wheel_checks.json"), load("wheel_triton.json"), load("wheel_timing.json")
warm = load("wheel_timing_cuda_first.json")
libs = sorted(manifest["libraries"].values(), key=lambda e: -(e["build_seconds"] or 0))
summary = {"wheel": wheel.name, "wheel_bytes": wheel.stat().st_size, "prebuilt_bytes_unpacked": libs_bytes,
           "build_wall_s": build_s, "build_ext_s": manifest["build_seconds"], "jobs": manifest["jobs"],
           "arch_list": manifest["arch_list"], "toolchain": manifest["toolchain"], "nvcc": manifest["nvcc"],
           "libraries": len(libs), "slowest": [(e["label"], e["build_seconds"]) for e in libs[:5]],
           "checks": checks, "triton": triton, "timing": timing, "timing_cuda_first": warm}
(out / "wheel.json").write_text(json.dumps(summary, indent=1))
print(f"wheel {wheel.name}: {wheel.stat().st_size / 1e6:.2f} MB ({libs_bytes / 1e6:.1f} MB of libraries unpacked), "
      f"{len(libs)} libraries for {manifest['arch_list']}")
print(f"build: {build_s:.1f} s wall (pip wheel, cold), build_ext {manifest['build_seconds']} s with {manifest['jobs']} jobs; "
      f"slowest: {', '.join(f'{l} {s:.1f} s' for l, s in summary['slowest'])}")
print(f"{'variant':32s} {'kind':6s} {'device':6s} {'check':6s} {'from':9s} {'s':>7s}")
for r in checks.get("rows", []) + triton.get("rows", []):
    print(f"{r['op'] + '/' + r['variant']:32s} {r['kind']:6s} {r['device']:6s} "
          f"{ {True: 'ok', False: 'FAIL', None: '-'}[r['ok']]:6s} "
          f"{'wheel' if r.get('from_wheel') else 'python' if r['kind'] != 'c++' else 'BUILT':9s} {r['seconds']:7.2f}")
print(f"checks (compilers hidden): {len(checks.get('rows', []))} variants, {'all passed' if checks.get('ok') else 'FAILURES'}, "
      f"compiler invocations {checks.get('compiler_invocations')}; triton (compilers visible): "
      f"{'all passed' if triton.get('ok') else 'FAILURES or none'}")
bt = timing.get("beyond_torch_s") or {}
print(f"import workbench + wb.load('bias_gelu', 'vec4'), fresh process: median {bt.get('median', float('nan')):.3f} s, "
      f"min {bt.get('min', float('nan')):.3f} s beyond import torch (target < 0.3 s); compiler invocations "
      f"{timing.get('compiler_invocations')}; import torch {((timing.get('import_torch_s') or {}).get('median') or 0):.2f} s")
wt = warm.get("beyond_torch_s") or {}
print(f"  with CUDA initialised first: median {wt.get('median', float('nan')):.3f} s, min {wt.get('min', float('nan')):.3f} s")
EOF
