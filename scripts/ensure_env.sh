# Sourced by scripts/demo.sh and scripts/test.sh: install what is missing, nothing else.
# Where torch is absent it installs torch 2.14.1 (its CUDA 13 build): with it, CUDA variants also
# build and link on a machine without a GPU. Everything already importable is left alone (the GPU
# machine has no network and needs nothing).
PY=${PYTHON:-python3}
_missing=()
$PY -c "import torch" 2>/dev/null || _missing+=("torch==2.14.1")
for _mod in "$@"; do
  $PY -c "import ${_mod%%=*}" 2>/dev/null || _missing+=("${_mod#*=}")
done
command -v ninja >/dev/null 2>&1 || $PY -c "import ninja" 2>/dev/null || _missing+=("ninja")
if [ ${#_missing[@]} -gt 0 ]; then
  echo "[setup] installing: ${_missing[*]}" >&2
  $PY -m pip install -q "${_missing[@]}" || { echo "[setup] pip install failed" >&2; exit 1; }
else
  echo "[setup] everything needed is already importable; installing nothing" >&2
fi
# pip's ninja lands next to the interpreter; make sure cpp_extension finds it.
export PATH="$($PY -c 'import sys, os; print(os.path.dirname(sys.executable))'):$PATH"
# The exercise judge's sandbox, bubblewrap: from the distribution's packages where they can be had
# (grading refuses without it; a check for oneself goes on, saying so).
if ! command -v bwrap >/dev/null 2>&1 && [ -z "${WORKBENCH_BWRAP:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing: bubblewrap (apt)" >&2
    { apt-get install -y -qq bubblewrap || { apt-get update -qq && apt-get install -y -qq bubblewrap; }; } >/dev/null 2>&1 \
      || echo "[setup] bubblewrap could not be installed: exercise grade will refuse to grade" >&2
  else
    echo "[setup] bubblewrap (bwrap) is missing: exercise check runs unsandboxed and grade refuses" >&2
  fi
fi
