"""Bad input to bias_gelu beyond the cases every op gets from its declaration (tests/test_ops.py):
each gives a clear error that names the argument and what was expected, or a correct result;
never a crash or a silently wrong number."""
from __future__ import annotations

import re

import pytest
import torch

import workbench as wb

from workbench.specs.bias_gelu import SPEC as spec


def op(*args):
    return torch.ops.workbench.bias_gelu(*args)


def backward_op(*args):
    return torch.ops.workbench.bias_gelu_backward(*args)


def _xb(shape=(4, 7), dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return spec.new_inputs(shape, dtype, "cpu", g)


def _assert_matches_reference(y, x, b):
    torch.testing.assert_close(y.double(), spec.reference(x, b), rtol=1e-5, atol=1e-6)


# --- wrong device ------------------------------------------------------------------------------

def test_cuda_variant_given_cpu_tensors(scalar_kernel):
    x, b = _xb()
    with pytest.raises(RuntimeError, match="runs on CUDA") as e:
        op(x, b, "scalar")
    assert "'scalar'" in str(e.value) and "x is on cpu" in str(e.value)
    with pytest.raises(RuntimeError, match="runs on CUDA"):
        scalar_kernel(x, b)
    with pytest.raises(RuntimeError, match="runs on CUDA"):
        backward_op(torch.ones_like(x), x, b, "scalar")


@pytest.mark.gpu
def test_cpu_variant_given_cuda_tensors(cpu_kernel):
    x, b = (t.cuda() for t in _xb())
    with pytest.raises(RuntimeError, match="runs on CPU"):
        op(x, b, "cpu")


@pytest.mark.gpu
def test_bias_on_other_device_than_x_cuda(scalar_kernel):
    x, b = _xb()
    with pytest.raises(RuntimeError, match=r"bias must be on the same device as x"):
        op(x.cuda(), b, "scalar")
    with pytest.raises(RuntimeError, match=r"runs on CUDA|same device"):
        op(x, b.cuda(), "scalar")


@pytest.mark.gpu
def test_grad_y_on_other_device_cuda(scalar_kernel):
    x, b = (t.cuda() for t in _xb())
    with pytest.raises(RuntimeError, match="grad_y must be on the same device as x"):
        backward_op(torch.ones(x.shape), x, b, "scalar")


def test_bias_on_meta_device_x_on_cpu(cpu_kernel):
    x, b = _xb()
    with pytest.raises((RuntimeError, ValueError), match="device"):
        y = op(x, b.to("meta"), "cpu")
        # If no error: the only acceptable result is a correct one.
        _assert_matches_reference(y, x, b)


def test_meta_inputs_give_meta_outputs(cpu_kernel):
    """Both on 'meta' is legitimate (shape propagation): the fake impl answers, shape-checked."""
    x, b = (t.to("meta") for t in _xb())
    y = op(x, b, "cpu")
    assert y.device.type == "meta" and y.shape == x.shape
    with pytest.raises(ValueError, match=r"bias must have shape \[7\] \(\[n\] with n = 7 from x\); got shape \[6\]"):
        op(x, torch.empty(6, device="meta"), "cpu")


# --- wrong dtype -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.complex64], ids=str)
def test_unsupported_dtype(cpu_kernel, dtype):
    x = torch.ones(4, 7, dtype=dtype)
    b = torch.ones(7, dtype=dtype)
    with pytest.raises(TypeError) as e:
        op(x, b, "cpu")
    msg = str(e.value)
    name = str(dtype).replace("torch.", "")
    assert f"x must be float32, float64, float16 or bfloat16; got {name}" in msg, msg


def test_dtype_the_variant_lacks(cpu_kernel, scalar_kernel):
    """vec4 is float32 only: float64 is refused by the variant, naming what it supports."""
    vec4 = wb.load("bias_gelu", "vec4")
    x, b = _xb(dtype=torch.float64)
    with pytest.raises(RuntimeError, match="runs on CUDA"):  # no GPU here: the device comes first
        vec4(x, b)
    if torch.cuda.is_available():
        with pytest.raises(TypeError, match=r"variant 'vec4' supports dtypes float32; x is float64"):
            vec4(x.cuda(), b.cuda())


def test_bias_dtype_differs_from_x(cpu_kernel):
    x, b = _xb()
    with pytest.raises(TypeError, match=r"bias must have the dtype of x \(float32\); got float64"):
        op(x, b.double(), "cpu")
    with pytest.raises(TypeError, match=r"bias must have the dtype of x"):
        op(x.half(), b, "cpu")


def test_grad_y_dtype_differs(cpu_kernel):
    x, b = _xb()
    with pytest.raises(TypeError, match=r"grad_y must have the dtype of x \(float32\); got float64"):
        backward_op(torch.ones(4, 7, dtype=torch.float64), x, b, "cpu")


# --- wrong shape / rank ------------------------------------------------------------------------

@pytest.mark.parametrize("bias_len", [6, 8, 1, 0])
def test_bias_length_mismatch(cpu_kernel, bias_len):
    x, _ = _xb()
    with pytest.raises(ValueError) as e:
        op(x, torch.randn(bias_len), "cpu")
    msg = str(e.value)
    assert f"bias must have shape [7] ([n] with n = 7 from x); got shape [{bias_len}]" in msg, msg


@pytest.mark.parametrize("bias_shape, got", [((1, 7), "shape [1, 7]"), ((7, 1), "shape [7, 1]"), ((), "a 0-dim tensor")],
                         ids=["1x7", "7x1", "0-dim"])
def test_bias_not_1d(cpu_kernel, bias_shape, got):
    x, _ = _xb()
    with pytest.raises(ValueError, match=re.escape(f"bias must have shape [7] ([n] with n = 7 from x); got {got}")):
        op(x, torch.randn(bias_shape), "cpu")


def test_rank0_x(cpu_kernel):
    with pytest.raises(ValueError, match="0-dim") as e:
        op(torch.tensor(1.5), torch.randn(1), "cpu")
    assert "x must have at least 1 dimension ([..., n]); got a 0-dim tensor" in str(e.value)
    with pytest.raises(ValueError, match="0-dim"):
        op(torch.tensor(1.5), torch.tensor(0.5), "cpu")


def test_rank1_x_is_fine(cpu_kernel):
    x, b = _xb((257,))
    _assert_matches_reference(op(x, b, "cpu"), x, b)


def test_grad_y_wrong_shape(cpu_kernel):
    x, b = _xb()
    with pytest.raises(ValueError, match=re.escape(
            "grad_y must have shape [4, 7] ([..., n] with ... = [4] from x, n = 7 from x); got shape [4, 6]")):
        backward_op(torch.randn(4, 6), x, b, "cpu")
    with pytest.raises(ValueError, match="grad_y must have shape"):
        backward_op(torch.randn(28), x, b, "cpu")


def test_none_arguments(cpu_kernel):
    x, b = _xb()
    with pytest.raises((ValueError, TypeError, RuntimeError), match="bias"):
        op(x, None, "cpu")
    with pytest.raises((ValueError, TypeError, RuntimeError)):
        op(None, b, "cpu")


# --- layouts: a correct result ----------------------------------------------------------------

def test_transposed_x(cpu_kernel):
    base, _ = _xb((7, 5))
    x = base.t()  # (5, 7), non-contiguous
    assert not x.is_contiguous()
    b = torch.randn(7, generator=torch.Generator().manual_seed(1))
    _assert_matches_reference(op(x, b, "cpu"), x, b)


def test_sliced_x_and_strided_bias(cpu_kernel):
    wide, _ = _xb((6, 14))
    x = wide[:, ::2]          # stride 2 in the last dimension
    b = torch.randn(14, generator=torch.Generator().manual_seed(2))[1::2]
    assert not x.is_contiguous() and not b.is_contiguous()
    _assert_matches_reference(op(x, b, "cpu"), x, b)


def test_expanded_x(cpu_kernel):
    row, b = _xb((1, 9))
    x = row.expand(5, 9)      # stride 0 rows
    y = op(x, b, "cpu")
    _assert_matches_reference(y, x, b)
    assert torch.equal(y[0], y[4])


def test_storage_offset_view(cpu_kernel):
    buf = torch.randn(1 + 6 * 11, generator=torch.Generator().manual_seed(3))
    x = buf[1:].view(6, 11)
    assert x.storage_offset() == 1 and x.is_contiguous()
    b = torch.randn(12, generator=torch.Generator().manual_seed(4))[1:]
    _assert_matches_reference(op(x, b, "cpu"), x, b)


def test_backward_with_non_contiguous_inputs(cpu_kernel):
    base, b9 = _xb((7, 9), torch.float64)
    x = base[:, 2:]                                   # (7, 7), row stride 9
    b = b9[2:]  # (7,), storage offset 2
    gy = torch.randn(7, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(5)).t()
    assert not x.is_contiguous() and not gy.is_contiguous() and b.storage_offset() == 2
    dx, db = backward_op(gy, x, b, "cpu")
    rdx, rdb = spec.run_reference_backward((gy,), (x, b), {})
    torch.testing.assert_close(dx, rdx, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(db, rdb, rtol=1e-12, atol=1e-12)


def test_autograd_through_strided_view(cpu_kernel):
    wide = torch.randn(5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(6), requires_grad=True)
    b = torch.randn(8, dtype=torch.float64, generator=torch.Generator().manual_seed(7), requires_grad=True)
    x = wide[:, 1::2]
    op(x, b, "cpu").sum().backward()
    rdx, rdb = spec.run_reference_backward((torch.ones(5, 8, dtype=torch.float64),), (x, b), {})
    torch.testing.assert_close(wide.grad[:, 1::2], rdx)
    assert torch.equal(wide.grad[:, ::2], torch.zeros(5, 8, dtype=torch.float64))
    torch.testing.assert_close(b.grad, rdb)


# --- empty -------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(0, 7), (5, 0), (0,)], ids=["0x7", "5x0", "0"])
def test_empty_tensor(cpu_kernel, shape):
    x = torch.empty(shape)
    b = torch.randn(shape[-1])
    y = op(x, b, "cpu")
    assert y.shape == x.shape and y.numel() == 0


# --- variants and names ------------------------------------------------------------------------

def test_variant_not_loaded(cpu_kernel):
    x, b = _xb()
    with pytest.raises(ValueError) as e:
        op(x, b, "no_such_variant")
    msg = str(e.value)
    assert "'no_such_variant' is not loaded" in msg and "workbench.load('bias_gelu', 'no_such_variant')" in msg, msg
    assert "cpu" in msg  # lists what is loaded


def test_unknown_build_id(cpu_kernel):
    x, b = _xb()
    with pytest.raises(ValueError, match="cpu@0000000000"):
        op(x, b, "cpu@0000000000")


def test_load_unknown_variant_lists_variants(wb):
    with pytest.raises(ValueError) as e:
        wb.load("bias_gelu", "no_such_variant")
    msg = str(e.value)
    assert "no_such_variant" in msg and "variants:" in msg
    for name in ("cpu", "scalar"):
        assert name in msg, msg


@pytest.mark.parametrize("op_name", ["no_such_op", None, 42, ""], ids=repr)
def test_load_unknown_op(wb, op_name):
    with pytest.raises(ValueError, match=re.escape(f"op must be one of {wb.ops()}")):
        wb.load(op_name, "cpu")


@pytest.mark.parametrize("variant", [None, "", "../cpu", "cpu.cpp", 3], ids=repr)
def test_load_garbage_variant(wb, variant):
    with pytest.raises(ValueError, match="variants: .*cpu"):
        wb.load("bias_gelu", variant)


def test_check_of_cuda_variant_without_gpu(wb, scalar_kernel):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the CUDA variant can run")
    with pytest.raises(RuntimeError, match="runs on CUDA and this machine has no usable GPU"):
        wb.check("bias_gelu", "scalar")
