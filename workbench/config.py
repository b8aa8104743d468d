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
# Libraries built ahead of time into a wheel, with their manifest (workbench/build/prebuilt.py). Only an
# installed package consults them: from a checkout, every build is JIT and edits rebuild.
PREBUILT_DIR = PACKAGE_DIR / "_prebuilt"
# The results committed with a checkout (an installed package has none: $WORKBENCH_RESULTS, else ./results).
RESULTS_DIR = (pathlib.Path(os.environ.get("WORKBENCH_RESULTS") or "results").resolve() if INSTALLED
               else REPO_ROOT / "results")


def output_dir() -> pathlib.Path:
    """Where a run writes its rows and plots unless told: $WORKBENCH_RESULTS, else ./workbench-results
    (never the checkout's committed results/). Read on every call: a notebook may change folder."""
    return pathlib.Path(os.environ.get("WORKBENCH_RESULTS") or "workbench-results").resolve()


def cache_dir() -> pathlib.Path:
    """The build cache: $WORKBENCH_CACHE, else ~/.cache/workbench, created 0700 where missing (what
    is trusted in it: cache.py). Read on every call: a test or a notebook may point it elsewhere."""
    env = os.environ.get("WORKBENCH_CACHE")
    root = pathlib.Path(env).expanduser() if env else pathlib.Path.home() / ".cache" / "workbench"
    if not os.path.lexists(root):  # created private (0700), whoever asks first; cache.root() checks it
        try:
            root.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(root, 0o700)
        except OSError:
            pass  # a read-only or missing parent: cache.root() says so, naming the folder
    return root


def private_dir_problem(path: pathlib.Path) -> str | None:
    """Why `path` (an existing folder) is not private to this user, else None: a build or bytecode
    planted in a shared folder would run in this process. It must be this user's, written by no
    group or others, inside folders only this user or root could rename it out of (a
    group-writable one above is accepted: with umask 002 that group is usually the user's own)."""
    import pwd
    import stat

    def who(uid: int) -> str:
        try:
            return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
        except KeyError:
            return f"uid {uid}"

    me = os.geteuid()
    try:
        st = os.stat(path)
    except OSError as e:
        return f"it cannot be read ({e.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if st.st_uid != me:
        return f"it belongs to {who(st.st_uid)}, not to you ({who(me)})"
    if st.st_mode & 0o022:
        by = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if st.st_mode & bit)
        return f"it is writable by {by} (mode {stat.S_IMODE(st.st_mode):04o})"
    for parent in pathlib.Path(os.path.realpath(path)).parents:
        try:
            pst = os.stat(parent)
        except OSError:
            continue
        if pst.st_uid not in (0, me):
            return f"the folder above it, {parent}, belongs to {who(pst.st_uid)}, who could replace it"
        if pst.st_mode & 0o002 and not pst.st_mode & stat.S_ISVTX:
            return (f"the folder above it, {parent}, is writable by others without the sticky bit "
                    f"(mode {stat.S_IMODE(pst.st_mode):04o}): anyone could replace it")
    return None


def pycache_dir() -> pathlib.Path:
    """Where bytecode goes when the environment turned it off (bytecode.py): never the build cache."""
    base = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(base).expanduser() / "workbench-pycache"


def quiet() -> bool:
    """Progress lines go to stderr unless WORKBENCH_QUIET=1."""
    return os.environ.get("WORKBENCH_QUIET", "") not in ("", "0")


def lock_timeout_s() -> float:
    return float(os.environ.get("WORKBENCH_LOCK_TIMEOUT", "900"))


def prebuilt_mode() -> str:
    """WORKBENCH_PREBUILT: "auto" (default: an installed wheel's prebuilt library where its source
    and toolchain match, else a JIT build), "only" (never compile: an error instead), "off"
    (ignore the prebuilt libraries; build everything)."""
    mode = os.environ.get("WORKBENCH_PREBUILT", "auto").strip().lower() or "auto"
    if mode not in ("auto", "only", "off"):
        raise ValueError(f"WORKBENCH_PREBUILT must be one of auto, only, off; got {mode!r}")
    return mode


def child_env(extra: dict | None = None) -> dict:
    """The environment of a Python child process: this one's, with the repository importable."""
    env = dict(os.environ, **(extra or {}))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env
