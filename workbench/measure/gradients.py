"""gradcheck for any op: torch.autograd.gradcheck in float64 where the variant has float64, else the
variant's gradients against the float64 reference's at each dtype's tolerance; a failure is a case
with the Jacobian entries that disagree, never an exception out of the check."""
from __future__ import annotations

import importlib
import math

import torch

from .correctness import (DTYPE_REFUSED, Case, Report, _compare_all, _first_line, _generator, _in_a_runner,
                          _isolated, _raised, _record, _start)
from ..model.opspec import as_tuple
from .verify import index_of


def gradcheck(op: str, variant, *, seed: int | None = None, shapes=None, isolate: bool | None = None) -> Report:
    """torch.autograd.gradcheck in float64 where the variant supports float64; otherwise the
    variant's gradients against the float64 reference's at each dtype's tolerance. `shapes`:
    sizes (default: the op's three smallest non-empty check sizes). The report's `method` says
    which ran. No case ends it, and isolate (a runner for an extension or a callable by default)
    is as for check()."""
    variant, isolate, note = _in_a_runner(op, variant, isolate)
    if isolate:
        return _isolated(gradcheck, op, variant, dict(seed=seed, shapes=shapes), note)
    spec, kernel, device, report = _start(op, variant, note)
    if not spec.differentiable:
        report.skipped.append(f"{op} has no differentiable inputs")
        return report
    if "backward" not in kernel.steps:
        report.skipped.append(f"{op}/{kernel.name} has no backward (a forward-only variant)")
        return report
    sizes = [tuple(s) for s in shapes] if shapes else gradcheck_sizes(spec)
    gen = _generator(device, seed)
    attrs = spec.sample_attrs()[0]
    diff = [t.differentiable for t in spec.inputs]
    fn = lambda *a: kernel(*a, **attrs)  # noqa: E731
    if "float64" in kernel.dtypes:
        report.method = f"torch.autograd.gradcheck in float64 (eps {GRADCHECK_EPS:g}, atol {GRADCHECK_ATOL:g}, " \
                        f"rtol {GRADCHECK_RTOL:g})"
        runs, what = [("float64", size) for size in sizes], "gradcheck"
    else:
        report.method = "gradients vs the float64 reference at the dtype's tolerance (no float64 support)"
        runs, what = [(dname, size) for dname in kernel.dtypes for size in sizes], "grad"
    refused = set()  # dtypes the launcher refused: one failed case says so, the rest skip
    for dname, size in runs:
        if dname in refused:
            continue
        try:
            inputs = [t.requires_grad_(d) for t, d in zip(spec.new_inputs(size, dname, device, gen), diff)]
            if what == "gradcheck":
                cases = [_gradcheck(spec, fn, tuple(inputs), diff, size)]
            else:
                cases = _gradients(spec, fn, inputs, diff, size, dname, attrs, gen)
        except Exception as e:  # noqa: BLE001 - the kernel raised: a failed case, not a crash
            cases = [_raised(what, e, size, dname, "contiguous")]
        if _record(report, device, cases):
            return report
        if DTYPE_REFUSED in cases[-1].note:
            refused.add(dname)
    return report


def _gradcheck(spec, fn, inputs, diff, size) -> Case:
    try:
        torch.autograd.gradcheck(fn, inputs, eps=GRADCHECK_EPS, atol=GRADCHECK_ATOL, rtol=GRADCHECK_RTOL)
    except _GradcheckError as e:
        return _gradcheck_failure(spec, fn, inputs, diff, size, e)
    return Case("gradcheck", size, "float64", "contiguous", True, note="Jacobians agree (numerical vs analytical)")


def _gradients(spec, fn, inputs, diff, size, dname, attrs, gen) -> list[Case]:
    """The variant's gradients for random output gradients, against the float64 reference's."""
    outs = as_tuple(fn(*inputs))
    grads = [torch.randn(o.shape, generator=gen, device=o.device, dtype=torch.float32).to(o.dtype) for o in outs]
    got = torch.autograd.grad(outs, [t for t, d in zip(inputs, diff) if d], grads)
    return _compare_all("grad ", [t.name for t in spec.differentiable], got,
                        spec.run_reference_backward(grads, inputs, attrs), spec.terms(size)[1], size, dname,
                        "contiguous")


GRADCHECK_EPS, GRADCHECK_ATOL, GRADCHECK_RTOL = 1e-6, 1e-6, 1e-4
# torch.autograd.gradcheck is the function (torch/autograd/__init__ imports it over its module's
# name); its exception lives in the module, reached through sys.modules.
_GradcheckError = getattr(importlib.import_module("torch.autograd.gradcheck"), "GradcheckError", RuntimeError)


def _jacobians(fn, inputs, diff, eps: float):
    """The two Jacobians gradcheck compares, as {(input index, output index): (analytical,
    numerical)}, each [input elements, output elements]: the numerical one by central differences
    (eps) on a copy of each input, the analytical one by backward calls (autograd.functional)."""
    xs = [t.detach().contiguous().clone() for t in inputs]
    idx = [i for i, d in enumerate(diff) if d]
    num = {}
    with torch.no_grad():
        outs0 = [o.detach() for o in as_tuple(fn(*xs))]
        for i in idx:
            flat = xs[i].view(-1)
            cols = [torch.empty(xs[i].numel(), o.numel(), dtype=torch.float64, device=o.device) for o in outs0]
            for j in range(xs[i].numel()):
                orig = flat[j].item()
                flat[j] = orig + eps
                plus = [o.detach().to(torch.float64).reshape(-1).clone() for o in as_tuple(fn(*xs))]
                flat[j] = orig - eps
                minus = [o.detach().to(torch.float64).reshape(-1) for o in as_tuple(fn(*xs))]
                flat[j] = orig
                for k, (p_, m_) in enumerate(zip(plus, minus)):
                    cols[k][j] = (p_ - m_) / (2 * eps)
            num.update(((i, k), c) for k, c in enumerate(cols))

    def of_wanted(*wanted):
        args = list(xs)
        for i, w in zip(idx, wanted):
            args[i] = w
        return as_tuple(fn(*args))

    jac = torch.autograd.functional.jacobian(of_wanted, tuple(xs[i] for i in idx))  # [output][input]
    return {(i, k): (jac[k][n].reshape(outs0[k].numel(), -1).T.to(torch.float64), num[(i, k)])
            for n, i in enumerate(idx) for k in range(len(outs0))}


def _gradcheck_failure(spec, fn, inputs, diff, size, err: Exception) -> Case:
    """The failed gradcheck case with its numbers: the Jacobian entry whose analytical and numerical
    values differ most, where (which output element by which input element), the tolerance, and how
    many entries are beyond it. gradcheck's own message only prints (possibly abbreviated) tensors."""
    told = _first_line(err).rstrip(",")
    case = Case("gradcheck", size, "float64", "contiguous", False, note=f"gradcheck: {told}")
    try:
        jac = _jacobians(fn, inputs, diff, GRADCHECK_EPS)
    except Exception as e:  # noqa: BLE001 - the numbers are a courtesy; the failure stands
        case.note += f" (the Jacobians could not be recomputed: {_first_line(e)})"
        return case
    out_names = [o.name for o in spec.outputs]
    worst = None
    n_bad = total = 0
    for (i, k), (a, n) in jac.items():
        d = (a - n).abs()
        bad = (d > GRADCHECK_ATOL + GRADCHECK_RTOL * n.abs()) | torch.isnan(d)
        n_bad += int(bad.sum())
        total += d.numel()
        if d.numel() == 0:
            continue
        flat = int(torch.argmax(torch.nan_to_num(d, nan=math.inf)))
        m = float(d.reshape(-1)[flat])
        if worst is None or not (m <= worst[0]):
            rel = float((a - n).norm() / max(float(n.norm()), 1e-300))
            worst = (m, i, k, *divmod(flat, d.shape[1]), float(a.reshape(-1)[flat]), float(n.reshape(-1)[flat]), rel)
    if worst is None or n_bad == 0:
        case.note += " (recomputed, the Jacobians agree: the failure is in what gradcheck checks besides them)"
        return case
    m, i, k, j, col, a_v, n_v, rel = worst
    x_idx = index_of(j, inputs[i].shape)
    y_idx = index_of(col, as_tuple(fn(*[t.detach() for t in inputs]))[k].shape)
    x_name = spec.inputs[i].name
    y_name = out_names[k] if k < len(out_names) else f"output {k}"
    tol = GRADCHECK_ATOL + GRADCHECK_RTOL * abs(n_v)
    case.rel_err, case.max_abs_err, case.where = rel, m, x_idx
    case.note = (f"d {y_name}{list(y_idx)} / d {x_name}{list(x_idx)}: analytical {a_v:.6g}, numerical {n_v:.6g}, "
                 f"|difference| {m:.3g} > tolerance {tol:.3g} (atol {GRADCHECK_ATOL:g} + rtol {GRADCHECK_RTOL:g} "
                 f"x |numerical|); {n_bad} of {total} Jacobian entries beyond it (gradcheck: {told})")
    return case


def gradcheck_sizes(spec) -> list[tuple]:
    """Three small non-empty sizes: finite differences cost one forward per input element."""
    sizes = sorted((tuple(s) for s in spec.check_sizes if 0 not in s),
                   key=lambda s: (math.prod(math.prod(x) for x in spec.input_shapes(s)), len(s)))
    return sizes[:3] or [spec.sample_size()]
