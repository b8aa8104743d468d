"""Where things live: the kernel tree (a checkout's, or the copy inside an installed wheel), the
prebuilt libraries a wheel ships, and the build cache."""
from __future__ import annotations

import os
import pathlib

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent


def _is_tree(root: pathlib.Path) -> bool:
    return (root / "kernels" / "common").is_dir() and (root / "bindings" / "harness").is_dir()


# A checkout (the package beside kernels/ and bindings/) is the default and wins; an installed wheel
# carries the same tree inside the package (workbench/_tree), which setup.py copies there.
INSTALLED = not _is_tree(PACKAGE_DIR.parent) and _is_tree(PACKAGE_DIR / "_tree")
REPO_ROOT = PACKAGE_DIR / "_tree" if INSTALLED else PACKAGE_DIR.parent
KERNELS_DIR = REPO_ROOT / "kernels"
COMMON_DIR = KERNELS_DIR / "common"
BINDINGS_DIR = REPO_ROOT / "bindings"
# Libraries built ahead of time into a wheel, with their manifest (workbench/prebuilt.py). Only an
# installed package consults them: from a checkout, every build is JIT and edits rebuild.
PREBUILT_DIR = PACKAGE_DIR / "_prebuilt"
# Results are written beside a checkout; never into site-packages ($WORKBENCH_RESULTS, else ./results).
RESULTS_DIR = (pathlib.Path(os.environ.get("WORKBENCH_RESULTS") or "results").resolve() if INSTALLED
               else REPO_ROOT / "results")


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


def prebuilt_mode() -> str:
    """WORKBENCH_PREBUILT: "auto" (default: an installed wheel's prebuilt library where its source
    and toolchain match, else a JIT build), "only" (never compile: an error instead), "off"
    (ignore the prebuilt libraries; build everything)."""
    mode = os.environ.get("WORKBENCH_PREBUILT", "auto").strip().lower() or "auto"
    if mode not in ("auto", "only", "off"):
        raise ValueError(f"WORKBENCH_PREBUILT must be one of auto, only, off; got {mode!r}")
    return mode
