"""workbench.run.nn.BiasGELU: a learnable bias through torch.ops.workbench.bias_gelu."""
from __future__ import annotations

import pytest
import torch

from workbench.specs.bias_gelu import SPEC as spec


@pytest.fixture
def BiasGELU(wb, cpu_kernel):
    return wb.nn.BiasGELU


def test_bias_is_a_parameter(BiasGELU):
    m = BiasGELU(12)
    assert isinstance(m.bias, torch.nn.Parameter) and m.bias.requires_grad
    assert m.bias.shape == (12,) and m.bias.dtype == torch.float32 and m.bias.device.type == "cpu"
    assert [name for name, _ in m.named_parameters()] == ["bias"]
    assert "bias" in m.state_dict()
    assert not torch.equal(m.bias.detach(), torch.zeros(12)), "a fresh bias should not be all zeros"
    assert "features=12" in repr(m) and "cpu" in repr(m)


def test_forward_matches_reference(BiasGELU):
    torch.manual_seed(0)
    m = BiasGELU(9)
    x = torch.randn(4, 5, 9)
    torch.testing.assert_close(m(x), spec.reference(x, m.bias).float(), rtol=1e-5, atol=1e-6)


def test_bias_grad_matches_float64_reference(BiasGELU):
    torch.manual_seed(1)
    m = BiasGELU(16, dtype=torch.float64)
    x = torch.randn(32, 16, dtype=torch.float64, requires_grad=True)
    gy = torch.randn(32, 16, dtype=torch.float64)
    (m(x) * gy).sum().backward()
    assert m.bias.grad is not None and m.bias.grad.shape == (16,)
    rdx, rdb = spec.run_reference_backward((gy,), (x, m.bias), {})
    torch.testing.assert_close(m.bias.grad, rdb, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(x.grad, rdx, rtol=1e-10, atol=1e-12)


def test_bias_grad_float32_close_to_reference(BiasGELU):
    torch.manual_seed(2)
    m = BiasGELU(33)
    x = torch.randn(200, 33)
    gy = torch.randn(200, 33)
    (m(x) * gy).sum().backward()
    _, rdb = spec.run_reference_backward((gy,), (x, m.bias), {})
    torch.testing.assert_close(m.bias.grad.double(), rdb, rtol=1e-4, atol=1e-4)


def _regression_data():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 4, generator=g)
    w = torch.randn(4, 1, generator=g)
    y = torch.tanh(x @ w) + 0.1 * x[:, :1] ** 2
    return x, y


def test_trains_inside_sequential(BiasGELU):
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), BiasGELU(8), torch.nn.Linear(8, 1))
    act = model[1]
    bias_before = act.bias.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _regression_data()
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        assert act.bias.grad is not None and torch.isfinite(act.bias.grad).all()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], f"loss did not decrease enough: {losses[0]:.4f} -> {losses[-1]:.4f}"
    assert not torch.equal(act.bias.detach(), bias_before), "the bias was never updated"


@pytest.mark.parametrize("features", [0, -3, 2.5, "8", None], ids=repr)
def test_invalid_features(BiasGELU, features):
    with pytest.raises(ValueError, match="features"):
        BiasGELU(features)


def test_wrong_input_width_is_a_clear_error(BiasGELU):
    m = BiasGELU(8)
    with pytest.raises(ValueError, match=r"bias must have shape \[7\] \(\[n\] with n = 7 from x\)"):
        m(torch.randn(3, 7))


def test_dtype_move_keeps_working(BiasGELU):
    m = BiasGELU(8).to(torch.float64)
    x = torch.randn(3, 8, dtype=torch.float64)
    assert m(x).dtype == torch.float64
    torch.testing.assert_close(m(x), spec.reference(x, m.bias), rtol=1e-12, atol=1e-13)


def test_compile_fullgraph_sequential(BiasGELU):
    torch._dynamo.reset()
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), BiasGELU(8), torch.nn.Linear(8, 1))
    compiled = torch.compile(model, fullgraph=True)
    x, y = _regression_data()
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    # One training step through the compiled module gives the eager gradients.
    torch.nn.functional.mse_loss(compiled(x), y).backward()
    compiled_grad = model[1].bias.grad.clone()
    model.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    torch.testing.assert_close(compiled_grad, model[1].bias.grad, rtol=1e-5, atol=1e-6)
