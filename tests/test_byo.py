"""Bring your own implementation (issue 30, workbench/run/byo.py): a callable, or a torch extension
written the course's way, checked, gradchecked and timed as a variant of an op.

The extension (notebooks/course/bias_gelu_ext_cpu.cpp, the CPU twin of the course's bias+GELU
extension) is built once per test session (module fixture; the shared cache of tests/conftest.py):
cpp_extension compiles the torch headers, ~60-80 s on 2 cores. The notebook and the exercise
checker's test below use the same file, and extension builds are keyed by content under one label
per op, so they find this build."""
from __future__ import annotations

import pathlib
import re
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import HAS_GPU, REPO_ROOT, describe, run_cli

import workbench as wb
from workbench.run import byo
from workbench.errors import BuildError, WorkbenchError

sys.path.insert(0, str(pathlib.Path(__file__).parent / "fixtures"))
import byo_impls  # noqa: E402

COURSE_CPU = REPO_ROOT / "notebooks" / "course" / "bias_gelu_ext_cpu.cpp"
COURSE_CUDA = REPO_ROOT / "notebooks" / "course" / "bias_gelu_ext.cu"
SMALL = [(3, 5), (64, 1000), (2, 3, 7), (257,), (0, 16)]


def wrong_shape(x, bias):
    return (x + bias)[..., :1]


def wrong_dtype(x, bias):
    return F.gelu(x.double() + bias.double(), approximate="tanh")


def two_outputs(x, bias):
    y = F.gelu(x + bias, approximate="tanh")
    return y, y


def through_numpy(x, bias):
    """Right values, but autograd cannot see through a NumPy round trip."""
    v = (x + bias).detach().cpu().numpy()
    return F.gelu(torch.from_numpy(v), approximate="tanh").to(x.device)


# ------------------------------------------------------------------------------------------ callables

def test_a_callable_of_torch_ops_passes_check_gradcheck_and_bench():
    k = wb.variant(byo_impls.bias_gelu_torch, op="bias_gelu")
    assert k.name == "byo_impls.bias_gelu_torch"                     # module.qualname
    assert k.device == ("cuda" if HAS_GPU else "cpu"), k.probe              # CUDA first where there is one
    assert set(k.dtypes) == {"float32", "float64", "float16", "bfloat16"}, k.probe
    assert "probed" in k.probe and "gradients flow through it by autograd" in k.probe, k.probe
    assert k.steps == ("forward", "backward")
    assert wb.variant(byo_impls.bias_gelu_torch, op="bias_gelu") is k    # probed once per callable
    rep = wb.check("bias_gelu", byo_impls.bias_gelu_torch, shapes=SMALL)
    assert rep.ok, rep.summary()
    assert rep.variant == "byo_impls.bias_gelu_torch"
    assert any("probed" in s for s in rep.skipped), rep.skipped      # the probe's note travels with it
    g = wb.gradcheck("bias_gelu", byo_impls.bias_gelu_torch)
    assert g.ok and "float64" in g.method, g.summary()
    r = wb.bench("bias_gelu", byo_impls.bias_gelu_torch, shapes=[(64, 256)], baselines=["eager"], budget_s=0.05)
    rows = {row["variant"]: row for row in r.rows}
    assert set(rows) == {"eager", "byo_impls.bias_gelu_torch"}, r.table()
    mine = rows["byo_impls.bias_gelu_torch"]
    assert mine["verified"] == "ok" and mine["median_ms"] > 0 and mine["speedup_vs_eager"] > 0, r.table()
    assert "byo_impls.bias_gelu_torch" in r.table()


def test_bench_takes_a_callable_beside_the_ops_own_variants():
    r = wb.bench("bias_gelu", ["cpu", byo_impls.bias_gelu_torch], shapes=[(32, 128)], baselines=["eager"],
                 directions=("fwd", "bwd"), budget_s=0.05)
    got = {(row["variant"], row["direction"]) for row in r.rows}
    assert {("cpu", "fwd"), ("byo_impls.bias_gelu_torch", "fwd"), ("cpu", "bwd"),
            ("byo_impls.bias_gelu_torch", "bwd")} <= got, r.table()
    assert all(row["verified"] == "ok" for row in r.rows), r.table()
    # the plots name it as the rows do
    fig = r.figure()
    texts = [t.get_text() for ax in fig.axes for t in ax.get_xticklabels() + ax.texts] + \
            [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("byo_impls.bias_gelu_torch" in t for t in texts), texts


@pytest.mark.skipif(HAS_GPU, reason="a CUDA-only provider is skipped only where no GPU is visible")
def test_a_cuda_only_provider_is_skipped_saying_why_and_the_rest_are_timed():
    r = wb.bench("bias_gelu", ["cpu", "vec4", byo_impls.bias_gelu_cuda_only], shapes=[(32, 128)],
                 baselines=["eager"], budget_s=0.05)
    assert {row["variant"] for row in r.rows} == {"eager", "cpu"}, r.table()
    assert all(row["verified"] == "ok" for row in r.rows), r.table()
    assert "float32: skipped vec4 (runs on cuda; no GPU is visible here)" in r.notes, r.notes
    assert any(n.startswith("skipped byo_impls.bias_gelu_cuda_only: variant: bias_gelu/byo_impls.bias_gelu_cuda_only "
                            "ran on no device and dtype here") for n in r.notes), r.notes


def test_a_wrong_gradient_fails_gradcheck_with_its_numbers():
    k = wb.variant(byo_impls.bias_gelu_torch, op="bias_gelu", backward=byo_impls.bias_gelu_backward_wrong,
                   dtypes=["float64", "float32"], device="cpu", name="wrong_grad")
    assert k.steps == ("forward", "backward") and "declared" in k.probe
    # A fixed seed: the first failing case is one element, whose error |1 - GELU'(x + b)| is tiny where
    # x + b is large; a random draw made it 1.4e-4 once (a fresh-clone CI run), under the 1e-3 below.
    rep = wb.gradcheck("bias_gelu", k, seed=4)
    assert not rep.ok and rep.failures, rep.summary()
    first = rep.failures[0]
    assert first.what == "gradcheck" and first.dtype == "float64"
    assert re.search(r"analytical [-\d.e]+, numerical [-\d.e]+, \|difference\| [\d.e-]+ > tolerance", first.note), first.note
    assert first.max_abs_err > 1e-3 and first.where is not None
    # the check matrix finds it too, with the gradient named
    bad = [c for c in wb.check("bias_gelu", k, shapes=[(3, 5)], dtypes=["float32"]).failures]
    assert any(c.what == "backward dx" for c in bad), bad


@pytest.mark.parametrize("fn, words", [
    (wrong_shape, r"returned y of shape \(3, 1\); expected shape \(3, 5\), dtype float32"),
    (wrong_dtype, r"returned y of dtype float64; expected shape \(3, 5\), dtype float32"),
    (two_outputs, r"returned 2 values from its forward; expected 1: bias_gelu's forward returns 1 tensor \(y\)"),
])
def test_a_wrong_shape_dtype_or_count_names_the_output_and_what_was_expected(fn, words):
    # declared: no probe, so the check matrix meets it, case by case
    k = wb.variant(fn, op="bias_gelu", dtypes=["float32"], device="cpu")
    rep = wb.check("bias_gelu", k, shapes=[(3, 5)], layouts=("contiguous",), backward=False)
    assert not rep.ok
    notes = " | ".join(c.note for c in rep.failures)
    assert re.search(words, notes), notes
    with pytest.raises(WorkbenchError, match=words):
        k(torch.randn(3, 5), torch.randn(5))
    # undeclared: the probe finds it on every dtype, and says so naming the output
    if fn is not wrong_dtype:
        with pytest.raises(WorkbenchError, match=r"ran on no device and dtype here[\s\S]*returned"):
            wb.check("bias_gelu", fn)
    else:  # a float64 answer is right for float64 inputs: that is all the probe finds
        assert wb.variant(fn, op="bias_gelu").dtypes == ("float64",)


def test_without_a_backward_autograd_flows_or_the_backward_checks_are_skipped_with_a_note():
    k = wb.variant(through_numpy, op="bias_gelu")
    assert k.steps == ("forward",)
    assert "autograd cannot see through it" in k.probe and "backward checks are skipped" in k.probe, k.probe
    rep = wb.check("bias_gelu", k, shapes=[(3, 5), (16, 33)])
    assert rep.ok, rep.summary()
    assert not any(c.what.startswith("backward") for c in rep.cases)
    assert any("has no backward" in s for s in rep.skipped), rep.skipped
    g = wb.gradcheck("bias_gelu", k)
    assert not g.cases and any("has no backward" in s for s in g.skipped), g.summary()


def test_isolate_imports_the_callable_by_module_path_or_refuses_with_why():
    rep = wb.check("bias_gelu", byo_impls.bias_gelu_torch, shapes=[(3, 5)], dtypes=["float32"], isolate=True)
    assert rep.ok and rep.variant == "byo_impls.bias_gelu_torch", rep.summary()
    spec = byo.child_address("bias_gelu", wb.variant(byo_impls.bias_gelu_torch, op="bias_gelu"))
    assert spec["callable"]["fn"]["module"] == "byo_impls"
    local = lambda x, bias: F.gelu(x + bias, approximate="tanh")  # noqa: E731
    with pytest.raises(WorkbenchError, match=r"cannot be sent to a runner process.*a lambda or a local function.*"
                                             r"Move it to a module of its own"):
        wb.check("bias_gelu", local, isolate=True)


def test_an_autograd_functions_apply_is_sent_as_its_own_class():
    """Function.apply is a classmethod: its __qualname__ names torch's Function, where it was
    defined. A runner must import the subclass it is bound to (a local one cannot be sent)."""
    spec = byo.child_address("bias_gelu", wb.variant(byo_impls.BiasGeluFunction.apply, op="bias_gelu"))
    assert spec["callable"]["fn"] == {**spec["callable"]["fn"], "module": "byo_impls", "qualname": "BiasGeluFunction.apply"}

    class Local(byo_impls.BiasGeluFunction):
        pass

    assert byo.origin_of(Local.apply) is None


def test_the_profiled_runner_remakes_a_callable_and_its_call_is_checked():
    """wb.profile serves the variant from a runner under ncu and drives the call from here
    (ncu.profiled_call): the Python runner re-makes the callable from its module path, and the
    profiled call is checked at its shape, as a variant's is."""
    from workbench.explain import ncu
    from workbench.judge import python_runner, start

    again = python_runner.resolve(python_runner.address_of("bias_gelu", byo_impls.bias_gelu_torch))
    assert again.name == "byo_impls.bias_gelu_torch" and again.fn is byo_impls.bias_gelu_torch
    k = start.isolated("bias_gelu", byo_impls.bias_gelu_torch)
    try:
        for direction in ("fwd", "bwd"):
            got = ncu.profiled_call("bias_gelu", k, (256, 64), "float32", direction)
            assert got["verified"] == "ok", got
    finally:
        k.module.close()


# --------------------------------------------------------------------------------- torch extensions

@pytest.fixture(scope="module")
def course_cpu():
    """The course-style CPU extension, built once per session (or found in the shared cache)."""
    return wb.load_source("bias_gelu", COURSE_CPU, name="course_cpu", style="extension")


def test_an_extension_style_source_builds_and_is_checked(course_cpu):
    k = course_cpu
    assert isinstance(k, byo.CallableKernel) and k.kind == "extension" and k.name == "course_cpu"
    assert "compiling it includes torch/extension.h" in k.probe          # what this path costs, said
    assert k.device == "cpu" and k.dtypes == ("float32",), k.probe       # data_ptr<float>(): float32 only
    assert "expected scalar type Float but found Double" in k.probe      # and the probe says why
    assert k.steps == ("forward", "backward")                             # its exported backward
    rep = wb.check("bias_gelu", k, shapes=[(3, 5), (64, 1000), (2, 3, 7), (257,)])
    by_layout = {}
    for c in rep.cases:
        by_layout.setdefault(c.layout, []).append(c.passed)
    # contiguous memory (and an offset pointer: data_ptr() includes it) is right; the course's code
    # reads data_ptr() as if every tensor were contiguous, and the matrix finds that
    assert all(by_layout["contiguous"]) and all(by_layout["offset"]), rep.table()
    assert not all(by_layout["strided"]) and not all(by_layout["transposed"]), rep.table()
    g = wb.gradcheck("bias_gelu", k)
    assert g.ok, g.summary()
    r = wb.bench("bias_gelu", ["cpu", k], shapes=[(64, 256)], baselines=["eager"], budget_s=0.05)
    assert {row["variant"] for row in r.rows} == {"eager", "cpu", "course_cpu"}, r.table()
    assert all(row["verified"] == "ok" for row in r.rows), r.table()


def test_an_extension_travels_to_a_runner_as_its_source(course_cpu):
    """isolate=True: the runner finds the build in the cache, loads it and probes it again."""
    fwd_only = wb.load_source("bias_gelu", COURSE_CPU, name="course_fwd", style="extension", backward=None)
    spec = byo.child_address("bias_gelu", fwd_only)
    assert spec["style"] == "extension" and spec["functions"] == ["forward", None], spec
    rep = wb.check("bias_gelu", fwd_only, shapes=[(3, 5)], layouts=("contiguous",), isolate=True)
    assert rep.ok and rep.variant == "course_fwd", rep.summary()
    assert not any(c.what.startswith("backward") for c in rep.cases), rep.table()   # forward-only there too


def test_a_line_info_build_of_an_extension_travels_to_the_runner_with_its_options(course_cpu):
    """wb.profile asks for a -lineinfo build through the variant's address (isolated(line_info=True)):
    an extension-style source's address carries the options too, and the runner builds (or finds)
    that same build."""
    from workbench.build import BuildOptions
    from workbench.judge.python_runner import address_of, resolve

    address = dict(address_of("bias_gelu", course_cpu), options={"line_info": True})
    again = resolve(address)
    assert again.options == BuildOptions(line_info=True) and again.kind == "extension", address
    assert address_of("bias_gelu", again)["options"] == {"line_info": True}
    assert "options" not in address_of("bias_gelu", course_cpu)   # the default build's address


def test_an_extension_that_does_not_compile_is_a_build_error_naming_file_and_line():
    src = ("#include <torch/extension.h>\n#include \"no_such_header_for_the_test.h\"\n"
           "torch::Tensor forward(torch::Tensor x, torch::Tensor b) { return x; }\n"
           "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &forward); }\n")
    with pytest.raises(BuildError) as err:
        wb.load_inline("bias_gelu", src, name="broken_ext", style="extension")
    e = err.value
    assert e.line == 2 and "broken_ext" in str(e.file), (e.file, e.line, str(e))
    assert "no_such_header_for_the_test.h" in str(e)


def test_an_extension_source_must_export_something_callable(tmp_path):
    p = tmp_path / "nothing.cpp"
    p.write_text("#include <torch/extension.h>\nint f() { return 1; }\n")
    with pytest.raises(ValueError, match="PYBIND11_MODULE"):
        wb.load_source("bias_gelu", p, style="extension")


def test_the_exercise_checker_takes_an_extension_style_file(course_cpu):
    """Built in the checker (a cache hit: the fixture built it), loaded only in its runner (the
    checker's copy of the library: the runner has no build cache), its dtypes probed there, SASS
    rules skipped for a CPU library, the matrix run by the checker over the runner (the strided views
    reach the extension as they are), verdict and exit status the checker's."""
    proc = run_cli("exercise", "check", "2", str(COURSE_CPU), "--seed", "1", "--no-speed", timeout=600)
    out = proc.stdout
    assert proc.returncode == 1, describe(proc)
    assert re.search(r"^  build \.+ ok \((unchanged, cached build|built in [\d.]+ s) as a torch extension", out, re.M), out
    assert re.search(r"^  load \.+ ok \(a torch extension; dtypes it ran in: float32\)", out, re.M), out
    assert re.search(r"^  declared dtypes \.+ ok \(float32\)", out, re.M), out
    assert re.search(r"^  SASS rules \.+ skipped \(a CPU library has no device code", out, re.M), out
    assert re.search(r"^  correctness \.+ FAIL \(.* strided", out, re.M), out
    assert "a torch extension gets them as they are" in out, out
    assert "\nFAIL: correctness" in out


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_the_course_cuda_extension_checked_and_benched_beside_the_trees_variants():
    ext = wb.load_source("bias_gelu", COURSE_CUDA, name="course", style="extension", backward=None)
    assert ext.device == "cuda" and ext.dtypes == ("float32",), ext.probe
    assert ext.steps == ("forward",) and "backward checks are skipped" in ext.probe   # a raw forward
    mod = ext.module

    class CourseBiasGELU(torch.autograd.Function):   # the course's Python wrapper
        @staticmethod
        def forward(ctx, x, bias):
            ctx.save_for_backward(x, bias)
            return mod.forward(x, bias)

        @staticmethod
        def backward(ctx, grad_out):
            x, bias = ctx.saved_tensors
            dx = mod.backward(grad_out.contiguous(), x, bias)
            return dx, (dx.flatten(0, -2).sum(0) if dx.dim() > 1 else dx)

    course = wb.variant(CourseBiasGELU.apply, op="bias_gelu", name="course")
    assert course.steps == ("forward", "backward") and course.dtypes == ("float32",), course.probe
    rep = wb.check("bias_gelu", course)
    contiguous = [c for c in rep.cases if c.layout == "contiguous"]
    assert contiguous and all(c.passed for c in contiguous), rep.table()
    assert any(not c.passed for c in rep.cases if c.layout in ("strided", "transposed")), rep.table()
    assert wb.gradcheck("bias_gelu", course).ok
    r = wb.bench("bias_gelu", ["scalar", "vec4", course], shapes=[(4096, 4096)], baselines=["eager", "compile"],
                 directions=("fwd", "bwd"), budget_s=0.3)
    rows = {(row["variant"], row["direction"]): row for row in r.rows}
    for d in ("fwd", "bwd"):
        assert rows[("course", d)]["verified"] == "ok" and not rows[("course", d)].get("impossible"), r.table()
        assert rows[("course", d)]["speedup_vs_eager"] > 0, r.table()
