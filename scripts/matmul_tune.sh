#!/usr/bin/env bash
# Builds scripts/matmul_tune.cu for warptile's float32 plans and tensor_core's bf16 plans, runs
# both on square GEMMs, and times cuBLAS (torch.matmul, TF32 off) on the same sizes beside them.
# Usage: [RUNGS=tensor_core] bash scripts/matmul_tune.sh [SIZE...]   (default 4096 8192); output on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=${*:-"4096 8192"}
rungs=${RUNGS:-"warptile tensor_core"}  # which sweeps to build and run
arch=$(python3 -c "import torch; m, n = torch.cuda.get_device_capability(); print(f'sm_{m}{n}')")
bin=$(mktemp -d)
for rung in $rungs; do
  flag=$([ $rung = tensor_core ] && echo -DTUNE_TENSOR_CORE || true)
  nvcc -std=c++17 -O3 -arch="$arch" -Ikernels/common -Ikernels/matmul $flag scripts/matmul_tune.cu -o "$bin/$rung" &
done
wait
python3 - $sizes <<'PY'
import sys, torch
torch.backends.cuda.matmul.allow_tf32 = False
for dtype in (torch.float32, torch.bfloat16):
    for size in map(int, sys.argv[1:]):
        a, b = (torch.rand(size, size, device="cuda", dtype=dtype) for _ in range(2))
        times = []
        for r in range(-1, max(3, int(2e13 / (2 * size**3) / (1 if dtype == torch.float32 else 10)))):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); torch.matmul(a, b); e.record(); e.synchronize()
            if r >= 0: times.append(s.elapsed_time(e))
        ms = sorted(times)[len(times) // 2]
        print(f"tune {str(dtype)[6:]} cuBLAS size={size} ms={ms:.4f} tflops={2 * size**3 / ms / 1e9:.1f}", flush=True)
PY
for rung in $rungs; do "$bin/$rung" $sizes; done
