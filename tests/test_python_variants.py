"""Python variants (kernels/<op>/<name>.py): a PyTorch formula (kind "torch") or Triton kernels
(kind "triton"), listed from a literal declaration without importing the file, loaded per content
(hot swap), checked like the C++ variants (same messages), and visible to torch.compile.

On the CPU: listing, the declaration's errors, check/gradcheck of rmsnorm's `pytorch` variant, bad
input (the C++ cpu variant's messages), hot swap and build errors, torch.compile of a torch-kind
Kernel (and of a C++ one), and rmsnorm's Triton kernels under Triton's interpreter (in a child
process: TRITON_INTERPRET=1 must be set before triton is imported), plus their compilation for
sm_90 with Triton's own compiler (no GPU needed). On the GPU: the triton and pytorch variants' check
matrix, gradients, opcheck, torch.compile with no graph break (and the vectorized C++ rung's),
bad input on CUDA, streams, devices, >2^31 elements, a bit-identical dweight."""
from __future__ import annotations

import json
import textwrap

import pytest
import torch

import workbench as wb
from conftest import REPO_ROOT, describe
from workbench.measure import correctness
from workbench.run import loader
from workbench.model import registry
from workbench.errors import BuildError

OP = "rmsnorm"
SPEC = registry.spec(OP)
KERNELS = REPO_ROOT / "kernels" / OP
gpu = pytest.mark.gpu
PY_GPU_VARIANTS = [v.name for op in [OP] for v in registry.variants(op) if v.python and v.runs_on("cuda")]


def _inputs(size, dtype=torch.float32, device="cpu", seed=0):
    return list(SPEC.new_inputs(size, dtype, device, torch.Generator(device).manual_seed(seed)))


# ----------------------------------------------------------------------------- listing

def test_listing_reads_the_declarations_without_importing_triton(run_python):
    proc = run_python(textwrap.dedent("""
        import json, sys
        import workbench as wb
        vs = wb.variants("rmsnorm")
        print(json.dumps({"variants": [[v.name, v.kind, v.device, list(v.dtypes)] for v in vs],
                          "triton": "triton" in sys.modules, "modules": [m for m in sys.modules if "variant" in m]}))
    """))
    assert proc.returncode == 0, describe(proc)
    out = json.loads(proc.stdout.splitlines()[-1])
    assert not out["triton"], "listing imported triton"
    assert not [m for m in out["modules"] if m.startswith("workbench_variant_")], out["modules"]
    got = {name: (kind, device, dtypes) for name, kind, device, dtypes in out["variants"]}
    assert got["pytorch"] == ("torch", "any", ["float32", "float64", "float16", "bfloat16"])
    assert got["triton"] == ("triton", "cuda", ["float32", "float16", "bfloat16"])
    assert [n for n, *_ in out["variants"]][:2] == ["pytorch", "triton"], "ladder order applies"


def test_a_python_variant_runs_on_its_declared_devices():
    listed = {v.name: v for v in registry.variants(OP)}
    assert listed["pytorch"].runs_on("cpu") and listed["pytorch"].runs_on("cuda")
    assert listed["triton"].runs_on("cuda") and not listed["triton"].runs_on("cpu")
    assert listed["cpu"].kind == "c++" and not listed["cpu"].python


GOOD = '{"op": "rmsnorm", "device": "any", "dtypes": ("float32",), "description": "d", "kind": "torch"}'


@pytest.mark.parametrize("text, match", [
    ("def forward(x, weight, eps):\n    return x\n", "no module-level WB_VARIANT"),
    (f"WB_VARIANT = {GOOD}\nWB_VARIANT = {GOOD}\n", "more than one module-level WB_VARIANT"),
    ('KIND = "torch"\nWB_VARIANT = {"op": "rmsnorm", "device": "any", "dtypes": ("float32",), '
     '"description": "d", "kind": KIND}\n', ":2: WB_VARIANT must be a literal dict"),
    ('WB_VARIANT = ["rmsnorm"]\n', "must be a dict; got list"),
    ('WB_VARIANT = {"op": "rmsnorm", "device": "any", "dtypes": ("float32",), "kind": "torch"}\n',
     "missing ['description']"),
    (GOOD.join(["WB_VARIANT = ", "\n"]).replace('"kind"', '"speed": 1, "kind"'), "unknown ['speed']"),
    (GOOD.join(["WB_VARIANT = ", "\n"]).replace('"any"', '"gpu"'), "device must be one of ('cuda', 'cpu', 'any')"),
    (GOOD.join(["WB_VARIANT = ", "\n"]).replace('"torch"', '"cuda"'), "kind must be one of ('torch', 'triton')"),
    (GOOD.join(["WB_VARIANT = ", "\n"]).replace('("float32",)', '()'), "dtypes must be a non-empty tuple"),
    (GOOD.join(["WB_VARIANT = ", "\n"]).replace('("float32",)', '("float8",)'), "dtypes must be a non-empty"),
    (GOOD.join(["WB_VARIANT = ", "\n"]).replace('"rmsnorm"', '"bias_gelu"'),
     "declares a variant of op 'bias_gelu', expected 'rmsnorm'"),
    (f"WB_VARIANT = {GOOD}\ndef forward(x, weight, eps:\n", ":2: cannot read the variant's declaration: SyntaxError"),
], ids=["missing", "twice", "not literal", "not a dict", "missing key", "unknown key", "device", "kind",
        "no dtypes", "unknown dtype", "other op", "syntax error"])
def test_a_malformed_declaration_names_the_file_and_what_is_expected(tmp_path, text, match):
    path = tmp_path / "mine.py"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        registry.static_variant(OP, path)
    assert str(path) in str(e.value) and match in str(e.value), str(e.value)


def test_declared_dtypes_are_listed_in_the_harness_order(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("WB_VARIANT = " + GOOD.replace('("float32",)', '("bfloat16", "float32")') + "\n")
    assert registry.static_variant(OP, path).dtypes == ("float32", "bfloat16")


@pytest.mark.parametrize("body, match", [
    ("", "must define a function forward(x, weight, eps)"),
    ("def forward(x, weight):\n    return x\n", "forward must take 3 positional arguments (x, weight, eps)"),
    ("def forward(x, weight, eps):\n    return x\ndef backward(dy, x):\n    return x\n",
     "backward must take 4 positional arguments (grad_y, x, weight, eps)"),
])
def test_a_module_without_the_entry_points_is_refused_by_name(tmp_path, body, match):
    path = tmp_path / "entry.py"
    path.write_text(f"WB_VARIANT = {GOOD}\n{body}")
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")):
        wb.load_source(OP, path)


def test_a_triton_kind_needs_a_backward(tmp_path):
    path = tmp_path / "tri.py"
    path.write_text(f"WB_VARIANT = {GOOD.replace('torch', 'triton')}\ndef forward(x, weight, eps):\n    return x\n")
    with pytest.raises(ValueError, match="kind 'triton' must define a function backward"):
        wb.load_source(OP, path)


def test_load_source_takes_py_and_refuses_other_files(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("x")
    with pytest.raises(ValueError, match=r"\.cu, \.cpp or \.py file"):
        wb.load_source(OP, bad)


# ----------------------------------------------------------------------------- the pytorch variant on the CPU

@pytest.fixture(scope="module")
def pytorch_kernel():
    return wb.load(OP, "pytorch")


def test_pytorch_variant_loads_as_a_kernel(pytorch_kernel):
    k = pytorch_kernel
    assert isinstance(k, wb.Kernel) and k.kind == "torch" and k.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert k.source == KERNELS / "pytorch.py" and k.library == k.source and len(k.build_id) == 10
    assert k.steps == ("forward", "backward") and k.qualified == f"pytorch@{k.build_id}"
    assert k.dtypes == ("float32", "float64", "float16", "bfloat16") and "PyTorch" in k.description
    assert loader.get(OP, "pytorch") is k and not k.stale
    assert "rmsnorm/pytorch@" in repr(k)


def test_pytorch_variant_check_and_gradcheck(pytorch_kernel):
    report = wb.check(OP, "pytorch", seed=11)
    assert report.ok, report.summary()
    assert {c.dtype for c in report.cases} == {"float32", "float64", "float16", "bfloat16"}
    grad = wb.gradcheck(OP, "pytorch", seed=3)
    assert grad.ok and "float64" in grad.method, grad.summary()


def test_pytorch_variant_is_the_eager_math(pytorch_kernel):
    x, w = _inputs((6, 96), torch.bfloat16)
    assert torch.equal(pytorch_kernel(x, w, eps=1e-6), SPEC.eager(x, w, 1e-6))


def test_pytorch_variant_autograd_uses_its_backward(pytorch_kernel):
    """Its backward is the variant's for autograd through k(...) as for k.backward."""
    x, w = (t.requires_grad_() for t in _inputs((5, 33), torch.float32, seed=2))
    dy = torch.randn(5, 33)
    pytorch_kernel(x, w).backward(dy)
    dx, dw = pytorch_kernel.backward(dy, x.detach(), w.detach())
    assert torch.equal(x.grad, dx) and torch.equal(w.grad, dw)


def test_a_torch_kind_without_backward_gets_autograd_through_forward(tmp_path):
    text = (KERNELS / "pytorch.py").read_text()
    path = tmp_path / "formula_only.py"
    path.write_text(text[:text.index("def backward")])
    k = wb.load_source(OP, path)
    x, w = _inputs((4, 16), torch.float64, seed=4)
    dy = torch.randn(4, 16, dtype=torch.float64)
    dx, dw = k.backward(dy, x, w)
    ref = SPEC.run_reference_backward([dy], [x, w], {"eps": 1e-6})
    torch.testing.assert_close(dx, ref[0])
    torch.testing.assert_close(dw, ref[1])
    assert wb.gradcheck(OP, k).ok


@pytest.mark.parametrize("case", SPEC.all_error_cases("cpu"), ids=lambda c: c.what)
def test_bad_input_gets_the_cpu_variants_messages(pytorch_kernel, case):
    """Every error case of the declaration, forward and backward: the same error type and first
    line as the C++ cpu variant's (whose words the C++ harness writes)."""
    cpu = wb.load(OP, "cpu")
    tensors, attrs = case.build("cpu", torch.Generator().manual_seed(5))
    for call in (lambda k: k(*tensors, **attrs),
                 lambda k: k.backward(torch.ones(tensors[0].shape, dtype=tensors[0].dtype), *tensors, **attrs)):
        with pytest.raises(case.error) as want:
            call(cpu)
        with pytest.raises(case.error) as got:
            call(pytorch_kernel)
        assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]
    with pytest.raises(case.error, match=case.match.replace("(", r"\(").replace(")", r"\)")):
        pytorch_kernel(*tensors, **attrs)


def test_a_cpu_python_variant_refuses_dtypes_it_does_not_declare_in_the_harness_words(tmp_path):
    path = tmp_path / "f32_only.py"
    path.write_text((KERNELS / "pytorch.py").read_text()
                    .replace('"dtypes": ("float32", "float64", "float16", "bfloat16")', '"dtypes": ("float32",)')
                    .replace('"device": "any"', '"device": "cpu"'))
    k = wb.load_source(OP, path)
    x, w = _inputs((4, 8), torch.float64)
    with pytest.raises(TypeError, match=r"^workbench::rmsnorm: variant 'f32_only' supports dtypes float32; x is float64$"):
        k(x, w)


def test_a_cuda_python_variant_refuses_cpu_tensors_in_the_harness_words(cuda_buildable):
    """The triton variant (device cuda) given CPU tensors says what the C++ harness says for a CUDA
    C++ variant, forward and backward; its declaration checks come first, as the harness's do."""
    triton = wb.load(OP, "triton")
    scalar = wb.load(OP, "scalar")
    x, w = _inputs((4, 8))
    for call in (lambda k: k(x, w), lambda k: k.backward(torch.ones_like(x), x, w)):
        with pytest.raises(RuntimeError) as want:
            call(scalar)
        with pytest.raises(RuntimeError) as got:
            call(triton)
        assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0].replace("'scalar'", "'triton'")
        assert "variant 'triton' runs on CUDA tensors; x is on cpu" in str(got.value)
    with pytest.raises(ValueError, match="weight must have shape"):
        triton(x, torch.ones(7))
    with pytest.raises(RuntimeError, match="runs on CUDA tensors"):  # the device before the dtype, as in C++
        triton(x.double(), w.double())


# ----------------------------------------------------------------------------- hot swap and build errors

def _copy(tmp_path, name="swap"):
    path = tmp_path / f"{name}.py"
    path.write_text((KERNELS / "pytorch.py").read_text())
    return path


def test_hot_swap_gives_a_new_build_and_the_old_handle_keeps_its_code(tmp_path):
    path = _copy(tmp_path)
    old = wb.load_source(OP, path)
    again = wb.load_source(OP, path)
    assert again.build_id == old.build_id and not again.built, "unchanged content: the same build"
    x, w = _inputs((3, 16), seed=7)
    before = old(x, w)
    path.write_text(path.read_text().replace("return eager(x, weight, eps)", "return eager(x, weight, eps) * 2"))
    new = wb.load_source(OP, path)
    assert new.build_id != old.build_id and new.built
    assert old.stale and not new.stale and loader.get(OP, "swap") is new
    assert torch.equal(old(x, w), before), "the old handle runs the old code"
    assert torch.equal(new(x, w), before * 2)
    assert any(v.name == "swap" and v.description.endswith("(inline)") for v in wb.variants(OP))


@pytest.mark.parametrize("edit, line, first", [
    (lambda t: t.replace("def forward(x, weight, eps):", "def forward(x, weight, eps)"), "def forward", "SyntaxError"),
    (lambda t: t.replace("import math\n", "import math\nimport no_such_module_for_the_test\n"),
     "no_such_module_for_the_test", "ModuleNotFoundError: No module named 'no_such_module_for_the_test'"),
], ids=["syntax", "import"])
def test_a_broken_edit_raises_build_error_and_keeps_the_last_good_build(tmp_path, edit, line, first):
    path = _copy(tmp_path, "broken")
    good = wb.load_source(OP, path)
    text = path.read_text()
    path.write_text(edit(text))
    with pytest.raises(BuildError) as e:
        wb.load_source(OP, path)
    expected_line = next(i for i, ln in enumerate(edit(text).splitlines(), 1) if line in ln)
    assert e.value.file == str(path) and e.value.line == expected_line, (e.value.file, e.value.line)
    assert e.value.first_error.startswith(first), e.value.first_error
    assert f"{path}:{expected_line}" in str(e.value) and e.value.log_path.is_file()
    assert good.qualified in e.value.last_good
    assert loader.get(OP, "broken") is good and not good.stale
    x, w = _inputs((2, 8))
    torch.testing.assert_close(good(x, w), SPEC.eager(x, w, 1e-6))


# ----------------------------------------------------------------------------- torch.compile on the CPU

def _explain_and_compile(k, x, w):
    def f(x, w):
        return torch.nn.functional.silu(k(x * 2.0, w, eps=1e-6)).sum()

    torch._dynamo.reset()
    ex = torch._dynamo.explain(f)(x, w)
    assert ex.graph_break_count == 0 and ex.graph_count == 1, ex.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(x, w), f(x, w))
    leaves = [t.detach().requires_grad_() for t in (x, w)]
    compiled(*leaves).backward()
    again = [t.detach().requires_grad_() for t in (x, w)]
    f(*again).backward()
    for a, b in zip(leaves, again):
        torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.slow
def test_torch_kind_compiles_fullgraph_with_no_graph_break(pytorch_kernel, tmp_path):
    x, w = _inputs((8, 64), seed=9)
    _explain_and_compile(pytorch_kernel, x, w)
    text = (KERNELS / "pytorch.py").read_text()
    path = tmp_path / "formula_compiled.py"
    path.write_text(text[:text.index("def backward")])  # autograd through forward, traced as it is
    _explain_and_compile(wb.load_source(OP, path), x, w)


@pytest.mark.slow
def test_a_cpp_kernel_compiles_fullgraph_with_no_graph_break():
    x, w = _inputs((8, 64), seed=10)
    _explain_and_compile(wb.load(OP, "cpu"), x, w)


def test_a_layer_over_a_python_variant_trains_and_compiles():
    layer = wb.nn.RMSNorm(32, variant="pytorch")
    x = torch.randn(4, 32, requires_grad=True)
    layer(x).sum().backward()
    assert layer.weight.grad is not None and x.grad is not None
    torch._dynamo.reset()
    ex = torch._dynamo.explain(layer)(x.detach())
    assert ex.graph_break_count == 0, ex.break_reasons


# ----------------------------------------------------------------------------- the other tools

def test_tools_for_cuda_cpp_refuse_python_variants_clearly(tmp_path):
    from workbench.explain import ptxas
    from workbench.run import sanitize

    with pytest.raises(ValueError, match="PyTorch-formula variant"):
        sanitize.run(OP, "pytorch")
    with pytest.raises(ValueError, match=r"ptxas reports are for CUDA C\+\+ sources"):
        ptxas.compile_report(KERNELS / "triton.py")


def test_cli_lists_and_builds_python_variants(run_cli):
    proc = run_cli("list", OP)
    assert proc.returncode == 0, describe(proc)
    rows = {ln.split()[0]: ln.split() for ln in proc.stdout.splitlines()[1:]}
    assert rows["pytorch"][1] == "any" and rows["triton"][1] == "cuda"
    proc = run_cli("build", OP, "pytorch")
    assert proc.returncode == 0 and f"{OP}/pytorch@" in proc.stdout and "pytorch.py" in proc.stdout, describe(proc)


# ----------------------------------------------------------------------------- Triton, on the CPU

def test_triton_variant_opens_with_what_it_does():
    lines = (KERNELS / "triton.py").read_text().splitlines()
    opening = " ".join(ln.lstrip("# ") for ln in lines[:next(i for i, ln in enumerate(lines) if not ln.startswith("#"))])
    for said in ("one read of x, one write of y", "reading x twice", "No atomics", "bit-identical", "triton_op"):
        assert said in opening, said


INTERPRETED = r"""
import json, sys, torch
import workbench as wb
from workbench.measure import correctness
from workbench.model import registry

spec = registry.spec("rmsnorm")
k = wb.load("rmsnorm", "triton")
m = k.build.module  # the kernels, called directly: the variant itself refuses CPU tensors
gen = torch.Generator().manual_seed(0)
out = []

def case(size, dtype, eps, label):
    x, w = spec.new_inputs(size, getattr(torch, dtype), "cpu", gen)
    attrs = {"eps": eps}
    y = m.forward(x, w, eps)
    dy = torch.randn(y.shape, generator=gen).to(y.dtype)
    dx, dw = m.backward(dy, x, w, eps)
    out_terms, grad_terms = spec.terms(size)
    fwd = correctness.compare(y, spec.run_reference([x, w], attrs)[0], dtype, terms=out_terms[0])
    ref = spec.run_reference_backward([dy], [x, w], attrs)
    gx = correctness.compare(dx, ref[0], dtype, terms=grad_terms[0])
    gw = correctness.compare(dw, ref[1], dtype, terms=grad_terms[1])
    same = all(correctness.same_bits(a, b) for a, b in zip((dx, dw), m.backward(dy, x, w, eps)))
    out.append({"case": f"{label} {size} {dtype}", "ok": [fwd[0], gx[0], gw[0], same],
                "rel": [fwd[1], gx[1], gw[1]]})

for size in [(4, 1), (4, 3), (6, 127), (3, 4097), (1, 1 << 20), (257,), (2, 3, 8), (0, 16), (6, 0), (40, 33)]:
    for dtype in (["float32", "bfloat16"] if size[-1] < 4096 else ["float32"]):
        case(size, dtype, 1e-6 if len(out) % 2 else 1e-2, "registers" if size[-1] <= m.BACKWARD_ROW_CAP else "loop")
m.ROW_CAP, m.BACKWARD_ROW_CAP, m.LOOP_CHUNK = 64, 32, 16  # the loop route at small sizes
for size in [(6, 127), (3, 4097), (257,), (40, 65), (2, 3, 33)]:
    case(size, "float16", 1e-6, "loop")
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_triton_kernels_under_the_interpreter_match_the_reference(run_python):
    """forward, dx and dweight against float64 at h = 1, 3, 127, 4097, a row of 2^20 (the loop
    route), 1-D, 3-D and empty sizes; the loop route again with the caps lowered; the backward
    twice gives the same bits."""
    proc = run_python(INTERPRETED, env_extra={"TRITON_INTERPRET": "1"}, timeout=600)
    assert proc.returncode == 0, describe(proc)
    results = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert len(results) >= 20
    bad = [r for r in results if not all(r["ok"])]
    assert not bad, json.dumps(bad, indent=1)


INTERPRETED_OPS = r"""
import torch
import workbench as wb
k = wb.load_source("rmsnorm", {path!r}, name="triton_any")
assert k.kind == "triton" and k.device == "cpu" and len(k.info["ops"]) == 2
x, w = torch.randn(6, 40, requires_grad=True), torch.randn(40, requires_grad=True)
y = k(x.detach(), w.detach())  # the handle's direct path, CPU tensors: no CUDA look-up on the way
assert torch.equal(y, k.op_overload(x.detach(), w.detach(), 1e-6)) and not torch.cuda.is_initialized()
k(x, w).pow(2).sum().backward()  # autograd: the forward op's formula calls the backward op
dx, dw = k.backward(torch.ones(6, 40), x.detach(), w.detach())
ref = k.spec.run_reference_backward([torch.ones(6, 40)], [x, w], {{"eps": 1e-6}})
assert torch.allclose(dx.double(), ref[0], atol=1e-4) and torch.allclose(dw.double(), ref[1], atol=1e-4)
gx, gw = torch.autograd.grad(k(x, w).pow(2).sum(), [x, w], create_graph=True)  # double backward
(gx.sum() + gw.sum()).backward()
def f(x, w):
    return torch.nn.functional.silu(k(x * 2.0, w, eps=1e-6)).sum()
ex = torch._dynamo.explain(f)(x.detach(), w.detach())
assert ex.graph_break_count == 0 and ex.graph_count == 1, ex.break_reasons
try:
    k.op_overload(torch.empty(4, 8, device="meta"), torch.empty(7, device="meta"), 1e-6)
except ValueError as e:
    assert "weight must have shape [8]" in str(e), e
else:
    raise AssertionError("the fake accepted a bad weight")
print("OK", wb.check("rmsnorm", k, dtypes=["float32"], shapes=[(4, 3), (5, 127), (0, 16), (6, 0)]).summary())
"""


@pytest.mark.slow
def test_triton_ops_under_the_interpreter(run_python, tmp_path):
    """A copy of the triton variant declared for any device runs through its two triton_ops on the
    CPU: autograd, double backward (the eager fallback), a spec-derived fake, dynamo with no
    graph break, the check matrix."""
    path = tmp_path / "triton_any.py"
    path.write_text((KERNELS / "triton.py").read_text().replace('"device": "cuda"', '"device": "any"'))
    proc = run_python(INTERPRETED_OPS.format(path=str(path)), env_extra={"TRITON_INTERPRET": "1"}, timeout=600)
    assert proc.returncode == 0 and "OK" in proc.stdout and "cases passed" in proc.stdout, describe(proc)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_triton_kernels_compile_for_sm90(dtype):
    """Triton's compiler (not the interpreter) takes every kernel and route, GPU or not; the
    in-register routes do not spill."""
    pytest.importorskip("triton")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    m = wb.load(OP, "triton").build.module
    target = GPUTarget("cuda", 90, 32)
    ptr = f"*{dtype}"
    fwd = {"x_ptr": ptr, "w_ptr": ptr, "y_ptr": ptr, "h": "i32", "eps": "fp32", "BLOCK": "constexpr", "LOOP": "constexpr"}
    bwd = {"dy_ptr": ptr, "x_ptr": ptr, "w_ptr": ptr, "dx_ptr": ptr, "partial_ptr": "*fp32", "stats_ptr": "*fp32",
           "rows": "i32", "h": "i32", "eps": "fp32", "programs": "i32", "BLOCK": "constexpr", "LOOP": "constexpr"}
    for kernel, sig, cap in ((m._forward_kernel, fwd, m.ROW_CAP), (m._backward_kernel, bwd, m.BACKWARD_ROW_CAP)):
        for h in (127, cap, cap + 1):
            block, loop, warps = m._plan(h, cap)
            c = triton.compile(ASTSource(kernel, signature=sig, constexprs={"BLOCK": block, "LOOP": loop}),
                               target=target, options={"num_warps": warps})
            assert "cubin" in c.asm
    c = triton.compile(ASTSource(m._sum_partials_kernel, signature={"partial_ptr": "*fp32", "out_ptr": ptr, "n": "i32",
                                                                    "h": "i32", "BLOCK": "constexpr"},
                                 constexprs={"BLOCK": m.SUM_BLOCK}), target=target, options={"num_warps": 4})
    assert "cubin" in c.asm


# ----------------------------------------------------------------------------- GPU

@pytest.fixture(scope="module", params=PY_GPU_VARIANTS)
def py_gpu_kernel(request):
    return wb.load(OP, request.param)


def _attrs():
    return SPEC.sample_attrs()[0]


@gpu
def test_gpu_check_matrix(py_gpu_kernel):
    report = wb.check(OP, py_gpu_kernel)
    assert report.ok, report.summary()
    wide = wb.check(OP, py_gpu_kernel, seed=1234,
                    shapes=[(1, 8), (3, 4096), (129, 1024), (1000, 264), (7, 3, 520), (2, 16392), (4, 1 << 20)])
    assert wide.ok, wide.summary()


@gpu
def test_gpu_gradcheck(py_gpu_kernel):
    report = wb.gradcheck(OP, py_gpu_kernel)
    assert report.ok, report.summary()


@gpu
@pytest.mark.parametrize("variant", PY_GPU_VARIANTS + ["vectorized"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_gpu_compile_fullgraph_no_graph_break(variant, dtype):
    k = wb.load(OP, variant)
    x, w = _inputs((64, 4096), dtype, "cuda", seed=5)

    def f(x, w):
        return torch.nn.functional.silu(k(x, w, eps=1e-6)) * 2.0

    torch._dynamo.reset()
    ex = torch._dynamo.explain(f)(x, w)
    assert ex.graph_break_count == 0 and ex.graph_count == 1, ex.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: k(x, w, eps=1e-6), fullgraph=True)
    torch.testing.assert_close(compiled(x, w), k(x, w, eps=1e-6), rtol=1e-2, atol=1e-2)
    torch._dynamo.reset()
    full = torch.compile(f, fullgraph=True)
    leaves = [t.detach().requires_grad_() for t in (x, w)]
    full(*leaves).float().sum().backward()
    again = [t.detach().requires_grad_() for t in (x, w)]
    f(*again).float().sum().backward()
    for a, b in zip(leaves, again):  # by norm: inductor fuses silu's backward into other roundings in bf16
        err = (a.grad.float() - b.grad.float()).norm() / b.grad.float().norm()
        assert err < (2e-2 if dtype == torch.bfloat16 else 1e-5), (variant, err.item())


@gpu
def test_gpu_opcheck_the_triton_ops():
    k = wb.load(OP, "triton")
    fwd, bwd = (getattr(torch.ops.workbench_py, name).default for name in k.info["ops"])
    for size in [(5, 127), (3, 4097), (2, 3, 8), (2, 1 << 15)]:
        x, w = _inputs(size, torch.float32, "cuda", seed=6)
        torch.library.opcheck(fwd, (x, w, 1e-6))
        torch.library.opcheck(fwd, (x.requires_grad_(), w.requires_grad_(), 1e-6))
        torch.library.opcheck(bwd, (torch.randn_like(x), x.detach(), w.detach(), 1e-6))


@gpu
def test_gpu_bad_input_on_cuda(py_gpu_kernel):
    for case in SPEC.all_error_cases("cuda"):
        tensors, attrs = case.build("cuda", torch.Generator("cuda").manual_seed(5))
        with pytest.raises(case.error) as e:
            py_gpu_kernel(*tensors, **attrs)
        assert case.match in str(e.value), (case.what, str(e.value))
    if py_gpu_kernel.info["device"] == "cuda":
        with pytest.raises(RuntimeError, match="variant 'triton' runs on CUDA tensors; x is on cpu"):
            py_gpu_kernel(*_inputs((4, 8)))


@gpu
def test_gpu_triton_dweight_is_bit_identical_run_to_run():
    k = wb.load(OP, "triton")
    gen = torch.Generator("cuda").manual_seed(7)
    for rows, h in [(4096, 512), (4096, 4096), (1024, 8192), (512, 16384), (300, 4097), (8, 1 << 17), (1, 1 << 20)]:
        x, w, dy = (torch.randn(s, device="cuda", generator=gen).to(torch.bfloat16) for s in ((rows, h), (h,), (rows, h)))
        first = k.backward(dy, x, w)
        for _ in range(3):
            assert all(torch.equal(a, b) for a, b in zip(first, k.backward(dy, x, w))), (rows, h)


@gpu
def test_gpu_triton_non_default_stream_and_double_backward():
    k = wb.load(OP, "triton")
    x, w = _inputs((2048, 4096), torch.bfloat16, "cuda", seed=2)
    expected = k(x, w)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x2 = x.clone()
        x2.mul_(1.0)
        got = k(x2, w)
    side.synchronize()
    assert torch.equal(got, expected)
    x, w = (t.requires_grad_() for t in _inputs((16, 64), torch.float32, "cuda", seed=3))
    gx, gw = torch.autograd.grad(k(x, w).pow(2).sum(), [x, w], create_graph=True)
    (gx.sum() + gw.sum()).backward()  # the eager math's derivative of the backward
    assert torch.isfinite(x.grad).all() and torch.isfinite(w.grad).all()


@gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_gpu_triton_on_a_non_current_device():
    k = wb.load(OP, "triton")
    x, w = _inputs((64, 512), torch.float32, "cuda:1", seed=3)
    with torch.cuda.device(0):
        y = k(x, w)
        dx, dw = k.backward(torch.ones_like(y), x, w)
    assert y.device == x.device and dx.device == x.device
    assert correctness.compare(y, SPEC.run_reference([x, w], _attrs())[0], torch.float32, terms=512)[0]


@gpu
def test_gpu_triton_over_int32_elements():
    k = wb.load(OP, "triton")
    cols = 4096
    rows = (2**31) // cols + 3
    gen = torch.Generator("cuda").manual_seed(4)
    x, w = SPEC.new_inputs((rows, cols), torch.bfloat16, "cuda", gen)
    y = k(x, w)
    for sl in (slice(0, 4), slice(rows - 4, rows)):
        ok, rel, *_ = correctness.compare(y[sl], SPEC.run_reference([x[sl], w], _attrs())[0], "bfloat16", terms=cols)
        assert ok, (sl, rel)
    del y
    dy = torch.empty(rows, cols, device="cuda", dtype=torch.bfloat16).normal_(generator=gen)
    dx, _ = k.backward(dy, x, w)
    for sl in (slice(0, 4), slice(rows - 4, rows)):
        ref = SPEC.run_reference_backward((dy[sl],), [x[sl], w], _attrs())
        ok, rel, *_ = correctness.compare(dx[sl], ref[0], "bfloat16")
        assert ok, (sl, rel)
