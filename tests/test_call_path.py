"""The call path (issue 26): autograd of the harness's ops is C++ at the Autograd key, so a call
runs no Python beyond the Kernel handle's own __call__; a forward with nothing requiring grad
records no graph; backward, double backward, torch.compile and opcheck still hold. Timings are not
tested here: scripts/call_overhead.py measures them."""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
import types

import pytest
from conftest import REPO_ROOT

torch = pytest.importorskip("torch")

import workbench as wb  # noqa: E402

# Python frames that run for a plain call through a Kernel handle: its __call__ and
# torch.compiler.is_dynamo_compiling; the op is called from C (bindings/harness/fast_call.cpp).
HANDLE_FRAMES = {"__call__", "is_dynamo_compiling"}
# Where a Python autograd formula would run: torch.library's autograd, autograd.Function, ours.
PYTHON_AUTOGRAD = ("/torch/_library/", "/torch/library.py", "/torch/autograd/function.py", "/workbench/")


@pytest.fixture(scope="module")
def mul():
    return wb.load("elementwise_mul", "cpu")


@pytest.fixture(scope="module")
def gelu():
    return wb.load("bias_gelu", "cpu")


def python_frames(fn) -> list[str]:
    """The Python functions fn() enters (not C functions; not this file's own), as 'file:function'."""
    seen = []

    def profile(frame, event, arg):
        if event == "call":
            seen.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return [s for s in seen if not s.startswith(__file__ + ":")]


def test_autograd_kernel_is_the_harness_one(mul):
    """The Autograd key of an op and of its backward is served by the C++ harness, not by a Python
    registration (torch.library.register_autograd)."""
    for name in ("elementwise_mul", "elementwise_mul_backward"):
        dump = torch._C._dispatch_dump(f"workbench::{name}")
        line = next(ln for ln in dump.splitlines() if ln.startswith("Autograd"))
        assert "bindings/harness/" in line, line


@pytest.mark.parametrize("requires_grad", [False, True])
def test_op_call_runs_no_python(mul, requires_grad):
    """torch.ops.workbench.<op> through its C++ callable: no Python frame, with or without a graph
    to record."""
    a, b = torch.randn(8, requires_grad=requires_grad), torch.randn(8)
    call, variant = torch.ops.workbench.elementwise_mul.default._op, mul.qualified
    call(a, b, variant)  # first call: nothing left to set up
    assert python_frames(lambda: call(a, b, variant)) == []


def test_handle_call_runs_only_the_handle(mul, gelu):
    """k(a, b) with the op's tensors alone (attributes at their defaults): no spec normalisation,
    no Python check, no Python autograd; only the handle's own frames."""
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    for k, args in ((mul, (a, b)), (gelu, (a, b[0]))):
        k(*args)
        frames = python_frames(lambda: k(*args))
        assert {f.rsplit(":", 1)[1] for f in frames} <= HANDLE_FRAMES, frames
    rms = wb.load("rmsnorm", "cpu")
    rms(a, b[0])
    assert {f.rsplit(":", 1)[1] for f in python_frames(lambda: rms(a, b[0]))} <= HANDLE_FRAMES


class Marked(torch.Tensor):
    """A tensor subclass: its calls go through __torch_function__, so never the C fast call."""


def test_fast_call_hands_back_what_it_does_not_serve(mul):
    """The handle's C caller runs a plain call (exact tensors, as many as the op's inputs) and
    returns NotImplemented for anything else, which the handle then runs through torch.ops: a
    subclass, a __torch_function__ mode, torch.jit tracing each see the op as they would there."""
    a, b = torch.randn(8), torch.randn(8)
    fast = mul._fast
    assert type(fast).__name__ == "FastCall"
    torch.testing.assert_close(fast((a, b)), a * b)
    torch.testing.assert_close(fast((torch.nn.Parameter(a), b)), a * b)  # torch's check treats it as a tensor
    assert fast((a,)) is NotImplemented and fast((a, b, a)) is NotImplemented
    assert fast((a.as_subclass(Marked), b)) is NotImplemented
    assert fast((a, None)) is NotImplemented
    out = mul(a.as_subclass(Marked), b)
    assert type(out) is Marked
    torch.testing.assert_close(out.as_subclass(torch.Tensor), a * b)

    seen = []

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Spy():
        assert fast((a, b)) is NotImplemented
        torch.testing.assert_close(mul(a, b), a * b)
    assert torch.ops.workbench.elementwise_mul.default in seen
    traced = torch.jit.trace(lambda x, y: mul(x, y), (a, b))
    assert "workbench::elementwise_mul" in str(traced.graph)
    with pytest.raises(TypeError, match="expected one tuple of tensors"):
        fast(a, b)


def test_a_handle_copies(mul):
    """copy.deepcopy of a handle (a model holding one is deep-copied whole) gives a handle that
    calls the same build, through the same C caller."""
    import copy

    a, b = torch.randn(8), torch.randn(8)
    mul(a, b)
    for twin in (copy.copy(mul), copy.deepcopy(mul)):
        assert twin._fast is mul._fast and twin.qualified == mul.qualified
        torch.testing.assert_close(twin(a, b), a * b)


def test_fast_call_raises_as_torch_ops_does(mul):
    """A call the harness refuses fails through the C caller with the type and the words it has
    through torch.ops."""
    a = torch.randn(8)
    overload = torch.ops.workbench.elementwise_mul.default
    for b, error in ((torch.randn(8, dtype=torch.float64), TypeError), (torch.randn(7), ValueError)):
        with pytest.raises(error) as through_ops:
            overload(a, b, mul.qualified)
        with pytest.raises(error) as through_handle:
            mul(a, b)
        assert str(through_handle.value) == str(through_ops.value)
        assert str(through_handle.value).startswith("workbench::elementwise_mul: b must have ")


def test_fast_call_follows_a_redefined_spec():
    """The C caller holds the attributes' defaults of the spec it was made for; a handle whose op
    is defined again with another default makes a new one (an op defined in a notebook)."""
    rms = wb.load("rmsnorm", "cpu")
    x, w = torch.randn(3, 16), torch.randn(16)
    rms(x, w)
    first = rms._fast
    spec = rms.spec
    try:
        wb.registry._specs["rmsnorm"] = dataclasses.replace(spec, attrs=[dataclasses.replace(spec.attrs[0], default=0.5)])
        torch.testing.assert_close(rms(x, w), rms(x, w, 0.5))
        assert rms._fast is not first
    finally:
        wb.registry._specs["rmsnorm"] = spec
    torch.testing.assert_close(rms(x, w), rms(x, w, spec.attrs[0].default))


def test_fast_and_normalised_calls_agree():
    """An attribute left to its default (the fast path) and the same attribute given, by position
    or by name (the spec's normalisation), run the same op."""
    rms = wb.load("rmsnorm", "cpu")
    x, w = torch.randn(3, 16), torch.randn(16)
    eps = rms.spec.attrs[0].default
    torch.testing.assert_close(rms(x, w), rms(x, w, eps))
    torch.testing.assert_close(rms(x, w), rms(x, w, eps=eps))
    assert not torch.equal(rms(x, w), rms(x, w, eps=0.5))


def test_wrong_calls_keep_their_messages(mul):
    """The fast path takes only exactly the op's tensors; other calls fail as before."""
    a = torch.randn(8)
    with pytest.raises(TypeError, match="expected tensors a, b; got 1 argument"):
        mul(a)
    with pytest.raises(ValueError, match=r"b must have shape \[8\]"):
        mul(a, torch.randn(7))


def test_no_graph_without_grad(mul):
    """Nothing requires grad, or grad mode is off: the output has no grad_fn."""
    a, b = torch.randn(8), torch.randn(8)
    assert mul(a, b).grad_fn is None and not mul(a, b).requires_grad
    a.requires_grad_()
    with torch.no_grad():
        y = mul(a, b)
    assert y.grad_fn is None and not y.requires_grad


def test_backward_is_the_variants_and_runs_no_python(mul):
    """A recorded call's node is the harness's; its backward runs <op>_backward with the same
    variant, and no Python frame runs for it."""
    a, b = torch.randn(8, dtype=torch.float64, requires_grad=True), torch.randn(8, dtype=torch.float64)
    y = mul(a, b)
    assert y.grad_fn.name() == "WorkbenchElementwiseMulBackward"
    g = torch.randn(8, dtype=torch.float64)
    # y.backward itself is Python (torch/_tensor.py, torch/autograd/); the node's apply is not.
    frames = python_frames(lambda: y.backward(g))
    assert [f for f in frames if any(p in f for p in PYTHON_AUTOGRAD)] == [], frames
    torch.testing.assert_close(a.grad, g * b)
    assert b.grad is None


def test_non_differentiable_input_requiring_grad():
    """vector_add's inputs are differentiable; reduce_sum's backward needs only x's shape: both
    give the right gradients through the C++ node."""
    k = wb.load("reduce_sum", "cpu")
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    k(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.ones_like(x))


def test_gradcheck_and_double_backward(gelu):
    """gradcheck and gradgradcheck through the C++ nodes (bias_gelu's double backward is the
    spec's; elementwise_mul's, autograd through the eager math)."""
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, b: gelu(x, b), (x, bias))
    assert torch.autograd.gradgradcheck(lambda x, b: gelu(x, b), (x, bias))
    (gx, _) = torch.autograd.grad(gelu(x, bias).sum(), (x, bias), create_graph=True)
    assert gx.grad_fn.name() == "WorkbenchBiasGeluBackwardBackward"
    mul = wb.load("elementwise_mul", "cpu")
    a, b = (torch.randn(5, dtype=torch.float64, requires_grad=True) for _ in range(2))
    assert torch.autograd.gradgradcheck(lambda a, b: mul(a, b), (a, b))


def test_node_vouches_only_for_gradients_of_its_outputs(gelu):
    """The node lets its backward skip the call check only where each gradient has its output's
    shape, dtype and device (the forward's check holds for them); a node called from Python with
    anything else gets the call check's own words."""
    x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, dtype=torch.float64, requires_grad=True)
    node = gelu(x, bias).grad_fn
    with pytest.raises(ValueError, match=r"grad_y must have shape \[2, 4\]"):
        node(torch.ones(3, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"grad_y must have the dtype of x \(float64\); got float32"):
        node(torch.ones(2, 4))
    gx, gbias = node(torch.ones(2, 4, dtype=torch.float64))
    torch.testing.assert_close(gx, gelu.backward(torch.ones(2, 4, dtype=torch.float64), x, bias)[0])


def test_unused_gradient_is_zero(gelu):
    """A backward that gets no gradient for an output (nobody used it) runs on zeros of its shape."""
    x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, dtype=torch.float64, requires_grad=True)
    gx, gbias = gelu(x, bias).grad_fn(None)
    torch.testing.assert_close(gx, torch.zeros_like(x))
    torch.testing.assert_close(gbias, torch.zeros_like(bias))


def test_compile_fullgraph_forward_and_backward(gelu):
    """torch.compile(fullgraph=True) through AOTAutograd: the forward and the backward op in the
    graph, the same gradients as eager."""
    x = torch.randn(4, 8, requires_grad=True)
    bias = torch.randn(8, requires_grad=True)
    compiled = torch.compile(lambda x, b: gelu(x, b).square().sum(), fullgraph=True, backend="aot_eager")
    compiled(x, bias).backward()
    gx, gb = x.grad.clone(), bias.grad.clone()
    x.grad = bias.grad = None
    gelu(x, bias).square().sum().backward()
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gb, bias.grad)


def test_opcheck(gelu):
    x, bias = torch.randn(3, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    torch.library.opcheck(torch.ops.workbench.bias_gelu.default, (x, bias, gelu.qualified))


def test_python_variant_checks_a_call_shape_once(monkeypatch):
    """A Python variant's call is checked as the harness checks it, once per call shape (spec,
    step, attributes, each tensor's shape, dtype and device); a bad call fails every time alike."""
    k = wb.load("rmsnorm", "pytorch")
    checks = []
    real = type(k.build)._check
    monkeypatch.setattr(type(k.build), "_check", lambda self, *a: (checks.append(a[1]), real(self, *a)))
    x, w = torch.randn(3, 16), torch.randn(16)
    k(x, w)
    k(x + 1, w)
    assert checks == ["fwd"]
    k(torch.randn(2, 16), w)
    k(x, w, eps=0.5)
    assert checks == ["fwd"] * 3
    for _ in range(2):
        with pytest.raises(ValueError, match=r"weight must have shape \[16\]"):
            k(x, torch.randn(15))
    assert len(checks) == 5


def test_overhead_script_times_a_row_and_its_twin_interleaved():
    """scripts/call_overhead.py times a wb row and its twin loop by loop in turn (A B A B ...), so a
    host whose speed drifts during the run moves both medians alike."""
    spec = importlib.util.spec_from_file_location("call_overhead", REPO_ROOT / "scripts" / "call_overhead.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    order = []
    calls, repeats = 3, 4
    medians = script.per_call_us([lambda: order.append("a"), lambda: order.append("b")], calls, repeats, lambda: None)
    timed = "".join(order[-2 * calls * repeats:])  # after each one's warm-up
    assert timed == ("a" * calls + "b" * calls) * repeats
    assert len(medians) == 2 and all(m > 0 for m in medians)


def test_the_triton_switch_is_torchs_thread_local():
    """The direct path flips torch's wrap_triton switch itself where torch keeps it as a thread-local
    beside its default (the context manager is the fallback): this torch does, and the flag read
    without a value set is that default."""
    from torch._library import triton as switch

    from workbench.run import pyvariant

    assert pyvariant._wrap_triton_switch() is switch
    assert getattr(switch.wrap_triton_enabled, "value", switch.wrap_triton_enabled_default) == \
        switch.is_wrap_triton_enabled()


def test_the_direct_path_sees_modes_transforms_and_subclasses():
    """A kind triton forward skips its custom op only with nothing for the dispatcher to do: a
    TorchFunctionMode, a TorchDispatchMode, a functorch transform, a tensor subclass, a tensor
    requiring grad or dynamo's tracing each send it through the op (here on CPU, with the checks
    alone: no triton kernel runs)."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    from workbench.run import pyvariant

    class Passing(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class Dispatching(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class Sub(torch.Tensor):
        pass

    build = pyvariant.Build.__new__(pyvariant.Build)
    build.info = types.SimpleNamespace(kind="triton")
    x, w = torch.randn(4, 8), torch.randn(8)
    assert build.runs_direct((x, w))
    with Passing():
        assert not build.runs_direct((x, w))
    with Dispatching():
        assert not build.runs_direct((x, w))
    seen = []
    torch.func.vmap(lambda r: (seen.append(build.runs_direct((r, w))), r)[1])(x)
    assert seen == [False]
    assert not build.runs_direct((x.as_subclass(Sub), w))
    assert not build.runs_direct((x, w.requires_grad_()))
    with torch.no_grad():
        assert build.runs_direct((x, w))
    assert torch.compile(lambda a: a + build.runs_direct((x, w.detach())), backend="eager")(x).eq(x).all()
    build.info = types.SimpleNamespace(kind="cuda")
    assert not build.runs_direct((x, w.detach()))


@pytest.mark.gpu
def test_triton_variant_runs_direct_only_without_a_graph():
    """A kind triton forward with nothing for the dispatcher to do runs its checked body directly;
    with an input requiring grad it goes through its custom op (autograd recorded)."""
    k = wb.load("rmsnorm", "triton")
    x, w = torch.randn(4, 64, device="cuda"), torch.randn(64, device="cuda")
    assert k.build.runs_direct((x, w))
    torch.testing.assert_close(k(x, w), k.build.forward(x, w, k.spec.attrs[0].default))
    seen = []  # the direct path runs the body as triton_op's eager backend does: wrap_triton off
    real = k.build.module.forward
    k.build.module.forward = lambda *a: (seen.append(torch._library.triton.is_wrap_triton_enabled()), real(*a))[1]
    try:
        k(x, w)
        with pytest.raises(RuntimeError, match="runs on CUDA tensors"):  # checked before the switch
            k(x.cpu(), w.cpu())
        k.build.module.forward = lambda *a: 1 / 0
        with pytest.raises(ZeroDivisionError):  # the switch is restored however the body ends
            k(x, w)
    finally:
        k.build.module.forward = real
    assert seen == [False] and torch._library.triton.is_wrap_triton_enabled()
    w.requires_grad_()
    assert not k.build.runs_direct((x, w))
    assert k(x, w).grad_fn is not None
    with torch.no_grad():
        assert k.build.runs_direct((x, w))


@pytest.mark.gpu
def test_cuda_variant_autograd_and_compile():
    """The same C++ autograd on a CUDA variant: gradients equal to the eager math's, and
    torch.compile(fullgraph=True) with inductor runs forward and backward."""
    k = wb.load("bias_gelu", "vec4")
    x = torch.randn(8, 64, device="cuda", requires_grad=True)
    bias = torch.randn(64, device="cuda", requires_grad=True)
    assert k(x.detach(), bias.detach()).grad_fn is None
    y = k(x, bias)
    assert y.grad_fn.name() == "WorkbenchBiasGeluBackward"
    y.square().sum().backward()
    gx, gb = x.grad.clone(), bias.grad.clone()
    x.grad = bias.grad = None
    torch.compile(lambda x, b: k(x, b).square().sum(), fullgraph=True)(x, bias).backward()
    torch.testing.assert_close(x.grad, gx)
    torch.testing.assert_close(bias.grad, gb, rtol=1e-4, atol=1e-4)
