"""The sandbox a judged runner starts in: bubblewrap (bwrap, from the distribution's packages).

What the student's process gets: its own PID, IPC, UTS and (unless a profiler must reach it)
network namespaces, so it cannot see, signal or open the checker's processes, and reaches no
network; no capabilities; read-only views of the system's files (the system folders, the Python
installation, the CUDA toolkit and driver, the judge's own folder with its copy of the library) and
nothing of the user's (no home, no build cache, no other submissions, a private /tmp); one writable
scratch folder, its HOME; the GPU's device nodes; no descriptor but the runner's socket; limits on
CPU time, processes, open files and the size of what it writes. When the checker runs as root, the
sandbox runs as nobody, so that the process limit holds and no file of root's is writable.

WORKBENCH_BWRAP names the bwrap binary where it is not on PATH (a .deb unpacked with dpkg -x on a
machine without a package manager's network, as the GPU machine is).
"""
from __future__ import annotations

import glob
import os
import pathlib
import shutil
import sys
from dataclasses import dataclass

from .. import config

# Limits of a sandboxed runner: CPU seconds, processes (the user's, where it runs as nobody), open
# files, and the largest file it may write (its log).
CPU_SECONDS = 600
PROCESSES = 1024   # threads count too, and every sandbox running as nobody shares it
OPEN_FILES = 256
FILE_BYTES = 16 << 20
NOBODY = 65534
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", "/sys")


def bwrap() -> str | None:
    return os.environ.get("WORKBENCH_BWRAP") or shutil.which("bwrap")


def missing() -> str:
    """Why no sandbox can be made here ("" where one can)."""
    path = bwrap()
    if not path:
        return ("bubblewrap (bwrap) is not installed: `apt-get install bubblewrap` (Debian, Ubuntu), "
                "`dnf install bubblewrap` (Fedora), or set WORKBENCH_BWRAP to a bwrap binary")
    if not os.access(path, os.X_OK):
        return f"WORKBENCH_BWRAP={path} is not an executable file"
    return ""


@dataclass(frozen=True)
class Sandbox:
    """How to wrap a runner's command. `readable`: folders it may read besides the system's (the
    judge's folder, the repository for a Python runner); `scratch`: its one writable folder;
    `network`: False (its own empty network) or True (the caller's: a profiler's front end, itself
    in a network namespace of its own, must reach it over loopback)."""
    scratch: pathlib.Path
    readable: tuple[pathlib.Path, ...] = ()
    network: bool = False
    gpu: bool = True
    env: tuple[tuple[str, str], ...] = ()   # variables besides the few kept (PATH, CUDA's, ...)
    # Run as nobody where the checker is root (user()); not behind a profiler, whose injected
    # library makes bwrap, started unprivileged, fail to create its user namespace.
    drop: bool = True
    # Clear the environment and set only environment(); False behind a profiler, whose variables
    # (its injection) must reach the runner: the runner's command is then started with
    # environment() alone (runner.Runner), so nothing else of the checker's leaks either.
    clear: bool = True

    def command(self, argv: list[str]) -> list[str]:
        """bwrap's command line around `argv`, behind setpriv's drop to nobody where user() says so
        (within the command, so that a tool in front of it, a profiler, still runs as the checker)."""
        drop = []
        if self.user() is not None and shutil.which("setpriv"):
            drop = ["setpriv", f"--reuid={self.user()}", f"--regid={self.user()}", "--clear-groups", "--"]
        cmd = [*drop, bwrap(), "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--unshare-user", "--cap-drop", "ALL", *(["--clearenv"] if self.clear else [])]
        if not self.network:
            cmd.append("--unshare-net")
        system, extra = self._readable()
        for path in system:
            cmd += ["--ro-bind", path, path]
        cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        if self.gpu:
            for node in sorted(glob.glob("/dev/nvidia*")):
                if os.path.exists(node) and not os.path.isdir(node):
                    cmd += ["--dev-bind", node, node]
        for path in extra:  # after /tmp's tmpfs: a judge's folder under /tmp stays in view
            cmd += ["--ro-bind", path, path]
        cache = os.path.realpath(config.cache_dir())
        if any(cache == p or cache.startswith(p.rstrip("/") + "/") for p in system + extra):
            cmd += ["--tmpfs", cache]  # the builds of everyone else's submissions stay unseen
        scratch = str(self.scratch)
        cmd += ["--bind", scratch, scratch, "--chdir", scratch]
        for name, value in self.environment().items():
            cmd += ["--setenv", name, value]
        return cmd + ["--", *argv]

    def _readable(self) -> tuple[list[str], list[str]]:
        """(the system's folders, the others: the Python installation and `readable`), each once."""
        system = [p for p in _SYSTEM if os.path.isdir(p) and not os.path.islink(p)]
        system += [p for p in _SYSTEM if os.path.islink(p) and os.path.realpath(p) not in system]
        extra: list[str] = []
        for p in (sys.prefix, sys.base_prefix, *map(str, self.readable)):
            real = os.path.realpath(p)
            if os.path.isdir(real) and not any(real == q or real.startswith(q + "/") for q in system + extra):
                extra.append(real)
        return system, extra

    def environment(self) -> dict:
        keep = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH", "PYTHONPATH",
                "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.update(HOME=str(self.scratch), TMPDIR=str(self.scratch), PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="4")
        env.update(dict(self.env))
        return env

    def limits(self) -> list[str]:
        """The prlimit(1) prefix that sets the runner's limits (inherited through bwrap)."""
        return ["prlimit", f"--cpu={CPU_SECONDS}", f"--nproc={PROCESSES}", f"--nofile={OPEN_FILES}",
                f"--fsize={FILE_BYTES}", "--"]

    def user(self) -> int | None:
        """The uid bwrap runs as: nobody where the checker is root, setpriv is there and nobody can
        reach every folder the runner needs (a Python installed under /root cannot be), else the
        checker's own (mapped to root inside, with no capability: the views are read-only all the same)."""
        if not self.drop or os.geteuid() != 0 or not shutil.which("setpriv") \
                or not all(_others_can_enter(p) for p in sum(self._readable(), [])):
            return None
        return NOBODY

    def prepare(self) -> None:
        """The scratch folder, writable by the sandbox's user alone."""
        self.scratch.mkdir(parents=True, exist_ok=True)
        if self.user() is not None:
            os.chown(self.scratch, self.user(), self.user())
        os.chmod(self.scratch, 0o700)


def _others_can_enter(path: str) -> bool:
    """Every folder from / down to `path` lets others through (o+x)."""
    p = pathlib.Path(os.path.realpath(path))
    return all(os.stat(q).st_mode & 0o001 for q in [p, *p.parents])
