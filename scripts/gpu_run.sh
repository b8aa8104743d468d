#!/usr/bin/env bash
# The one call for the GPU machine: environment, build timings, GPU tests, the bias_gelu benchmark
# sweep, then a short table. Everything it writes goes under $OUT (default artifacts/gpu):
#   env.txt build_timings.json gpu_tests.log bench.jsonl bench.log [bench_repeat.*] summary.txt
# Usage (device tool):  bash scripts/gpu_run.sh            # everything
#                       STEPS="tests" bash scripts/gpu_run.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/artifacts/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export WORKBENCH_CACHE=${WORKBENCH_CACHE:-/tmp/workbench-cache}
STEPS=${STEPS:-"env timings tests bench"}
BUDGET=${BUDGET:-0.5}

for step in $STEPS; do
  echo "=== $step ($(date -u +%H:%M:%S))"
  case $step in
    env)
      { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
        python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0]); print(torch.cuda.get_device_properties(0))"
        nvcc --version | tail -2; git rev-parse --short HEAD 2>/dev/null || true; } 2>&1 | tee "$OUT/env.txt" ;;
    timings)
      timeout 300 python3 scripts/build_timings.py scalar 2>&1 | tee "$OUT/build_timings.json" ;;
    tests)
      WORKBENCH_TEST_CACHE="$WORKBENCH_CACHE" timeout 540 python3 -m pytest -q -m gpu -rfEs tests 2>&1 | tee "$OUT/gpu_tests.log" ;;
    bench|bench_repeat)  # bench_repeat: the same sweep again, to see run-to-run spread
      timeout 420 python3 -m workbench bench bias_gelu --dtypes float32 float16 bfloat16 --directions fwd bwd \
        --budget "$BUDGET" --results "$OUT/$step.jsonl" 2>&1 | grep -v "^\[bench\]" | tee "$OUT/$step.log" ;;
    *) echo "unknown step $step" ;;
  esac
done
python3 scripts/gpu_summary.py "$OUT" | tee "$OUT/summary.txt"
