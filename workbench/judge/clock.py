"""Speed on the judge's clock: each side (the student's variant, the reference) in a runner, every
counted call on fresh inputs and into its own poisoned output, every output verified by the judge.

A round writes fresh inputs for N calls into an arena the judge owns (and computes what each call
must return, PyTorch's eager math at the dtype), then, for each side in turn: the outputs are
poisoned, the runner is handed the N calls (untimed), and the clock runs from the judge's "go" to
"every output verified present": the runner's "done", then a check of K positions of every output,
drawn by the judge in secret, against what they must hold. Work a kernel leaves for later (a
second stream, a thread that finishes after "done") is either inside that window or caught by it.
After the clock stops, every element of every output is compared with the expected values (the
first call of each round with the float64 reference where it fits). Nothing the runner says but
"done" is read. The protocol's own cost (an empty batch, timed the same way) is measured and
reported; the sides alternate which goes first.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field

import torch

from .. import dtypes as dtypes_
from ..measure import verify
from ..model import registry
from .memory import Arena
from .remote import Remote, call_line, tensor_words

SAMPLES = 64              # positions of each output checked before the clock stops
BATCH_S = 0.02            # a batch's aimed-for length: the protocol's fixed cost stays a small share of it
ROUNDS = 3
MEMORY_SHARE = 0.4        # of the device's free memory, for the batch's inputs, outputs and expected outputs
MIN_CALLS, MAX_CALLS = 2, 256
_HOST_BYTES = 2 << 30     # what a race on the host takes at most (of which MEMORY_SHARE)


@dataclass
class Side:
    name: str
    per_call_ms: list[float] = field(default_factory=list)   # one per round: the batch's time / calls
    wrong: str = ""                                          # the first verification failure

    @property
    def median_ms(self) -> float:
        return statistics.median(self.per_call_ms) if self.per_call_ms else math.nan


@dataclass
class Race:
    op: str
    direction: str
    dtype: str
    shape: tuple
    calls: int = 0              # per batch
    rounds: int = 0
    protocol_ms: float = math.nan   # an empty batch, timed as a batch is
    batch_ms: float = math.nan      # the median batch of the sides
    sides: dict[str, Side] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def overhead(self) -> float:
        """The protocol's share of a timed batch."""
        return self.protocol_ms / self.batch_ms if self.batch_ms and not math.isnan(self.batch_ms) else math.nan

    def describe(self) -> str:
        return (f"on the judge's clock: {self.rounds} rounds of {self.calls} calls a side, each call on fresh "
                f"inputs into its own output, every output verified; the protocol's own cost "
                f"{self.protocol_ms * 1e3:.0f} us a batch ({100 * self.overhead:.2f}% of one)")


class _Batch:
    """N calls' inputs and outputs in an arena the judge owns, and what each must return."""

    def __init__(self, op: str, direction: str, dtype: str, shape, n: int, arena: Arena):
        self.spec = spec = registry.spec(op)
        self.direction, self.dtype, self.shape, self.n, self.arena = direction, dtype, tuple(shape), n, arena
        self.torch_dtype = dtypes_.to_torch(dtype)
        self.attrs = spec.sample_attrs()[0]
        in_shapes = list(spec.input_shapes(shape))
        out_shapes = list(spec.output_shapes(shape))
        if direction == "fwd":
            self.step, arg_shapes, res_shapes = "forward", in_shapes, out_shapes
        else:
            self.step = "backward"
            arg_shapes = out_shapes + in_shapes
            res_shapes = [s for s, t in zip(in_shapes, spec.inputs) if t.differentiable]
        arena.reset()
        self.args = [[self._place(s) for s in arg_shapes] for _ in range(n)]
        self.results = [[self._place(s) for s in res_shapes] for _ in range(n)]
        self.expected: list[tuple] = []

    def _place(self, shape):
        offset = self.arena.place(math.prod(shape) * self.torch_dtype.itemsize)
        return offset, tuple(shape), self.arena.view(offset, shape, self.torch_dtype)

    @staticmethod
    def bytes_per_call(op: str, direction: str, dtype: str, shape) -> int:
        """Inputs, outputs and the expected outputs (at the dtype) of one call."""
        spec = registry.spec(op)
        item = dtypes_.to_torch(dtype).itemsize
        ins = sum(math.prod(s) for s in spec.input_shapes(shape))
        outs = sum(math.prod(s) for s in spec.output_shapes(shape))
        if direction == "fwd":
            return item * (ins + 2 * outs) + 4096
        diff = sum(math.prod(s) for s, t in zip(spec.input_shapes(shape), spec.inputs) if t.differentiable)
        return item * (outs + ins + 2 * diff) + 4096

    def fresh(self, gen: torch.Generator, expect: bool = True) -> None:
        """New inputs for every call, and (expect) what each call must return (eager math at the dtype)."""
        spec, n_out = self.spec, len(self.spec.outputs)
        self.expected = []
        for args in self.args:
            views = [v for _, _, v in args]
            ins = views if self.direction == "fwd" else views[n_out:]
            for v, t in zip(ins, spec.new_inputs(self.shape, self.dtype, self.arena.data.device, gen)):
                v.copy_(t)
            grads = None
            if self.direction != "fwd":
                for v in views[:n_out]:
                    v.copy_(torch.randn(v.shape, generator=gen, device=v.device, dtype=torch.float32))
                grads = views[:n_out]
            if expect:
                self.expected.append(verify.eager_step(spec, ins, self.attrs, self.direction, grads))

    def poison(self) -> None:
        for res in self.results:
            for _, _, v in res:
                v.fill_(float("nan"))

    def lines(self, arena_id: int) -> list[str]:
        values = list(self.attrs.values())  # sample_attrs: every attribute, in declaration order
        return [call_line(self.step, self.dtype, [tensor_words(arena_id, o, s) for o, s, _ in args],
                          [tensor_words(arena_id, o, s) for o, s, _ in res], values)
                for args, res in zip(self.args, self.results)]

    def sampler(self, gen: torch.Generator):
        """(positions of each output, what they must hold, how far off they may be): drawn in
        secret, checked inside the timed window."""
        flat = self.arena.data.view(self.torch_dtype)
        item = self.torch_dtype.itemsize
        idx, want = [], []
        for res, exp in zip(self.results, self.expected):
            for (offset, shape, v), e in zip(res, exp):
                numel = math.prod(shape)
                if not numel:
                    continue
                pos = torch.randint(numel, (SAMPLES,), generator=gen, device=v.device)
                idx.append(pos + offset // item)
                want.append(e.reshape(-1)[pos].float())
        if not idx:
            return None
        positions, expected = torch.cat(idx), torch.cat(want)
        _, atol, rtol = dtypes_.tolerance(self.dtype)
        terms = self.spec.terms(self.shape)[0 if self.direction == "fwd" else 1]
        bound = 4 * (atol * math.sqrt(max(max(terms, default=1), 1)) + rtol * expected.abs())
        return flat, positions, expected, bound

    def verify_all(self) -> str:
        """'' where every output holds what it must; else the first failure, named. The first call
        against the float64 reference where it fits (verify.py's rules); the others, element by
        element against eager at the dtype, in one pass with one device round trip (the full
        comparison runs only to name a failure)."""
        v = self._against_reference(tuple(v for _, _, v in self.results[0]))
        if not v.ok:
            return v.detail
        _, atol, rtol = dtypes_.tolerance(self.dtype)
        terms = self.spec.terms(self.shape)[0 if self.direction == "fwd" else 1]
        held = []
        for res, exp in zip(self.results[1:], self.expected[1:]):
            for (_, _, got), e, t in zip(res, exp, terms):
                bound = 2 * atol * math.sqrt(max(t, 1)) + rtol * e.abs()  # verify.judge's at scale 2
                held.append((((got - e).abs() <= bound) | (got == e)).all())
        if not held or bool(torch.stack(held).all()):
            return ""
        for i, (res, exp) in enumerate(zip(self.results, self.expected)):
            if i == 0:
                continue
            v = verify.judge(self.spec, self.shape, self.dtype, self.direction, tuple(v for _, _, v in res), exp,
                             f"eager {self.dtype}", 2, f"timed call {i + 1} of {self.n}")
            if not v.ok:
                return v.detail
        return "an output differs from what it must hold"

    def _against_reference(self, views) -> verify.Verdict:
        spec, n_out = self.spec, len(self.spec.outputs)
        args = [v for _, _, v in self.args[0]]
        ins = args if self.direction == "fwd" else args[n_out:]
        grads = None if self.direction == "fwd" else args[:n_out]
        refs, against, scale, floors = verify.expected(spec, self.shape, ins, self.attrs, self.direction, grads)
        return verify.judge(spec, self.shape, self.dtype, self.direction, views, refs, against, scale,
                            f"timed call 1 of {self.n}", floors)


def _present(sample) -> bool:
    """The secretly drawn positions of every output hold what they must (one device round trip)."""
    if sample is None:
        return True
    flat, positions, expected, bound = sample
    got = flat[positions].float()
    return bool(((got - expected).abs() <= bound).all())


def _timed(runner, lines: list[str], sample) -> tuple[float, bool]:
    """(seconds from "go" to every output verified present, whether they were)."""
    runner.send([f"batch {len(lines)}", *lines])  # parsed by the runner before the clock starts
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    start = time.perf_counter()
    runner.request("go")
    ok = _present(sample)
    return time.perf_counter() - start, ok


def race(op: str, sides: dict[str, Remote], direction: str, dtype: str, shape, *, rounds: int = ROUNDS,
         batch_s: float = BATCH_S, seed: int = 0) -> Race:
    """Time every side at `shape` in `direction` and `dtype` (module docstring). The sides are
    variants in runners, all of one device (the first side's); the first is the reference the
    calls' count is sized by."""
    out = Race(op, direction, dtype, tuple(shape))
    first = next(iter(sides.values()))
    device = "cuda" if first.device == "cuda" else "cpu"
    need = _Batch.bytes_per_call(op, direction, dtype, shape)
    free = torch.cuda.mem_get_info()[0] if device == "cuda" else _HOST_BYTES
    limit = max(MIN_CALLS, min(MAX_CALLS, int(free * MEMORY_SHARE // need)))
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    secret = torch.Generator(device=device)
    secret.manual_seed(int.from_bytes(os.urandom(8), "little"))
    # Calibrate on the first side: two calls, untimed for the verdict, set the batch's size.
    probe_arena = Arena(device, 2 * need + 4096)
    try:
        probe = _Batch(op, direction, dtype, shape, 2, probe_arena)
        probe.fresh(gen)
        runner = first.ensure()
        lines = probe.lines(runner.lend(probe_arena))
        _timed(runner, lines, None)
        seconds, _ = _timed(runner, lines, None)
        runner.forget(probe_arena)
    finally:
        probe_arena.close()
    n = max(MIN_CALLS, min(limit, int(math.ceil(batch_s / max(seconds / 2, 1e-7)))))
    if n == limit and limit < batch_s / max(seconds / 2, 1e-7):
        out.notes.append(f"{n} calls a batch: their inputs and outputs fill {100 * MEMORY_SHARE:.0f}% of the free "
                         f"{'device' if device == 'cuda' else 'host'} memory it may take")
    arena = Arena(device, n * need + 4096)
    try:
        _rounds(out, sides, _Batch(op, direction, dtype, shape, n, arena), rounds, gen, secret)
    finally:
        for remote in sides.values():
            if remote.runner is not None and remote.runner.alive:
                remote.runner.forget(arena)
        arena.close()
    return out


def _rounds(out: Race, sides: dict[str, Remote], batch: _Batch, rounds: int, gen, secret) -> None:
    """The timed rounds (round 0 warms every side up, uncounted). A runner that dies here ends the
    race (its caller's check fails, naming it): it is never restarted mid-race."""
    out.calls, out.rounds = batch.n, rounds
    names = list(sides)
    out.sides = {name: Side(name) for name in names}
    runners = {name: sides[name].ensure() for name in names}
    ids = {name: runners[name].lend(batch.arena) for name in names}
    protocol, batches = [], []
    for r in range(rounds + 1):
        batch.fresh(gen)
        for name in (names if r % 2 else names[::-1]):
            side = out.sides[name]
            batch.poison()
            sample = batch.sampler(secret)
            seconds, present = _timed(runners[name], batch.lines(ids[name]), sample)
            wrong = batch.verify_all()
            if not present and not wrong:  # right afterwards, not when the runner said it was done
                wrong = (f"round {r}: outputs did not hold their values when the runner said the calls were done, "
                         f"and did later: work left running after the calls returned")
            if wrong and not side.wrong:
                side.wrong = wrong
            if r:
                side.per_call_ms.append(1e3 * seconds / batch.n)
                batches.append(seconds)
        if r:  # the protocol alone: an empty batch, and the same check of every output's samples
            protocol.append(_timed(runners[names[0]], [], sample)[0])
    out.protocol_ms = 1e3 * statistics.median(protocol)
    out.batch_ms = 1e3 * statistics.median(batches)
