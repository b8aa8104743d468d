#!/usr/bin/env bash
# The NumPy front end (workbench.ship.ndarray) on the GPU: its tests, then the vector_add benchmark at
# 2^26 float32, scalar and vec4 (median kernel time, GB/s over three arrays, H2D and D2H staging
# apart; torch never imported). Everything it writes goes under $OUT (default artifacts/gpu):
#   ndarray_env.txt ndarray_tests.log ndarray_bench.json ndarray_bench.log
# Needs nvcc (CUDA_HOME or /usr/local/cuda), pybind11 and numpy; no network.
# Usage (device tool):  bash scripts/gpu_ndarray.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export OUT=${OUT:-$PWD/artifacts/gpu} WORKBENCH_CACHE=${WORKBENCH_CACHE:-/tmp/workbench-cache} PYTHONUNBUFFERED=1 \
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT" || exit 1
status=0

echo "=== env ($(date -u +%H:%M:%S))"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -2
  python3 -c "import sys, numpy, pybind11; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'pybind11', pybind11.__version__)"
  git rev-parse --short HEAD 2>/dev/null || true; } 2>&1 | tee "$OUT/ndarray_env.txt"

echo "=== tests ($(date -u +%H:%M:%S))"
# -s: the timing tests print their kernel and staging times into the log
WORKBENCH_TEST_CACHE="$WORKBENCH_CACHE" timeout 420 python3 -m pytest -q -s -rfEs --durations=10 -p no:cacheprovider \
  tests/test_ndarray.py 2>&1 | tee "$OUT/ndarray_tests.log"
status=$((status | ${PIPESTATUS[0]}))

echo "=== bench ($(date -u +%H:%M:%S))"
timeout 300 python3 scripts/ndarray_bench.py --out "$OUT/ndarray_bench.json" 2>&1 | tee "$OUT/ndarray_bench.log"
status=$((status | ${PIPESTATUS[0]}))

echo "=== done ($(date -u +%H:%M:%S)), status $status"
exit "$status"
