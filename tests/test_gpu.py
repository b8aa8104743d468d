"""GPU tests: the check matrix and gradcheck for every CUDA variant, >2^31 elements, opcheck,
torch.compile, streams and device guards. Skipped where no GPU is visible."""
from __future__ import annotations


import pytest
import torch

import workbench as wb
from workbench import registry
from workbench.ops import bias_gelu as spec

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")]

GPU_VARIANTS = [v.name for v in registry.variants("bias_gelu") if v.device == "cuda"]


@pytest.fixture(scope="module", params=GPU_VARIANTS)
def kernel(request):
    return wb.load("bias_gelu", request.param)


def test_check_matrix(kernel):
    report = wb.check("bias_gelu", kernel)  # fresh random inputs
    print(report.summary())
    assert report.ok, report.summary()


def test_check_matrix_seeded_wide_shapes(kernel):
    shapes = [(1, 8), (3, 4096), (129, 1024), (1000, 264), (7, 3, 520), (2, 16392)]
    report = wb.check("bias_gelu", kernel, shapes=shapes, seed=1234)
    assert report.ok, report.summary()


def test_gradcheck(kernel):
    report = wb.gradcheck("bias_gelu", kernel)
    print(report.summary())
    assert report.ok, report.summary()
    if "float64" in kernel.dtypes:
        assert "torch.autograd.gradcheck" in report.method


def test_opcheck(kernel):
    dtype = torch.float32 if "float32" in kernel.dtypes else torch.bfloat16
    for shape in [(4, 16), (3, 5, 8)]:
        x, b = spec.make_inputs(shape, dtype, "cuda", torch.Generator("cuda").manual_seed(0))
        torch.library.opcheck(torch.ops.workbench.bias_gelu.default, (x, b, kernel.qualified))
        torch.library.opcheck(torch.ops.workbench.bias_gelu.default,
                              (x.requires_grad_(), b.requires_grad_(), kernel.qualified))
        dy = torch.randn_like(x)
        torch.library.opcheck(torch.ops.workbench.bias_gelu_backward.default, (dy, x.detach(), b.detach(), kernel.qualified))


def test_compile_fullgraph(kernel):
    dtype = torch.float32 if "float32" in kernel.dtypes else torch.float16
    x, b = spec.make_inputs((64, 256), dtype, "cuda", torch.Generator("cuda").manual_seed(1))
    name = kernel.qualified

    def f(x, b):
        return torch.ops.workbench.bias_gelu(x * 2, b, name).sum(-1)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x, b), f(x, b))


def test_non_default_stream(kernel):
    dtype = torch.float32 if "float32" in kernel.dtypes else torch.bfloat16
    side = torch.cuda.Stream()
    x, b = spec.make_inputs((2048, 4096), dtype, "cuda", torch.Generator("cuda").manual_seed(2))
    expected = kernel(x, b)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # a long op queued first on the side stream: if our kernel ran on another stream it would
        # read x before the in-place update below and the result would not match
        x2 = x.clone()
        x2.mul_(1.0)
        y = kernel(x2, b)
    side.synchronize()
    torch.testing.assert_close(y, expected, rtol=0, atol=0)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_non_current_device(kernel):
    dtype = torch.float32 if "float32" in kernel.dtypes else torch.bfloat16
    x, b = spec.make_inputs((64, 512), dtype, "cuda:1", torch.Generator("cuda:1").manual_seed(3))
    with torch.cuda.device(0):
        y = kernel(x, b)
    assert y.device == x.device
    assert wb.correctness.compare(y, spec.reference(x, b), dtype)[0]


def test_large_tensor_over_int32(kernel):
    """More than 2^31 elements: the last rows (whose flat indices exceed int32) and dbias are right."""
    dtype = torch.float32 if "float32" in kernel.dtypes else torch.bfloat16
    cols = 4096
    rows = (2**31) // cols + 3
    gen = torch.Generator("cuda").manual_seed(4)
    x, b = spec.make_inputs((rows, cols), dtype, "cuda", gen)
    y = kernel(x, b)
    for sl in (slice(0, 4), slice(rows - 4, rows)):
        ok, rel, *_ = wb.correctness.compare(y[sl], spec.reference(x[sl], b), dtype)
        assert ok, f"forward rows {sl}: rel {rel}"
    del y
    dy = torch.empty_like(x).normal_(generator=gen)
    dx, db = kernel.backward(dy, x, b)
    for sl in (slice(0, 4), slice(rows - 4, rows)):
        ok, rel, *_ = wb.correctness.compare(dx[sl], spec.reference_backward(dy[sl], x[sl], b)[0], dtype)
        assert ok, f"dx rows {sl}: rel {rel}"
    total = torch.zeros(cols, dtype=torch.float64, device="cuda")
    for start in range(0, rows, 1 << 16):
        total += dx[start:start + (1 << 16)].double().sum(0)
    # dbias sums 2^19 rows of kernel-rounded dx: compare with the float64 sum of the same dx
    rel = ((db.double() - total).norm() / total.norm()).item()
    assert rel < (1e-4 if dtype == torch.float32 else 1e-2), f"dbias rel {rel}"


def test_bad_input_on_cuda(kernel):
    dtype = torch.float32 if "float32" in kernel.dtypes else torch.float16
    x = torch.randn(4, 8, device="cuda", dtype=dtype)
    with pytest.raises(RuntimeError, match="bias must be on the same device as x"):
        kernel(x, torch.randn(8, dtype=dtype))
    with pytest.raises(RuntimeError, match="runs on CUDA tensors; x is on cpu"):
        kernel(x.cpu(), torch.randn(8, dtype=dtype))
    with pytest.raises(TypeError, match="supports dtypes"):
        kernel(x.to(torch.int32), torch.zeros(8, device="cuda", dtype=torch.int32))
    with pytest.raises(ValueError, match="bias must be 1-D with x.size\\(-1\\) = 8"):
        kernel(x, torch.randn(7, device="cuda", dtype=dtype))
    empty = kernel(x[:0], torch.randn(8, device="cuda", dtype=dtype))
    assert empty.shape == (0, 8)


def test_module_trains_on_cuda():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 64), wb.nn.BiasGELU(64), torch.nn.Linear(64, 1)).cuda()
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
    assert losses[-1] < 0.5 * losses[0]
    assert m[1]._variant in ("vec4", "scalar")


def test_bench_small_sweep(tmp_path):
    """A real sweep on the GPU: every provider times, GB/s and the ceiling are filled, results
    round-trip through the JSONL file and the plots are drawn."""
    from workbench import plot, results

    r = wb.bench("bias_gelu", dtypes=["float32", "bfloat16"], shapes=[(1024, 1024), (4096, 1024)],
                 directions=("fwd", "bwd"), budget_s=0.2)
    providers = {(row["dtype"], row["variant"]) for row in r.rows}
    assert {("float32", p) for p in ("eager", "compile", "scalar", "vec4")} <= providers
    assert {("bfloat16", p) for p in ("eager", "compile", "scalar", "half")} <= providers
    for row in r.rows:
        assert row["median_ms"] > 0 and row["p20_ms"] <= row["median_ms"] <= row["p80_ms"]
        assert row["GBps"] > 0 and 0 < row["pct_of_ceiling"] < 1000 and row["ceiling_GBps"] > 100
        assert row["method"] in ("cuda-events", "cuda-graph") and row["peak_mem_bytes"] >= 0
        if row["variant"] == "eager":
            assert row["speedup_vs_eager"] == 1.0
    path = r.save(tmp_path / "rows.jsonl")
    assert len(results.read_rows(path)) == len(r.rows)
    assert len(plot.plot_all(results.read_rows(path), tmp_path / "plots")) >= 8
