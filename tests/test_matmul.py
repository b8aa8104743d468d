"""matmul: what the generic op tests (test_ops.py, test_gpu.py) cannot say about it. The float32
GEMM ladder is declared in order and every rung's file tells its step; the declaration gives the
op model its flops and bytes; the cpu variant is right at odd sizes, gives zeros for k = 0 and empty
outputs for m or n = 0, reads transposed and offset views as their contiguous copies, computes the
backward as the two GEMMs of the contract and is the same bits for any thread count; bad input is
refused by name; the vector rungs and the tensor-core rung issue the instructions their comments
claim (read from the SASS), the Hopper rungs HGMMA and TMA loads. On a GPU: every CUDA rung at the
lab's sizes, both of its routes, and the same bits twice; the Hopper rungs on a Hopper GPU only,
declining by name elsewhere."""
from __future__ import annotations

import pathlib
import re
import tempfile

import pytest
import torch

import workbench as wb
from workbench.measure import correctness
from workbench.model import registry

SPEC = registry.spec("matmul")
LADDER = ("naive", "coalesced", "smem_tiling", "blocktile_1d", "blocktile_2d", "vectorized", "warptile", "tensor_core",
          "wgmma_tma", "warp_specialized", "persistent")
HOPPER = LADDER[LADDER.index("tensor_core") + 1:]  # sm_90a: TMA, wgmma (kernels/matmul/hopper.cuh)
CUDA_VARIANTS = [v.name for v in registry.variants("matmul") if v.device == "cuda"]
LAB_SIZES = [(1, 1, 1), (3, 5, 7), (127, 1000, 33), (1000, 127, 4095), (4095, 65, 1000)]
gpu = pytest.mark.gpu


def _opening(rung: str) -> str:
    """The comment that opens a rung's file, as one line of text."""
    lines = registry.variant_source("matmul", rung).read_text().splitlines()
    head = []
    for line in lines:
        if not line.startswith("//"):
            break
        head.append(line[2:].strip())
    return " ".join(head)


def test_the_ladder_is_declared_in_order_and_every_rung_is_a_variant():
    assert SPEC.ladder == LADDER
    names = [v.name for v in registry.variants("matmul")]
    assert names[:len(LADDER)] == list(LADDER), "variants are listed in ladder order"
    assert set(CUDA_VARIANTS) == set(LADDER) and "cpu" in names
    dtypes = {v.name: v.dtypes for v in registry.variants("matmul")}
    assert dtypes["naive"] == ("float32", "float64"), "naive takes float64: a true float64 gradcheck on the GPU"
    assert all(dtypes[r] == ("float32",) for r in LADDER[1:LADDER.index("tensor_core")]), \
        "the CUDA-core rungs are float32"
    assert all(dtypes[r] == ("float16", "bfloat16") for r in ("tensor_core",) + HOPPER)
    assert dtypes["cpu"] == ("float32", "float64", "float16", "bfloat16")


@pytest.mark.parametrize("rung", LADDER)
def test_every_rung_opens_with_its_change_and_prediction(rung):
    """Each rung's file opens with what it changes over the rung before, the gain siboehm/SGEMM_CUDA
    measured for that step (a figure; the Hopper rungs cite fast.cu's H100 ladder), and what the
    committed GPU run measured (x cuBLAS, naming its results/gpu/<commit>)."""
    opening = _opening(rung)
    i = LADDER.index(rung)
    if i:
        assert re.search(rf"\bover {LADDER[i - 1]}\b", opening, re.IGNORECASE), \
            f"{rung}: say what changes over {LADDER[i - 1]}"
    assert re.search(r"Predicted:.*\d", opening), f"{rung}: no prediction"
    if rung in HOPPER:  # the public Hopper ladder
        assert "fast.cu" in opening and re.search(r"\d+% of cuBLAS", opening), f"{rung}: cite the measured step"
        assert "sm_90a" in opening, f"{rung}: say which target it needs"
    elif rung != "tensor_core":  # siboehm's ladder stops at warp tiling
        assert "siboehm" in opening and re.search(r"\d+\.\d% of cuBLAS", opening), f"{rung}: cite the measured step"
    measured = opening[opening.find("Measured"):]
    assert re.search(r"results/gpu/[0-9a-f]{7}", measured), f"{rung}: the measurement must name its results"
    assert re.search(r"\d+\.\d+x cuBLAS", measured), f"{rung}: the measured share of cuBLAS, as a figure"


def test_the_contract_states_the_transposed_gemms():
    header = (registry.sources("matmul").header).read_text()
    for case in ("N/N", "N/T", "T/N", "da = dy @ b^T", "db = a^T @ dy"):
        assert case in header, case


def test_the_op_model_counts_flops_and_bytes():
    m, k, n = 127, 33, 1000
    assert SPEC.flop_count((m, k, n), "fwd") == 2 * m * n * k
    assert SPEC.flop_count((m, k, n), "bwd") == 4 * m * n * k
    assert SPEC.bytes((m, k, n), "float32", "fwd") == 4 * (m * k + k * n + m * n)
    # backward: reads dy, a, b; writes da, db
    assert SPEC.bytes((m, k, n), "bfloat16", "bwd") == 2 * (m * n + 2 * (m * k + k * n))
    assert SPEC.input_shapes((m, k, n)) == ((m, k), (k, n)) and SPEC.output_shapes((m, k, n)) == ((m, n),)
    assert SPEC.terms((m, k, n)) == ((k,), (n, m))


def test_the_benchmark_has_the_squares_and_the_llm_shapes():
    sizes = SPEC.bench_sizes["cuda"]
    assert [s for s in sizes if len(set(s)) == 1] == [(d, d, d) for d in (512, 1024, 2048, 4096, 8192)]
    assert (16384, 4096, 4096) in sizes and (16384, 4096, 11008) in sizes
    assert all(2 * s[0] * s[1] * s[2] < 2e8 for s in SPEC.check_sizes), "check sizes stay cheap on the CPU"


@pytest.fixture(scope="module")
def cpu_kernel():
    return wb.load("matmul", "cpu")


def test_cpu_lab_sizes_every_dtype_and_layout(cpu_kernel):
    correctness.check("matmul", cpu_kernel, shapes=[(1, 1, 1), (3, 5, 7), (127, 1000, 33), (33, 7, 4095)],
                      seed=11).raise_if_failed()


def test_cpu_gradcheck_is_a_float64_gradcheck(cpu_kernel):
    report = wb.gradcheck("matmul", cpu_kernel, seed=4)
    assert report.ok and "float64" in report.method, report.summary()


def test_cpu_backward_is_the_two_gemms_of_the_contract(cpu_kernel):
    g = torch.Generator().manual_seed(3)
    a, b, dy = (torch.randn(s, generator=g, dtype=torch.float64) for s in ((37, 19), (19, 53), (37, 53)))
    da, db = cpu_kernel.backward(dy, a, b)
    torch.testing.assert_close(da, dy @ b.T, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(db, a.T @ dy, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("size", [(5, 0, 7), (0, 5, 7), (5, 7, 0), (0, 0, 0)], ids=lambda s: "x".join(map(str, s)))
def test_empty_dims_give_zeros_or_empty_outputs(cpu_kernel, size):
    """k = 0: y is a sum over nothing, zeros; m or n = 0: y is empty. Gradients have their inputs'
    shapes and are zeros (a sum over an empty m or n) where not empty."""
    m, k, n = size
    a, b = torch.randn(m, k, requires_grad=True), torch.randn(k, n, requires_grad=True)
    y = cpu_kernel(a, b)
    assert y.shape == (m, n) and torch.equal(y, torch.zeros(m, n))
    (y * 2).sum().backward()
    assert a.grad.shape == (m, k) and torch.equal(a.grad, torch.zeros(m, k))
    assert b.grad.shape == (k, n) and torch.equal(b.grad, torch.zeros(k, n))


def test_transposed_and_offset_views_give_the_contiguous_bits(cpu_kernel):
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(31, 17, generator=g), torch.randn(17, 45, generator=g)
    want = cpu_kernel(a, b)
    at, bt = a.t().contiguous().t(), b.t().contiguous().t()  # column-major views
    assert not at.is_contiguous() and not bt.is_contiguous()
    assert torch.equal(cpu_kernel(at, bt), want)
    offset = torch.empty(a.numel() + 1)[1:].view(a.shape).copy_(a)
    assert torch.equal(cpu_kernel(offset, b), want)


def test_cpu_results_are_the_same_for_any_thread_count(cpu_kernel):
    g = torch.Generator().manual_seed(5)
    a, b, dy = torch.randn(300, 700, generator=g), torch.randn(700, 520, generator=g), torch.randn(300, 520, generator=g)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = (cpu_kernel(a, b), *cpu_kernel.backward(dy, a, b))
        torch.set_num_threads(max(2, before))
        many = (cpu_kernel(a, b), *cpu_kernel.backward(dy, a, b))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(x, y) for x, y in zip(one, many))


def test_bad_input_is_refused_by_name(cpu_kernel):
    a = torch.randn(5, 7)
    with pytest.raises(ValueError, match=re.escape("b must have shape [7, n] ([k, n] with k = 7 from a); got shape [6, 4]")):
        cpu_kernel(a, torch.randn(6, 4))
    with pytest.raises(ValueError, match="a must have 2 dimensions"):
        cpu_kernel(torch.randn(2, 5, 7), torch.randn(7, 4))
    with pytest.raises(ValueError, match=re.escape("b must have shape [7, n]")):
        cpu_kernel(a, torch.randn(7))
    with pytest.raises(TypeError, match=re.escape("b must have the dtype of a (float32); got float64")):
        cpu_kernel(a, torch.randn(7, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="a must be float32, float64, float16 or bfloat16; got int64"):
        cpu_kernel(torch.ones(5, 7, dtype=torch.int64), torch.ones(7, 4, dtype=torch.int64))


# ----------------------------------------------------------------------------- the rungs' machine code

def _sass(rung: str, arch: str = "sm_90") -> dict[str, dict[str, int]]:
    """kernel -> opcode counts of the rung's SASS for arch."""
    from workbench.explain import ptxas
    from workbench.build import toolchain

    if toolchain.nvcc_path() is None or ptxas.cuobjdump() is None:
        pytest.skip("needs nvcc and cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = pathlib.Path(tmp) / "out.cubin"
        ptxas.compile_report(registry.variant_source("matmul", rung), arch, cubin=cubin)
        counts = ptxas.sass_counts(ptxas.sass(cubin))
    return {kernel: dict(c) for (_, kernel), c in counts.items()}


def _has(counts: dict[str, int], prefix: str) -> bool:
    return any(op.startswith(prefix) for op in counts)


@pytest.mark.parametrize("rung", ["vectorized", "warptile"])
def test_the_vector_rungs_move_16_bytes_per_access(rung):
    """The V = 4 route loads float4s from global memory and every route reads its tiles as float4s
    from shared memory; the V = 1 route (rows that are not whole aligned float4s) loads one float."""
    kernels = _sass(rung)
    width = {k: re.search(r"Li([0-9]+)EE+vN6matmul", k).group(1) for k in kernels}  # the last parameter, V
    vec = [c for k, c in kernels.items() if width[k] == "4"]
    scalar = [c for k, c in kernels.items() if width[k] == "1"]
    assert len(vec) == 3 and len(scalar) == 3, list(kernels)  # N/N, N/T, T/N
    assert all(c.get("LDG.E.128", 0) > 0 and c.get("STG.E.128", 0) > 0 for c in vec)
    assert all(not _has(c, "LDG.E.128") for c in scalar)
    assert all(c.get("LDS.128", 0) > 0 and not _has(c, "LDS.U") for c in vec + scalar)


def test_blocktile_2d_loads_one_float_at_a_time_from_global_memory():
    kernels = _sass("blocktile_2d")
    assert kernels and all(_has(c, "LDG.E") and not _has(c, "LDG.E.128") for c in kernels.values())


def test_tensor_core_rung_issues_mma_ldmatrix_and_cp_async():
    kernels = _sass("tensor_core")
    assert len(kernels) == 12, list(kernels)  # 2 dtypes x 3 transpose cases x 2 routes
    flags = {}  # kernel -> (TA, TB, the cp.async route), from tensor_core_kernel<T, TA, TB, ASYNC>
    for k, c in kernels.items():
        ta, tb, async_route = (x == "1" for x in re.search(r"_tLb([01])ELb([01])ELb([01])E", k).groups())
        flags[k] = (ta, tb)
        assert _has(c, "HMMA.16816.F32"), k
        assert _has(c, "LDSM.16"), k
        assert not _has(c, "FFMA"), f"{k}: the products must not fall back to CUDA cores"
        assert _has(c, "LDGSTS") == async_route, k
        # A tile contiguous along m (A transposed) or along n (B as stored) is read with ldmatrix
        # .trans (MT88): db = a^T @ dy (T/N) transposes both fragments, da = dy @ b^T (N/T) neither.
        assert _has(c, "LDSM.16.MT88") == (ta or not tb) and _has(c, "LDSM.16.M88") == (not ta or tb), k
    assert sorted(set(flags.values())) == [(False, False), (False, True), (True, False)]


@pytest.mark.parametrize("rung", HOPPER)
def test_hopper_rungs_issue_hgmma_and_tma_loads(rung):
    """Each Hopper rung's own kernels (2 dtypes x 3 transpose cases) multiply with HGMMA and load
    with UTMALDG on mbarriers; the producer/consumer rungs reallocate registers (USETMAXREG). The
    rest of the library is tensor_core's kernel, the route for operands TMA cannot address."""
    kernels = _sass(rung, "sm_90a")
    own = {k: c for k, c in kernels.items() if f"{rung}_kernel" in k and "tc_route" not in k}
    assert len(own) == 6, list(kernels)
    for k, c in own.items():
        assert _has(c, "HGMMA.64"), k
        assert _has(c, "UTMALDG.2D"), k
        assert _has(c, "SYNCS.PHASECHK"), k  # mbarrier waits
        assert not _has(c, "HMMA") and not _has(c, "FFMA"), k
        assert _has(c, "USETMAXREG") == (rung != "wgmma_tma"), k
    assert all(_has(c, "HMMA.16816.F32") for k, c in kernels.items() if "tc_route" in k)


def test_hopper_rungs_build_for_sm90a_where_the_arch_list_has_9_0():
    from workbench.build import toolchain

    for rung in HOPPER:
        source = registry.variant_source("matmul", rung)
        assert toolchain.variant_arch_flags(source, "8.0;9.0") == [
            "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90a,code=sm_90a"]
        assert toolchain.variant_arch_flags(source, "9.0+PTX")[-1] == "-gencode=arch=compute_90a,code=compute_90a"
    assert toolchain.variant_arch_flags(registry.variant_source("matmul", "tensor_core"), "8.0;9.0") == []


# ----------------------------------------------------------------------------- GPU

def _gpu_load(variant):
    """The variant, or a skip where it cannot run on this GPU (the Hopper rungs off sm_90)."""
    from workbench.build import toolchain

    why = toolchain.unmet_arch(registry.variant_source("matmul", variant), torch.device("cuda"))
    if why:
        pytest.skip(f"{variant} {why}")
    return wb.load("matmul", variant)


@gpu
@pytest.mark.parametrize("variant", HOPPER)
def test_gpu_hopper_rungs_decline_by_name_off_hopper(variant):
    from workbench.build import toolchain

    if not toolchain.unmet_arch(registry.variant_source("matmul", variant), torch.device("cuda")):
        pytest.skip("a Hopper GPU: the rung runs (the other GPU tests)")
    k = wb.load("matmul", variant)
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(Exception, match=f"{variant} needs an sm_90a GPU"):
        k(a, a)


def _gpu_dtypes(k) -> list[str]:
    return [d for d in ("float32", "float64", "bfloat16", "float16") if d in k.dtypes]


@gpu
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
def test_gpu_lab_sizes_every_variant(variant):
    k = _gpu_load(variant)
    correctness.check("matmul", k, dtypes=_gpu_dtypes(k), shapes=LAB_SIZES, seed=13,
                      layouts=("contiguous", "offset", "transposed")).raise_if_failed()


@gpu
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
def test_gpu_both_routes_and_every_tile_edge(variant):
    """Sizes whose rows are whole 16-byte vectors (the vector routes), and the same plus one (the
    one-value-per-access routes), around each rung's tile sizes (32, 64, 128; k slices 8, 16, 32)."""
    k = _gpu_load(variant)
    sizes = [(128, 64, 128), (256, 512, 384), (136, 40, 264), (129, 65, 257), (64, 33, 200), (2, 4096, 8)]
    correctness.check("matmul", k, dtypes=_gpu_dtypes(k)[:2], shapes=sizes, seed=14,
                      layouts=("contiguous", "offset")).raise_if_failed()


@gpu
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
def test_gpu_same_bits_twice(variant):
    """No atomics, no split-k: each output is one fixed-order sum, so every run gives the same bits."""
    k = _gpu_load(variant)
    gen = torch.Generator("cuda").manual_seed(15)
    dtype = getattr(torch, _gpu_dtypes(k)[0])
    for m, kk, n in [(1000, 127, 4095), (4096, 4096, 4096) if variant != "naive" else (1024, 1024, 1024)]:
        a = torch.randn(m, kk, device="cuda", generator=gen).to(dtype)
        b = torch.randn(kk, n, device="cuda", generator=gen).to(dtype)
        dy = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
        first = (k(a, b), *k.backward(dy, a, b))
        for _ in range(2):
            again = (k(a, b), *k.backward(dy, a, b))
            assert all(correctness.same_bits(x, y) for x, y in zip(first, again)), (variant, m, kk, n)


@gpu
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
def test_gpu_output_over_int32(variant):
    """C with more than 2^31 elements (m * n past int32, k small): the last rows, whose flat
    offsets need 64 bits, are right in the forward and in da (test_gpu's row-sliced version does
    not fit an op whose second operand is not sliced by rows)."""
    k = _gpu_load(variant)
    dtype = getattr(torch, _gpu_dtypes(k)[0])
    n, kk = 4096, 8
    m = 2**31 // n + 3
    gen = torch.Generator("cuda").manual_seed(16)
    a = torch.randn(m, kk, device="cuda", generator=gen).to(dtype)
    b = torch.randn(kk, n, device="cuda", generator=gen).to(dtype)
    y = k(a, b)
    for sl in (slice(0, 4), slice(m - 4, m)):
        ref = a[sl].double() @ b.double()
        ok, rel, *_ = correctness.compare(y[sl], ref, str(dtype).replace("torch.", ""))
        assert ok, (variant, sl, rel)
    dy = y  # any values of C's shape: da = dy @ b^T reads every row of it
    da, _ = k.backward(dy, a, b)
    for sl in (slice(0, 4), slice(m - 4, m)):
        ref = dy[sl].double() @ b.double().T
        ok, rel, *_ = correctness.compare(da[sl], ref, str(dtype).replace("torch.", ""))
        assert ok, (variant, sl, rel)
