#!/usr/bin/env bash
# Set up (only what is missing) and run the test suite. GPU tests skip where no GPU is visible.
# nbclient, nbformat and ipykernel (which brings IPython) run the notebooks and the cell magic; pybind11 builds the
# NumPy front end (workbench.ship.ndarray); setuptools and wheel build the workbench's own wheel (tests/test_wheel.py);
# ray runs tests/test_cluster.py's local cluster (plain ray: the dashboard of ray[default] is not needed there);
# starlette, uvicorn, jinja2, markdown, python-multipart (the serve extra), httpx2 (Starlette's test client) and
# selenium run tests/test_serve*.py;
# pytest-xdist runs the test files on two processes where there is no GPU (CI: 2 cores), one file per worker at
# a time (--dist loadfile: a module's fixtures are built once), all sharing one build cache, so each piece is
# still compiled once per run. WORKBENCH_TEST_WORKERS=1 runs them in this process alone (the GPU default: timed
# tests should not share the GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure_env.sh numpy pytest matplotlib pandas nbclient nbformat ipykernel pybind11 setuptools wheel \
  xdist=pytest-xdist ray starlette uvicorn jinja2 markdown python_multipart=python-multipart httpx2 selenium
# The serve pages' browser test (tests/test_serve_browser.py) drives Debian's headless Chromium: installed where it
# is absent and apt-get can (as root); elsewhere that test skips and says why.
if ! command -v chromedriver >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "[setup] installing chromium chromium-driver (apt)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; } >/dev/null 2>&1 \
    || echo "[setup] chromium could not be installed: the browser test will skip" >&2
fi
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
