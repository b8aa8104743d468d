"""Correctness: the check matrix against a float64 reference, and gradcheck.

Every case draws fresh random inputs, poisons the memory the op's outputs will land in (so an
element the kernel never writes shows up as NaN), and compares with the float64 reference by
relative norm error and element-wise tolerance; NaN passes only where the reference has it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from dataclasses import dataclass, field

import torch

from . import loader, registry, toolchain

# Relative norm error ||out - ref|| / ||ref|| and element-wise (atol, rtol) per dtype.
TOLERANCES = {
    torch.float64: (1e-12, 1e-13, 1e-10),
    torch.float32: (1e-5, 1e-5, 1e-4),
    torch.float16: (2e-3, 2e-3, 4e-3),
    torch.bfloat16: (1e-2, 1.6e-2, 1.6e-2),
}
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class Case:
    what: str            # "forward", "backward dx", "backward dbias", "determinism"
    shape: tuple
    dtype: str
    layout: str          # "contiguous", "strided", "offset"
    passed: bool
    rel_err: float = 0.0
    max_abs_err: float = 0.0
    where: tuple | None = None   # index of the worst element
    note: str = ""

    def line(self) -> str:
        mark = "ok  " if self.passed else "FAIL"
        shape = "x".join(map(str, self.shape)) or "scalar"
        where = f" worst at {list(self.where)}" if self.where is not None and not self.passed else ""
        return (f"{mark} {self.what:15s} {shape:>10s} {self.dtype:9s} {self.layout:10s} "
                f"rel {self.rel_err:.2e} max|d| {self.max_abs_err:.2e}{where} {self.note}").rstrip()


@dataclass
class Report:
    op: str
    variant: str
    device: str
    cases: list[Case] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    method: str = ""     # gradcheck: which method was used

    @property
    def ok(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def failures(self) -> list[Case]:
        return [c for c in self.cases if not c.passed]

    def summary(self) -> str:
        n, bad = len(self.cases), len(self.failures)
        head = f"{self.op}/{self.variant} on {self.device}: {n - bad}/{n} cases passed"
        if self.method:
            head += f" ({self.method})"
        lines = [head] + [c.line() for c in self.failures[:20]]
        lines += [f"skipped: {s}" for s in self.skipped]
        return "\n".join(lines)

    def table(self) -> str:
        return "\n".join([self.summary().splitlines()[0]] + [c.line() for c in self.cases])

    def raise_if_failed(self) -> "Report":
        if not self.ok:
            raise AssertionError(self.summary())
        return self

    def __repr__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Report":
        cases = [Case(**{**c, "shape": tuple(c["shape"]), "where": tuple(c["where"]) if c["where"] else None})
                 for c in d["cases"]]
        return cls(d["op"], d["variant"], d["device"], cases, list(d["skipped"]), d["method"])


def compare(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, *, terms: int = 1
            ) -> tuple[bool, float, float, tuple | None, str]:
    """(passed, relative norm error, max abs error, worst index, note) of out against a float64 ref.
    `terms`: how many values each element sums (a reduction's rounding error grows as sqrt(terms))."""
    rel_tol, atol, rtol = TOLERANCES[dtype]
    atol *= math.sqrt(max(terms, 1))
    if out.shape != ref.shape:
        return False, math.inf, math.inf, None, f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    if out.numel() == 0:
        return True, 0.0, 0.0, None, "empty"
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    nan_o, nan_r = torch.isnan(o), torch.isnan(r)
    if not torch.equal(nan_o, nan_r):
        idx = tuple(int(i) for i in torch.nonzero(nan_o != nan_r)[0])
        return False, math.inf, math.inf, idx, "NaN where the reference has none (unwritten element?)" \
            if nan_o[idx] else "reference is NaN here, output is not"
    fin = ~nan_r
    diff = torch.where(fin, (o - r).abs(), torch.zeros_like(o))
    diff = torch.where(torch.isinf(r) & (o == r), torch.zeros_like(diff), diff)
    finite_r = torch.where(torch.isfinite(r), r, torch.zeros_like(r))
    # Floor the norm at what the absolute tolerance allows, so a tensor of tiny values (GELU of a
    # very negative input, which fp16 rounds to 0) is not judged by its relative error alone.
    denom = max(finite_r.norm().item(), atol * math.sqrt(r.numel()))
    rel = diff[torch.isfinite(diff)].norm().item() / denom
    bound = atol + rtol * r.abs()
    bad = diff > torch.where(torch.isfinite(bound), bound, torch.full_like(bound, math.inf))
    bad |= torch.isnan(diff)
    worst = tuple(int(i) for i in torch.unravel_index(torch.argmax(torch.nan_to_num(diff, nan=math.inf)), diff.shape))
    max_abs = diff.max().item()
    # The norm criterion needs enough elements to mean something: over a handful, one element
    # near a zero of the function (where any float32 formula cancels) decides it alone. Small
    # tensors are held to the element-wise bound only.
    norm_ok = rel <= rel_tol or r.numel() < 32
    passed = norm_ok and not bool(bad.any())
    note = "" if passed else (f"{int(bad.sum())} elements beyond atol {atol:g} + rtol {rtol:g}" if bad.any()
                              else f"relative error above {rel_tol:g}")
    return passed, rel, max_abs, worst, note


def _grad_cases(prefix: str, spec, shape: tuple, dname: str, layout: str, got, refs) -> list[Case]:
    """One case per differentiable input ("<prefix><input name>"), each compared with the float64
    reference at the dtype's tolerance, a reduction's scaled by how many terms it sums."""
    terms = spec.grad_terms(shape) or (1,) * len(refs)
    return [Case(prefix + name, shape, dname, layout, *compare(g, r, DTYPES[dname], terms=n))
            for name, g, r, n in zip(spec.input_names, got, refs, terms)]


def _device_for(kernel) -> torch.device:
    if kernel.device == "cuda":
        if not toolchain.gpu_available():
            raise RuntimeError(f"{kernel.op}/{kernel.name} runs on CUDA and this machine has no usable GPU "
                               f"(torch.cuda.is_available() is False); check a CPU variant such as 'cpu'")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _generator(device: torch.device, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def _layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values in another memory layout: a strided (non-contiguous) view, or a contiguous
    view whose data pointer is offset by one element (misaligned for 16-byte vector loads)."""
    if layout == "contiguous" or t.numel() == 0:
        return t
    if layout == "strided":
        wide = torch.empty((*t.shape[:-1], 2 * t.shape[-1]), dtype=t.dtype, device=t.device)
        view = wide[..., ::2]
        view.copy_(t)
        return view
    if layout == "offset":
        buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        view = buf[1:].view(t.shape)
        view.copy_(t)
        return view
    raise ValueError(f"layout must be contiguous, strided or offset; got {layout!r}")


@contextlib.contextmanager
def _poisoned_outputs():
    """Inside: every tensor the op allocates (its outputs too) starts as NaN, so an element the
    kernel never writes fails the comparison. torch's deterministic mode fills uninitialised memory
    from at::empty on CPU and CUDA alike; freeing a NaN block and hoping the allocator hands it
    back works for CUDA's caching allocator but not for CPU malloc."""
    was = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(was, warn_only=warn_only)


def _seed(seed: int | None) -> int:
    return int.from_bytes(os.urandom(4), "little") if seed is None else seed


def _isolated(kind: str, op: str, variant, kwargs: dict) -> Report:
    from . import isolate

    return Report.from_dict(isolate.run(kind, isolate.variant_spec(op, variant), kwargs))


def check(op: str, variant: str, *, dtypes=None, shapes=None, layouts=("contiguous", "strided", "offset"),
          seed: int | None = None, backward: bool = True, verbose: bool = False, isolate: bool = False) -> Report:
    """Run the correctness matrix for one variant: every supported dtype x shape x layout, forward
    and backward, against the float64 reference. Returns a Report (report.ok, report.table()).
    isolate=True runs it in a child process: a kernel that faults raises IsolatedRunError here and
    leaves this process, its CUDA context and its tensors as they were."""
    if isolate:
        return _isolated("check", op, variant, dict(
            dtypes=dtypes, shapes=[list(s) for s in shapes] if shapes else None, layouts=list(layouts),
            seed=seed, backward=backward))
    spec = registry.spec(op)
    kernel = variant if isinstance(variant, loader.Kernel) else loader.get(op, variant)
    device = _device_for(kernel)
    report = Report(op, kernel.name, str(device))
    wanted = list(kernel.dtypes) if dtypes is None else [d if isinstance(d, str) else str(d).replace("torch.", "") for d in dtypes]
    for name in wanted:
        if name not in DTYPES:
            raise ValueError(f"dtypes must be among {list(DTYPES)}; got {name!r}")
        if name not in kernel.dtypes:
            report.skipped.append(f"{name}: not supported by {kernel.name} (supports {', '.join(kernel.dtypes)})")
    seed = _seed(seed)
    gen = _generator(device, seed)
    for dname in [d for d in wanted if d in kernel.dtypes]:
        dtype = DTYPES[dname]
        for shape in (shapes or spec.check_shapes):
            shape = tuple(shape)
            for layout in layouts:
                if layout != "contiguous" and 0 in shape:
                    continue
                inputs = [_layout(t, layout) for t in spec.make_inputs(shape, dtype, device, gen)]
                with _poisoned_outputs():
                    out = kernel(*inputs)
                ok, rel, mx, where, note = compare(out, spec.reference(*inputs), dtype)
                report.cases.append(Case("forward", shape, dname, layout, ok, rel, mx, where, note))
                if verbose:
                    print(report.cases[-1].line())
                if not backward:
                    continue
                grad = _layout(torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype), layout)
                with _poisoned_outputs():
                    grads = kernel.backward(grad, *inputs)
                for case in _grad_cases("backward d", spec, shape, dname, layout, grads,
                                        spec.reference_backward(grad, *inputs)):
                    report.cases.append(case)
                    if verbose:
                        print(case.line())
                again = kernel.backward(grad, *inputs)
                same = all(torch.equal(a, b) for a, b in zip(grads, again))
                report.cases.append(Case("determinism", shape, dname, layout, same,
                                         note="" if same else "backward differs between two identical runs"))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return report


def gradcheck(op: str, variant: str, *, seed: int | None = None, shapes=((3, 5), (2, 3, 4), (1, 1)),
              isolate: bool = False) -> Report:
    """torch.autograd.gradcheck in float64 where the variant supports float64; otherwise the
    variant's gradients against the float64 reference's at each dtype's tolerance. The report's
    `method` says which ran. isolate=True: as for check()."""
    if isolate:
        return _isolated("gradcheck", op, variant, dict(seed=seed, shapes=[list(s) for s in shapes]))
    spec = registry.spec(op)
    kernel = variant if isinstance(variant, loader.Kernel) else loader.get(op, variant)
    device = _device_for(kernel)
    report = Report(op, kernel.name, str(device))
    gen = _generator(device, _seed(seed))
    if "float64" in kernel.dtypes:
        report.method = "torch.autograd.gradcheck in float64"
        for shape in shapes:
            inputs = tuple(t.requires_grad_() for t in spec.make_inputs(shape, torch.float64, device, gen))
            try:
                ok = torch.autograd.gradcheck(lambda *a: kernel(*a), inputs, eps=1e-6, atol=1e-6, rtol=1e-4)
                note = ""
            except torch.autograd.gradcheck.GradcheckError as e:
                ok, note = False, str(e).splitlines()[0]
            report.cases.append(Case("gradcheck", shape, "float64", "contiguous", ok, note=note))
        return report
    report.method = "gradients vs the float64 reference at the dtype's tolerance (no float64 support)"
    for dname in kernel.dtypes:
        dtype = DTYPES[dname]
        for shape in shapes:
            inputs = [t.requires_grad_() for t in spec.make_inputs(shape, dtype, device, gen)]
            out = kernel(*inputs)
            grad = torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
            got = torch.autograd.grad(out, inputs, grad)
            report.cases += _grad_cases("grad ", spec, shape, dname, "contiguous", got,
                                        spec.reference_backward(grad, *inputs))
    return report
