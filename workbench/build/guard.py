"""A build's processes, guarded: its compilers die with the process that started them.

A build runs in a session of its own, watched by a small process that kills the whole session if
this process dies (even by kill -9) or is interrupted. Also environment (os.environ for a while) and
own_clock (a child's time for a limit that the machine's load does not eat).
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time


def _set_environment(values: dict) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextlib.contextmanager
def environment(**values: str | None):
    """os.environ with `values` set (None: unset) inside, as it was after."""
    old = {k: os.environ.get(k) for k in values}
    try:
        _set_environment(values)
        yield
    finally:
        _set_environment(old)


# Killing a build: everything in its session (ninja puts each compiler in a process group of its own,
# but a session is left only by setsid, which compilers do not call); /proc where there is one.
_KILL_SESSION = """
def kill_session(sid):
    import os, signal
    for _ in range(3):
        found = False
        try:
            pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                with open("/proc/%d/stat" % pid) as f:
                    text = f.read()
                if int(text[text.rindex(")") + 2:].split()[3]) == sid and pid != os.getpid():
                    os.kill(pid, signal.SIGKILL)
                    found = True
            except (OSError, ValueError, IndexError):
                pass
        try:
            os.killpg(sid, signal.SIGKILL)
            found = True
        except OSError:
            pass
        if not found:
            break
"""
_scope: dict = {}
exec(_KILL_SESSION, _scope)  # noqa: S102 - the same code the watchdog runs, kept in one place
kill_session = _scope["kill_session"]

# The watchdog: reads the build's session id, then waits; if its pipe closes without "done" (the
# workbench process died, even by kill -9, or gave up on the build), it kills the whole session.
_WATCHDOG = _KILL_SESSION + ("import sys\n"
                             "f = sys.stdin.buffer\n"
                             "sid = int(f.readline() or 0)\n"
                             "rest = f.read()\n"
                             "if sid > 1 and not rest.startswith(b'done'):\n"
                             "    kill_session(sid)\n")
# The command starts as a shell, leader of its new session, that writes its pid to the watchdog's
# pipe before it becomes the command (input /dev/null): the watchdog knows the session before
# anything runs in it, even if this process is killed at once.
_TELL_WATCHDOG = 'echo $$ >&0 && exec "$@" </dev/null'


def run_guarded(cmd, *, check: bool = False, timeout=None, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run in a session of its own, killed whole when this process dies, when the wait is
    interrupted, or on timeout."""
    watch = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHDOG], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                             close_fds=True)
    done = False
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", _TELL_WATCHDOG, "sh", *cmd], stdin=watch.stdin,
                                start_new_session=True, **kwargs)
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            kill_session(proc.pid)
            proc.wait()
            raise
        done = True
    finally:
        with contextlib.suppress(OSError):
            if done:
                watch.stdin.write(b"done")
            watch.stdin.close()
        watch.wait()
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd, output=out, stderr=err)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def own_clock(pid: int):
    """Seconds since this call, less those process `pid`'s main thread spent runnable but waiting for
    a CPU (/proc/<pid>/schedstat; wall time without it): a limit the machine's load does not eat.
    It never runs faster than wall time, so a wait of `limit - clock()` never overshoots."""
    def waited() -> float:
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/schedstat") as f:
            last[0] = max(last[0], int(f.read().split()[1]) / 1e9)  # a process that ended keeps its last
        return last[0]

    last = [0.0]
    start, base = time.monotonic(), waited()
    return lambda: time.monotonic() - start - (waited() - base)
