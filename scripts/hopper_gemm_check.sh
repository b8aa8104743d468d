#!/usr/bin/env bash
# Builds each Hopper rung (kernels/matmul/<rung>.cu, as the variant it exports, for sm_90a) into a
# library and runs scripts/hopper_gemm_check.cu over them: the check (every GEMM case, tails,
# both routes, bit-for-bit repeats), the output past 2^31 elements, and the forward against
# cuBLAS at the issue's sizes.
# Usage: [RUNGS="wgmma_tma warp_specialized persistent"] bash scripts/hopper_gemm_check.sh [check] [big] [bench]
# (default: all three). Builds under $OUT (or a temporary directory); output on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
modes=${*:-"check big bench"}
rungs=${RUNGS:-"wgmma_tma warp_specialized persistent"}
bin=${OUT:-$(mktemp -d)}/hopper_bin
mkdir -p "$bin"
gencode="-gencode=arch=compute_90a,code=sm_90a"
libs=()
for rung in $rungs; do
  nvcc -std=c++17 -O3 $gencode -Xptxas=-v -shared -Xcompiler -fPIC -Ikernels/common -Ikernels/matmul \
    "kernels/matmul/$rung.cu" -o "$bin/$rung.so" > "$bin/$rung.ptxas.log" 2>&1 &
  libs+=("$bin/$rung.so")
done
# TUNE="name=flag,flag ...": more builds of persistent.cu, each under its name, timed beside the rest
# (e.g. TUNE="c2=-DWB_PERSISTENT_CLUSTER=2 c2w0=-DWB_PERSISTENT_CLUSTER=2,-DWB_PERSISTENT_WAIT=0")
for spec in ${TUNE:-}; do
  name=${spec%%=*}; flags=${spec#*=}
  nvcc -std=c++17 -O3 $gencode -Xptxas=-v -shared -Xcompiler -fPIC -Ikernels/common -Ikernels/matmul ${flags//,/ } \
    kernels/matmul/persistent.cu -o "$bin/persistent_$name.so" > "$bin/persistent_$name.ptxas.log" 2>&1 &
  libs+=("$bin/persistent_$name.so")
done
nvcc -std=c++17 -O3 $gencode -Ikernels/common -Ikernels/matmul scripts/hopper_gemm_check.cu -o "$bin/check" \
  -lcublas -ldl &
for job in $(jobs -p); do wait "$job" || { cat "$bin"/*.ptxas.log | grep -i -B2 -A2 error; exit 1; }; done
for log in "$bin"/*.ptxas.log; do
  echo "ptxas $(basename "$log" .ptxas.log): $(grep -A3 "_kernel" "$log" | grep -o "Used [0-9]* registers\|[0-9]* bytes spill stores" | sort | uniq -c | tr '\n' ' ')"
  grep -h "C7508\|warning" "$log" | sort | uniq -c || true
done
status=0
for mode in $modes; do "$bin/check" "$mode" "${libs[@]}" || status=1; done
exit $status
