#!/usr/bin/env bash
# Set up (only what is missing) and run the test suite. GPU tests skip where no GPU is visible.
# nbclient, nbformat and ipykernel (which brings IPython) run the notebooks and the cell magic; pybind11 builds the
# NumPy front end (workbench.ship.ndarray); setuptools and wheel build the workbench's own wheel (tests/test_wheel.py);
# ray runs tests/test_cluster.py's local cluster (plain ray: the dashboard of ray[default] is not needed there);
# pytest-xdist runs the test files on two processes where there is no GPU (CI: 2 cores), one file per worker at
# a time (--dist loadfile: a module's fixtures are built once), all sharing one build cache, so each piece is
# still compiled once per run. WORKBENCH_TEST_WORKERS=1 runs them in this process alone (the GPU default: timed
# tests should not share the GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure_env.sh numpy pytest matplotlib pandas nbclient nbformat ipykernel pybind11 setuptools wheel \
  xdist=pytest-xdist ray
if [ -z "${WORKBENCH_TEST_WORKERS:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then WORKBENCH_TEST_WORKERS=1; else WORKBENCH_TEST_WORKERS=2; fi
fi
if [ -z "${WORKBENCH_TEST_CACHE:-}" ]; then  # one cache for every worker, removed afterwards
  WORKBENCH_TEST_CACHE=$(mktemp -d "${TMPDIR:-/tmp}/workbench-test-cache-XXXXXX")
  trap 'rm -rf "$WORKBENCH_TEST_CACHE"' EXIT
fi
export WORKBENCH_TEST_CACHE
workers=()
[ "$WORKBENCH_TEST_WORKERS" -gt 1 ] && workers=(-n "$WORKBENCH_TEST_WORKERS" --dist loadfile)
"$PY" -m pytest -q "${workers[@]}" "$@"
