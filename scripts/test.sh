#!/usr/bin/env bash
# Set up (only what is missing) and run the test suite. GPU tests skip where no GPU is visible.
# nbclient, nbformat and ipykernel (which brings IPython) run the notebooks and the cell magic; pybind11 builds the
# NumPy front end (workbench.ndarray); setuptools and wheel build the workbench's own wheel (tests/test_wheel.py).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure_env.sh numpy pytest matplotlib pandas nbclient nbformat ipykernel pybind11 setuptools wheel
exec "$PY" -m pytest -q "$@"
