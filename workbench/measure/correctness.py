"""Correctness: the check matrix against a float64 reference, for any op (gradients.py: gradcheck).

Every case draws fresh random inputs from the op's spec, poisons the memory the op's outputs will
land in (so an element the kernel never writes shows up as NaN), and compares each output and each
gradient with the float64 reference by relative norm error and element-wise tolerance, scaled for
an element that sums n terms; NaN passes only where the reference has it.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch

from .. import dtypes as dtypes_
from ..run import loader
from ..model import registry
from ..build import toolchain
from ..model.opspec import as_tuple
from .verify import compare, poisoned_outputs, with_layout  # compare: correctness.compare, as before


@dataclass
class Case:
    what: str            # "forward", "backward dx", "backward dbias", "determinism"
    shape: tuple         # the size (for most ops, the first input's shape)
    dtype: str
    layout: str          # "contiguous", "strided", "offset", "transposed"
    passed: bool
    # What was measured, and only that: NaN where no difference was measured (a determinism
    # comparison of bits, a passing gradcheck, a call that raised), and then not printed.
    rel_err: float = math.nan
    max_abs_err: float = math.nan
    where: tuple | None = None   # index of the worst element
    note: str = ""

    @property
    def measured(self) -> bool:
        return _measured(self.rel_err) or _measured(self.max_abs_err)

    @property
    def shape_text(self) -> str:
        return "x".join(map(str, self.shape)) or "scalar"

    @property
    def label(self) -> str:
        """Which case: "forward 3x5 float32 strided"."""
        return f"{self.what} {self.shape_text} {self.dtype} {self.layout}"

    def line(self) -> str:
        mark = "ok  " if self.passed else "FAIL"
        shape = self.shape_text
        nums = ""
        if _measured(self.rel_err):
            nums += f" rel {self.rel_err:.2e}"
        if _measured(self.max_abs_err):
            nums += f" max|d| {self.max_abs_err:.2e}"
        where = f" worst at {list(self.where)}" if self.where is not None and not self.passed else ""
        return f"{mark} {self.what:15s} {shape:>10s} {self.dtype:9s} {self.layout:10s}{nums}{where} {self.note}".rstrip()


def _measured(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


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
        head = f"{self.op}/{self.variant} on {self.device}: " + (f"{n - bad}/{n} cases passed" if n else
                                                                 "FAIL: no case ran (the notes below say why)")
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
        def num(x):  # JSON carries NaN; an older report may hold None
            return math.nan if x is None else float(x)
        cases = [Case(**{**c, "shape": tuple(c["shape"]), "where": None if c["where"] is None else tuple(c["where"]),
                         "rel_err": num(c.get("rel_err")), "max_abs_err": num(c.get("max_abs_err"))})
                 for c in d["cases"]]
        return cls(d["op"], d["variant"], d["device"], cases, list(d["skipped"]), d["method"])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical (NaN equal to the same NaN), the test for determinism."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False

    def flat_bytes(t):  # a fresh stride-1 copy: reshape/contiguous keep odd strides on size-1 dims
        return t.new_empty(t.numel()).copy_(t.reshape(-1)).view(torch.uint8)
    return torch.equal(flat_bytes(a), flat_bytes(b))


def _compare_all(prefix: str, names, got, refs, terms, shape, dname, layout) -> list[Case]:
    got = as_tuple(got)
    if len(got) != len(refs):
        return [Case(prefix.strip() or "outputs", shape, dname, layout, False,
                     note=f"{len(got)} tensors returned, {len(refs)} expected")]
    return [Case(f"{prefix}{n}".strip(), shape, dname, layout, *compare(g, r, dname, terms=t))
            for n, g, r, t in zip(names, got, refs, terms)]


# What a launcher returns for a dtype its dispatch lacks (kernels/common/wb_cpu.h, wb_cuda.h), in
# the harness's message: "... forward failed: dtype not supported by this variant (status -1)".
DTYPE_REFUSED = "dtype not supported by this variant"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _raised(what: str, e: Exception, size, dname: str, layout: str) -> Case:
    """A failed case for a kernel call that raised, naming the likely cause of a CUDA error."""
    from ..run.cuda_errors import error_name, explained

    msg = _first_line(e)
    if DTYPE_REFUSED in msg:
        note = f"declared {dname} but the launcher refused it: {msg}"
    else:
        note = f"raised {error_name(e)}: {explained(e)}"
    return Case(what, tuple(size), dname, layout, False, note=note)


def _after_case(device: torch.device, cases: list[Case]) -> str:
    """On CUDA, after a case ran here: an error its code left pending (an unchecked launch of zero
    blocks) fails that case, not the next op's; a lost context (a sticky fault) fails it too, and
    its error is returned: no later case can run in this process ("" where the context is fine)."""
    if device.type != "cuda" or not cases:
        return ""
    from ..run.cuda_errors import context_state, explained

    state, err = context_state(device)
    last = cases[-1]
    if state == "cleared":
        cases.append(Case(last.what, last.shape, last.dtype, last.layout, False,
                          note=f"left a CUDA error pending, raised by the next op: {explained(err)}"))
    elif state == "lost":
        last.passed = False
        last.note = (last.note or explained(err)) + "; this process's CUDA context is lost (a sticky error)"
    return explained(err) if state == "lost" else ""


def _record(report: Report, device: torch.device, cases: list[Case]) -> bool:
    """Add one case's results to the report; True where that case lost this process's CUDA context
    (the report then says why the rest did not run)."""
    lost = _after_case(device, cases)
    report.cases += cases
    if lost:
        report.skipped.append(
            f"the cases after {report.cases[-1].label} were not run: this process's CUDA context is lost ({lost}); "
            f"every later CUDA call here fails: restart the process. isolate=True runs a variant in a runner process "
            f"of its own, where a fault ends that runner and fails only its case")
    return bool(lost)


def _device_for(kernel) -> torch.device:
    if kernel.device == "cuda":
        if not toolchain.gpu_available():
            raise RuntimeError(f"{kernel.op}/{kernel.name} runs on CUDA and this machine has no usable GPU "
                               f"(torch.cuda.is_available() is False); check a CPU variant such as 'cpu'")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _generator(device: torch.device, seed: int | None) -> torch.Generator:
    """A generator seeded with `seed`, or at random where it is None."""
    g = torch.Generator(device=device)
    if seed is None:
        g.seed()
    else:
        g.manual_seed(seed)
    return g


def _isolated(run, op: str, variant, kwargs: dict, note: str = "") -> Report:
    """run(op, kernel, **kwargs) (check, gradcheck) here, over the variant served from a runner
    (judge.start.isolated): a call that ends the runner fails its case, the next starts another."""
    from ..judge.start import isolated
    from ..run import byo

    variant = byo.as_variant(op, variant)
    kernel = isolated(op, variant)
    if isinstance(variant, byo.CallableKernel):  # what its probe here found (an output argument, its dtypes)
        kernel.probe = variant.probe
    try:
        _device_for(kernel)  # no GPU for a CUDA variant: said before a runner starts
        kernel.module.ensure()  # a runner that cannot start raises IsolatedRunError here, not as a case
        kernel.info["steps"] = kernel.module.reported["steps"]  # what the library exports (forward only?)
        report = run(op, kernel, **kwargs)
        report.skipped += [note] if note else []
        return report
    finally:
        kernel.module.close()


def _in_a_runner(op: str, variant, isolate: bool | None) -> tuple[object, bool, str]:
    """(the variant, whether its calls go through a runner, a note for the report). isolate=None: a
    torch extension or a brought callable does (a fault in native code takes its process's CUDA
    context), unless a runner cannot import it (__main__, a lambda); the op's own variants run here."""
    if isolate is not None:
        return variant, isolate, ""
    from ..errors import WorkbenchError
    from ..run import byo

    v = byo.as_variant(op, variant)
    if getattr(v, "kind", None) not in ("extension", "callable") or not v.dtypes:  # not brought, or nothing to run
        return v, False, ""
    try:
        byo.child_address(op, v)
    except WorkbenchError:
        return v, False, ("note: it ran in this process, where a CUDA fault in it ends the checks: a runner imports "
                          "a callable by its module path, and this one is defined in __main__, a lambda or a local "
                          "function" if v.device == "cuda" else "")
    return v, True, ("note: its calls ran in a runner process of their own (a fault there fails its case, never this "
                     "process; isolate=False: here)")


def _start(op: str, variant, note: str):
    """(spec, kernel, device, a Report noting what a brought variant's probe found, and `note`)."""
    spec = registry.spec(op)
    if isinstance(variant, loader.Kernel):
        kernel = variant
    elif callable(variant) and not isinstance(variant, str):  # bring your own (byo.py): probed once
        from ..run import byo

        kernel = byo.variant(variant, op=op)
    else:
        kernel = loader.get(op, variant)
    device = _device_for(kernel)
    report = Report(op, kernel.name, str(device))
    probe = getattr(kernel, "probe", "")
    report.skipped += ([f"note: {probe}"] if probe else []) + ([note] if note else [])
    return spec, kernel, device, report


def _wanted_dtypes(kernel, dtypes, report: Report) -> list[str]:
    wanted = list(kernel.dtypes) if dtypes is None else dtypes_.names(dtypes)
    for name in wanted:
        if name not in kernel.dtypes:
            report.skipped.append(f"{name}: not supported by {kernel.name} (supports {', '.join(kernel.dtypes)})")
    return [d for d in wanted if d in kernel.dtypes]


def check(op: str, variant, *, dtypes=None, shapes=None, layouts=("contiguous", "strided", "offset", "transposed"),
          seed: int | None = None, backward: bool = True, verbose: bool = False, isolate: bool | None = None,
          on_case=None) -> Report:
    """Run the correctness matrix for one variant (a name, a Kernel, or any callable: byo.py's
    wb.variant): every supported dtype x size x layout (x the spec's attribute samples, in turn),
    forward, backward and determinism, against the float64 reference. `shapes`: sizes for the op's
    size pattern (default: the spec's check sizes). Returns a Report (report.ok, report.table()).
    No case ends the matrix: a call that raises is its case's failure, a lost CUDA context ends it,
    saying so. isolate=True makes every call in a runner process (workbench/judge), where a fault
    fails only its case; None (the default) does that for a torch extension or a callable brought
    from outside (_in_a_runner). on_case(description) is called before each case runs."""
    variant, isolate, note = _in_a_runner(op, variant, isolate)
    if isolate:
        return _isolated(check, op, variant, dict(dtypes=dtypes, shapes=shapes, layouts=layouts, seed=seed,
                                                  backward=backward, verbose=verbose, on_case=on_case), note)
    spec, kernel, device, report = _start(op, variant, note)
    wanted = _wanted_dtypes(kernel, dtypes, report)
    backward = backward and bool(spec.differentiable)
    if backward and "backward" not in kernel.steps:
        report.skipped.append(f"backward: {op}/{kernel.name} has no backward (a forward-only variant)")
        backward = False
    out_names = [o.name for o in spec.outputs] if len(spec.outputs) > 1 else [""]
    grad_names = [t.name for t in spec.differentiable]
    settings = spec.sample_attrs()
    gen = _generator(device, seed)
    n = 0
    for dname in wanted:
        refused = False  # the launcher refused this declared dtype: one failed case says so, the rest skip
        for size in (shapes or spec.check_sizes):
            if refused:
                break
            size = tuple(size)
            out_terms, grad_terms = spec.terms(size)
            for layout in layouts:
                if layout != "contiguous" and 0 in size:
                    continue
                attrs = settings[n % len(settings)]
                n += 1
                inputs = [with_layout(t, layout) for t in spec.new_inputs(size, dname, device, gen)]
                label = f"{spec.label(size)} {dname} {layout}" + (f" {attrs}" if attrs else "")
                cases = []
                try:
                    step = "forward"
                    if on_case:
                        on_case(f"forward {label}")
                    with poisoned_outputs():
                        out = kernel(*inputs, **attrs)
                    cases += _compare_all("forward " if out_names != [""] else "forward", out_names, out,
                                          spec.run_reference(inputs, attrs), out_terms, size, dname, layout)
                    if backward:
                        step = "backward"
                        grads = [with_layout(torch.randn(r.shape, generator=gen, device=device,
                                                         dtype=torch.float32).to(r.dtype), layout)
                                 for r in as_tuple(out)]
                        if on_case:
                            on_case(f"backward {label}")
                        with poisoned_outputs():
                            got = kernel.backward(*grads, *inputs, **attrs)
                        cases += _compare_all("backward d", grad_names, got,
                                              spec.run_reference_backward(grads, inputs, attrs), grad_terms,
                                              size, dname, layout)
                    step = "determinism"
                    if on_case:
                        on_case(f"determinism {label}")
                    # Run again on the same inputs, poisoned alike (an unwritten element is the
                    # forward's failure, not this one's), and compare bits, NaN included.
                    with poisoned_outputs():
                        same = all(same_bits(a, b) for a, b in zip(as_tuple(out), as_tuple(kernel(*inputs, **attrs))))
                        if backward:
                            same = same and all(same_bits(a, b) for a, b in
                                                zip(as_tuple(got), as_tuple(kernel.backward(*grads, *inputs, **attrs))))
                    cases.append(Case("determinism", size, dname, layout, same,
                                      note="" if same else "two runs on the same inputs gave different bits"))
                except Exception as e:  # noqa: BLE001 - a call that raised is this case's failure
                    cases.append(_raised(step, e, size, dname, layout))
                    if DTYPE_REFUSED in _first_line(e):
                        refused = True
                        report.skipped.append(f"{dname}: the rest of its cases, after the launcher refused it "
                                              f"in {step} {label}")
                if verbose:
                    for c in cases:
                        print(c.line())
                if _record(report, device, cases):
                    return report
                if refused:
                    break
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return report

