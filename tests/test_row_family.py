"""The row family (kernels/common/wb_row.h, .cuh, _cpu.h): an op over rows of the last dimension is
its math as two steps and its declaration. softmax and l2_normalize are on it; their check matrix,
gradcheck, opcheck and compile run in test_ops.py (every op) and on the GPU in test_gpu.py. Here:
what the family itself promises (the max subtracted, NaN and infinities as PyTorch, a clamped norm),
that a new op of the family is small, and that one can be written from strings in a notebook."""
from __future__ import annotations

import json
import math

import pytest
import torch

import workbench as wb
from conftest import REPO_ROOT, describe
from workbench import config
from workbench.build import nvrtc, nvrtc_split, nvrtc_tier
from workbench.measure.correctness import compare
from workbench.model import registry

ROW_OPS = ("softmax", "l2_normalize")
CUDA = [(op, v.name) for op in ROW_OPS for v in registry.variants(op) if v.device == "cuda"]


def test_a_row_op_of_the_family_is_its_math_and_declaration_in_120_lines():
    """l2_normalize, added on the family: its header (two steps), four variants, binding, declaration
    and math stay within 120 lines (the family holds the layout, reductions, dispatch and binding)."""
    specs = REPO_ROOT / "workbench" / "specs"
    files = [*(REPO_ROOT / "kernels" / "l2_normalize").iterdir(), REPO_ROOT / "bindings" / "l2_normalize.cpp",
             specs / "l2_normalize.py", specs / "l2_normalize_math.py"]
    lines = {str(p.relative_to(REPO_ROOT)): len(p.read_text().splitlines()) for p in files}
    assert sum(lines.values()) <= 120, lines
    for op in ROW_OPS:
        assert "WB_EXPORT_BINDING(%s, WB_ROW_STEPS)" % op in (REPO_ROOT / "bindings" / f"{op}.cpp").read_text()
        assert {"cpu", "scalar", "vec4", "half"} <= {v.name for v in registry.variants(op)}
        scalar = next(v for v in registry.variants(op) if v.name == "scalar")
        assert "float64" in scalar.dtypes  # the float64 gradcheck runs on the GPU too


# A CUDA variant of the family: the storage type and access width its kernels are instantiated with.
FAMILY_KERNELS = {"scalar": ("double", 1), "vec4": ("float", 4), "half": ("wb_bf16_t", 8)}


@pytest.mark.skipif(not nvrtc.available(), reason="no NVRTC library here (torch's CUDA wheels bring it)")
@pytest.mark.parametrize("op, variant", [*CUDA, ("rmsnorm", "vectorized")], ids=lambda x: str(x))
def test_the_nvrtc_tier_takes_the_family_headers(op, variant):
    """The NVRTC tier's device view of every CUDA variant of the family, and of rmsnorm's vectorized
    rung on its row groups, compiles with NVRTC (syntax only), the family's kernels instantiated: the
    headers use nothing NVRTC lacks (<utility>, INFINITY) and device code names no host function (a
    using-declaration of one); else the edit loop falls back to nvcc."""
    source = registry.resolve(op).variant_source(variant)
    closure = nvrtc_split.closure(source, [config.COMMON_DIR, source.parent])
    names = []
    if op in ROW_OPS:
        t, v = FAMILY_KERNELS[variant]
        step = "Wb" + "".join(w.title() for w in op.split("_"))
        layouts = [(0, "false")] + ([(4, "false"), (1, "true")] if v > 1 else [])
        names = [f"&wb_row::row_kernel<{t}, {v}, {npt}, {warp}, {step}{s}>"
                 for s in ("Forward", "Backward") for npt, warp in layouts]
    options = [*nvrtc_tier.nvrtc_options("sm_90a", []), nvrtc_tier.SYNTAX_ONLY]
    nvrtc.compile_program(closure[0][0], nvrtc_split.split(closure).device, options, names)


def _rows(dtype, device):
    big = 60000.0 if dtype == torch.float16 else 3e4  # exp overflows far below: the max must be subtracted
    inf, nan = math.inf, math.nan
    return torch.tensor([[big, big - 1, big - 30, -big, 0.5, 1.0],
                         [-big, -big + 2, -big + 1, -big, -big, -big],
                         [1.0, 2.0, 3.0, -inf, -inf, 0.0],
                         [nan, 1.0, 2.0, 3.0, 4.0, 5.0],
                         [inf, 1.0, 2.0, 3.0, 4.0, 5.0],
                         [-inf, -inf, -inf, -inf, -inf, -inf]], dtype=torch.float64).to(dtype).to(device)


def _softmax_matches_pytorch(kernel, device):
    spec = registry.spec("softmax")
    for name in kernel.dtypes:
        dtype = getattr(torch, name)
        x = _rows(dtype, device)
        dy = torch.linspace(-1, 1, x.numel(), dtype=torch.float64).reshape(x.shape).to(dtype).to(device)
        ok, _, _, where, note = compare(kernel(x), spec.reference(x), dtype, terms=x.shape[-1])
        assert ok, f"softmax {name}: {note} at {where}"
        ok, _, _, where, note = compare(kernel.backward(dy, x), spec.run_reference_backward((dy,), (x,), {})[0],
                                        dtype, terms=x.shape[-1])
        assert ok, f"softmax backward {name}: {note} at {where}"


def test_softmax_subtracts_the_max_and_treats_nan_and_inf_as_pytorch():
    """Rows of +-3e4 (+-60000 in fp16), -inf entries (probability 0), a NaN or +inf in a row (a NaN
    row), a row of -inf (NaN), forward and backward, against the float64 reference (torch.softmax)."""
    _softmax_matches_pytorch(wb.load("softmax", "cpu"), "cpu")


def test_l2_normalize_clamps_at_eps_as_f_normalize():
    """A row whose norm is below eps is divided by eps, and its gradient is dy / eps (torch's clamp_min
    passes no gradient to the norm); a row of zeros too. Against F.normalize's autograd."""
    k = wb.load("l2_normalize", "cpu")
    x = torch.tensor([[0.0, 0.0, 0.0], [1e-3, -2e-3, 0.5e-3], [3.0, -4.0, 0.0]], dtype=torch.float64)
    dy = torch.tensor([[1.0, -2.0, 3.0], [0.5, 0.25, -1.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    for eps in (1e-12, 1e-2):
        leaf = x.clone().requires_grad_()
        ref = torch.nn.functional.normalize(leaf, dim=-1, eps=eps)
        ref.backward(dy)
        torch.testing.assert_close(k(x, eps=eps), ref.detach())
        torch.testing.assert_close(k.backward(dy, x, eps=eps), leaf.grad)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")
@pytest.mark.parametrize("variant", [v for op, v in CUDA if op == "softmax"])
def test_gpu_softmax_subtracts_the_max_and_treats_nan_and_inf_as_pytorch(variant):
    _softmax_matches_pytorch(wb.load("softmax", variant), "cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")
@pytest.mark.parametrize("op, variant", CUDA, ids=[f"{o}/{v}" for o, v in CUDA])
def test_gpu_every_route_of_the_plan_matches_the_reference(op, variant):
    """Every row length's route (a warp per row with 1, 2 or 4 vectors a lane, a block with 4 or 8, the
    streamed route past 4096 vectors, 1 element per access for an odd n or an offset view) against the
    reference, in each dtype the variant takes; hundreds of rows, so that warps share blocks."""
    k = wb.load(op, variant)
    sizes = [(300, 64), (300, 256), (300, 512), (300, 1024), (64, 4096), (16, 16384), (8, 32768), (4, 40000),
             (40, 999)]
    report = wb.check(op, k, shapes=sizes, layouts=("contiguous", "offset"), seed=7)
    assert report.ok, report.summary()


ROW_OP_FROM_STRINGS = r'''
import json, torch, workbench as wb

HEADER = """
#pragma once
#include "wb_row.h"
struct CenterForward {  // x -> (x - mean(x)) * scale
  static constexpr int kReads = 1, kWrites = 1;
  double scale;
  explicit CenterForward(const WbRowArgs& a) : scale(a.attrs[0].f) {}
  template <typename Row>
  WB_HD void operator()(const Row& row) const {
    using A = typename Row::Acc;
    const A mean = row.sum([](const A* in) { return in[0]; }) / A(row.n());
    row.write([&](const A* in, A* out) { out[0] = (in[0] - mean) * A(scale); });
  }
};
struct CenterBackward {  // dy, x -> (dy - mean(dy)) * scale
  static constexpr int kReads = 2, kWrites = 1;
  double scale;
  explicit CenterBackward(const WbRowArgs& a) : scale(a.attrs[0].f) {}
  template <typename Row>
  WB_HD void operator()(const Row& row) const {
    using A = typename Row::Acc;
    const WbSum2<A> s = row.sum([](const A* in) { return WbSum2<A>{in[0], A(1)}; });  // sum(dy), n
    row.write([&](const A* in, A* out) { out[0] = (in[0] - s.a / s.b) * A(scale); });
  }
};
"""
BINDING = '#include "center.h"\n#include "wb_binding.h"\nWB_EXPORT_BINDING(center, WB_ROW_STEPS)\n'
VARIANT = """#include "center.h"
#include "wb_row_cpu.h"
static const WbRowLaunchers launchers = wb_row::cpu_launchers<WB_F32 | WB_F64, CenterForward, CenterBackward>();
WB_EXPORT_VARIANT(center, WB_DEVICE_CPU, WB_F32 | WB_F64, "centred rows", launchers, wb_cpu_status_string)
"""

def reference(x, scale):
    x = x.double()
    return (x - x.mean(-1, keepdim=True)) * scale

spec = wb.OpSpec(name="center", doc="(x - mean(x)) * scale over the last dim",
                 inputs=(wb.Tensor("x", "... n", grad_terms="n"),), outputs=(wb.Output("y", "... n", terms="n"),),
                 attrs=(wb.Attr("scale", float, 1.0, samples=(1.0, -2.5)),),
                 reference=reference, eager=lambda x, scale: (x - x.mean(-1, keepdim=True)) * scale,
                 check_sizes=((1, 1), (3, 5), (2, 3, 300), (4, 0)))
wb.define_op(spec, header=HEADER, binding=BINDING)
k = wb.load_inline("center", VARIANT, name="cpu_mine")
x = torch.randn(4, 7, dtype=torch.float64, requires_grad=True)
y = k(x, scale=-2.5)
y.backward(torch.ones_like(y))
print("RESULT " + json.dumps({
    "forward": bool(torch.allclose(y, reference(x, -2.5))),
    "backward": bool(torch.allclose(x.grad, torch.zeros_like(x), atol=1e-12)),
    "check": wb.check("center", k, seed=1).ok, "gradcheck": wb.gradcheck("center", k, seed=1).ok}))
'''


def test_a_row_op_from_strings_needs_its_math_and_declaration_only(run_python, cpu_kernel):
    """A notebook's row op: a header of two steps (an attribute, a WbSum2 reduction), a one-line
    binding and a one-line CPU variant; it checks and gradchecks like a tree op."""
    proc = run_python(ROW_OP_FROM_STRINGS, timeout=600)
    assert proc.returncode == 0, describe(proc)
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert out == {"forward": True, "backward": True, "check": True, "gradcheck": True}, out
