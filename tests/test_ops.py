"""Every op, through the one model: each test here is parametrized over wb.ops() and runs the op's
C++ `cpu` variant, so an op added to the tree (or defined in a notebook) is held to all of it:
schemas from the spec, the check matrix, gradcheck, opcheck, torch.compile(fullgraph=True), the
bad-input cases derived from its declaration (and its own), with the fake implementation's words
equal to the C++ harness's, empty tensors, and attributes given wrongly."""
from __future__ import annotations

import secrets

import pytest
import torch

import workbench as wb
from workbench.model import registry
from workbench.model.opspec import as_tuple

OPS = registry.ops()


@pytest.fixture(scope="module", params=OPS)
def op(request, wb):
    wb.load(request.param, "cpu")
    return request.param


def _call(op, tensors, attrs, variant="cpu"):
    spec = registry.spec(op)
    return getattr(torch.ops.workbench, op)(*tensors, *[attrs[a.name] for a in spec.attrs], variant)


def _inputs(op, size, dtype=torch.float32, seed=0, requires_grad=False):
    spec = registry.spec(op)
    ts = spec.new_inputs(size, dtype, "cpu", torch.Generator().manual_seed(seed))
    return [t.requires_grad_(requires_grad and s.differentiable) for s, t in zip(spec.inputs, ts)]


def test_the_two_new_ops_are_in_the_tree():
    assert {"bias_gelu", "elementwise_mul", "scale_bias_relu"} <= set(OPS)


def test_schemas_come_from_the_spec(op):
    spec = registry.spec(op)
    assert str(getattr(torch.ops.workbench, op).default._schema) == f"workbench::{spec.schema()}"
    if spec.differentiable:
        schema = getattr(torch.ops.workbench, f"{op}_backward").default._schema
        assert str(schema) == f"workbench::{spec.backward_schema()}"


def test_check_matrix(op):
    seed = secrets.randbits(31)
    report = wb.check(op, "cpu", seed=seed)
    assert report.ok, f"seed {seed}:\n{report.summary()}"
    assert {c.layout for c in report.cases} == {"contiguous", "strided", "offset", "transposed"}
    assert {c.dtype for c in report.cases} == {"float32", "float64", "float16", "bfloat16"}
    assert any(0 in c.shape for c in report.cases), "the matrix must include empty tensors"


def test_gradcheck(op):
    report = wb.gradcheck(op, "cpu", seed=3)
    assert report.ok and "float64" in report.method, report.summary()


def _sizes_for_opcheck(op):
    spec = registry.spec(op)
    sizes = [s for s in spec.check_sizes if 0 not in s][:3]
    return sizes + [next(s for s in spec.check_sizes if 0 in s)]


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no-grad", "grad"])
def test_opcheck(op, requires_grad):
    spec = registry.spec(op)
    attrs = spec.sample_attrs()[0]
    for size in _sizes_for_opcheck(op):
        ts = _inputs(op, size, seed=21, requires_grad=requires_grad)
        args = (*ts, *attrs.values(), "cpu")
        torch.library.opcheck(getattr(torch.ops.workbench, op).default, args)
        grads = [torch.randn(s).requires_grad_(requires_grad) for s in spec.output_shapes(size)]
        torch.library.opcheck(getattr(torch.ops.workbench, f"{op}_backward").default,
                              (*grads, *[t.detach() for t in ts], *attrs.values(), "cpu"))


def test_compile_fullgraph_no_graph_break(op):
    spec = registry.spec(op)
    fn, attrs = getattr(torch.ops.workbench, op), list(spec.sample_attrs()[0].values())

    def f(*ts):  # the op between two element-wise steps; nothing but tensor code inside
        out = as_tuple(fn(ts[0] * 2.0, *ts[1:], *attrs, "cpu"))
        return sum(o.sum() for o in out) * 3.0

    size = spec.check_sizes[2]
    ts = _inputs(op, size, seed=31)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(f)(*ts)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1, explanation.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(*ts), f(*ts))
    leaves = _inputs(op, size, seed=32, requires_grad=True)
    compiled(*leaves).backward()
    again = _inputs(op, size, seed=32, requires_grad=True)
    f(*again).backward()
    for a, b in zip(leaves, again):
        if a.requires_grad:
            torch.testing.assert_close(a.grad, b.grad)


def _case_ids():
    out = []
    for o in OPS:
        for c in registry.spec(o).all_error_cases("cpu"):
            out.append(pytest.param(o, c, id=f"{o}: {c.what}"))
    return out


@pytest.mark.parametrize("op_name, case", _case_ids())
def test_bad_input_is_refused_and_named(wb, op_name, case):
    """The real call (C++ harness) raises the case's error naming the argument; where the
    declaration alone decides it, the fake implementation (meta tensors) says the same words."""
    wb.load(op_name, "cpu")
    tensors, attrs = case.build("cpu", torch.Generator().manual_seed(5))
    with pytest.raises(case.error) as real:
        _call(op_name, tensors, attrs)
    message = str(real.value).splitlines()[0]
    assert case.match in message, message
    if case.decl:
        with pytest.raises(case.error) as fake:
            _call(op_name, [t.to("meta") for t in tensors], attrs)
        assert str(fake.value).splitlines()[0] == message


def test_variant_checks_come_after_the_declaration(op):
    """A CPU variant given a dtype it does not support, and a variant name that is not loaded."""
    ts = _inputs(op, registry.spec(op).sample_size())
    attrs = registry.spec(op).sample_attrs()[0]
    with pytest.raises(ValueError, match=f"variant 'no_such' is not loaded.*workbench.load\\('{op}', 'no_such'\\)"):
        _call(op, ts, attrs, "no_such")


def test_empty_inputs_give_empty_or_zero_outputs(op):
    spec = registry.spec(op)
    attrs = spec.sample_attrs()[0]
    for size in [s for s in spec.check_sizes if 0 in s]:
        ts = _inputs(op, size, requires_grad=True)
        outs = as_tuple(_call(op, ts, attrs))
        assert [tuple(o.shape) for o in outs] == list(spec.output_shapes(size))
        assert all(torch.equal(o, torch.zeros_like(o)) for o in outs)
        sum(o.sum() for o in outs).backward()
        for s, t in zip(spec.inputs, ts):
            if s.differentiable:
                assert t.grad is not None and t.grad.shape == t.shape and torch.equal(t.grad, torch.zeros_like(t))


def test_views_give_the_contiguous_result(op):
    """Strided, transposed and offset views of the same values: bit-identical results."""
    from workbench.measure.verify import with_layout

    spec = registry.spec(op)
    attrs = spec.sample_attrs()[0]
    ts = _inputs(op, (9, 13) if len(spec.size_pattern.tokens) == 2 else spec.check_sizes[3], seed=7)
    want = as_tuple(_call(op, ts, attrs))
    for layout in ("strided", "offset", "transposed"):
        views = [with_layout(t, layout) for t in ts]
        got = as_tuple(_call(op, views, attrs))
        assert all(torch.equal(a, b) for a, b in zip(got, want)), layout


def test_attributes_missing_or_of_the_wrong_type_are_named(op):
    spec = registry.spec(op)
    k = wb.load(op, "cpu")
    ts = _inputs(op, spec.sample_size())
    for a in spec.attrs:
        others = {b.name: v for b, v in zip(spec.attrs, spec.sample_attrs()[0].values()) if b is not a}
        if a.required:
            with pytest.raises(TypeError, match=f"{op}: missing attribute {a.name}"):
                k(*ts, **others)
        with pytest.raises(TypeError, match=f"attribute {a.name} must be a {a.kind.__name__}; got str"):
            k(*ts, **{a.name: "2", **others})
        raw = [spec.sample_attrs()[0][b.name] if b is not a else "2" for b in spec.attrs]
        with pytest.raises(RuntimeError, match=a.name):
            getattr(torch.ops.workbench, op)(*ts, *raw, "cpu")
    with pytest.raises(TypeError, match="unknown attribute"):
        k(*ts, not_an_attribute=1.0, **spec.sample_attrs()[0])


def test_double_backward_matches_eager(op):
    """create_graph=True through the op (a gradient penalty): the same second derivative as the
    op's eager math, in float64."""
    spec = registry.spec(op)
    fn, attrs = getattr(torch.ops.workbench, op), list(spec.sample_attrs()[0].values())

    def penalty_grads(f):
        ts = _inputs(op, spec.check_sizes[2], torch.float64, seed=41, requires_grad=True)
        outs = as_tuple(f(*ts))
        first = torch.autograd.grad(sum((o * o.detach().sin()).sum() for o in outs), [t for t in ts if t.requires_grad],
                                    create_graph=True)
        loss = sum((g ** 2).sum() for g in first) + sum(o.sum() for o in outs)
        return torch.autograd.grad(loss, [t for t in ts if t.requires_grad])

    want = penalty_grads(lambda *ts: spec.eager(*ts, **spec.sample_attrs()[0]))
    got = penalty_grads(lambda *ts: fn(*ts, *attrs, "cpu"))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10)
