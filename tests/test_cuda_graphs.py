"""Every CUDA variant captures into a CUDA graph and replays correctly (issue 26, item 6): for each op
and each variant that runs on CUDA (C++ through the harness, Python: PyTorch formula and Triton),
its forward, its backward step and a forward+backward through autograd are captured with
torch.cuda.graph on fresh static inputs; the inputs are then changed in place and the graph
replayed, twice, and the outputs must equal an eager call on the same values bit for bit (every
variant here adds in a fixed order) and pass the float64 reference's check. A call that allocates
with cudaMalloc, clears memory on the legacy stream, launches off the caller's stream or waits for
the device fails the capture (torch's global capture mode refuses them); workspace from torch's
caching allocator is captured into the graph's private pool and is fine.

No variant is skipped by design. Skipped: sm_90a variants off Hopper (they cannot run there at all)
and the backward of forward-only variants. reduce_sum/fast, whose eager call of a row of several
chunks is one launch with counters that survive between calls, takes its two-launch path under
capture (a graph keeps no state between replays): both paths give the same bits, checked here at the
issue's 2^20 and around the one-launch path's limits, and calls on two streams at once."""
from __future__ import annotations

import pytest
import torch

import workbench as wb
from workbench.build import toolchain
from workbench.measure import correctness
from workbench.model import registry
from workbench.model.opspec import as_tuple

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")]

CUDA_VARIANTS = [(op, v.name) for op in registry.ops() for v in registry.variants(op) if v.runs_on("cuda")]
REPLAYS = 2


@pytest.fixture(scope="module", params=CUDA_VARIANTS, ids=[f"{o}/{v}" for o, v in CUDA_VARIANTS])
def kernel(request):
    k = wb.load(*request.param)
    why = toolchain.unmet_arch(getattr(k, "source", None), torch.device("cuda"))
    if why:
        pytest.skip(f"{k.op}/{k.name} {why}")
    return k


def _dtype(kernel):
    return torch.float32 if "float32" in kernel.dtypes else getattr(torch, kernel.dtypes[0])


def _sizes(spec) -> list[tuple]:
    """The three largest non-empty sizes of the op's check matrix: sizes every variant takes, and
    (for reduce_sum) rows of one chunk and of several, a row and a 1-D total."""
    sizes = [tuple(s) for s in spec.check_sizes if 0 not in s]
    return sorted(sizes, key=lambda s: torch.Size(spec.input_shapes(s)[0]).numel())[-3:]


def _fresh(spec, size, dtype, seed):
    return list(spec.new_inputs(size, dtype, "cuda", torch.Generator("cuda").manual_seed(seed)))


def _capture(fn):
    """fn() captured into a CUDA graph (warmed up first on a side stream, as torch asks): (graph,
    its static outputs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = as_tuple(fn())
    return graph, outs


def _replays_match(statics, fresh_values, graph, outs, eager, references, terms, dtype, what):
    """Fill the static tensors with new values, replay, and compare with eager and the reference."""
    for round_ in range(REPLAYS):
        values = fresh_values(round_)
        with torch.no_grad():
            for s, v in zip(statics, values):
                s.copy_(v)
        graph.replay()
        torch.cuda.synchronize()
        expected = as_tuple(eager(values))
        for i, (o, e, r, t) in enumerate(zip(outs, expected, references(values), terms)):
            assert torch.equal(o, e), f"{what}, replay {round_}: output {i} differs from an eager call"
            ok, rel, *_, note = correctness.compare(o, r, dtype, terms=t)
            assert ok, f"{what}, replay {round_}: output {i} against the float64 reference: rel {rel} {note}"


def test_forward_captures_and_replays(kernel):
    spec, dtype, attrs = kernel.spec, _dtype(kernel), kernel.spec.sample_attrs()[0]
    for size in _sizes(spec):
        static = _fresh(spec, size, dtype, seed=1)
        graph, outs = _capture(lambda: kernel(*static, **attrs))
        _replays_match(static, lambda r: _fresh(spec, size, dtype, seed=10 + r), graph, outs,
                       lambda v: kernel(*v, **attrs), lambda v: spec.run_reference(v, attrs), spec.terms(size)[0],
                       dtype, f"{kernel.op}/{kernel.name} forward at {size}")
        del graph


def _grads(spec, size, dtype, seed):
    gen = torch.Generator("cuda").manual_seed(seed)
    return [torch.randn(s, device="cuda", generator=gen).to(dtype) for s in spec.output_shapes(size)]


def test_backward_step_captures_and_replays(kernel):
    if "backward" not in kernel.steps or not kernel.spec.differentiable:
        pytest.skip(f"{kernel.op}/{kernel.name} is forward-only")
    spec, dtype, attrs = kernel.spec, _dtype(kernel), kernel.spec.sample_attrs()[0]
    n_out = len(spec.outputs)
    for size in _sizes(spec):
        static = _grads(spec, size, dtype, seed=2) + _fresh(spec, size, dtype, seed=3)
        graph, outs = _capture(lambda: kernel.backward(*static, **attrs))
        fresh = lambda r: _grads(spec, size, dtype, seed=20 + r) + _fresh(spec, size, dtype, seed=30 + r)  # noqa: E731
        _replays_match(static, fresh, graph, outs, lambda v: kernel.backward(*v, **attrs),
                       lambda v: spec.run_reference_backward(v[:n_out], v[n_out:], attrs), spec.terms(size)[1],
                       dtype, f"{kernel.op}/{kernel.name} backward step at {size}")
        del graph


def test_forward_and_autograd_backward_capture_together(kernel):
    """The path a model takes: the op's forward and autograd's backward through it, one graph."""
    if "backward" not in kernel.steps or not kernel.spec.differentiable:
        pytest.skip(f"{kernel.op}/{kernel.name} is forward-only")
    spec, dtype, attrs = kernel.spec, _dtype(kernel), kernel.spec.sample_attrs()[0]
    diff = [t.differentiable for t in spec.inputs]
    size = _sizes(spec)[-1]
    n_out = len(spec.outputs)

    def step(values):
        grads, inputs = values[:n_out], values[n_out:]
        leaves = [t.detach().requires_grad_(d) for t, d in zip(inputs, diff)]
        outs = as_tuple(kernel(*leaves, **attrs))
        got = torch.autograd.grad(outs, [t for t in leaves if t.requires_grad], grads)
        return tuple(o.detach() for o in outs) + tuple(got)

    static = _grads(spec, size, dtype, seed=4) + _fresh(spec, size, dtype, seed=5)
    graph, outs = _capture(lambda: step(static))
    fresh = lambda r: _grads(spec, size, dtype, seed=40 + r) + _fresh(spec, size, dtype, seed=50 + r)  # noqa: E731
    out_terms, grad_terms = spec.terms(size)
    _replays_match(static, fresh, graph, outs, step,
                   lambda v: spec.run_reference(v[n_out:], attrs) + spec.run_reference_backward(v[:n_out], v[n_out:], attrs),
                   out_terms + grad_terms, dtype, f"{kernel.op}/{kernel.name} forward+backward at {size}")


# ---------------------------------------------------------------- reduce_sum/fast's one launch

# One launch eagerly (chunks within one wave of blocks, 3 an SM: 396 on an H100): 2^20 (the issue's
# small size, one row of 256 chunks), a row just past one chunk (5), 64 rows of 5 chunks, 16-bit rows,
# float64 odd rows. Two launches eagerly too: past one wave (2^22: 1024 chunks), past the 1024
# counted rows.
ONE_LAUNCH_SIZES = [((1 << 20,), torch.float32), ((16385,), torch.float32), ((64, 20000), torch.float32),
                    ((5, 1 << 17), torch.bfloat16), ((3, 70001), torch.float64), ((1 << 22,), torch.float32),
                    ((1025, 20000), torch.float32)]


@pytest.mark.parametrize("size,dtype", ONE_LAUNCH_SIZES, ids=[f"{'x'.join(map(str, s))}-{d}" for s, d in ONE_LAUNCH_SIZES])
def test_reduce_sum_fast_one_launch_and_captured_two_launches_agree(size, dtype):
    """Eager (one launch, counters) and captured (two launches) give the same bits, replay after
    replay, and the eager call repeated gives them too (the counters went back to zero)."""
    k = wb.load("reduce_sum", "fast")
    x = torch.randn(size, device="cuda", generator=torch.Generator("cuda").manual_seed(6)).to(dtype)
    graph, (y,) = _capture(lambda: k(x))
    for seed in (7, 8, 9):
        x.copy_(torch.randn(size, device="cuda", generator=torch.Generator("cuda").manual_seed(seed)).to(dtype))
        graph.replay()
        eager = [k(x) for _ in range(3)]
        torch.cuda.synchronize()
        assert all(torch.equal(e, eager[0]) for e in eager), "eager calls differ from one another"
        assert torch.equal(y, eager[0]), f"captured and eager differ at {size} {dtype}"
        ok, rel, *_ = correctness.compare(y, x.double().sum(-1), dtype, terms=size[-1])
        assert ok, rel
    # rows that start off a 16-byte boundary (a view's storage offset): the same bits call after call
    view = torch.randn(3 * 70001 + 1, device="cuda").to(dtype)[1:].view(3, 70001)
    first = k(view)
    assert all(torch.equal(k(view), first) for _ in range(3))
    assert correctness.compare(first, view.double().sum(-1), dtype, terms=70001)[0]


def test_reduce_sum_fast_on_two_streams_at_once():
    """Calls on two streams run side by side with counters of their own: every result right."""
    k = wb.load("reduce_sum", "fast")
    gen = torch.Generator("cuda").manual_seed(11)
    xs = [torch.randn(16, 1 << 16, device="cuda", generator=gen) for _ in range(2)]  # 256 chunks: one launch
    expected = [k(x) for x in xs]
    streams = [torch.cuda.Stream() for _ in xs]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    outs: list[list[torch.Tensor]] = [[], []]
    for _ in range(50):
        for i, (s, x) in enumerate(zip(streams, xs)):
            with torch.cuda.stream(s):
                outs[i].append(k(x))
    torch.cuda.synchronize()
    for i in range(2):
        assert all(torch.equal(o, expected[i]) for o in outs[i]), f"stream {i}: a result differs"
