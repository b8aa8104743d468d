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
