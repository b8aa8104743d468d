"""`python -m workbench doctor`: what the workbench will build with, and what looks wrong."""
from __future__ import annotations

import fcntl
import os
import platform
import sys
import shutil
import subprocess

from .. import build, config
from ..build import cache, clean, toolchain


def _ninja_version() -> str | None:
    exe = shutil.which("ninja")
    if not exe:
        return None
    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return None


def _held_locks() -> list[tuple[str, str]]:
    """Build locks currently held, with the pid recorded in each. flock()s die with their process,
    so a lock can only be 'held' by a live process; one held for long points at a hung build."""
    held = []
    root = config.cache_dir() / "locks"
    for path in sorted(root.glob("*.lock")) if root.exists() else []:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            held.append((str(path), f"? (not a lock file: {e.strerror})"))
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            held.append((str(path), os.pread(fd, 64, 0).decode(errors="replace").strip()))
        finally:
            os.close(fd)
    return held


def report() -> tuple[list[tuple[str, str]], list[str]]:
    """(rows of name/value, problems)."""
    import torch

    rows, problems = [], []
    rows.append(("python", f"{platform.python_version()} ({sys.executable})"))
    rows.append(("torch", f"{torch.__version__} (CUDA {torch.version.cuda or 'none'}, "
                          f"C++11 ABI {int(torch.compiled_with_cxx11_abi())})"))
    home = toolchain.cuda_home()
    nvcc = toolchain.nvcc_version() if home else None
    rows.append(("CUDA_HOME", home or "not found"))
    rows.append(("nvcc", nvcc or "not found"))
    ninja = _ninja_version()
    rows.append(("ninja", ninja or "not found"))
    gxx = shutil.which(os.environ.get("CXX", "c++"))
    rows.append(("c++", gxx or "not found"))
    if torch.version.cuda and toolchain.gpu_available():
        for i in range(torch.cuda.device_count()):
            cap = torch.cuda.get_device_capability(i)
            rows.append((f"gpu {i}", f"{torch.cuda.get_device_name(i)} (sm_{cap[0]}{cap[1]})"))
    else:
        rows.append(("gpu", "none visible: CPU variants only" + (
            "" if torch.version.cuda is None else "; CUDA variants still build and link here")))
    rows.append(("arch list", build.arch_list() if toolchain.can_build_cuda() else "-"))
    root = config.cache_dir()
    size = clean.dir_size(root) if root.exists() else 0
    n_builds = sum(1 for d in (root / "builds").iterdir() if d.is_dir()) if (root / "builds").exists() else 0
    rows.append(("cache", f"{root} ({n_builds} builds, {size / 2**20:.1f} MiB)"))
    try:
        cache.root()
        rows.append(("cache trust", "private: yours alone, not writable by group or others"))
    except cache.CacheError as e:
        rows.append(("cache trust", "REFUSED"))
        problems.append(str(e))
    held = _held_locks()
    rows.append(("build locks held", ", ".join(f"{p} (pid {pid}: a build in progress, or hung - kill it to release "
                                               f"the lock)" for p, pid in held) or "none"))

    if ninja is None:
        problems.append("ninja is missing: a torch extension's build needs it (pip install ninja)")
    if gxx is None:
        problems.append("no C++ compiler found (c++ / $CXX): nothing can be built")
    if torch.version.cuda and not home:
        problems.append(f"torch has CUDA {torch.version.cuda} but no CUDA toolkit (nvcc) was found: "
                        f"set CUDA_HOME, or only CPU variants can be built")
    release = toolchain.nvcc_release(nvcc)
    if torch.version.cuda and release and int(torch.version.cuda.split(".")[0]) != release[0]:
        problems.append(f"nvcc is CUDA {release[0]}.{release[1]} but torch was built with CUDA {torch.version.cuda}: "
                        f"their major versions must match (install a matching toolkit or torch)")
    for path, pid in held:
        # A held lock is a build in progress (the lock goes with its process), not a problem by
        # itself: the row above names it; only a holder that has gone (a lock file left locked by a
        # process that is not there) is one.
        alive = pid.isdigit() and os.path.exists(f"/proc/{pid}")
        if not alive:
            problems.append(f"build lock {path} is held by pid {pid}, which is not running")
    return rows, problems


def main() -> int:
    rows, problems = report()
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:>{width}} : {v}")
    if problems:
        print("\nproblems:")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("\nno problems found")
    return 0
