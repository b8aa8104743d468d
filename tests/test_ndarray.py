"""The NumPy front end (workbench.ship.ndarray): the torch-free variant libraries on NumPy arrays.

CPU variants of vector_add, bias_gelu and elementwise_mul against NumPy float64 references, forward
and backward; every op's CPU variant against its spec's torch reference (generic); the bad input
the issue lists, each error naming the argument; a child process that runs it all without ever
importing torch; the CUDA variants built and linked here (no GPU needed); and, where the front end
itself sees a CUDA device (no torch involved in deciding), the CUDA variants against the references
with their kernel and staging times reported."""
from __future__ import annotations

import json
import math
import re
import sys

import numpy as np
import pytest

from workbench import dtypes

from workbench.ship import ndarray as wbn, ndarray_build

from workbench.model import registry
from workbench.errors import WorkbenchError

from conftest import describe

pytest.importorskip("pybind11", reason="the NumPy front end builds with pybind11")

_K = math.sqrt(2.0 / math.pi)


def _gelu_parts(v):
    """GELU_tanh(v) = v * s and its derivative, s = sigmoid(2u), u = k (v + 0.044715 v^3)."""
    u = _K * (v + 0.044715 * v ** 3)
    s = 1.0 / (1.0 + np.exp(-2.0 * u))
    ds = 2.0 * s * (1.0 - s) * _K * (1.0 + 3 * 0.044715 * v * v)
    return v * s, s + v * ds


# op -> (forward reference, backward reference, sizes: input shapes), all in float64
REFS = {
    "vector_add": (lambda a, b: (a + b,), lambda g, a, b: (g, g),
                   [[(1,), (1,)], [(7,), (7,)], [(1031,), (1031,)], [(4099,), (4099,)]]),
    "elementwise_mul": (lambda a, b: (a * b,), lambda g, a, b: (g * b, g * a),
                        [[(), ()], [(7,), (7,)], [(3, 5), (3, 5)], [(2, 3, 7), (2, 3, 7)]]),
    "bias_gelu": (lambda x, b: (_gelu_parts(x + b)[0],),
                  lambda g, x, b: (g * _gelu_parts(x + b)[1], (g * _gelu_parts(x + b)[1]).reshape(-1, b.shape[0]).sum(0)),
                  [[(1, 1), (1,)], [(3, 5), (5,)], [(127, 129), (129,)], [(257,), (257,)], [(2, 3, 7), (7,)]]),
}
WIDE = {"vector_add": [((1 << 20) + 3,)] * 2, "elementwise_mul": [(1000, 1027)] * 2,
        "bias_gelu": [(1000, 1027), (1027,)]}
NUMPY_DTYPES = [d for d in dtypes.NAMES if d != "bfloat16"]   # NumPy has no bfloat16 of its own


def _arrays(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [np.asarray(rng.standard_normal(s) * 1.5).astype(dtype) for s in shapes]


def _offset(a):
    """The same values in a buffer one element in: contiguous, not 16-byte aligned."""
    buf = np.empty(a.size + 1, a.dtype)
    view = buf[1:].reshape(a.shape)
    view[...] = a
    return view


def _close(got, want, dtype, terms=1):
    _, atol, rtol = dtypes.tolerance(dtype)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=rtol, atol=atol * math.sqrt(terms))


def _check_against_reference(k, dtype, shapes, seed=0):
    fwd, bwd, _ = REFS[k.op]
    ins = _arrays(shapes, dtype, seed)
    wide = [a.astype(np.float64) for a in ins]
    out = k(*ins)
    assert out.dtype == np.dtype(dtype) and out.shape == fwd(*wide)[0].shape
    _close(out, fwd(*wide)[0], dtype)
    g = _arrays([out.shape], dtype, seed + 1)[0]
    grads = k.backward(g, *ins)
    rows = max(1, ins[0].size // max(1, ins[-1].size))  # bias_gelu's dbias sums this many terms
    for got, want in zip(grads, bwd(g.astype(np.float64), *wide)):
        _close(got, want, dtype, terms=rows if got.shape != ins[0].shape else 1)


@pytest.fixture(scope="module")
def cpu():
    """op -> its cpu variant, through the NumPy front end."""
    return {op: wbn.load(op, "cpu") for op in REFS}


# ----------------------------------------------------------------------------- CPU variants

@pytest.mark.parametrize("op", sorted(REFS))
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_cpu_variant_matches_numpy_float64(cpu, op, dtype):
    for i, shapes in enumerate(REFS[op][2]):
        _check_against_reference(cpu[op], dtype, shapes, seed=i)


def test_outputs_are_written_in_place_and_returned(cpu):
    f = cpu["vector_add"]
    a, b = _arrays([(1000,), (1000,)], "float32")
    c = np.full(1000, np.nan, dtype=np.float32)
    assert f(a, b, c) is c and np.array_equal(c, a + b)
    d = np.zeros_like(c)
    assert f(a, b, out=d) is d and np.array_equal(d, c)
    x, bias = _arrays([(4, 6), (6,)], "float32")
    y = np.empty((4, 6), np.float32)
    assert cpu["bias_gelu"](x, bias, y) is y


def test_misaligned_views_and_large_threaded_calls(cpu):
    """A slice one element in (not 16-byte aligned: the variants' scalar route on a GPU) and an
    array past the threading grain (several std::threads)."""
    f = cpu["vector_add"]
    a, b = _arrays([(1 << 18,), (1 << 18,)], "float32")
    assert np.array_equal(f(a[1:], b[1:]), a[1:] + b[1:])
    f.threads = 3
    assert np.array_equal(f(a, b), a + b)


def test_empty_arrays_give_empty_outputs_without_a_launch(cpu):
    f = cpu["vector_add"]
    c = f(np.empty(0, np.float32), np.empty(0, np.float32))
    assert c.shape == (0,) and f.last_timing.launched is False
    g = cpu["bias_gelu"]
    _, dbias = g.backward(np.empty((0, 5), np.float32), np.empty((0, 5), np.float32), np.ones(5, np.float32))
    assert np.array_equal(dbias, np.zeros(5, np.float32))   # a sum over no rows


def test_cpu_timing_is_the_kernel_alone(cpu):
    f = cpu["vector_add"]
    a, b = _arrays([(4096,), (4096,)], "float32")
    t = f.time(a, b, repeat=4, warmup=1)
    assert t is f.last_timing and t.device == "cpu" and len(t.kernel_ms_all) == 4 and t.kernel_ms > 0
    assert t.h2d_ms is None and t.d2h_ms is None and t.launched
    json.dumps(t.as_dict())


@pytest.mark.parametrize("op", registry.ops())
def test_every_ops_cpu_variant_agrees_with_its_spec(op):
    """Generic: each op's cpu variant on NumPy arrays against the spec's float64 reference (torch
    is in this process; the front end does not use it), forward and backward, attributes and all."""
    import torch

    spec = registry.spec(op)
    k = wbn.load(op, "cpu")
    attrs = spec.sample_attrs()[0]
    for size in [s for s in spec.check_sizes if 0 not in s][:3]:
        ts = spec.new_inputs(size, torch.float32, "cpu", torch.Generator().manual_seed(2))
        outs = k(*[t.numpy() for t in ts], **attrs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        terms, grad_terms = spec.terms(size)
        for o, r, n in zip(outs, spec.run_reference(ts, attrs), terms):
            _close(o, r.numpy(), "float32", n)
        if not spec.differentiable:
            continue
        gs = [torch.randn(s, generator=torch.Generator().manual_seed(3)) for s in spec.output_shapes(size)]
        grads = k.backward(*[g.numpy() for g in gs], *[t.numpy() for t in ts], **attrs)
        grads = grads if isinstance(grads, tuple) else (grads,)
        for g, r, n in zip(grads, spec.run_reference_backward(gs, ts, attrs), grad_terms):
            _close(g, r.numpy(), "float32", n)


def test_the_front_end_checks_with_the_registry_spec():
    """One store of specs: the NumPy front end's spec is the registry's declaration, not a copy."""
    assert wbn.load("vector_add", "cpu").spec is registry.spec("vector_add")


# ----------------------------------------------------------------------------- bad input

def _f32(*shapes):
    return [np.ones(s, np.float32) for s in shapes]


BAD = [
    ("float64 where vec4 takes float32", "vec4", lambda: [np.ones(4), np.ones(4)], {}, TypeError,
     "vector_add/vec4: a must be a float32 array (variant 'vec4' takes float32); got float64"),
    ("b float64, a float32", "cpu", lambda: [np.ones(4, np.float32), np.ones(4)], {}, TypeError,
     "b must have the dtype of a (float32); got float64"),
    ("int32 arrays", "cpu", lambda: [np.ones(4, np.int32), np.ones(4, np.int32)], {}, TypeError,
     "a must be float32, float64, float16 or bfloat16; got int32"),
    ("2-D where 1-D is expected", "cpu", lambda: _f32((2, 3), (2, 3)), {}, ValueError,
     "a must have 1 dimension ([n]); got shape [2, 3]"),
    ("0-dim a", "cpu", lambda: _f32((), ()), {}, ValueError, "a must have 1 dimension ([n]); got a 0-dim tensor"),
    ("mismatched lengths", "cpu", lambda: _f32((5,), (6,)), {}, ValueError,
     "b must have shape [5] ([n] with n = 5 from a); got shape [6]"),
    ("a strided view", "cpu", lambda: [np.ones(10, np.float32)[::2], np.ones(5, np.float32)], {}, ValueError,
     "a must be C-contiguous; got a strided array (shape [5], strides (8,) bytes)"),
    ("a read-only output", "cpu", lambda: [*_f32((4,), (4,)), _readonly(np.ones(4, np.float32))], {}, ValueError,
     "c (an output) is read-only (flags.writeable is False)"),
    ("an output of the wrong length", "cpu", lambda: _f32((4,), (4,), (3,)), {}, ValueError,
     "c (an output) must have shape [4]; got shape [3]"),
    ("an output of another dtype", "cpu", lambda: [*_f32((4,), (4,)), np.ones(4)], {}, TypeError,
     "c (an output) must be a float32 array like the inputs; got float64"),
    ("a strided output", "cpu", lambda: [*_f32((4,), (4,)), np.ones(8, np.float32)[::2]], {}, ValueError,
     "c (an output) must be C-contiguous"),
    ("a list, not an array", "cpu", lambda: [[1.0, 2.0], np.ones(2, np.float32)], {}, TypeError,
     "a must be a numpy.ndarray; got list"),
    ("one array", "cpu", lambda: _f32((4,)), {}, TypeError, "expected arrays a, b (then the outputs c, optional); got 1"),
    ("an unknown attribute", "cpu", lambda: _f32((4,), (4,)), {"alpha": 2.0}, TypeError, "unknown attribute(s) ['alpha']"),
]


def _readonly(a):
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("what, variant, build, attrs, error, match", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_and_named(what, variant, build, attrs, error, match):
    f = wbn.load("vector_add", variant)   # vec4: the checks come before any device is needed
    with pytest.raises(error) as e:
        f(*build(), **attrs)
    assert match in str(e.value), str(e.value)


def test_bad_input_from_the_spec_of_other_ops(cpu):
    x = np.ones((4, 7), np.float32)
    with pytest.raises(ValueError, match=r"bias_gelu/cpu: bias must have shape \[7\] \(\[n\] with n = 7 from x\); "
                                         r"got shape \[2, 7\]"):
        cpu["bias_gelu"](x, np.ones((2, 7), np.float32))
    with pytest.raises(ValueError, match=r"elementwise_mul/cpu: b must have shape \[4, 7\]"):
        cpu["elementwise_mul"](x, np.ones((7, 4), np.float32))
    f = wbn.load("scale_bias_relu", "cpu")
    with pytest.raises(TypeError, match="scale_bias_relu: missing attribute scale"):
        f(x, np.ones(7, np.float32))
    with pytest.raises(ValueError, match="scale must be a finite number"):
        f(x, np.ones(7, np.float32), scale=float("nan"))
    assert np.allclose(f(x, np.ones(7, np.float32), 2.0), 3.0)   # an attribute by position


def test_the_module_takes_the_declaration_as_data():
    """declare() is handed spec.fields() (a list per column, no text to parse): the same fields give
    the same handle, another op's another, and a bad column is refused with what is wrong."""
    ext = wbn.extension()
    fields = registry.spec("rmsnorm").fields()
    assert ext.declare(*fields) == ext.declare(*fields) != ext.declare(*registry.spec("bias_gelu").fields())
    bad = list(fields)
    bad[10] = ["complex"]  # the attributes' kinds
    with pytest.raises(ValueError, match="malformed op declaration \\(attribute kind\\)"):
        ext.declare(*bad)


def test_unknown_op_and_variant_list_what_exists():
    with pytest.raises(ValueError, match=r"op must be one of \[.*'vector_add'.*\]; got 'vector_sub'"):
        wbn.load("vector_sub", "cpu")
    with pytest.raises(ValueError, match="vector_add has no C.. variant 'vec8'; C.. variants: cpu, scalar, vec4"):
        wbn.load("vector_add", "vec8")
    with pytest.raises(ValueError, match=r"rmsnorm has no C.. variant 'triton'.*Python variants, which need torch"):
        wbn.load("rmsnorm", "triton")


def test_the_module_keeps_its_cpp_runtime_to_itself(cpu):
    """A compiler that links libstdc++ statically (the H100 machine's CXX) made the module export
    __cxa_throw and the rest, and a bad call's ValueError crashed pytest there: the runtime's symbols
    are linked hidden (--exclude-libs), so none is exported whichever way the compiler links it."""
    import shutil
    import subprocess

    from workbench.ship import ndarray_build

    assert "-Wl,--exclude-libs,ALL" in ndarray_build.MODULE_FLAGS
    if shutil.which("nm"):
        exported = subprocess.run(["nm", "-D", "--defined-only", wbn.extension().__file__], capture_output=True,
                                  text=True, check=True).stdout
        assert "__cxa_throw" not in exported and "__cxa_begin_catch" not in exported


def test_the_module_refuses_what_the_python_checks_refuse(cpu):
    """The extension's own second line: a read-only output and a strided buffer, called directly."""
    f, ext = cpu["vector_add"], wbn.extension()
    a, b = _f32((4,), (4,))
    with pytest.raises(ValueError, match="read-only"):
        ext.run(*f._handles, 0, 0, [a, b], [_readonly(np.ones(4, np.float32))], [])
    with pytest.raises(ValueError, match="C-contiguous"):
        ext.run(*f._handles, 0, 0, [np.ones(8, np.float32)[::2], b], [np.ones(4, np.float32)], [])


# ----------------------------------------------------------------------------- no torch, cache

NO_TORCH = r'''
import json, sys
import numpy as np
from workbench.ship import ndarray as wbn
out, rng = {}, np.random.default_rng(0)
a, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
f = wbn.load("vector_add", "cpu")
c = np.empty_like(a)
f(a, b, c)
out["vector_add"] = bool(np.array_equal(c, a + b))
x, bias = rng.standard_normal((8, 33)).astype(np.float32), rng.standard_normal(33).astype(np.float32)
y = wbn.load("bias_gelu", "cpu")(x, bias)
v = x.astype(np.float64) + bias
out["bias_gelu"] = bool(np.allclose(y, v / (1 + np.exp(-2 * 0.7978845608 * (v + 0.044715 * v ** 3))), atol=1e-5))
out["elementwise_mul"] = bool(np.array_equal(wbn.load("elementwise_mul", "cpu")(x, x), x * x))
try:
    wbn.load("vector_add", "vec4")(np.ones(4), np.ones(4))
except TypeError as e:
    out["error"] = str(e)
built = [wbn.load(op, "cpu").built for op in ("vector_add", "bias_gelu", "elementwise_mul")]
out["built_again"] = any(built)
out["torch"] = "torch" in sys.modules
print("RESULT " + json.dumps(out))
'''


def test_runs_in_a_process_that_never_imports_torch(run_python, cpu):
    for attempt in ("first", "warm"):
        proc = run_python(NO_TORCH, timeout=300)
        assert proc.returncode == 0, describe(proc)
        out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
        assert out["torch"] is False, attempt
        assert out["vector_add"] and out["bias_gelu"] and out["elementwise_mul"], out
        assert out["error"] == "vector_add/vec4: a must be a float32 array (variant 'vec4' takes float32); got float64"
        assert out["built_again"] is False


def test_builds_are_content_keyed_and_torch_free(cpu):
    from workbench import build

    f = cpu["vector_add"]
    again = wbn.load("vector_add", "cpu")
    assert again.built is False and again.library == f.library
    meta = json.loads((f.library.parent / "meta.json").read_text())
    assert meta["toolchain"]["front_end"] == "ndarray" and "torch" not in meta["toolchain"]
    assert not any("torch" in part for part in meta["command"])
    assert build.lookup(f.library.parent)[0] == f.library


# ----------------------------------------------------------------------------- CUDA: build here, run on a GPU

CUDA_VARIANTS = [(op, v.name) for op in sorted(REFS) for v in wbn.variants(op) if v.device == "cuda"]


@pytest.fixture(scope="module")
def cuda_buildable():
    if not ndarray_build.can_build_cuda():
        pytest.skip("cannot build CUDA variants here: no nvcc or no libcudart.so")


@pytest.mark.parametrize("op, name", CUDA_VARIANTS, ids=[f"{o}/{n}" for o, n in CUDA_VARIANTS])
def test_cuda_variant_builds_and_links_without_torch(cuda_buildable, op, name):
    k = wbn.load(op, name)
    static = next(v for v in wbn.variants(op) if v.name == name)
    assert (k.device, k.dtypes, k.description) == ("cuda", static.dtypes, static.description)
    meta = json.loads((k.library.parent / "meta.json").read_text())
    assert meta["arch_list"] == wbn.arch_list() and "-cudart" in meta["command"]
    assert "ptxas info" in (k.library.parent / "build.log").read_text()
    if wbn.device_count() == 0:
        ins = _arrays(REFS[op][2][1], k.dtypes[0])
        with pytest.raises(WorkbenchError, match=f"{op}/{name} is a CUDA variant and no CUDA device is visible"):
            k(*ins)


def test_arch_flags():
    assert ndarray_build.gencode_flags("8.0;9.0+PTX") == [
        "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90"]
    assert ndarray_build.gencode_flags("9.0a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    with pytest.raises(ValueError, match="arch list entries must look like"):
        ndarray_build.gencode_flags("sm_90")


@pytest.fixture(scope="module")
def gpu(cuda_buildable):
    """Skip unless the front end itself sees a CUDA device (torch is not asked)."""
    count, why = wbn.extension().device_count()
    if count == 0:
        pytest.skip(f"no CUDA device visible to the NumPy front end: {why}")
    return wbn.devices()[0]


@pytest.mark.gpu
@pytest.mark.parametrize("op, name", CUDA_VARIANTS, ids=[f"{o}/{n}" for o, n in CUDA_VARIANTS])
def test_gpu_variant_matches_numpy_float64(gpu, op, name):
    k = wbn.load(op, name)
    for dtype in [d for d in k.dtypes if d in NUMPY_DTYPES]:
        for i, shapes in enumerate(REFS[op][2]):
            _check_against_reference(k, dtype, shapes, seed=i)
            t = k.last_timing
            assert t.device == "cuda" and t.kernel_ms > 0 and t.h2d_ms > 0 and t.d2h_ms > 0, t
        # wide sizes (many blocks, tails), then the same values one element into their buffers:
        # not 16-byte aligned, so the vectorized variants take their scalar route on the device
        _check_against_reference(k, dtype, WIDE[op], seed=7)
        ins = [_offset(a) for a in _arrays(WIDE[op], dtype, seed=8)]
        _close(k(*ins), REFS[op][0](*[a.astype(np.float64) for a in ins])[0], dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["scalar", "vec4"])
def test_gpu_kernel_and_staging_times_are_reported_apart(gpu, name):
    f = wbn.load("vector_add", name)
    n = 1 << 22
    a, b = _arrays([(n,), (n,)], "float32")
    c = np.empty_like(a)
    f(a, b, c)
    t = f.last_timing
    assert np.array_equal(c, a + b)
    assert t.h2d_bytes == 2 * 4 * n and t.d2h_bytes == 4 * n and len(t.kernel_ms_all) == 1
    assert 0 < t.kernel_ms < t.wall_ms and t.h2d_ms > 0 and t.d2h_ms > 0
    timed = f.time(a, b, c, repeat=10, warmup=2)
    gbps = 3 * 4 * n / timed.kernel_ms / 1e6
    print(f"vector_add/{name} 2^22 float32 on {gpu['name']}: kernel {timed.kernel_ms:.4f} ms ({gbps:.0f} GB/s), "
          f"h2d {t.h2d_ms:.3f} ms, d2h {t.d2h_ms:.3f} ms")
    assert len(timed.kernel_ms_all) == 10 and timed.h2d_bytes == t.h2d_bytes


# ----------------------------------------------------------------------------- byte order and aliasing (issue 24)

@pytest.mark.parametrize("which", ["a", "b", "c", "all"])
def test_arrays_in_the_other_byte_order_are_refused_and_named(cpu, which):
    f = cpu["vector_add"]
    a, b, c = (np.arange(8, dtype=np.float32) + i for i in range(3))
    swapped = {"a": a, "b": b, "c": c}
    other = ">" if sys.byteorder == "little" else "<"
    for k in (["a", "b", "c"] if which == "all" else [which]):
        swapped[k] = swapped[k].astype(swapped[k].dtype.newbyteorder(other))
    which = "a" if which == "all" else which   # the first one named
    name = which if which != "c" else "c (an output)"
    with pytest.raises(TypeError, match=rf"vector_add/cpu: {re.escape(name)} is stored in the other byte order "
                                        rf"\(dtype '[<>]f4'.*pass {which}\.astype\({which}\.dtype\.newbyteorder\('='\)\)"):
        f(swapped["a"], swapped["b"], swapped["c"])
    # the copy the message names works, with the right numbers
    fixed = {k: v.astype(v.dtype.newbyteorder("=")) for k, v in swapped.items()}
    np.testing.assert_array_equal(f(fixed["a"], fixed["b"]), a + b)


@pytest.mark.parametrize("which", ["a", "b", "c"])
def test_a_masked_array_is_refused_not_its_mask_dropped(cpu, which):
    f = cpu["vector_add"]
    arrays = {k: np.arange(8, dtype=np.float32) + i for i, k in enumerate("abc")}
    arrays[which] = np.ma.masked_array(arrays[which], mask=np.arange(8) % 2 == 0)
    name = which if which != "c" else "c (an output)"
    with pytest.raises(TypeError, match=rf"vector_add/cpu: {re.escape(name)} is a masked array \(numpy\.ma\); the kernels "
                                        rf"read every element and would ignore its mask: pass {which}\.filled\(value\)"):
        f(arrays["a"], arrays["b"], arrays["c"])
    filled = {k: v.filled(0) if np.ma.isMaskedArray(v) else v for k, v in arrays.items()}
    np.testing.assert_array_equal(f(filled["a"], filled["b"]), filled["a"] + filled["b"])


def test_an_output_that_overlaps_an_input_is_refused_naming_both():
    try:
        f = wbn.load("matmul", "cpu")
    except (ValueError, WorkbenchError) as e:
        pytest.skip(f"no matmul cpu variant here: {e}")
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((32, 32), dtype=np.float32), rng.standard_normal((32, 32), dtype=np.float32)
    want = A.astype(np.float64) @ B.astype(np.float64)
    with pytest.raises(ValueError, match=r"matmul/cpu: y \(an output\) shares memory with a \(an input\)"):
        f(A, B, A)
    with pytest.raises(ValueError, match=r"matmul/cpu: y \(an output\) shares memory with b \(an input\)"):
        f(A, B, out=B)
    np.testing.assert_allclose(A @ B, want, rtol=1e-4, atol=1e-3)  # A and B untouched by the refused calls
    np.testing.assert_allclose(f(A, B), want, rtol=1e-4, atol=1e-3)


def test_a_partially_overlapping_view_is_refused(cpu):
    buf = np.arange(17, dtype=np.float32)
    a, c = buf[:16], buf[1:17]          # c starts one element into a
    b = np.ones(16, np.float32)
    with pytest.raises(ValueError, match=r"c \(an output\) shares memory with a \(an input\)"):
        cpu["vector_add"](a, b, c)
    np.testing.assert_array_equal(buf, np.arange(17, dtype=np.float32))
    disjoint = np.empty(16, np.float32)
    np.testing.assert_array_equal(cpu["vector_add"](a, b, disjoint), a + 1)


# ----------------------------------------------------------------------------- one call contract (issue 26, item 4)

def test_a_call_is_checked_by_the_cpp_contract_not_the_python_twin(cpu, monkeypatch):
    """The NumPy front end checks through bindings/harness/call_contract.h compiled into its module:
    with the Python twin of the check (shapes.check_call) made to fail, bad calls still get the
    contract's words, good calls and empty ones still run."""
    from workbench.model import opspec, shapes

    def no_twin(*args, **kwargs):
        raise AssertionError("the NumPy front end ran the Python twin of the call check")

    monkeypatch.setattr(shapes, "check_call", no_twin)
    monkeypatch.setattr(opspec.OpSpec, "check_call", no_twin)
    f = cpu["bias_gelu"]
    x = np.ones((4, 7), np.float32)
    with pytest.raises(ValueError) as e:
        f(x, np.ones(6, np.float32))
    assert str(e.value) == "bias_gelu/cpu: bias must have shape [7] ([n] with n = 7 from x); got shape [6]"
    with pytest.raises(TypeError) as e:
        f(x, np.ones(7))
    assert str(e.value) == "bias_gelu/cpu: bias must have the dtype of x (float32); got float64"
    with pytest.raises(ValueError) as e:
        wbn.load("scale_bias_relu", "cpu")(x, np.ones(7, np.float32), scale=float("inf"))
    assert str(e.value) == "scale_bias_relu/cpu: scale must be a finite number; got inf"
    assert f(x, np.ones(7, np.float32)).shape == (4, 7)
    _, dbias = f.backward(np.empty((0, 7), np.float32), np.empty((0, 7), np.float32), np.ones(7, np.float32))
    assert np.array_equal(dbias, np.zeros(7, np.float32)) and f.last_timing.launched is False


# (what is wrong, op, arrays, attributes): the contract's words from the module, and from the torch harness
CONTRACT_CASES = [
    ("a bias of another length", "bias_gelu", lambda: [np.ones((4, 7)), np.ones(6)], ()),
    ("int32 arrays", "bias_gelu", lambda: [np.ones((4, 7), np.int32), np.ones(7, np.int32)], ()),
    ("9 dims", "bias_gelu", lambda: [np.ones((1,) * 8 + (7,)), np.ones(7)], ()),
    ("a 0-dim x", "bias_gelu", lambda: [np.ones(()), np.ones(7)], ()),
    ("eps below its minimum", "rmsnorm", lambda: [np.ones((3, 5)), np.ones(5)], (-1.0,)),
    ("eps NaN", "rmsnorm", lambda: [np.ones((3, 5)), np.ones(5)], (float("nan"),)),
]


@pytest.mark.parametrize("what, op, arrays, attrs", CONTRACT_CASES, ids=[c[0] for c in CONTRACT_CASES])
def test_the_contracts_message_reaches_a_numpy_caller_verbatim(wb, what, op, arrays, attrs):
    """The module's check() raises what the torch harness raises for the same call (one C++
    source, call_contract.h): the same type and the same words after each front end's prefix."""
    import torch

    ext, spec = wbn.extension(), registry.spec(op)
    decl = ext.declare(*spec.fields())
    xs = arrays()
    with pytest.raises((ValueError, TypeError, RuntimeError)) as numpy_side:
        ext.check(decl, 0, "PREFIX: ", [a.shape for a in xs], [a.dtype.name for a in xs], list(attrs))
    wb.load(op, "cpu")
    with pytest.raises((ValueError, TypeError, RuntimeError)) as torch_side:
        getattr(torch.ops.workbench, op)(*(torch.from_numpy(a) for a in xs), *attrs, "cpu")
    assert type(numpy_side.value) is type(torch_side.value)
    assert "PREFIX: " + str(numpy_side.value)[len("PREFIX: "):] == str(numpy_side.value)
    assert str(torch_side.value).splitlines()[0] == f"workbench::{op}: " + str(numpy_side.value)[len("PREFIX: "):]


def test_the_numpy_module_has_no_call_check_of_its_own():
    """Structural: ndarray_module.cpp runs the contract's check, guard and launch (call_contract.h)
    and words none of the contract's messages itself; ndarray.py calls no Python twin of the check
    and has no empty-tensor guard of its own."""
    from workbench import config

    src = (config.BINDINGS_DIR / "ndarray" / "ndarray_module.cpp").read_text()
    assert '#include "call_contract.h"' in src
    for use in ("schema_args<NdFront>", "check_call_as<NdFront>", "output_shapes<NdFront>",
                "nothing_to_launch<NdFront>", "launch_call<NdFront>", "workbench::workspace_bytes("):
        assert use in src, use
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", src, flags=re.S)  # the comments may name the checks
    for words in ("must be a tensor", "must be on the same device", "must have the dtype of", "must be float32",
                  "dimensions; at most", "must be a finite number", "has_min", "has_max", "isfinite", "status_string(",
                  ".bind(", "b->run(", "b->workspace_bytes("):
        assert words not in code, f"ndarray_module.cpp words its own call check: {words!r}"
    py = (config.PACKAGE_DIR / "ship" / "ndarray.py").read_text()
    assert "check_call" not in py and ".fill(0)" not in py and ".size == 0" not in py
