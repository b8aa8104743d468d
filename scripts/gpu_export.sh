#!/usr/bin/env bash
# Graduation on the GPU: export bias_gelu (scalar, vec4, cpu) and matmul (its warptile and
# tensor_core rungs, and cpu) as packages of their own, pip-install them (no network, no build
# isolation, into a target folder), and run each package's own test, which checks every variant
# that runs here (CUDA included) against the op's float64 reference, opchecks both ops and compiles
# fullgraph, in a process that never imports the workbench. Writes under $OUT (default
# artifacts/gpu_export): env.txt, <package>_export.log, <package>_build.log, <package>_test.log,
# <package>_junit.xml, summary.txt (the table printed at the end).
# Usage (device tool):  bash scripts/gpu_export.sh
#                       PACKAGES="bias_gelu" bash scripts/gpu_export.sh
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
OUT=${OUT:-$PWD/artifacts/gpu_export}
WORK=${WORK:-/tmp/wb_export}
PACKAGES=${PACKAGES:-"bias_gelu matmul"}
mkdir -p "$OUT"
rm -rf "$WORK" && mkdir -p "$WORK"
export PYTHONUNBUFFERED=1
unset PYTHONPATH  # the packages' tests must not see the workbench; the export step adds it itself

variants_of() {
  case $1 in
    bias_gelu) echo "scalar,vec4,cpu" ;;
    matmul) echo "warptile,tensor_core,cpu" ;;
    *) echo "cpu" ;;
  esac
}

{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  nvcc --version | tail -2; git rev-parse --short HEAD 2>/dev/null || true
  echo "nproc $(nproc); TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-unset, so the visible GPU}"; } 2>&1 | tee "$OUT/env.txt"

declare -A BUILD_S BUILD_RC TEST_RC
for op in $PACKAGES; do
  pkg=wb_$op
  echo "=== $pkg: export $(variants_of "$op") ($(date -u +%H:%M:%S))"
  PYTHONPATH=$REPO python3 -m workbench export "$op" --variants "$(variants_of "$op")" --out "$WORK/$pkg" \
    > "$OUT/${pkg}_export.log" 2>&1 || { echo "export failed: see $OUT/${pkg}_export.log"; tail -5 "$OUT/${pkg}_export.log"; continue; }
  start=$(date +%s.%N)
  # pip where it is; else setuptools' own build into the same target folder
  if python3 -m pip --version >/dev/null 2>&1; then
    (cd "$WORK" && timeout 900 python3 -m pip install --no-build-isolation --no-deps --no-index -v \
       --target "$WORK/site_$op" "$WORK/$pkg") > "$OUT/${pkg}_build.log" 2>&1
  else
    (cd "$WORK/$pkg" && timeout 900 python3 setup.py build --build-lib "$WORK/site_$op") > "$OUT/${pkg}_build.log" 2>&1
  fi
  BUILD_RC[$op]=$?
  BUILD_S[$op]=$(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')")
  echo "build: exit ${BUILD_RC[$op]} in ${BUILD_S[$op]} s"
  if [ "${BUILD_RC[$op]}" != 0 ]; then grep -n -m5 -i "error" "$OUT/${pkg}_build.log"; continue; fi
  echo "=== $pkg: its own test"
  (cd "$WORK/$pkg" && PYTHONPATH="$WORK/site_$op" timeout 900 python3 -m pytest -q -rA -p no:cacheprovider \
     --junitxml="$OUT/${pkg}_junit.xml" tests/) > "$OUT/${pkg}_test.log" 2>&1
  TEST_RC[$op]=$?
  tail -3 "$OUT/${pkg}_test.log"
done

# The table: per package, its build, then per variant how its test cases went (a case's variant is
# its parameter; the compile test runs once per device, with variant "").
{
  printf "%-18s %7s  %4s  %-14s %-6s %6s %6s %7s  %s\n" package "build s" exit variant device passed failed skipped "(test s)"
  for op in $PACKAGES; do
    OP=$op BUILD="${BUILD_S[$op]:--}" RC="${BUILD_RC[$op]:--}" XML="$OUT/wb_${op}_junit.xml" WORK="$WORK" python3 - <<'EOF'
import os, re, ast, xml.etree.ElementTree as ET
op, xml = os.environ["OP"], os.environ["XML"]
head = f"wb_{op:<15s} {os.environ['BUILD']:>7s}  {os.environ['RC']:>4s}"
decl_path = os.path.join(os.environ["WORK"], f"wb_{op}", f"wb_{op}", "_decl.py")
if not os.path.exists(xml) or not os.path.exists(decl_path):
    print(f"{head}  (no test results)")
    raise SystemExit
decl = {}
exec(open(decl_path).read(), decl)
device = {v["name"]: v["device"] for v in decl["VARIANTS"]}
rows = {}
for case in ET.parse(xml).getroot().iter("testcase"):
    name = case.get("name", "")
    m = re.search(r"\[([^\]-]+)", name)
    key = ("compile", m.group(1)) if name.startswith("test_compile") and m else \
          (device.get(m.group(1), "-"), m.group(1)) if m and m.group(1) in device else ("-", "(others)")
    r = rows.setdefault(key, [0, 0, 0, 0.0])
    failed = case.find("failure") is not None or case.find("error") is not None
    r[2 if case.find("skipped") is not None else 1 if failed else 0] += 1
    r[3] += float(case.get("time", 0))
for i, ((dev, label), (ok, bad, skip, secs)) in enumerate(sorted(rows.items(), key=lambda kv: (kv[0][0] == "compile", kv[0]))):
    if dev == "compile":
        dev, label = label, "(compile)"
    print(f"{head if i == 0 else ' ' * len(head)}  {label:<14s} {dev:<6s} {ok:6d} {bad:6d} {skip:7d}  ({secs:.1f})")
EOF
  done
} | tee "$OUT/summary.txt"
