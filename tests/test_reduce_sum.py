"""reduce_sum: what the generic op tests (test_ops.py, test_gpu.py) cannot say about a reduction.
The ladder is declared and every rung's file tells its story; sums are deterministic (the CPU
variant for any thread count; every CUDA rung bit for bit from run to run, and a row's sum does not
depend on the grid it was launched in); NaN and Inf propagate as torch.sum's do; an empty last
dimension sums to zero with a well-formed gradient; a float32 sum of 2^28 values is as accurate as
torch.sum's."""
from __future__ import annotations

import re

import pytest
import torch

import workbench as wb
from workbench.model import registry

SPEC = registry.spec("reduce_sum")
CUDA_VARIANTS = [v.name for v in registry.variants("reduce_sum") if v.device == "cuda"]
gpu = pytest.mark.gpu


def test_the_ladder_is_declared_in_order_and_every_rung_is_a_variant():
    assert SPEC.ladder[0] == "interleaved_divergent" and SPEC.ladder[-1] == "fast" and len(SPEC.ladder) >= 7
    names = [v.name for v in registry.variants("reduce_sum")]
    assert names[:len(SPEC.ladder)] == list(SPEC.ladder), "variants are listed in ladder order"
    assert set(CUDA_VARIANTS) == set(SPEC.ladder) and "cpu" in names


@pytest.mark.parametrize("rung", SPEC.ladder)
def test_every_rung_opens_with_its_change_prediction_and_measurement(rung):
    """Each rung's file opens with what it changes over the step before, the speedup it predicts
    and the speedup the committed benchmark measured (a figure, and where it comes from)."""
    text = registry.variant_source("reduce_sum", rung).read_text()
    opening = "\n".join(line for line in text.splitlines()[:40] if line.startswith("//"))
    i = SPEC.ladder.index(rung)
    if i:
        assert f"over {SPEC.ladder[i - 1]}" in opening, f"{rung}: say what changes over {SPEC.ladder[i - 1]}"
    assert re.search(r"Predicted:.*\d", opening), f"{rung}: no prediction"
    measured = opening[opening.find("Measured"):]
    assert re.search(r"results/gpu/[0-9a-f]{7}", measured), f"{rung}: the measurement must name its results"
    assert re.search(r"\d+\.\d+x", measured), f"{rung}: the measured speedup, as a figure"


@pytest.fixture(scope="module")
def cpu_kernel():
    return wb.load("reduce_sum", "cpu")


@pytest.mark.parametrize("shape", [(3, 3 * 16384 + 5), (2**18 + 3,), (4000, 33)])
def test_cpu_sums_are_the_same_for_any_thread_count(cpu_kernel, shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = cpu_kernel(x)
        torch.set_num_threads(max(2, before))
        many = cpu_kernel(x)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, many)


def _special_rows(device, dtype):
    x = torch.randn(6, 37, generator=torch.Generator().manual_seed(2)).to(dtype).to(device)
    x[0, 3] = float("nan")
    x[1, 5] = float("inf")
    x[2, 7] = float("-inf")
    x[3, 1], x[3, 30] = float("inf"), float("-inf")    # inf + -inf = nan
    x[4, 0], x[4, 36] = float("inf"), float("inf")
    return x


def _assert_special_like_torch(y, x):
    y, want = y.cpu().double(), x.cpu().double().sum(-1)  # torch.sum's own propagation, in float64
    assert torch.equal(torch.isnan(y), torch.isnan(want))
    infinite = torch.isinf(want)
    assert torch.equal(torch.isinf(y), infinite) and torch.equal(y[infinite], want[infinite])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_nan_and_inf_propagate_as_torch_sum(cpu_kernel, dtype):
    x = _special_rows("cpu", dtype)
    _assert_special_like_torch(cpu_kernel(x), x)


@pytest.mark.parametrize("shape", [(4, 0), (0,), (0, 5), (2, 0, 3, 0)])
def test_empty_inputs_sum_to_zeros_with_a_well_formed_gradient(cpu_kernel, shape):
    x = torch.randn(shape, requires_grad=True)
    y = cpu_kernel(x)
    assert y.shape == x.shape[:-1] and torch.equal(y, torch.zeros(x.shape[:-1]))
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_integer_input_and_rank_0_are_refused_by_name(cpu_kernel):
    with pytest.raises(TypeError, match="x must be float32, float64, float16 or bfloat16; got int64"):
        cpu_kernel(torch.arange(10))
    with pytest.raises(ValueError, match="x must have"):
        cpu_kernel(torch.tensor(1.5))


def test_cpu_accuracy_is_like_torch_sum(cpu_kernel):
    x = torch.rand(2**22, generator=torch.Generator().manual_seed(3))  # all positive: errors add up
    exact = x.double().sum()
    ours = (cpu_kernel(x).double() - exact).abs().item()
    theirs = (x.sum().double() - exact).abs().item()
    assert ours <= max(4 * theirs, 1e-6 * exact.item()), (ours, theirs)


# ----------------------------------------------------------------------------- GPU

@gpu
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_rung_is_bitwise_repeatable(variant, dtype):
    k = wb.load("reduce_sum", variant)
    gen = torch.Generator("cuda").manual_seed(5)
    for shape in [(2**24 + 3,), (300, 5003), (20000, 1000)]:
        x = torch.randn(shape, device="cuda", generator=gen).to(dtype)
        first = k(x)
        for _ in range(3):
            assert torch.equal(k(x), first), (variant, shape)


@gpu
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
def test_a_rows_sum_does_not_depend_on_the_grid(variant):
    """The same row summed alone (a grid of its own blocks) and inside batches of 3 and 700 rows
    (grids 3x and 700x as large, scheduled in any order): the same bits. For each rung the order
    of the additions depends on n (and the row's alignment) only."""
    k = wb.load("reduce_sum", variant)
    gen = torch.Generator("cuda").manual_seed(6)
    for n in (1000, 16384, 40000, 2**20 + 8):
        batch = torch.randn(700, n, device="cuda", generator=gen)
        want = k(batch)
        small = k(batch[:3].clone())
        for r in (0, 1, 2, 699):
            alone = k(batch[r].clone())
            assert torch.equal(alone, want[r]), (variant, n, r)
        assert torch.equal(small, want[:3]), (variant, n)


@gpu
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
def test_gpu_nan_and_inf_propagate_as_torch_sum(variant):
    k = wb.load("reduce_sum", variant)
    for dtype in (torch.float32, torch.bfloat16):
        x = _special_rows("cuda", dtype)
        _assert_special_like_torch(k(x), x)


@gpu
@pytest.mark.parametrize("variant", ["vec_grid_stride", "fast"])
def test_float32_sum_of_2_28_values_is_as_accurate_as_torch_sum(variant):
    """Against a float64 reference, on standard-normal and on all-positive values (where rounding
    errors do not cancel); scripts/reduce_sum_accuracy.py reports the figures."""
    k = wb.load("reduce_sum", variant)
    gen = torch.Generator("cuda").manual_seed(7)
    for fill in ("randn", "rand"):
        x = getattr(torch, fill)(2**28, device="cuda", generator=gen)
        exact = x.double().sum()
        ours = (k(x).double() - exact).abs().item()
        theirs = (x.sum().double() - exact).abs().item()
        scale = x.abs().double().sum().item()
        assert ours <= max(4 * theirs, 1e-7 * scale), (variant, fill, ours, theirs)
        del x


# ----------------------------------------------------------------------------- the rungs' machine code

def _sass_counts(rung: str):
    """(kernel -> opcode counts) of the rung's sm_90 SASS, over the float32 instantiations."""
    import pathlib
    import tempfile

    from workbench.explain import ptxas

    from workbench.build import toolchain

    if toolchain.nvcc_path() is None or ptxas.cuobjdump() is None:
        pytest.skip("needs nvcc and cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = pathlib.Path(tmp) / "out.cubin"
        ptxas.compile_report(registry.variant_source("reduce_sum", rung), "sm_90", cubin=cubin)
        counts = ptxas.sass_counts(ptxas.sass(cubin))
    # float32 in, float32 out: IffE (textbook rungs), IfLi4E... (vectorized ones)
    return {k: c for (_, k), c in counts.items() if "IffE" in k or "IfLi4E" in k or "IffLi" in k}


def _total(counts, prefix: str) -> int:
    return sum(n for c in counts.values() for op, n in c.items() if op.startswith(prefix))


def test_the_shuffle_rung_trades_barriers_for_shuffles():
    """What warp_shuffle's opening comment claims, read from the SASS: SHFL appears, and fewer
    BAR.SYNC than first_add's shared-memory tree (3 barriers per block instead of 9)."""
    before, after = _sass_counts("first_add"), _sass_counts("warp_shuffle")
    assert before and after
    assert _total(before, "SHFL") == 0 and _total(after, "SHFL") >= 5
    assert 0 < _total(after, "BAR.SYNC") < _total(before, "BAR.SYNC")


@pytest.mark.parametrize("rung", ["vec_grid_stride", "fast"])
def test_the_vector_rungs_load_16_bytes_at_a_time(rung):
    counts = _sass_counts(rung)
    loads = {op for c in counts.values() for op in c if op.startswith("LDG")}
    assert any(op.endswith(".128") or ".128." in op for op in loads), sorted(loads)
