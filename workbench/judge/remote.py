"""A runner process, and the kernel handle that calls through it.

A Runner is a process that loads a variant's library and makes the calls it is told to make on
memory its caller owns (memory.py), answering only whether each went (bindings/runner/wb_runner.cu
has the protocol; python_runner.py speaks it for variants that need Python). It may be started in a
sandbox (sandbox.py), and behind a tool (Nsight Compute, compute-sanitizer). Its output is a log
the caller may show, never a result.

A Remote holds a variant's runner, and kernel() makes it what the checks (measure.correctness,
measure.gradients) call as they call a Kernel: each call copies its inputs into an arena the
runner was lent, gives it fresh poisoned outputs there, has the runner make the call, and returns
copies of the outputs. A kernel that faults takes the runner down, never the caller (its CUDA
context, its tensors); the next call starts another. start.py starts runners (isolated(op,
variant) does it all for a variant by name, source, Kernel, callable or extension).
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import pathlib
import selectors
import shutil
import socket
import subprocess
import tempfile
import time

import torch

from .. import config, dtypes as dtypes_
from ..build.guard import own_clock
from ..errors import IsolatedRunError
from ..model import registry
from .memory import Arena
from .sandbox import Sandbox

REPLY_TIMEOUT_S = 600.0    # one command (a batch of calls included); a kernel that never returns fails
START_TIMEOUT_S = 120.0    # a runner's start, its library's load included
TOOL_GRACE_S = 120.0       # a tool in front of a runner (ncu, compute-sanitizer) writes its report as the runner ends
_LOG_TAIL = 40


class CallRefused(RuntimeError):
    """The runner made the call and the variant refused it (a status it returned, a CUDA error that
    left the device usable): that call's failure, as the torch harness raises it. `error_name` is the
    type the runner named ("RuntimeError: ..." from the Python runner), what a report calls it."""

    def __init__(self, text: str):
        named = re.match(r"([A-Za-z_]\w*(?:Error|Exception)): (.*)", text, re.S)
        super().__init__(named[2] if named else text)
        self.error_name = named[1] if named else "RuntimeError"


class DeviceLost(IsolatedRunError):
    """The call left the runner's CUDA context unusable (an illegal address, a trap): the runner is
    gone; every later call needs a new one. `fatal` tells the checks not to go on in this runner."""
    fatal = True


class Runner:
    """One runner process (argv, then its socket's descriptor), in `sandbox` if given, behind
    `prefix` (a tool: ncu, compute-sanitizer; a time limit)."""

    def __init__(self, argv: list[str], *, label: str, sandbox: Sandbox | None = None, prefix=(),
                 env: dict | None = None):
        self.label = label
        self._dir = pathlib.Path(tempfile.mkdtemp(prefix="wb-runner-"))
        self.log_path = self._dir / "runner.log"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock, self._buffer, self._arenas = ours, b"", {}
        os.set_inheritable(theirs.fileno(), True)
        argv = [*argv, str(theirs.fileno())]
        cmd = [*prefix, *(sandbox.command(argv) if sandbox else argv)]
        if sandbox is not None and shutil.which("prlimit"):
            cmd = sandbox.limits() + cmd
        if sandbox is not None and not sandbox.clear:
            env = {**sandbox.environment(), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        with open(self.log_path, "wb") as log:
            os.chmod(self.log_path, 0o666)  # the runner may run as another user: its stderr is this file
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         pass_fds=(theirs.fileno(),), env=env, cwd=config.REPO_ROOT,
                                         start_new_session=True)
        theirs.close()
        self.started = time.perf_counter()
        self.fronted = bool(prefix)  # a tool in front of it writes its report as the runner ends
        self.keeps_layout = False    # hand its variant strided inputs as views (python_runner: an extension sees them as they are)

    # ------------------------------------------------------------------ the protocol

    def request(self, line: str, *, fd: int | None = None, timeout_s: float = REPLY_TIMEOUT_S) -> str:
        """Send one command; return its reply's text after "ok"/"done". An "error" reply raises
        CallRefused, a "fatal" one DeviceLost, a runner that ends or outlasts timeout_s IsolatedRunError."""
        data = (line + "\n").encode()
        try:
            if fd is None:
                self._sock.sendall(data)
            else:
                socket.send_fds(self._sock, [data], [fd])
        except OSError:
            raise self._ended(f"{line.split()[0]}: the runner could not be sent the command") from None
        reply = self._read_line(timeout_s, line.split()[0])
        word, _, rest = reply.partition(" ")
        if word in ("ok", "done"):
            return rest
        try:
            text = bytes.fromhex(rest).decode(errors="replace") if word in ("error", "fatal") else None
        except ValueError:
            text = None
        if text is None:  # anything else on the socket is not the runner's protocol: the library wrote it
            self.close()
            raise IsolatedRunError(f"{self.label}: {line.split()[0]}", self.proc.returncode or 0,
                                   f"it sent {reply[:200]!r}\n{self.log_tail()}",
                                   before="after answering outside the protocol (something it loaded wrote to its socket)")
        if word == "fatal":
            if self.fronted:  # the tool writes its report as the runner ends
                self.finish(TOOL_GRACE_S)
            self.close()
            raise DeviceLost(f"{self.label}: {line.split()[0]}", None, self.log_tail(),
                             before=f"lost its CUDA context ({text})") from None
        raise CallRefused(text)

    def send(self, lines: list[str]) -> None:
        """Lines that get no reply of their own (a batch's calls, before its "go")."""
        try:
            self._sock.sendall(("\n".join(lines) + "\n").encode())
        except OSError:
            raise self._ended("batch: the runner could not be sent the calls") from None

    def _read_line(self, timeout_s: float, what: str) -> str:
        # The limit counts the runner's own time: what a busy machine held it back is not charged
        # (a load that is merely slow there is not "hung"; build/guard.py's own_clock).
        clock = own_clock(self._leaf())
        with selectors.DefaultSelector() as sel:
            sel.register(self._sock, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = timeout_s - clock()
                if left <= 0:
                    self.close()
                    err = IsolatedRunError(f"{self.label}: {what}", -9, self.log_tail())
                    err.timed_out = True
                    err.args = (f"{self.label}: {what}: the runner did not answer within {timeout_s:g} s and was "
                                f"killed; the caller's process is unaffected.\n{err.output}",)
                    raise err
                if not sel.select(min(left, 0.5)):
                    if self.proc.poll() is not None:  # ended (a tool in front of it may still hold its socket)
                        raise self._ended(what)
                    continue
                try:
                    chunk = self._sock.recv(1 << 16)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise self._ended(what)
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace")

    def _leaf(self) -> int:
        """The innermost process of the runner's command (a sandbox and a tool start it as a
        descendant): the one whose time a limit counts."""
        pid = self.proc.pid
        for _ in range(8):
            try:
                children = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                break
            if not children:
                break
            pid = int(children[-1])
        return pid

    def _ended(self, what: str) -> IsolatedRunError:
        code = self.proc.wait()
        return IsolatedRunError(f"{self.label}: {what}", code, self.log_tail(), before="before answering")

    def log_tail(self, n: int = _LOG_TAIL) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - 65536))
                return "\n".join(f.read().decode(errors="replace").strip().splitlines()[-n:])
        except OSError:
            return ""

    def lend(self, arena: Arena) -> int:
        """The id this runner knows `arena` by (lent on first use)."""
        key = id(arena)
        if key not in self._arenas:
            arena_id = len(self._arenas) + 1
            message, fd = arena.lend(arena_id)
            self.request(message, fd=fd)
            self._arenas[key] = (arena_id, arena)  # kept alive while lent
        return self._arenas[key][0]

    def finish(self, timeout_s: float) -> None:
        """End the runner politely (its input closed) and wait for it and what wraps it (a profiler
        writing its report) to exit; killed past timeout_s."""
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.close()

    def forget(self, arena: Arena) -> None:
        """Unmap `arena` in the runner before its memory is freed."""
        entry = self._arenas.pop(id(arena), None)
        if entry is not None and self.alive:
            self.request(f"drop {entry[0]}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait()
        self._sock.close()

    def discard(self) -> None:
        if self.fronted:  # the tool writes its report as the runner ends
            self.finish(TOOL_GRACE_S)
        self.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def hex_text(text: str) -> str:
    return text.encode().hex()


def time_limit(timeout_s: float) -> list[str]:
    """A prefix that kills what follows (a tool, the runner behind it: their whole process group)
    after timeout_s: coreutils timeout. The caller then reads the runner's end as any other."""
    return ["timeout", "-s", "KILL", f"{timeout_s:g}"]


# ---------------------------------------------------------------------- calls


def tensor_words(arena_id: int, offset: int, shape, strides=None) -> str:
    """A tensor of a call: contiguous at `offset`, or (strides given: the Python runner only) a view
    with those strides, its dimension count negated."""
    dims = f"{len(shape)} {' '.join(str(int(s)) for s in shape)}" if strides is None else \
        f"-{len(shape)} {' '.join(str(int(s)) for s in (*shape, *strides))}"
    return f"{arena_id} {offset} {dims}".rstrip()


def _strided(t: torch.Tensor) -> bool:
    """A view a Python runner gets as it is: not contiguous, not empty, no element repeated."""
    return not t.is_contiguous() and t.numel() > 0 and 0 not in t.stride()


def _span(t: torch.Tensor) -> int:
    """The elements `t` reaches with its strides (its numel where it is not _strided)."""
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if _strided(t) else t.numel()


def call_line(step: str, dtype: str, inputs: list[str], outputs: list[str], attrs: list) -> str:
    """A "call" command: step "forward"/"backward", tensors as tensor_words, attributes as values."""
    words = ["call", "0" if step == "forward" else "1", str(dtypes_.NAMES.index(dtype)), str(len(inputs)), *inputs,
             str(len(outputs)), *outputs, str(len(attrs))]
    for v in attrs:
        words += ["f", repr(float(v))] if isinstance(v, float) else ["i", str(int(v))]
    return " ".join(words)


class Remote:
    """A variant in a runner, called as a Kernel is (see kernel()): `forward(*inputs, **attrs)`,
    `backward(*grads, *inputs, *attrs)`. `start()` makes the runner (again, after one was lost:
    at most MAX_RESTARTS times) and returns (runner, what it read of the library)."""

    MAX_RESTARTS = 3

    def __init__(self, op: str, device: str, start, *, own_memory: bool = False):
        self.op, self.spec, self.device, self.own_memory = op, registry.spec(op), device, own_memory
        self._start, self.runner, self.reported, self.restarts = start, None, {}, 0
        self._arena: Arena | None = None

    def ensure(self) -> Runner:
        if self.runner is None or not self.runner.alive:
            if self.runner is not None:
                self.runner.discard()
                self.runner = None
                if self.restarts >= self.MAX_RESTARTS:
                    raise DeviceLost(self.op, None, "", before=f"was lost {self.restarts + 1} times; not started again")
                self.restarts += 1
            self.runner, self.reported = self._start()
            if self.own_memory:
                self.runner.request("own-memory")
        return self.runner

    @contextlib.contextmanager
    def nvtx_range(self, name: str):
        """The calls inside in an NVTX range of the runner's (what a profiler in front selects:
        ncu --nvtx-include NAME/); a call that raises leaves it open, in a runner that is gone."""
        runner = self.ensure()
        runner.request("range " + hex_text(name))
        yield
        runner.request("end")

    def forward(self, *args, **attrs):
        return self._call("forward", args, attrs)

    def backward(self, *args):
        return self._call("backward", args, {})

    def _call(self, step: str, args, kwargs: dict):
        spec = self.spec
        tensors, values = spec.call_args(tuple(args), kwargs, grads=len(spec.outputs) if step == "backward" else 0)
        binder = spec.check_call("bwd" if step == "backward" else "fwd", tensors, values)
        if step == "forward":
            shapes = [binder.shape_of(o.pattern) for o in spec.outputs]
        else:
            first = len(spec.outputs)
            shapes = [tuple(tensors[first + i].shape) for i, t in enumerate(spec.inputs) if t.differentiable]
        dtype, item = tensors[0].dtype, tensors[0].element_size()
        arena = self._arena_for(sum(_span(t) * t.element_size() for t in tensors)
                                + sum(_numel(s) * item for s in shapes) + 512 * (len(tensors) + len(shapes)))
        runner = self.ensure()
        arena_id = runner.lend(arena)
        arena.reset()
        ins = []
        for t in tensors:
            # A strided view reaches a kernel of the ABI as a contiguous copy (the harness makes one),
            # and a Python runner's variant (an extension) as the view it is; a view that starts off a
            # 16-byte boundary keeps that offset (float4 loads are illegal there).
            if runner.keeps_layout and _strided(t):
                offset = arena.place(_span(t) * t.element_size(), t.data_ptr() % 16)
                arena.view(offset, (_span(t),), dtype).as_strided(t.shape, t.stride()).copy_(t)
                ins.append(tensor_words(arena_id, offset, t.shape, t.stride()))
                continue
            offset = arena.place(t.numel() * t.element_size(), t.data_ptr() % 16 if t.is_contiguous() else 0)
            arena.view(offset, t.shape, dtype).copy_(t)
            ins.append(tensor_words(arena_id, offset, t.shape))
        outs, views = [], []
        for shape in shapes:
            offset = arena.place(_numel(shape) * item)
            views.append(arena.view(offset, shape, dtype).fill_(float("nan")))  # unwritten stays NaN
            outs.append(tensor_words(arena_id, offset, shape))
        if arena.device == "cuda":
            torch.cuda.synchronize()  # the inputs and the poison are in place before the runner reads
        runner.request(call_line(step, dtypes_.name_of(dtype), ins, outs, list(values)))
        out = tuple(v.to(self.device, copy=True) for v in views)
        return out[0] if len(out) == 1 else out

    def _arena_for(self, need: int) -> Arena:
        if self._arena is None or self._arena.nbytes < need:
            if self._arena is not None and self.runner is not None:
                self.runner.discard()  # a runner keeps every arena it was lent mapped: start afresh
                self.runner = None
            # Own memory: the runner copies from host memory (no CUDA IPC under a sanitizer)
            device = "cuda" if self.device == "cuda" and not self.own_memory else "cpu"
            self._arena = Arena(device, max(need, 64 << 20))
        return self._arena

    def close(self) -> None:
        if self.runner is not None:
            self.runner.discard()
            self.runner = None
        if self._arena is not None:
            self._arena.close()
            self._arena = None


def _numel(shape) -> int:
    return math.prod(int(s) for s in shape)


def kernel(remote: Remote, name: str, dtypes, **fields):
    """The Kernel the checks call: a CallableKernel (run/byo.py) over the remote's steps, its dtypes
    as declared (never probed: probing would run the library)."""
    from ..run import byo

    return byo.variant(remote.forward, remote.op, backward=remote.backward, dtypes=tuple(dtypes), device=remote.device,
                       name=name, kind="runner", module=remote, **fields)
