"""The runner for variants that need Python (a torch extension, a callable, a Triton or PyTorch
variant, a tree variant loaded through the torch harness): the protocol of bindings/runner/wb_runner.cu,
spoken by a Python process with torch, on memory its caller owns.

    python -m workbench.judge.python_runner SOCKET_FD

Its "variant" command carries the variant's address (address_of: a name in the tree, a source
file, an extension's source, a callable's module path) instead of a library's path. A call's
outputs are the variant's own tensors, copied into the caller's; the caller times this runner
only against the same protocol (the reference in a runner of this kind too).
"""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import socket
import sys

from .. import bytecode

bytecode.use_private_cache()  # before torch: see bytecode.py

import torch  # noqa: E402

from .. import dtypes as dtypes_  # noqa: E402
from ..run.cuda_errors import context_state  # noqa: E402
from .memory import _DeviceArray, _IpcMemHandle, _check, _driver  # noqa: E402



def address_of(op: str, variant) -> dict:
    """How a runner finds the same variant (a JSON dict with "op" and "name"): by name in the tree,
    by source path, an extension by its source, a callable by its module path."""
    from ..model import registry
    from ..run import byo, loader

    if isinstance(variant, byo.BuiltExtension):  # an extension-style source, built, never loaded here
        return {"op": op, "name": variant.name, "source": str(variant.source), "style": "extension"}
    if isinstance(variant, loader.BuiltVariant):  # built, never loaded here: the runner loads that source
        return {"op": op, "name": variant.name, "source": str(variant.source)}
    variant = byo.as_variant(op, variant)
    if isinstance(variant, byo.CallableKernel):
        return byo.child_address(op, variant)
    if isinstance(variant, loader.Kernel):
        options = {"options": variant.options.as_dict()} if variant.options.as_dict() else {}
        in_tree = registry.variant_sources(op).get(variant.name)
        if in_tree is not None and in_tree.resolve() == variant.source.resolve():
            return {"op": op, "name": variant.name, **options}
        return {"op": op, "name": variant.name, "source": str(variant.source), **options}
    return {"op": op, "name": str(variant)}


def resolve(address: dict):
    """The variant at `address`, loaded in this process."""
    from ..build import BuildOptions
    from ..run import byo, loader

    if address.get("style") == "extension" or "callable" in address:
        return byo.from_child_address(address)
    options = BuildOptions(**address.get("options", {}))
    if "source" in address:
        return loader.load_source(address["op"], address["source"], address["name"], options=options)
    return loader.load(address["op"], address["name"], options=options)


class PyRunner:
    def __init__(self, fd: int):
        self.sock = socket.socket(fileno=fd)
        self.buffer, self.fds, self.arenas, self.kernel, self.own_memory = b"", [], {}, None, False
        self.pending = ""

    def serve(self) -> int:
        while True:
            line = self.read_line()
            if line is None:
                return 0
            try:
                self.reply(self.handle(line))
            except Exception as e:  # noqa: BLE001 - the variant's failure is this call's, told to the caller
                text = f"{type(e).__name__}: {e}".encode().hex()
                if self.context() == "lost":  # a sticky CUDA error: nothing more runs here
                    self.reply("fatal " + text)
                    return 3
                self.reply("error " + text)

    def handle(self, line: str) -> str:
        words = line.split()
        cmd = words[0]
        if cmd in ("declare", "binding", "threads", "marker"):
            if cmd == "threads":
                torch.set_num_threads(int(words[1]))
            return "ok"
        if cmd in ("range", "end"):
            if torch.cuda.is_available() and cmd == "range":
                torch.cuda.nvtx.range_push(bytes.fromhex(words[1]).decode())
            elif torch.cuda.is_available():
                torch.cuda.nvtx.range_pop()
            return "ok"
        if cmd == "own-memory":  # each call's inputs copied to allocations of their own (its outputs are)
            self.own_memory = True
            return "ok"
        if cmd == "variant":
            self.kernel = resolve(json.loads(bytes.fromhex(words[1])))
            k = self.kernel
            mask = sum(1 << dtypes_.NAMES.index(d) for d in k.dtypes)
            steps = sum(1 << i for i, s in enumerate(("forward", "backward")) if s in k.steps)
            return f"ok {k.op} {k.device} {mask} {steps} {(k.description or '').encode().hex()}"
        if cmd == "arena":
            return self.map_arena(words[1:])
        if cmd == "drop":
            self.wait()
            arena = self.arenas.pop(int(words[1]))
            if arena.device.type == "cuda":
                _check(_driver().cuIpcCloseMemHandle(ctypes.c_uint64(arena.data_ptr())), "cuIpcCloseMemHandle")
            return "ok"
        if cmd == "call":
            self.run(words[1:])
            self.wait()
            if self.context() == "cleared":  # a launch error nobody checked is this call's, not the next one's
                raise RuntimeError(f"left a CUDA error pending, raised by the next op: {self.pending}")
            return "ok"
        if cmd == "batch":
            calls = [self.read_line().split()[1:] for _ in range(int(words[1]))]
            if self.read_line() != "go":
                raise ValueError("a batch ends with go")
            for c in calls:
                self.run(c)
            self.wait()
            return "done"
        raise ValueError(f"unknown command: {cmd}")

    def map_arena(self, words: list[str]) -> str:
        arena_id, kind = int(words[0]), words[1]
        if kind == "cuda":
            ptr = ctypes.c_uint64()
            handle = _IpcMemHandle.from_buffer_copy(bytes.fromhex(words[2]))
            fn = getattr(_driver(), "cuIpcOpenMemHandle_v2", None) or _driver().cuIpcOpenMemHandle
            torch.zeros(1, device="cuda")  # the primary context, current on this thread
            _check(fn(ctypes.byref(ptr), handle, ctypes.c_uint(1)), "cuIpcOpenMemHandle")
            self.arenas[arena_id] = torch.as_tensor(_DeviceArray(ptr.value, int(words[3])), device="cuda")
        else:
            fd = self.fds.pop(0)
            self.arenas[arena_id] = torch.frombuffer(mmap.mmap(fd, int(words[2])), dtype=torch.uint8)
            os.close(fd)
        return "ok"

    def run(self, words: list[str]) -> None:
        step, dtype = int(words[0]), dtypes_.to_torch(dtypes_.NAMES[int(words[1])])
        pos = 2

        def tensors():
            nonlocal pos
            n, pos = int(words[pos]), pos + 1
            out = []
            for _ in range(n):
                arena, offset, ndim = (int(w) for w in words[pos:pos + 3])
                dims = [int(w) for w in words[pos + 3:pos + 3 + 2 * abs(ndim) if ndim < 0 else pos + 3 + ndim]]
                pos += 3 + len(dims)
                shape, strides = dims[:abs(ndim)], dims[abs(ndim):]  # strides: a view, kept as the caller made it
                span = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if strides else torch.Size(shape).numel()
                data = self.arenas[arena][offset:offset + span * dtype.itemsize].view(dtype)
                out.append(data.as_strided(shape, strides) if strides else data.view(shape))
            return out

        inputs, outputs = tensors(), tensors()
        if self.own_memory:  # at the caller's offset modulo 16, as the C++ runner places them
            inputs = [_own_copy(t, self.kernel.device) for t in inputs]
        n, pos = int(words[pos]), pos + 1
        attrs = [float(words[pos + 2 * i + 1]) if words[pos + 2 * i] == "f" else int(words[pos + 2 * i + 1])
                 for i in range(n)]
        got = self.kernel(*inputs, *attrs) if step == 0 else self.kernel.backward(*inputs, *attrs)
        for out, value in zip(outputs, got if isinstance(got, (tuple, list)) else (got,)):
            out.copy_(value)

    def context(self) -> str:
        """The CUDA context's state after a call (cuda_errors.context_state: "ok", "cleared" with the
        error in self.pending, "lost"); "ok" where this runner never used CUDA."""
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return "ok"
        state, self.pending = context_state(torch.device("cuda"))
        return state

    def wait(self) -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def read_line(self) -> str | None:
        while b"\n" not in self.buffer:
            data, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 4)
            if not data:
                return None
            self.fds += fds
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()

    def reply(self, text: str) -> None:
        self.sock.sendall((text + "\n").encode())


def _own_copy(t: torch.Tensor, device: str) -> torch.Tensor:
    skew = t.data_ptr() % 16 // t.element_size()
    return torch.empty(t.numel() + skew, dtype=t.dtype, device=device)[skew:].view(t.shape).copy_(t)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m workbench.judge.python_runner SOCKET_FD (started by workbench/judge/remote.py)", file=sys.stderr)
        return 2
    os.dup2(2, 1)  # what a variant prints goes to the log, never into the protocol
    return PyRunner(int(argv[0])).serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
