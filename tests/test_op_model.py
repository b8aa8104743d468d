"""The op model itself: an op defined from strings in a running process (an output shape unlike any
input's, several outputs, a non-differentiable input, a forward-only variant), editing one op's
binding rebuilds that binding alone, the declaration's words are the harness's, and the package's
structure (no import cycles, no generic module naming an op)."""
from __future__ import annotations

import ast
import dataclasses
import json
import pathlib
import re

import pytest
import torch

import workbench as wb
from workbench import config
from workbench.run import loader
from workbench.run.process_state import STATE
from workbench.model import registry
from workbench.model.shapes import DimPattern, ShapeBinder

from conftest import describe

PACKAGE = pathlib.Path(wb.__file__).parent


def test_ops_is_still_a_function_after_a_load(cpu_kernel):
    """The specs sub-package is not called `ops`: importing it cannot replace wb.ops."""
    wb.load("elementwise_mul", "cpu")
    assert callable(wb.ops) and "bias_gelu" in wb.ops()


# ----------------------------------------------------------------------------- a new op in a running process

ROW_STATS = r'''
import json, sys, torch
import workbench as wb
from workbench.run import loader
from workbench.run.process_state import STATE

k = wb.load("bias_gelu", "cpu")        # a process that already has another op loaded
x5, b5 = torch.randn(5, 7), torch.randn(7)
y_before = k(x5, b5)

HEADER = """
#pragma once
#include "wb_variant.h"
typedef struct RowStatsArgs { int dtype; int64_t rows, cols; const void* x; const void* w; void* s1; void* s2;
                              const void* g1; const void* g2; void* dx; } RowStatsArgs;
typedef struct RowStatsLaunchers {
  int (*forward)(const RowStatsArgs*, const WbLaunch*);
  int (*backward)(const RowStatsArgs*, const WbLaunch*);
} RowStatsLaunchers;
"""

BINDING = """
#include "row_stats.h"
#include "wb_binding.h"
static int forward(const WbCall& c, const RowStatsLaunchers& l, const WbLaunch* launch) {
  const RowStatsArgs a{c.dtype, wb_rows(&c.inputs[0]), wb_last_dim(&c.inputs[0]), c.inputs[0].data,
                       c.inputs[1].data, c.outputs[0].data, c.outputs[1].data, nullptr, nullptr, nullptr};
  return l.forward(&a, launch);
}
static int backward(const WbCall& c, const RowStatsLaunchers& l, const WbLaunch* launch) {
  const RowStatsArgs a{c.dtype, wb_rows(&c.inputs[2]), wb_last_dim(&c.inputs[2]), c.inputs[2].data,
                       c.inputs[3].data, nullptr, nullptr, c.inputs[0].data, c.inputs[1].data, c.outputs[0].data};
  return l.backward(&a, launch);
}
WB_EXPORT_BINDING(row_stats, RowStatsLaunchers, forward, backward, nullptr, nullptr)
"""

VARIANT = """
#include "row_stats.h"
#include "wb_cpu.h"
// s1[r] = sum_c x w, s2[r] = sum_c x^2 w; dx = g1 w + 2 g2 x w. Float64 only: a test op.
static int forward(const RowStatsArgs* a, const WbLaunch*) {
  if (a->dtype != WB_FLOAT64) return WB_ERR_DTYPE;
  const double *x = (const double*)a->x, *w = (const double*)a->w;
  for (int64_t r = 0; r < a->rows; ++r) {
    double s1 = 0, s2 = 0;
    for (int64_t c = 0; c < a->cols; ++c) { s1 += x[r * a->cols + c] * w[c]; s2 += x[r * a->cols + c] * x[r * a->cols + c] * w[c]; }
    ((double*)a->s1)[r] = s1; ((double*)a->s2)[r] = s2;
  }
  return WB_OK;
}
static int backward(const RowStatsArgs* a, const WbLaunch*) {
  const double *x = (const double*)a->x, *w = (const double*)a->w, *g1 = (const double*)a->g1, *g2 = (const double*)a->g2;
  for (int64_t r = 0; r < a->rows; ++r)
    for (int64_t c = 0; c < a->cols; ++c)
      ((double*)a->dx)[r * a->cols + c] = g1[r] * w[c] + 2 * g2[r] * x[r * a->cols + c] * w[c];
  return WB_OK;
}
static const RowStatsLaunchers launchers = {forward, BACKWARD};
WB_EXPORT_VARIANT(row_stats, WB_DEVICE_CPU, WB_F64, "test op: weighted row sums", launchers, wb_cpu_status_string)
"""

def reference(x, w):
    return (x * w).sum(-1), (x * x * w).sum(-1)

spec = wb.OpSpec(
    name="row_stats", doc="weighted row sums of x and x^2",
    inputs=(wb.Tensor("x", "... n"), wb.Tensor("w", "n", differentiable=False)),
    outputs=(wb.Output("s1", "...", terms="n"), wb.Output("s2", "...", terms="n")),
    reference=reference, eager=reference,
    check_sizes=((3, 5), (7,), (2, 3, 4), (0, 3), (4, 0)))
wb.define_op(spec, header=HEADER, binding=BINDING)
mine = wb.load_inline("row_stats", VARIANT.replace("BACKWARD", "backward"), name="cpu_mine")
out = {"ops": wb.ops(), "harness_built_again": STATE.harness["built"]}
x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
w = torch.rand(6, dtype=torch.float64)
s1, s2 = mine(x, w)
out["shapes"] = [list(s1.shape), list(s2.shape)]
out["forward_ok"] = bool(torch.allclose(s1, (x * w).sum(-1)) and torch.allclose(s2, (x * x * w).sum(-1)))
s1.sum().backward()  # s2 unused: its gradient is zero
out["grad_unused_output_ok"] = bool(torch.allclose(x.grad, w.expand(4, 6)))
out["check"] = wb.check("row_stats", mine, seed=1).ok
out["gradcheck"] = wb.gradcheck("row_stats", mine, seed=1).ok
try:
    torch.ops.workbench.row_stats(x, w.float(), "cpu_mine")
except TypeError as e:
    out["dtype_error"] = str(e).splitlines()[0]
fwd_only = wb.load_inline("row_stats", VARIANT.replace("BACKWARD", "nullptr"), name="fwd_only")
out["steps"] = list(fwd_only.steps)
y = fwd_only(x, w)[0]
try:
    y.sum().backward()
except NotImplementedError as e:
    out["no_backward"] = str(e).splitlines()[0]
out["check_fwd_only"] = [wb.check("row_stats", fwd_only, seed=2).ok, wb.check("row_stats", fwd_only).skipped]
out["bias_gelu_still_runs"] = bool(torch.equal(k(x5, b5), y_before))
print("RESULT " + json.dumps(out))
'''


def test_an_op_from_strings_joins_a_running_process(run_python, cpu_kernel):
    proc = run_python(ROW_STATS, timeout=600)
    assert proc.returncode == 0, describe(proc)
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert "row_stats" in out["ops"] and "bias_gelu" in out["ops"]
    assert out["harness_built_again"] is False      # the harness knows no op: nothing of it rebuilt
    assert out["shapes"] == [[4], [4]] and out["forward_ok"] and out["grad_unused_output_ok"]
    assert out["check"] and out["gradcheck"]
    assert out["dtype_error"] == "workbench::row_stats: w must have the dtype of x (float64); got float32"
    assert out["steps"] == ["forward"]
    assert out["no_backward"] == "row_stats/fwd_only has no backward; gradients need a variant with one"
    assert out["check_fwd_only"][0] is True
    assert any("has no backward" in s for s in out["check_fwd_only"][1])
    assert out["bias_gelu_still_runs"]


DECLARED_UNDER_MODES = """
import torch, workbench as wb
from torch.utils._python_dispatch import TorchDispatchMode
from torch._subclasses.fake_tensor import FakeTensorMode
seen = []
class Seen(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        seen.append(str(func))
        return func(*args, **(kwargs or {}))
with Seen():
    k = wb.load("bias_gelu", "cpu")
with FakeTensorMode():
    m = wb.load("elementwise_mul", "cpu")
x = torch.zeros(2, 3)
print("RESULT", k(x, torch.zeros(3)).tolist(), m(x + 1, x + 2).tolist(), "workbench_harness.define_op.default" in seen)
"""


def test_an_ops_first_load_under_a_dispatch_mode_declares_it(run_python, cpu_kernel):
    """The declaration reaches the harness through a dispatcher op (workbench_harness.define_op): a
    TorchDispatchMode active at an op's first load in a process sees it and passes it on, and under
    FakeTensorMode the op is declared all the same (no tensor in it to fake)."""
    proc = run_python(DECLARED_UNDER_MODES, timeout=600)
    assert proc.returncode == 0, describe(proc)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    assert line == "RESULT [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]] [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]] True", line


def test_a_forward_only_tree_variant_refuses_backward_by_name(wb, cpu_kernel, cpu_source_text):
    src = cpu_source_text.replace("{forward, backward, workspace_bytes}", "{forward, nullptr, nullptr}")
    assert src != cpu_source_text
    k = wb.load_inline("bias_gelu", src, name="fwd_only_cpu")
    x = torch.randn(4, 7, requires_grad=True)
    y = k(x, torch.randn(7))
    with pytest.raises(NotImplementedError, match="bias_gelu/fwd_only_cpu has no backward; gradients need a variant"):
        y.sum().backward()
    with pytest.raises(NotImplementedError, match="has no backward"):
        k.backward(torch.ones(4, 7), x.detach(), torch.randn(7))
    report = wb.check("bias_gelu", k, dtypes=["float32"], seed=1)
    assert report.ok and any("has no backward" in s for s in report.skipped), report.summary()
    assert "forward only" in repr(k)
    r = wb.bench("bias_gelu", variants=[k], shapes=[(8, 16)], directions=["fwd", "bwd"], baselines=("eager",),
                 budget_s=0.02)
    assert {(row["direction"], row["variant"]) for row in r.rows} == {("fwd", "eager"), ("fwd", "fwd_only_cpu"),
                                                                         ("bwd", "eager")}
    assert "float32 bwd: skipped fwd_only_cpu (a forward-only variant)" in r.notes


def test_editing_one_binding_rebuilds_that_binding_alone(wb, cpu_kernel, tmp_path, monkeypatch):
    wb.load("elementwise_mul", "cpu")
    harness_key = STATE.harness["key"]
    before = dict(STATE.bindings)
    real = registry.sources("elementwise_mul")
    edited = tmp_path / "elementwise_mul.cpp"
    edited.write_text("// an edit\n" + real.binding.read_text())
    monkeypatch.setattr(registry, "resolve", lambda op, _real=registry.resolve: (
        dataclasses.replace(_real(op), sources=registry.OpSources(real.kernel_dir, real.header, edited))
        if op == "elementwise_mul" else _real(op)))
    loader.ensure_op(registry.resolve("elementwise_mul"))
    loader.ensure_op(registry.resolve("bias_gelu"))
    assert STATE.bindings["elementwise_mul"] != before["elementwise_mul"]
    assert STATE.bindings["bias_gelu"] == before["bias_gelu"]
    assert STATE.harness["key"] == harness_key
    x = torch.randn(3, 4)
    torch.testing.assert_close(torch.ops.workbench.elementwise_mul(x, x, "cpu"), x * x)


COUNT_LOOKUPS = r'''
import collections, json, pathlib
import workbench as wb
from workbench.model import registry

calls = collections.Counter()
for name in ("resolve", "check_op", "_is_tree_op", "_tree_ops", "_sources", "_variant_files", "_import_spec",
             "_export_args", "static_variant", "python_variant", "check_not_shadowing"):
    setattr(registry, name, lambda *a, _f=getattr(registry, name), _n=name, **k: (calls.update([_n]), _f(*a, **k))[1])
out = {}
for what, load in (("cold", lambda: wb.load("elementwise_mul", "cpu")), ("warm", lambda: wb.load("elementwise_mul", "cpu")),
                   ("inline", lambda: wb.load_inline("elementwise_mul", SOURCE, name="counted"))):
    if what == "inline":
        SOURCE = registry.variant_source("elementwise_mul", "cpu").read_text()
        calls.clear()
    k = load()
    out[what] = dict(calls)
    out[what + "_declared"] = (k.device, list(k.dtypes), k.description) == (
        k.info["device"], k.info["dtypes"], k.info["description"])
    calls.clear()
print("RESULT " + json.dumps(out))
'''


def test_a_load_resolves_the_op_once_and_reads_its_declaration_from_the_library(run_python, cpu_kernel):
    """Issue 25, item 3 and issue 46: the op is looked up once per load (its files stat'ed once, its
    folder listed once, its spec imported once on a cold load) and carried down, on a cold load (a
    fresh process), a warm one and a load_inline; what a C++ variant declares comes from its
    library (the harness): no load reads the source's macro, not even a string's."""
    proc = run_python(COUNT_LOOKUPS)
    assert proc.returncode == 0, describe(proc)
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    once = {"resolve": 1, "check_op": 1, "_is_tree_op": 1, "_sources": 1, "_variant_files": 1}
    assert out["cold"] == {**once, "_import_spec": 1}, out
    assert out["warm"] == once, out
    assert out["inline"] == {**once, "check_not_shadowing": 1}, out
    assert out["cold_declared"] and out["warm_declared"] and out["inline_declared"]


def test_another_build_of_the_harness_is_found_among_torchs_loaded_libraries(cpu_kernel, tmp_path):
    """torch.ops.workbench is registered once per process: a second build of the harness is refused
    before it is loaded, found with public torch (torch.ops.loaded_libraries), not a dispatcher dump."""
    import ctypes

    # The harness this process loaded (from its build's staging folder, where this process built it).
    loaded = [p for p in torch.ops.loaded_libraries if hasattr(ctypes.CDLL(p), "workbench_harness_info")]
    assert len(loaded) == 1, torch.ops.loaded_libraries
    assert not loader._other_harness_loaded(pathlib.Path(loaded[0]))
    assert loader._other_harness_loaded(tmp_path / "wb_harness_another_build.so")


def test_the_loaded_state_has_one_owner():
    """The loader keeps no state of its own: run/process_state.py's STATE is the one record of what is loaded."""
    from workbench.run import kernel, process_state

    for module in (loader, kernel, registry):
        held = [n for n, v in vars(module).items() if isinstance(v, (dict, set, list)) and not n.isupper()
                and not n.startswith("__") and n not in ("_specs", "_inline_sources")]
        assert held == [], (module.__name__, held)
    assert isinstance(process_state.STATE, process_state.LoadedState)


def test_a_library_without_the_expected_table_is_refused_naming_what_it_must_export(wb, cpu_kernel):
    """The harness looks a library's table up one way for variants and bindings alike."""
    k = wb.load("vector_add", "cpu")
    with pytest.raises(wb.WorkbenchError, match=r"exports no workbench_op_binding\(\); an op's binding must end "
                                                r"with WB_EXPORT_BINDING"):
        loader._call_harness("workbench_register_binding", "vector_add", str(k.library), "contract")
    binding = pathlib.Path(loader.get_or_build(loader.binding_piece(registry.resolve("vector_add"))).library)
    with pytest.raises(wb.WorkbenchError, match=r"exports no workbench_variant_info\(\); a variant source must end "
                                                r"with WB_EXPORT_VARIANT"):
        loader._call_harness("workbench_register_variant", "vector_add", "not_a_variant", "0000000000", str(binding),
                             "contract")


def test_variant_built_against_another_header_is_refused(wb, cpu_kernel):
    """The contract check: a variant registered with another op header's hash than the binding's."""
    k = wb.load("bias_gelu", "cpu")
    loader._call_harness("workbench_register_variant", "bias_gelu", "old_contract", "0000000000", str(k.library),
                         "not-the-header-hash")
    with pytest.raises(RuntimeError, match=r"variant 'old_contract@0000000000' was built against another "
                                           r"bias_gelu.h than the loaded binding"):
        torch.ops.workbench.bias_gelu(torch.randn(2, 3), torch.randn(3), "old_contract")


# ----------------------------------------------------------------------------- the shape rule

SHAPE_CASES = [
    (["... n", "n"], [(4, 7), (6,)], "b must have shape [7] ([n] with n = 7 from a); got shape [6]"),
    (["... n", "n"], [(), (1,)], "a must have at least 1 dimension ([..., n]); got a 0-dim tensor"),
    (["...", "..."], [(4, 7), (4, 6)], "b must have shape [4, 7] ([...] with ... = [4, 7] from a); got shape [4, 6]"),
    (["m k", "k n"], [(2, 3), (4, 5)], "b must have shape [3, n] ([k, n] with k = 3 from a); got shape [4, 5]"),
    (["m k", "k n"], [(2, 3, 1), (3, 5)], "a must have 2 dimensions ([m, k]); got shape [2, 3, 1]"),
    (["n n", "n"], [(3, 4), (3,)], "a must have shape [n, n] ([n, n]); got shape [3, 4]"),
    (["m 4", "m"], [(3, 5), (3,)], "a must have shape [m, 4] ([m, 4]); got shape [3, 5]"),
]

PROBE = r'''
import json, sys, torch
import workbench as wb
cases = json.loads(sys.argv[1])
BINDING = """
#include "wb_binding.h"
typedef struct L { int (*forward)(const void*, const WbLaunch*); int (*backward)(const void*, const WbLaunch*); } L;
static int forward(const WbCall&, const L&, const WbLaunch*) { return WB_ERR_ARGUMENT; }
WB_EXPORT_BINDING(OP, L, forward, nullptr, nullptr, nullptr)
"""
out = []
for i, (patterns, shapes, _) in enumerate(cases):
    name = f"shape_probe_{i}"
    spec = wb.OpSpec(name=name, doc="probe", inputs=(wb.Tensor("a", patterns[0], differentiable=False),
                                                     wb.Tensor("b", patterns[1], differentiable=False)),
                     outputs=(wb.Output("y", patterns[0]),), reference=None, eager=None)
    wb.define_op(spec, header="#pragma once\n", binding=BINDING.replace("OP", name))
    try:
        getattr(torch.ops.workbench, name)(torch.zeros(shapes[0]), torch.zeros(shapes[1]), "none")
        out.append("no error")
    except ValueError as e:
        out.append(str(e).splitlines()[0])
print("RESULT " + json.dumps(out))
'''


def test_the_python_shape_rule_and_the_harness_say_the_same(run_python, cpu_kernel):
    """workbench/model/shapes.py (the fakes) against bindings/harness/op_decl.cpp (real calls): the same
    message for the same mistake, for bias-like, same-shape, matmul-like and literal patterns."""
    proc = run_python(PROBE, args=[json.dumps(SHAPE_CASES)], timeout=600)
    assert proc.returncode == 0, describe(proc)
    harness = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    for i, ((patterns, shapes, message), from_cpp) in enumerate(zip(SHAPE_CASES, harness)):
        b = ShapeBinder()
        from_python = next(filter(None, (b.bind(n, DimPattern.parse(p), s)
                                         for n, p, s in zip(("a", "b"), patterns, shapes))), "")
        assert from_python == message
        assert from_cpp == f"workbench::shape_probe_{i}: {message}"


# (what is wrong, op, tensors, attributes): each fails the call check, in C++ and in Python alike
CALL_CASES = [
    ("a bias of another length", "bias_gelu", lambda: (torch.randn(4, 7), torch.randn(6)), ()),
    ("bias float64", "bias_gelu", lambda: (torch.randn(4, 7), torch.randn(7, dtype=torch.float64)), ()),
    ("int32 tensors", "bias_gelu", lambda: (torch.ones(4, 7, dtype=torch.int32), torch.ones(7, dtype=torch.int32)), ()),
    ("9 dims", "bias_gelu", lambda: (torch.randn((1,) * 8 + (7,)), torch.randn(7)), ()),
    ("a 0-dim x", "bias_gelu", lambda: (torch.tensor(1.0), torch.randn(7)), ()),
    ("eps below its minimum", "rmsnorm", lambda: (torch.randn(3, 5), torch.randn(5)), (-1.0,)),
    ("eps NaN", "rmsnorm", lambda: (torch.randn(3, 5), torch.randn(5)), (float("nan"),)),
    ("scale infinite", "scale_bias_relu", lambda: (torch.randn(3, 5), torch.randn(5)), (float("inf"),)),
]


@pytest.mark.parametrize("what, op, tensors, attrs", CALL_CASES, ids=[c[0] for c in CALL_CASES])
def test_the_call_check_says_the_same_in_cpp_and_python(wb, what, op, tensors, attrs):
    """bindings/harness/call_check.cpp (a real call) and workbench/model/shapes.py's check_call (the fake
    implementation, on meta tensors): the same error type and words for the same bad call."""
    wb.load(op, "cpu")
    ts = tensors()
    with pytest.raises((ValueError, TypeError, RuntimeError)) as real:
        getattr(torch.ops.workbench, op)(*ts, *attrs, "cpu")
    with pytest.raises((ValueError, TypeError, RuntimeError)) as fake:
        getattr(torch.ops.workbench, op)(*(t.to("meta") for t in ts), *attrs, "cpu")
    assert type(real.value) is type(fake.value)
    assert str(real.value).splitlines()[0] == str(fake.value).splitlines()[0]
    assert str(real.value).startswith(f"workbench::{op}: ")


# ----------------------------------------------------------------------------- declarations

NO_TORCH = r'''
import json, sys
sys.modules["torch"] = None  # any import of torch fails
from workbench.model import registry
out = {}
for op in registry.ops():
    spec = registry.spec(op)
    size = spec.check_sizes[0] if spec.check_sizes else spec.sample_size()
    out[op] = {"declaration": spec.declaration(), "fields": spec.fields(), "shapes": [list(s) for s in spec.input_shapes(size)],
               "ladder": list(spec.ladder), "variants": [v.name for v in registry.variants(op)]}
print("RESULT " + json.dumps(out))
'''


def test_every_declaration_reads_without_torch(run_python):
    """A declaration is torch-free data: a process where importing torch fails reads every op's
    (the harness's declaration text, shapes, the ladder, the variants) and gets what this one does."""
    proc = run_python(NO_TORCH)
    assert proc.returncode == 0, describe(proc)
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert sorted(out) == registry.ops()
    for op, got in out.items():
        spec = registry.spec(op)
        assert got["declaration"] == spec.declaration() and got["ladder"] == list(spec.ladder), op
        assert got["fields"] == json.loads(json.dumps(spec.fields())), op
        tree = registry.variant_sources(op)  # this process may hold variants built from strings too
        assert got["variants"] == [v.name for v in registry.variants(op) if v.name in tree], op


def test_the_harness_takes_the_declaration_as_data(wb, cpu_kernel):
    """torch's harness is handed spec.fields(), typed lists through the dispatcher (no text to
    parse): the same fields again declare nothing, other fields for a declared op are refused with
    its schema named, and columns of different lengths are refused before anything is declared."""
    fields = list(registry.spec("bias_gelu").fields())
    define = torch.ops.workbench_harness.define_op
    assert define(*fields) is False
    other = list(fields)
    other[4] = ["... m", "m"]  # the inputs' dims
    with pytest.raises(ValueError, match=r"already declared in this process with other inputs.*bias_gelu\(Tensor x"):
        define(*other)
    short = ["wb_never_declared", *fields[1:]]
    short[5] = [True]  # one differentiable flag for two inputs
    with pytest.raises(ValueError, match="malformed op declaration \\(columns of different lengths\\)"):
        define(*short)
    assert not hasattr(torch.ops.workbench, "wb_never_declared")


def test_the_math_is_named_and_resolves(wb):
    """Each tree op's declaration names its math in workbench/specs/<op>_math.py; read in a torch
    process, every math field is the function itself (timed and traced as it is)."""
    from workbench.model.opmath import MathRef, declared

    for op in registry.ops():
        spec = registry.spec(op)
        for field in ("reference", "eager", "make_inputs", "reference_backward", "double_backward", "bytes_moved"):
            raw = declared(spec, field)
            assert raw is None or (isinstance(raw, MathRef) and raw.module == f"workbench.specs.{op}_math"), (op, field)
            assert not isinstance(getattr(spec, field), MathRef), (op, field)
        assert callable(spec.reference) and callable(spec.eager), op
        assert not any(isinstance(f, MathRef) for f in spec.baselines.values()), op
        if spec.layer is not None and spec.layer.init is not None:
            assert callable(spec.layer.init.resolve() if isinstance(spec.layer.init, MathRef) else spec.layer.init)
        for case in spec.error_cases:
            assert callable(case.build.resolve() if isinstance(case.build, MathRef) else case.build), (op, case.what)


def test_one_store_of_specs(wb, cpu_kernel):
    """The registry holds the process's specs: a loaded kernel, the fakes and a second look-up all
    see the same object."""
    from workbench.run import torchops

    spec = registry.spec("bias_gelu")
    assert registry.spec("bias_gelu") is spec and cpu_kernel.spec is spec
    assert torchops.current_spec("bias_gelu") is spec
    assert not hasattr(torchops, "_specs")


def test_a_failed_define_op_leaves_nothing_behind(wb):
    """A binding that does not build: define_op raises, and the op is not left listed without one."""
    spec = wb.OpSpec(name="never_built", doc="a binding with a syntax error",
                     inputs=(wb.Tensor("x", "n"),), outputs=(wb.Output("y", "n"),), reference=None, eager=None)
    binding = "#include \"wb_binding.h\"\nthis is not C++;\nWB_EXPORT_BINDING(never_built, int, 0, 0, 0, 0)\n"
    with pytest.raises(Exception):
        wb.define_op(spec, header="#pragma once\n", binding=binding)
    assert "never_built" not in wb.ops()
    assert not hasattr(torch.ops.workbench, "never_built")  # the binding builds before the op is declared
    with pytest.raises(ValueError, match="op must be one of"):
        registry.spec("never_built")


def test_list_goes_on_past_an_op_whose_spec_fails(wb, monkeypatch, capsys):
    """python -m workbench list: one op whose declaration cannot be read is reported, the ops after
    it are still listed, and the exit status says something failed."""
    from workbench import cli

    broken = registry.ops()[0]
    monkeypatch.delitem(registry._specs, broken, raising=False)
    monkeypatch.setitem(__import__("sys").modules, f"workbench.specs.{broken}", None)  # its import fails
    assert cli.main(["list"]) == 1
    out, err = capsys.readouterr()
    assert f"cannot list {broken}" in err
    for op in registry.ops():
        assert f"\n{op}\n" in "\n" + out, op
    assert "  cpu" in out.split(f"\n{registry.ops()[-1]}\n")[-1]  # the last op's variants too


# ----------------------------------------------------------------------------- structure

def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        rel = p.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """Workbench modules `name` imports, anywhere in the file (function-level imports included)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for alias in node.names:
                cand = f"{mod}.{alias.name}"
                found.add(cand if cand in known else mod)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m in known and m != name}


def test_no_import_cycles_in_the_package():
    mods = _modules()
    known = set(mods)
    graph = {m: {d for d in _imports(m, p, known) if not m.startswith(d + ".")} for m, p in mods.items()}
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                cycle = stack[stack.index(d):] + [d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)


ROOMS = ("model", "build", "run", "measure", "explain", "ship", "exercise", "judge", "serve", "specs", "cluster")


def test_the_package_is_rooms_by_concern_each_saying_what_it_owns_and_may_import():
    """workbench/ holds the entry points and the shared vocabulary (cli, config, errors, dtypes,
    bytecode) and a few rooms; each room's docstring says what it owns and what it may import."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "bytecode.py", "cli.py", "config.py", "dtypes.py", "errors.py"], top
    rooms = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert rooms == sorted(ROOMS), rooms
    for room in ROOMS:
        doc = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text())) or ""
        assert "May import" in doc, f"workbench/{room}: its docstring says what it may import"


def test_no_module_over_450_lines():
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert max(sizes.values()) <= 450, sorted(sizes.items(), key=lambda kv: -kv[1])[:5]


def test_no_generic_module_names_an_op():
    """Only a spec (workbench/specs/<op>.py) may name an op in code; docstrings may use one as an
    example."""
    ops = registry.ops()
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "specs":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                for op in ops:
                    if re.search(rf"\b{op}\b", node.value):
                        offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value[:60]!r}")
    assert not offenders, "\n".join(offenders)


def test_one_dtype_vocabulary():
    """The dtype names are written out once (workbench/dtypes.py); other modules import them."""
    spelled = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "dtypes.py":
            continue
        text = path.read_text()
        if re.search(r'"float32",\s*"float64",\s*"float16",\s*"bfloat16"', text) or '"WB_BF16"' in text:
            spelled.append(str(path.relative_to(PACKAGE)))
    assert not spelled, spelled


def test_the_exercise_checker_is_a_package_of_small_modules():
    folder = PACKAGE / "exercise"
    assert (folder / "__init__.py").is_file()
    sizes = {p.name: len(p.read_text().splitlines()) for p in folder.glob("*.py")}
    assert len(sizes) >= 5 and max(sizes.values()) < 300, sizes


def test_generic_code_has_a_config_for_the_tree():
    """An op needs exactly its three pieces; the README's section on adding an op names them."""
    readme = (config.REPO_ROOT / "README.md").read_text()
    for piece in ("kernels/<op>/<op>.h", "bindings/<op>.cpp", "workbench/specs/<op>.py", "WB_EXPORT_BINDING",
                  "wb.define_op"):
        assert piece in readme, piece


def test_an_elementwise_op_of_the_family_is_its_math_and_declaration_in_80_lines():
    """swiglu, added on the elementwise family (kernels/common/wb_elementwise.*): its header, four
    variants, binding, declaration and math together stay within 80 lines (the family holds the
    tiles, dispatch, alignment and tail routing)."""
    root = config.REPO_ROOT
    files = [*(root / "kernels" / "swiglu").iterdir(), root / "bindings" / "swiglu.cpp",
             PACKAGE / "specs" / "swiglu.py", PACKAGE / "specs" / "swiglu_math.py"]
    lines = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in files}
    assert sum(lines.values()) <= 80, lines
    assert "swiglu" in registry.ops() and {"cpu", "scalar", "vec4", "half"} <= {v.name for v in registry.variants("swiglu")}
