#!/usr/bin/env bash
# Set up (only what is missing) and run the demo: build, check, gradcheck, benchmark, plot.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure_env.sh numpy matplotlib
exec "$PY" -m workbench demo "$@"
