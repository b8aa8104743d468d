"""Where things live: the repository's kernel tree and the build cache."""
from __future__ import annotations

import os
import pathlib

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
KERNELS_DIR = REPO_ROOT / "kernels"
COMMON_DIR = KERNELS_DIR / "common"
BINDINGS_DIR = REPO_ROOT / "bindings"
RESULTS_DIR = REPO_ROOT / "results"


def cache_dir() -> pathlib.Path:
    """The build cache: $WORKBENCH_CACHE, else ~/.cache/workbench. Read on every call so that a
    test or a notebook can point it elsewhere without re-importing."""
    env = os.environ.get("WORKBENCH_CACHE")
    root = pathlib.Path(env).expanduser() if env else pathlib.Path.home() / ".cache" / "workbench"
    return root


def quiet() -> bool:
    """Progress lines go to stderr unless WORKBENCH_QUIET=1."""
    return os.environ.get("WORKBENCH_QUIET", "") not in ("", "0")


def lock_timeout_s() -> float:
    return float(os.environ.get("WORKBENCH_LOCK_TIMEOUT", "900"))


def pycache_enabled() -> bool:
    """Whether `python -m workbench` may cache bytecode under the cache where the environment
    disabled it (WORKBENCH_PYCACHE=0: no)."""
    return os.environ.get("WORKBENCH_PYCACHE", "1") not in ("", "0")
