#!/usr/bin/env bash
# Set up (only what is missing) and run the test suite. GPU tests skip where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure_env.sh numpy pytest matplotlib pandas
exec "$PY" -m pytest -q "$@"
