"""The `cpu` variant of bias_gelu end to end: the check matrix against the float64 reference (and
proof that the check catches wrong kernels), gradcheck, opcheck, torch.compile, dtypes, empty
tensors and determinism."""
from __future__ import annotations

import secrets

import pytest
import torch
import torch.nn.functional as F

from workbench.measure.correctness import compare
from workbench.dtypes import tolerance
from workbench.specs.bias_gelu import SPEC as spec

# A CPU variant modelled on kernels/bias_gelu/cpu.cpp, serial, with two holes a test can fill:
# FORWARD_COLS (how many columns forward writes) and FORWARD_ARG (what it takes the GELU of).
# Backward is always correct, so a failing report can only come from the forward.
WRONG_TEMPLATE = r"""// test-only variant: {what}
#include "bias_gelu.h"
#include "wb_cpu.h"
#include "gelu.h"

namespace {{

constexpr unsigned kDtypes = WB_F32 | WB_F64 | WB_F16 | WB_BF16;

int forward(const WbBiasGeluForward* a, const WbLaunch*) {{
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {{
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(a->x);
    const T* bias = static_cast<const T*>(a->bias);
    T* y = static_cast<T*>(a->y);
    const int64_t cols = a->cols;
    for (int64_t r = 0; r < a->rows; ++r)
      for (int64_t c = 0; c < {forward_cols}; ++c)
        y[r * cols + c] = wb_from_acc<T>(wb_gelu_tanh({forward_arg}));
    (void)bias;
    return WB_OK;
  }});
}}

size_t workspace_bytes(int64_t, int64_t, int, const WbLaunch*) {{ return 0; }}

int backward(const WbBiasGeluBackward* a, const WbLaunch*) {{
  return wb_dispatch_dtype<kDtypes>(a->dtype, [&](auto tag) {{
    using T = typename decltype(tag)::type;
    using A = wb_acc_t<T>;
    const T* dy = static_cast<const T*>(a->dy);
    const T* x = static_cast<const T*>(a->x);
    const T* bias = static_cast<const T*>(a->bias);
    T* dx = static_cast<T*>(a->dx);
    T* dbias = static_cast<T*>(a->dbias);
    for (int64_t c = 0; c < a->cols; ++c) {{
      A sum = A(0);
      for (int64_t r = 0; r < a->rows; ++r) {{
        const int64_t i = r * a->cols + c;
        const A g = wb_to_acc(dy[i]) * wb_gelu_tanh_grad(wb_to_acc(x[i]) + wb_to_acc(bias[c]));
        dx[i] = wb_from_acc<T>(g);
        sum += g;
      }}
      dbias[c] = wb_from_acc<T>(sum);
    }}
    return WB_OK;
  }});
}}

const WbBiasGeluLaunchers launchers = {{forward, backward, workspace_bytes}};

}}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CPU, WB_F32 | WB_F64 | WB_F16 | WB_BF16,
                  "test-only: {what}", launchers, wb_cpu_status_string)
"""

CORRECT = dict(forward_cols="cols", forward_arg="wb_to_acc(x[r * cols + c]) + wb_to_acc(bias[c])")


def wrong_source(what: str, **holes) -> str:
    return WRONG_TEMPLATE.format(what=what, **{**CORRECT, **holes})


def _inputs(shape, dtype=torch.float32, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    x, b = spec.new_inputs(tuple(shape), dtype, "cpu", g)
    return x.requires_grad_(requires_grad), b.requires_grad_(requires_grad)


# --- the check matrix --------------------------------------------------------------------------

def test_check_passes_with_fixed_seed(wb, cpu_kernel):
    report = wb.check("bias_gelu", "cpu", seed=1234)
    assert report.ok, report.summary()
    # The whole matrix ran: every dtype, forward and both gradients, all three layouts.
    assert {c.dtype for c in report.cases} == {"float32", "float64", "float16", "bfloat16"}
    assert {c.what for c in report.cases} >= {"forward", "backward dx", "backward dbias", "determinism"}
    assert {c.layout for c in report.cases} == {"contiguous", "strided", "offset", "transposed"}
    assert any(0 in c.shape for c in report.cases), "the matrix must include empty tensors"
    assert not report.skipped


def test_check_passes_with_fresh_seed(wb, cpu_kernel):
    seed = secrets.randbits(31)
    report = wb.check("bias_gelu", "cpu", seed=seed)
    assert report.ok, f"seed {seed}:\n{report.summary()}"


def test_check_accepts_kernel_handle_and_dtype_subset(wb, cpu_kernel):
    report = wb.check("bias_gelu", cpu_kernel, dtypes=["float32"], seed=5)
    assert report.ok, report.summary()
    assert {c.dtype for c in report.cases} == {"float32"}


@pytest.mark.parametrize("what, holes, name", [
    ("GELU of x without the bias", dict(forward_arg="wb_to_acc(x[r * cols + c])"), "wrong_nobias"),
    ("last column never written", dict(forward_cols="cols - 1"), "wrong_lastcol"),
], ids=["no-bias", "unwritten-last-column"])
def test_check_fails_for_wrong_kernel(wb, cpu_kernel, what, holes, name):
    k = wb.load_inline("bias_gelu", wrong_source(what, **holes), name=name)
    report = wb.check("bias_gelu", k, dtypes=["float32", "float64"], seed=7)
    assert not report.ok, f"a kernel whose {what} passed the check:\n{report.table()}"
    failing = {c.what for c in report.failures}
    assert failing == {"forward"}, report.summary()  # backward is correct in these sources
    fwd = [c for c in report.cases if c.what == "forward"]
    assert all(c.passed for c in fwd if 0 in c.shape), report.table()  # empty: trivially right
    if name == "wrong_nobias":  # every non-empty case is wrong arithmetic
        must_fail = [c for c in fwd if 0 not in c.shape]
    else:  # an unwritten element holds whatever was there; with >= 8 of them, some are surely off
        must_fail = [c for c in fwd if 0 not in c.shape and (c.shape[0] if len(c.shape) > 1 else 1) >= 8]
    assert must_fail and all(not c.passed for c in must_fail), report.table()
    assert {c.dtype for c in report.failures} == {"float32", "float64"}
    assert "FAIL" in report.summary()


def test_check_poisons_cpu_outputs(wb, cpu_kernel):
    k = wb.load_inline("bias_gelu", wrong_source("last column never written", forward_cols="cols - 1"),
                       name="wrong_lastcol")
    report = wb.check("bias_gelu", k, dtypes=["float32"], layouts=("contiguous",), backward=False, seed=7)
    nonempty = [c for c in report.cases if 0 not in c.shape and c.what == "forward"]
    assert nonempty and all("NaN where the reference has none" in c.note for c in nonempty), report.table()
    # Poisoned alike on both runs, the unwritten element is the forward's failure alone.
    assert all(c.passed for c in report.cases if c.what == "determinism"), report.table()


def test_the_test_template_is_right_when_unbroken(wb, cpu_kernel):
    """Guards the test above: with both holes filled correctly the same source passes."""
    k = wb.load_inline("bias_gelu", wrong_source("nothing wrong (control)"), name="wrong_control")
    report = wb.check("bias_gelu", k, dtypes=["float32", "float64"], seed=7)
    assert report.ok, report.summary()


# --- gradients ---------------------------------------------------------------------------------

def test_gradcheck_float64(wb, cpu_kernel):
    report = wb.gradcheck("bias_gelu", "cpu", seed=3)
    assert report.ok, report.summary()
    assert "gradcheck" in report.method and "float64" in report.method, report.method
    assert len(report.cases) >= 3


def test_autograd_matches_float64_reference(cpu_kernel):
    x, b = _inputs((9, 13), torch.float64, seed=11, requires_grad=True)
    gy = torch.randn(9, 13, dtype=torch.float64, generator=torch.Generator().manual_seed(12))
    y = cpu_kernel(x, b)
    dx, db = torch.autograd.grad(y, (x, b), gy)
    rdx, rdb = spec.run_reference_backward((gy,), (x, b), {})
    torch.testing.assert_close(dx, rdx, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(db, rdb, rtol=1e-12, atol=1e-12)


def test_reference_is_torch_gelu_tanh():
    """The float64 reference the checks trust is the same function as F.gelu(approximate='tanh')."""
    x, b = _inputs((64, 33), torch.float64, seed=2)
    torch.testing.assert_close(spec.reference(x, b), F.gelu(x + b, approximate="tanh"), rtol=1e-12, atol=1e-14)


def test_double_backward_is_correct_or_refused(cpu_kernel):
    """create_graph=True through the op (e.g. a gradient penalty): the right second derivative, or
    a clear error; never a silently wrong number."""
    def penalty_grad(f):
        x = torch.linspace(-2, 2, 15, dtype=torch.float64).reshape(3, 5).requires_grad_()
        b = torch.linspace(-0.5, 0.5, 5, dtype=torch.float64).requires_grad_()
        y = f(x, b)
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        return torch.autograd.grad((g ** 2).sum() + y.sum(), x)[0]

    expected = penalty_grad(lambda x, b: F.gelu(x + b, approximate="tanh"))
    try:
        got = penalty_grad(cpu_kernel)
    except RuntimeError as e:  # refusing is acceptable if it says why
        assert "backward" in str(e) or "double" in str(e)
        return
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)


# --- torch.library.opcheck ---------------------------------------------------------------------

OPCHECK_SHAPES = [(3, 5), (2, 3, 7), (257,), (1, 1), (0, 7)]


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no-grad", "grad"])
@pytest.mark.parametrize("shape", OPCHECK_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_opcheck_forward(cpu_kernel, shape, requires_grad):
    x, b = _inputs(shape, seed=21, requires_grad=requires_grad)
    torch.library.opcheck(torch.ops.workbench.bias_gelu.default, (x, b, "cpu"))


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no-grad", "grad"])
@pytest.mark.parametrize("shape", OPCHECK_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_opcheck_backward(cpu_kernel, shape, requires_grad):
    x, b = _inputs(shape, seed=22, requires_grad=requires_grad)
    gy = torch.randn(shape, generator=torch.Generator().manual_seed(23)).requires_grad_(requires_grad)
    torch.library.opcheck(torch.ops.workbench.bias_gelu_backward.default, (gy, x, b, "cpu"))


# --- torch.compile -----------------------------------------------------------------------------

def _small_fn(x, b):
    y = torch.ops.workbench.bias_gelu(x * 2.0, b, "cpu")
    return y * 3.0 + 1.0  # elementwise only: compiled and eager round identically


def test_dynamo_explain_has_no_graph_break(cpu_kernel):
    torch._dynamo.reset()
    x, b = _inputs((8, 16), seed=31)
    explanation = torch._dynamo.explain(_small_fn)(x, b)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


def test_compile_fullgraph_matches_eager(cpu_kernel):
    torch._dynamo.reset()
    compiled = torch.compile(_small_fn, fullgraph=True)
    for shape in [(8, 16), (5, 16)]:  # a second shape: recompiles (or goes dynamic), still no break
        x, b = _inputs(shape, seed=32)
        torch.testing.assert_close(compiled(x, b), _small_fn(x, b))
    # Gradients flow through the compiled graph too.
    x, b = _inputs((8, 16), seed=33, requires_grad=True)
    compiled(x, b).sum().backward()
    xe, be = x.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    _small_fn(xe, be).sum().backward()
    torch.testing.assert_close(x.grad, xe.grad)
    torch.testing.assert_close(b.grad, be.grad)


def test_fullgraph_would_raise_on_a_graph_break(cpu_kernel):
    """Proves the compile test above can fail: the same function with a forced break raises."""
    torch._dynamo.reset()

    def broken(x, b):
        y = _small_fn(x, b)
        torch._dynamo.graph_break()
        return y

    x, b = _inputs((4, 16), seed=34)
    with pytest.raises(Exception, match="(?i)graph.?break"):
        torch.compile(broken, fullgraph=True, backend="eager")(x, b)


# --- dtypes, empty tensors, determinism --------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.float32], ids=str)
def test_dtypes(cpu_kernel, dtype):
    assert str(dtype).replace("torch.", "") in cpu_kernel.dtypes
    x, b = _inputs((37, 71), dtype, seed=41, requires_grad=True)
    y = cpu_kernel(x, b)
    assert y.dtype == dtype and y.shape == x.shape
    ok, rel, *_rest, note = compare(y, spec.reference(x, b), dtype)
    assert ok, f"{dtype}: rel {rel:.3e} {note}"
    gy = torch.randn(37, 71, generator=torch.Generator().manual_seed(42)).to(dtype)
    dx, db = torch.autograd.grad(y, (x, b), gy)
    assert dx.dtype == dtype and db.dtype == dtype
    for got, ref in zip((dx, db), spec.run_reference_backward((gy,), (x, b), {})):
        ok, rel, *_rest, note = compare(got, ref, dtype)
        assert ok, f"{dtype} grad: rel {rel:.3e} {note} (tolerance {tolerance(dtype)})"


@pytest.mark.parametrize("shape", [(0, 7), (5, 0), (2, 0, 3)], ids=["0x7", "5x0", "2x0x3"])
def test_empty_tensors(cpu_kernel, shape):
    x, b = _inputs(shape, seed=51, requires_grad=True)
    y = cpu_kernel(x, b)
    assert y.shape == x.shape and y.numel() == 0 and y.dtype == x.dtype
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    assert b.grad is not None and b.grad.shape == b.shape
    assert torch.equal(b.grad, torch.zeros_like(b)), "dbias over zero rows must be exactly zero"
    # The backward op directly, too (no autograd in between).
    dx, db = torch.ops.workbench.bias_gelu_backward(torch.ones(shape), x.detach(), b.detach(), "cpu")
    assert dx.shape == x.shape and db.shape == b.shape and torch.equal(db, torch.zeros_like(db))


def test_dbias_zero_rows_is_zeros_not_garbage(cpu_kernel):
    """(0, 7): seven bias elements, no rows; dbias must be seven exact zeros."""
    x = torch.empty(0, 7)
    b = torch.randn(7)
    _, db = torch.ops.workbench.bias_gelu_backward(torch.empty(0, 7), x, b, "cpu")
    assert db.shape == (7,) and torch.equal(db, torch.zeros(7))


def test_deterministic_across_runs_and_thread_counts(cpu_kernel):
    x, b = _inputs((1000, 131), seed=61)  # many rows: backward is cut into several chunks
    gy = torch.randn(1000, 131, generator=torch.Generator().manual_seed(62))
    y1 = cpu_kernel(x, b)
    g1 = cpu_kernel.backward(gy, x, b)
    threads = torch.get_num_threads()
    try:
        for n in sorted({1, 2, max(1, threads)}):
            torch.set_num_threads(n)
            assert torch.equal(cpu_kernel(x, b), y1), f"forward differs with {n} threads"
            g = cpu_kernel.backward(gy, x, b)
            assert all(torch.equal(a, c) for a, c in zip(g, g1)), f"backward differs with {n} threads"
    finally:
        torch.set_num_threads(threads)


def test_op_by_name_and_by_qualified_build_agree(cpu_kernel):
    x, b = _inputs((6, 10), seed=71)
    by_name = torch.ops.workbench.bias_gelu(x, b, "cpu")
    by_build = torch.ops.workbench.bias_gelu(x, b, cpu_kernel.qualified)
    assert torch.equal(by_name, by_build)
    assert torch.equal(cpu_kernel(x, b), by_name)


# --- the CPU path at PyTorch's speed: vectorized, exact at the limits (issue 42) -----------------

SIMD_OPS = ["bias_gelu", "elementwise_mul", "vector_add", "swiglu", "scale_bias_relu", "rmsnorm", "reduce_sum",
            "matmul"]


def _functions(library) -> dict[str, list[str]]:
    """{demangled function name: its instructions} from objdump's disassembly of a library."""
    import shutil
    import subprocess

    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    text = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", str(library)], capture_output=True,
                          text=True, check=True).stdout
    out, name = {}, None
    for line in text.splitlines():
        if line.endswith(">:"):
            name = line[line.index("<") + 1:-2]
            name = None if name.endswith("[clone .cold]") else name  # a function's rarely taken paths
            if name is not None:
                out[name] = []
        elif name is not None and "\t" in line:
            out[name].append(line.split("\t", 1)[1])
    return out


@pytest.mark.parametrize("op", SIMD_OPS)
def test_cpu_variant_loops_are_vectorized(wb, op):
    """Each hot loop of the op's cpu variant has an AVX2 build (a WB_CPU_SIMD clone, or matmul's
    blocks_avx2), and that build computes on 256-bit registers: the loop was vectorized. A loop
    the compiler left scalar would use only xmm registers there (vaddss, vmovss, ...)."""
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the clones are x86-64's")
    fns = _functions(wb.load(op, "cpu").library)
    avx2 = {n: ins for n, ins in fns.items() if "[clone .arch_x86_64_v3]" in n or "blocks_avx2<" in n}
    assert avx2, f"{op}/cpu has no AVX2 build of a loop (WB_CPU_SIMD); functions: {sorted(fns)[:20]}"
    scalar = [n for n, ins in avx2.items() if not any("%ymm" in i for i in ins)]
    assert not scalar, f"{op}/cpu: loops left scalar in their AVX2 build: {scalar}"
    if op != "matmul":  # every clone has its AVX-512 and baseline twin
        assert sum("[clone .arch_x86_64_v4]" in n for n in fns) == len(avx2)
        assert sum("[clone .default]" in n for n in fns) == len(avx2)


def test_gelu_limits_and_specials_match_torch(cpu_kernel):
    """GELU's exp is a polynomial on the host (wb_math.h): its limits (exp underflowing to 0,
    overflowing to inf) must still give torch's values, and NaN must stay NaN, forward and backward."""
    x = torch.tensor([[-1e30, -200.0, -90.0, -20.0, -1e-30, 0.0, 1e-30, 20.0, 90.0, 200.0, 1e30, float("nan")]])
    b = torch.zeros(x.shape[1])
    want = F.gelu(x.double(), approximate="tanh").float()
    got = cpu_kernel(x, b)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-30, equal_nan=True), (got, want)
    xg = x.double().requires_grad_()
    gwant, = torch.autograd.grad(F.gelu(xg, approximate="tanh").sum(), xg)
    dx, _db = cpu_kernel.backward(torch.ones_like(x), x, b)
    assert torch.allclose(dx, gwant.float(), rtol=1e-5, atol=1e-30, equal_nan=True), (dx, gwant)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_16bit_rounding_is_bitwise_pytorchs(wb, dtype):
    """The branch-free 16-bit conversions (wb_cpu.h) round exactly as PyTorch does: a + b and a * b
    in float, rounded once, are PyTorch's bits, across subnormals, overflow to inf, inf and NaN."""
    g = torch.Generator().manual_seed(91)
    info = torch.finfo(dtype)
    specials = torch.tensor([0.0, -0.0, info.tiny, info.tiny / 8, -info.tiny / 3, info.max, -info.max,
                             float("inf"), -float("inf"), float("nan"), 1.0, -1.0], dtype=torch.float32)
    wide = torch.randn(4096, generator=g) * torch.pow(2.0, torch.randint(-30, 18, (4096,), generator=g).float())
    a = torch.cat([specials, wide]).to(dtype)
    b = torch.cat([specials.flip(0), torch.randn(4096, generator=g) * 3]).to(dtype)
    for op, math in (("vector_add", lambda u, v: u + v), ("elementwise_mul", lambda u, v: u * v)):
        got, want = wb.load(op, "cpu")(a, b), math(a.float(), b.float()).to(dtype)
        same = (got.view(torch.int16) == want.view(torch.int16)) | (got.isnan() & want.isnan())
        assert bool(same.all()), (f"{op} {dtype}: {int((~same).sum())} elements differ, "
                                  f"e.g. {got[~same][:4]} vs {want[~same][:4]}")


# A test-only variant whose forward writes, for each row, the id of the thread that ran it.
THREAD_IDS = r"""// test-only: which threads ran the rows
#include <sys/syscall.h>
#include <unistd.h>

#include "bias_gelu.h"
#include "wb_cpu.h"

namespace {

int forward(const WbBiasGeluForward* a, const WbLaunch* l) {
  if (a->dtype != WB_FLOAT32) return WB_ERR_DTYPE;
  float* y = static_cast<float*>(a->y);
  const int64_t cols = a->cols, grain = kWbCpuGrain / cols > 1 ? kWbCpuGrain / cols : 1;
  wb_parallel_for(l, 0, a->rows, grain, [&](int64_t r0, int64_t r1) {
    const float tid = static_cast<float>(syscall(SYS_gettid));  // exact: ids stay below 2^22
    for (int64_t i = r0 * cols; i < r1 * cols; ++i) y[i] = tid;
  });
  return WB_OK;
}

const WbBiasGeluLaunchers launchers = {forward, nullptr, nullptr};

}  // namespace

WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CPU, WB_F32, "test-only: the rows' thread ids", launchers, wb_cpu_status_string)
"""


def test_cpu_variants_run_on_torchs_threads_above_the_grain_only(wb):
    """wb_parallel_for lends torch's thread pool (the harness is built with OpenMP, without which
    at::parallel_for runs serially): a tensor of two grains' worth of elements runs on two threads,
    one below the grain (kWbCpuGrain, 2^15 elements) on the caller's thread alone."""
    import os
    import threading

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: nothing to spread over")
    k = wb.load_inline("bias_gelu", THREAD_IDS, name="thread_ids")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        many = k(torch.zeros(64, 1024), torch.zeros(1024))  # 2^16 elements: two tasks
        few = k(torch.zeros(16, 1024), torch.zeros(1024))   # 2^14: one
    finally:
        torch.set_num_threads(threads)
    assert len(set(many.flatten().tolist())) == 2, "above the grain, the rows should run on both threads"
    assert set(few.flatten().tolist()) == {float(threading.get_native_id())}, "below it, on the calling thread"
