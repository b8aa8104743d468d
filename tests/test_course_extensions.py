"""The course documents' own extensions, as written (tests/fixtures/course/, issue 40): Day 10's
fused bias + GELU in its two files (binding .cpp + kernels .cu) and the blog's elementwise_mult
(a module name of its own, an output argument), and the Python each wraps its extension in.

On the CPU: their build and load paths. These builds compile the torch headers (nvcc parses them
for a .cu; a .cpp reads the precompiled torch/extension.h), minutes on 2 cores: each is built once
per session (module fixtures, the shared test cache), three in all (Day 10's pair, Day 10's binding
alone, the blog's file). Without a build: a case that ends its runner, a backward one gradient
short, a callable with an output argument, what a case run here on the GPU meets after it (the
context's answers standing in). On the GPU (marked gpu): their check, gradcheck and bench, every
case a verdict (a zero-block launch, a division by zero on the host, a wrong layout, a missing
gradient each a FAIL saying why), nothing raised, the caller's CUDA context untouched."""
from __future__ import annotations

import pathlib
import sys

import pytest
import torch

from conftest import CACHE_DIR, HAS_GPU

import workbench as wb
from workbench.errors import WorkbenchError
from workbench.judge import python_runner
from workbench.run import byo

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
sys.path[:0] = [str(FIXTURES), str(FIXTURES / "course")]
import byo_impls  # noqa: E402

COURSE = FIXTURES / "course"
DAY10 = [COURSE / "day10_bias_gelu" / "fused_bias_gelu.cpp", COURSE / "day10_bias_gelu" / "fused_bias_gelu_cuda.cu"]
BLOG = COURSE / "blog_elementwise_mult" / "elementwise_mult.cu"
gpu = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _one_arch_without_a_gpu():
    """Without a GPU nothing runs the device code these builds make: one arch, not the JIT fallback's
    two, saves one of nvcc's two passes through the torch headers per .cu (a GPU asks its own)."""
    patch = pytest.MonkeyPatch()
    if not HAS_GPU:
        patch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    yield
    patch.undo()


@pytest.fixture(scope="module")
def day10():
    """Day 10's extension, its two files as the page lays them out: one build per session."""
    return wb.load_source("bias_gelu", DAY10, name="day10", style="extension")


@pytest.fixture(scope="module")
def blog():
    """The blog's extension: `PYBIND11_MODULE(elementwise_mult, m)` exporting elementwise_mult(a, b, result)."""
    return wb.load_source("elementwise_mul", BLOG, name="blog", style="extension", forward="elementwise_mult")


# ------------------------------------------------------------------------------------- the CPU: builds

def test_the_course_layout_binding_and_kernels_builds_as_one_extension(day10):
    k = day10
    assert k.kind == "extension" and k.origin["sources"] == [str(p) for p in DAY10]
    assert k.steps == ("forward", "backward") and callable(k.module.forward) and callable(k.module.backward)
    assert k.device == "cuda"
    if not HAS_GPU:
        assert "not probed: a CUDA extension, and no GPU is visible here" in k.probe, k.probe
    # A runner finds the same build from both files (a check's default for an extension, isolate=True).
    address = byo.child_address("bias_gelu", k)
    assert address["source"] == [str(p) for p in DAY10] and address["style"] == "extension"
    assert python_runner.resolve(address).library == k.library
    # its C++ file read the precompiled torch/extension.h (GCC says where one was not used: -Winvalid-pch)
    log = (k.library.parent / "build.log").read_text()
    compile_cpp = next(ln for ln in log.splitlines() if "fused_bias_gelu.cpp" in ln and " -c " in ln)
    assert f"-I{CACHE_DIR / 'pch'}" in compile_cpp and "-Winvalid-pch" in compile_cpp, compile_cpp
    assert "extension.h.gch" not in log, log


def test_after_each_gpu_case_run_here_a_pending_error_fails_it_and_a_lost_context_ends_the_matrix(monkeypatch):
    """correctness._after_case on a CUDA device (the context's answers stand in for a GPU's): an
    error left pending is the failure of the case that left it, with its likely cause; a lost context
    fails the case it was lost in. check() then runs no later case and says why (here a CPU variant
    stands in, its third case the one that 'lost' the context)."""
    from workbench.measure import correctness
    from workbench.run import cuda_errors

    said = iter([("ok", ""), ("cleared", "CUDA error: invalid configuration argument"),
                 ("lost", "CUDA error: an illegal memory access was encountered")])
    monkeypatch.setattr(cuda_errors, "context_state", lambda device: next(said))
    cuda = torch.device("cuda")

    def passed(shape):
        return [correctness.Case("forward", shape, "float32", "contiguous", True)]
    ok = passed((3, 5))
    assert correctness._after_case(cuda, ok) == "" and [c.passed for c in ok] == [True]
    pending = passed((0, 16))
    assert correctness._after_case(cuda, pending) == "" and [c.passed for c in pending] == [True, False], pending
    assert "left a CUDA error pending, raised by the next op: CUDA error: invalid configuration argument (likely " \
           "cause: a launch with an impossible grid or block: zero blocks" in pending[-1].note, pending[-1].note
    lost = passed((4, 8))
    err = correctness._after_case(cuda, lost)
    assert "illegal memory access" in err and not lost[-1].passed, lost
    assert "this process's CUDA context is lost" in lost[-1].note and "illegal memory access" in lost[-1].note

    calls = iter(["", "", "CUDA error: an illegal memory access was encountered"])
    monkeypatch.setattr(correctness, "_after_case", lambda device, cases: next(calls))
    rep = wb.check("bias_gelu", "cpu", shapes=[(3, 5), (4, 8), (2, 7), (6, 9)], dtypes=["float32"],
                   layouts=("contiguous",), seed=0)
    assert [c.shape for c in rep.cases if c.what == "forward"] == [(3, 5), (4, 8), (2, 7)], rep.table()
    (said,) = [s for s in rep.skipped if "not run" in s]
    assert said.startswith("the cases after determinism 2x7 float32 contiguous were not run: this process's CUDA "
                           "context is lost (CUDA error: an illegal memory access"), said
    assert "isolate=True runs a variant in a runner process of its own" in said, said


def test_the_binding_alone_does_not_load_and_names_the_symbols_it_lacks():
    with pytest.raises(WorkbenchError) as err:
        wb.load_source("bias_gelu", DAY10[0], name="day10_binding", style="extension")
    msg = str(err.value)
    assert "uses 2 symbol(s) that none of its files defines" in msg, msg
    assert "fused_bias_gelu_fwd_cuda(at::Tensor, at::Tensor)" in msg, msg
    assert "fused_bias_gelu_bwd_cuda(at::Tensor, at::Tensor, at::Tensor)" in msg, msg
    assert "[binding.cpp, kernels.cu]" in msg and "undefined symbol" in msg, msg
    assert "Could not load this library" not in msg


def test_a_module_named_in_its_source_loads_under_that_name_with_nothing_rewritten(blog):
    assert blog.module.__name__ == "elementwise_mult"
    assert "PYBIND11_MODULE(elementwise_mult, m) names its module itself: loaded under that name, nothing " \
           "rewritten" in blog.probe, blog.probe
    assert BLOG.read_text().count("PYBIND11_MODULE(elementwise_mult, m)") == 1   # the source as it was


def test_an_output_argument_is_found_and_the_way_to_adapt_it_said(blog):
    """elementwise_mult(a, b, result) -> None cannot be called as elementwise_mul(a, b) -> y: its
    load says so and how (out=), and nothing is checked as if it could."""
    assert blog.dtypes == () and blog.out == ()
    assert "cannot be called as the op, elementwise_mul(a, b) -> y: it takes 3 arguments (arg0, arg1, arg2) " \
           "and returns None" in blog.probe, blog.probe
    assert "out='arg2' (or by position, out=2)" in blog.probe, blog.probe
    adapted = wb.load_source("elementwise_mul", BLOG, name="blog_out", style="extension", forward="elementwise_mult",
                             out="arg2")
    assert adapted.out == (2,) and adapted.library == blog.library     # the same build
    assert byo.child_address("elementwise_mul", adapted)["out"] == [2]
    with pytest.raises(ValueError, match=r"out='result' names no parameter of elementwise_mul/blog_bad "
                                         r"\(its parameters: arg0, arg1, arg2\)"):
        wb.load_source("elementwise_mul", BLOG, name="blog_bad", style="extension", forward="elementwise_mult",
                       out="result")
    with pytest.raises(ValueError, match=r"exports no 'forward' function .*; it exports elementwise_mult: name one "
                                         r"with forward="):
        wb.load_source("elementwise_mul", BLOG, name="blog_fwd", style="extension")


# --------------------------------------------------------------------------- the CPU: no build needed

def test_a_callable_that_writes_into_an_argument_is_told_how_to_adapt_and_then_checks():
    rep = wb.check("elementwise_mul", byo_impls.mult_into)
    assert not rep.ok and not rep.cases
    assert "FAIL: no case ran" in rep.summary(), rep.summary()
    assert "out='out' (or by position, out=2)" in rep.summary(), rep.summary()
    k = wb.variant(byo_impls.mult_into, op="elementwise_mul", out="out", name="mult_into_out")
    assert k.out == (2,) and k.dtypes, k.probe
    rep = wb.check("elementwise_mul", k, shapes=[(), (7,), (3, 5), (0,)])     # in a runner, told out= there too
    assert rep.ok and rep.cases, rep.table()
    assert any("its calls ran in a runner process of their own" in s for s in rep.skipped), rep.skipped


def test_a_backward_one_gradient_short_fails_each_case_saying_so_not_stopiteration():
    k = wb.variant(byo_impls.bias_gelu_torch, op="bias_gelu", backward=byo_impls.bias_gelu_backward_dx_only,
                   dtypes=["float64", "float32"], device="cpu", name="dx_only")
    g = wb.gradcheck("bias_gelu", k, seed=0)
    assert g.cases and not any(c.passed for c in g.cases), g.table()
    for c in g.cases:
        assert "returned 1 value from its backward; expected 2: bias_gelu's backward returns the gradients of x, " \
               "bias (one for each, in order" in c.note, c.note
        assert "StopIteration" not in c.note
    rep = wb.check("bias_gelu", k, shapes=[(3, 5)], dtypes=["float32"], layouts=("contiguous",))
    assert [c.passed for c in rep.cases if c.what == "forward"] == [True], rep.table()
    assert any(not c.passed and "returned 1 value from its backward" in c.note for c in rep.cases), rep.table()


def test_a_case_that_ends_its_runner_is_that_cases_failure_and_the_rest_still_run():
    """A callable brought from outside runs in a runner by default; a case that kills it (SIGFPE, as
    Day 10's division by zero on an empty tensor does) fails that case with the signal and its likely
    cause, the next case starts a fresh runner, and this process goes on."""
    sizes = [(3, 5), (0, 16), (4, 8), (6, 0), (2, 3, 7)]
    rep = wb.check("bias_gelu", byo_impls.gelu_dies_on_empty, shapes=sizes, dtypes=["float32"],
                   layouts=("contiguous",), seed=1)
    assert [c.shape for c in rep.failures] == [(0, 16), (6, 0)], rep.table()
    for c in rep.failures:
        assert "killed by SIGFPE" in c.note and "likely cause: an integer division by zero in host code" in c.note, \
            c.note
    assert {(3, 5), (4, 8), (2, 3, 7)} == {c.shape for c in rep.cases if c.passed}, rep.table()
    assert any("its calls ran in a runner process of their own" in s for s in rep.skipped), rep.skipped


def test_a_runner_hands_a_brought_variant_the_views_the_matrix_made():
    """An extension gets its inputs as they are, strided and transposed views included (making them
    contiguous, or refusing them, is its own job): through a runner too, whose copies keep them."""
    rep = wb.check("bias_gelu", byo_impls.bias_gelu_contiguous_only, shapes=[(6, 9)], dtypes=["float32"],
                   backward=False, seed=0)
    assert {c.layout for c in rep.failures} == {"strided", "transposed"}, rep.table()
    assert all("x must be contiguous" in c.note for c in rep.failures), rep.table()
    assert any("ran in a runner process" in s for s in rep.skipped), rep.skipped


# --------------------------------------------------------------------------------------------- the GPU

def _by(rep, what=None, shape=None, layout=None):
    return [c for c in rep.cases if what in (None, c.what) and shape in (None, c.shape) and layout in (None, c.layout)]


@gpu
def test_day10_check_gives_every_case_a_verdict(day10):
    x = torch.randn(64, 64, device="cuda")
    rep = wb.check("bias_gelu", day10)       # a torch extension: its calls run in a runner
    assert any("its calls ran in a runner process of their own" in s for s in rep.skipped), rep.skipped
    assert day10.dtypes == ("float32",), day10.probe
    fwd = _by(rep, "forward", layout="contiguous")
    assert all(c.passed for c in fwd if 0 not in c.shape), rep.table()
    assert any(not c.passed for c in _by(rep, "forward", layout="strided")), rep.table()   # no contiguity check
    # (0, 16): a launch of zero blocks, never checked: left pending, the call's failure in the runner
    assert any("zero blocks" in c.note and not c.passed for c in _by(rep, shape=(0, 16))), rep.table()
    # (6, 0): numel() / size(-1) = 0 / 0 on the host
    (died,) = [c for c in _by(rep, shape=(6, 0))]
    assert "SIGFPE" in died.note and "integer division by zero" in died.note, died.note
    # its backward returns the input's gradient alone: each backward case says so
    assert any("returned 1 value from its backward; expected 2" in c.note for c in rep.failures), rep.table()
    g = wb.gradcheck("bias_gelu", day10)
    assert g.cases and all("returned 1 value from its backward" in c.note for c in g.cases), g.table()
    torch.cuda.synchronize()                 # none of it reached this process's CUDA context
    assert torch.equal(x * 1, x)


@gpu
def test_day10_autograd_function_check_gradcheck_and_bench():
    import course_autograd as ca

    rep = wb.check("bias_gelu", ca.fused_bias_gelu)   # a callable wrapping native code: in a runner
    assert all(c.passed for c in _by(rep, "forward", layout="contiguous") if 0 not in c.shape), rep.table()
    assert any("SIGFPE" in c.note for c in _by(rep, shape=(6, 0))), rep.table()
    assert any("zero blocks" in c.note and not c.passed for c in _by(rep, shape=(0, 16))), rep.table()
    g = wb.gradcheck("bias_gelu", ca.fused_bias_gelu)
    assert g.ok, g.table()
    r = wb.bench("bias_gelu", ["vec4", ca.fused_bias_gelu], shapes=[(4096, 4096)], baselines=["eager", "compile"],
                 directions=("fwd", "bwd"), budget_s=0.2)
    rows = {(row["variant"], row["direction"]): row for row in r.rows}
    for d in ("fwd", "bwd"):
        row = rows[("course_autograd.fused_bias_gelu", d)]
        assert row["verified"] == "ok" and row["speedup_vs_compile"] > 0, r.table()


@gpu
def test_the_blog_extension_check_bench_and_its_autograd_function(blog):
    rep = wb.check("elementwise_mul", blog)
    assert not rep.cases and "FAIL: no case ran" in rep.summary() and "out='arg2'" in rep.summary(), rep.summary()
    adapted = wb.load_source("elementwise_mul", BLOG, name="blog_out", style="extension", forward="elementwise_mult",
                             out="arg2")
    assert adapted.dtypes == ("float32",), adapted.probe
    rep = wb.check("elementwise_mul", adapted)
    assert all(c.passed for c in _by(rep, "forward", layout="contiguous") if 0 not in c.shape), rep.table()
    strided = [c for c in _by(rep, "forward", layout="strided") if not c.passed]
    assert strided and all("must be contiguous" in c.note for c in strided), rep.table()
    assert any("zero blocks" in c.note and not c.passed for c in _by(rep, shape=(0,))), rep.table()
    import course_autograd as ca

    rep = wb.check("elementwise_mul", ca.elementwise_mult)
    assert any(not c.passed for c in _by(rep, layout="strided")), rep.table()           # its contiguity bug
    assert all(c.passed for c in _by(rep, "forward", layout="contiguous") if 0 not in c.shape), rep.table()
    g = wb.gradcheck("elementwise_mul", ca.elementwise_mult)
    assert g.ok, g.table()
    r = wb.bench("elementwise_mul", ["vec4", adapted, ca.elementwise_mult], shapes=[(4096, 4096)],
                 baselines=["eager", "compile"], budget_s=0.2)
    assert {row["variant"] for row in r.rows} == {"eager", "compile", "vec4", "blog_out",
                                                  "course_autograd.elementwise_mult"}, r.table()
    assert all(row["verified"] == "ok" for row in r.rows), r.table()
