"""GPU tests, for every CUDA C++ variant of every op: the check matrix and gradcheck, opcheck,
torch.compile, bad input on CUDA, streams and device guards, >2^31 elements. Skipped where no GPU
is visible. Python variants (PyTorch, Triton) have theirs in test_python_variants.py: they are not
served by the harness's torch.ops.workbench.<op>, which these tests call by variant name."""
from __future__ import annotations

import pytest
import torch

import workbench as wb
from workbench.model import registry
from workbench.model.opspec import as_tuple

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")]

GPU_VARIANTS = [(op, v.name) for op in registry.ops() for v in registry.variants(op)
                if v.device == "cuda" and not v.python]


@pytest.fixture(scope="module", params=GPU_VARIANTS, ids=[f"{o}/{v}" for o, v in GPU_VARIANTS])
def kernel(request):
    return wb.load(*request.param)


def _dtype(kernel, prefer=torch.float32):
    name = str(prefer).replace("torch.", "")
    return prefer if name in kernel.dtypes else getattr(torch, kernel.dtypes[0])


def _inputs(kernel, size, dtype, seed=0, device="cuda"):
    return list(kernel.spec.new_inputs(size, dtype, device, torch.Generator(device).manual_seed(seed)))


def _attrs(kernel):
    return kernel.spec.sample_attrs()[0]


def _size(kernel, rows: int, cols: int) -> tuple:
    """A size of about rows x cols outputs in the op's own size pattern: (rows, cols) for the
    row-wise ops, (m, k, n) = (rows, 64, cols) for a GEMM-shaped one, (rows * cols,) for a 1-D one."""
    return _spec_size(kernel.spec, rows, cols)


def _spec_size(spec, rows: int, cols: int) -> tuple:
    tokens = spec.size_pattern.tokens
    return (rows, 64, cols) if tokens == ("m", "k", "n") else (rows * cols,) if tokens == ("n",) else (rows, cols)


def test_check_matrix(kernel):
    report = wb.check(kernel.op, kernel)  # fresh random inputs
    print(report.summary())
    assert report.ok, report.summary()


def test_check_matrix_seeded_wide_sizes(kernel):
    """Sizes around the vector widths and tile edges, with many rows."""
    pattern = kernel.spec.size_pattern.tokens
    if pattern == ("...", "n"):
        sizes = [(1, 8), (3, 4096), (129, 1024), (1000, 264), (7, 3, 520), (2, 16392)]
    elif pattern == ("n",):
        sizes = [(8,), (4096 * 3 + 5,), (129 * 1024 + 1,), (1 << 20,), (3 * 520 + 2,), ((1 << 20) + 7,)]
    elif pattern == ("...",):
        sizes = [(8,), (4096 * 3 + 5,), (129, 1024), (1000, 264), (7, 3, 520), (1, 1 << 20)]
    else:
        pytest.skip(f"no wide sizes listed for the pattern {pattern}")
    report = wb.check(kernel.op, kernel, shapes=sizes, seed=1234)
    assert report.ok, report.summary()


def test_gradcheck(kernel):
    report = wb.gradcheck(kernel.op, kernel)
    print(report.summary())
    assert report.ok, report.summary()
    if "float64" in kernel.dtypes:
        assert "torch.autograd.gradcheck" in report.method


def test_opcheck(kernel):
    spec, dtype, attrs = kernel.spec, _dtype(kernel), list(_attrs(kernel).values())
    op = getattr(torch.ops.workbench, kernel.op)
    for size in [s for s in spec.check_sizes if 0 not in s][2:4]:
        ts = _inputs(kernel, size, dtype)
        torch.library.opcheck(op.default, (*ts, *attrs, kernel.qualified))
        torch.library.opcheck(op.default, (*[t.requires_grad_() for t in ts], *attrs, kernel.qualified))
        grads = [torch.randn(s, device="cuda", dtype=dtype) for s in spec.output_shapes(size)]
        torch.library.opcheck(getattr(torch.ops.workbench, f"{kernel.op}_backward").default,
                              (*grads, *[t.detach() for t in ts], *attrs, kernel.qualified))


def test_compile_fullgraph(kernel):
    dtype, attrs = _dtype(kernel), list(_attrs(kernel).values())
    op, name = getattr(torch.ops.workbench, kernel.op), kernel.qualified
    ts = _inputs(kernel, kernel.spec.check_sizes[3], dtype, seed=1)

    def f(*ts):
        return sum(o.sum(-1) for o in as_tuple(op(ts[0] * 2, *ts[1:], *attrs, name)))

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(*ts), f(*ts))


def test_bad_input_on_cuda(kernel):
    """Every error case of the op's declaration, on CUDA tensors, and a second input left on the CPU."""
    op = getattr(torch.ops.workbench, kernel.op)
    for case in kernel.spec.all_error_cases("cuda"):
        tensors, attrs = case.build("cuda", torch.Generator("cuda").manual_seed(5))
        with pytest.raises(case.error) as e:
            op(*tensors, *[attrs[a.name] for a in kernel.spec.attrs], kernel.qualified)
        assert case.match in str(e.value), (case.what, str(e.value))
    ts = _inputs(kernel, kernel.spec.sample_size(), _dtype(kernel), device="cpu")
    with pytest.raises(RuntimeError, match=f"runs on CUDA tensors; {kernel.spec.inputs[0].name} is on cpu"):
        kernel(*ts, **_attrs(kernel))


def test_non_default_stream(kernel):
    dtype, attrs = _dtype(kernel, torch.bfloat16), _attrs(kernel)
    side = torch.cuda.Stream()
    ts = _inputs(kernel, _size(kernel, 2048, 4096), dtype, seed=2)
    expected = as_tuple(kernel(*ts, **attrs))
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # a long op queued first on the side stream: if our kernel ran on another stream it would
        # read the input before the in-place update below and the result would not match
        x2 = ts[0].clone()
        x2.mul_(1.0)
        got = as_tuple(kernel(x2, *ts[1:], **attrs))
    side.synchronize()
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_non_current_device(kernel):
    dtype, attrs = _dtype(kernel), _attrs(kernel)
    ts = _inputs(kernel, _size(kernel, 64, 512), dtype, seed=3, device="cuda:1")
    with torch.cuda.device(0):
        out = as_tuple(kernel(*ts, **attrs))
    assert all(o.device == ts[0].device for o in out)
    for o, r in zip(out, kernel.spec.run_reference(ts, attrs)):
        assert wb.correctness.compare(o, r, dtype)[0]


def test_large_tensor_over_int32(kernel):
    """More than 2^31 elements: the last rows (whose flat indices exceed int32) and the gradients
    are right."""
    spec, dtype, attrs = kernel.spec, _dtype(kernel, torch.bfloat16), _attrs(kernel)
    if spec.size_pattern.tokens == ("m", "k", "n"):
        pytest.skip("its second operand is not sliced by rows: test_matmul.py::test_gpu_output_over_int32")
    cols = 4096
    rows = (2**31) // cols + 3
    size = _size(kernel, rows, cols)
    rows = size[0]  # a 1-D op's rows are its elements
    gen = torch.Generator("cuda").manual_seed(4)
    ts = list(spec.new_inputs(size, dtype, "cuda", gen))
    (y,) = as_tuple(kernel(*ts, **attrs))
    for sl in (slice(0, 4), slice(rows - 4, rows)):
        part = [t[sl] if t.dim() == len(size) else t for t in ts]
        ok, rel, *_ = wb.correctness.compare(y[sl], spec.run_reference(part, attrs)[0], dtype)
        assert ok, f"forward rows {sl}: rel {rel}"
    del y
    dy = torch.empty(spec.output_shapes(size)[0], device="cuda", dtype=dtype).normal_(generator=gen)
    grads = as_tuple(kernel.backward(dy, *ts, **attrs))
    for sl in (slice(0, 4), slice(rows - 4, rows)):
        part = [t[sl] if t.dim() == len(size) else t for t in ts]
        ref = spec.run_reference_backward((dy[sl],), part, attrs)
        ok, rel, *_ = wb.correctness.compare(grads[0][sl], ref[0], dtype)
        assert ok, f"first gradient rows {sl}: rel {rel}"


def test_a_forward_only_variant_refuses_backward_by_name():
    """A variant whose launcher table leaves the backward out (NULL): the forward runs, and
    autograd's backward raises an error naming the op, the variant and the step; no crash."""
    src = (wb.registry.variant_source("bias_gelu", "scalar").read_text()
           .replace("{forward, backward, workspace_bytes}", "{forward, nullptr, nullptr}"))
    k = wb.load_inline("bias_gelu", src, name="fwd_only_gpu")
    assert k.steps == ("forward",)
    x = torch.randn(8, 16, device="cuda", requires_grad=True)
    b = torch.randn(16, device="cuda", requires_grad=True)
    y = k(x, b)
    with pytest.raises(NotImplementedError, match="bias_gelu/fwd_only_gpu has no backward; gradients need a variant"):
        y.sum().backward()
    assert torch.isfinite(k(x, b)).all()  # the process and its CUDA context carry on


def test_modules_train_on_cuda():
    torch.manual_seed(0)
    for layer in (wb.nn.BiasGELU(64), wb.nn.ScaleBiasReLU(64, scale=1.5)):
        m = torch.nn.Sequential(torch.nn.Linear(16, 64), layer, torch.nn.Linear(64, 1)).cuda()
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        x = torch.randn(256, 16, device="cuda")
        y = x[:, :1] * 2 - x[:, 1:2]
        losses = []
        for _ in range(40):
            loss = torch.nn.functional.mse_loss(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < 0.5 * losses[0], (type(layer).__name__, losses[::10])
        assert m[1]._variant in ("vec4", "scalar")


@pytest.mark.parametrize("op", registry.ops())
def test_bench_small_sweep(tmp_path, op):
    """A real sweep on the GPU: every provider times, GB/s and the ceiling are filled, results
    round-trip through the JSONL file and the plots are drawn."""
    from workbench.explain import plot
    from workbench.measure import bench_rows

    spec = registry.spec(op)
    shapes = [_spec_size(spec, 1024, 1024), _spec_size(spec, 4096, 1024)]
    r = wb.bench(op, dtypes=["float32", "bfloat16"], shapes=shapes,
                 directions=spec.benched_directions, budget_s=0.2)
    providers = {(row["dtype"], row["variant"]) for row in r.rows}
    for dtype in ("float32", "bfloat16"):
        wanted = ["eager", "compile"] + [v.name for v in registry.variants(op) if v.device == "cuda" and dtype in v.dtypes]
        assert {(dtype, p) for p in wanted} <= providers
    for row in r.rows:
        assert row["median_ms"] > 0 and row["p20_ms"] <= row["median_ms"] <= row["p80_ms"]
        assert row["GBps"] > 0 and 0 < row["pct_of_ceiling"] < 1000 and row["ceiling_GBps"] > 100
        assert row["method"] in ("cuda-events", "cuda-graph") and row["peak_mem_bytes"] >= 0
        assert row["attrs"] == spec.sample_attrs()[0]
        if row["variant"] == "eager":
            assert row["speedup_vs_eager"] == 1.0
    path = r.save(tmp_path / "rows.jsonl")
    assert len(bench_rows.read_rows(path)) == len(r.rows)
    # per dtype and direction: speedup over eager, over compile, and bandwidth (or throughput); the roofline
    assert len(plot.plot_all(bench_rows.read_rows(path), tmp_path / "plots")) >= 2 * len(spec.benched_directions) * 3 + 1
