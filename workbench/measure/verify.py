"""Proof that what was timed computed the right thing: outputs checked at the timed shape.

A benchmark row, a profile and an exercise's speed verdict are only as good as the output behind
them. Correctness is checked on small shapes (correctness.py); a kernel that skips work only at the
large size it is timed at, or that replays an earlier answer once warmed up, passes those and then
looks fast. So every timed shape is also a checked shape:

- before timing, each provider runs once on freshly drawn inputs with its outputs poisoned (NaN);
- the timed calls rotate through several input sets whose values change in place between samples
  (benchmark._Group: an answer cached by pointer is then an answer to other inputs), and the
  output of the last timed call is checked against its own inputs;
- after timing, once more on new inputs (behaviour that changes after warm-up is caught).

The trusted result is the float64 reference where its float64 copies fit in memory, else the
op's eager baseline at the dtype (compared at twice the dtype's tolerance: both round). Against
the float64 reference an element may also be off by EAGER_FACTOR times PyTorch's own largest
error at the same inputs. A wrong output is a Verdict naming the check, the output, the largest
error and where.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from .. import dtypes as dtypes_
from ..model.opspec import LAYOUTS, as_tuple, input_grads

# Share of the device's free memory the float64 reference (inputs, outputs, autograd's
# intermediates: about 3x the float64 tensors) may take; beyond it the eager baseline is trusted.
_REFERENCE_MEMORY_SHARE = 0.5
_CPU_REFERENCE_BYTES = 8 * 2**30
# Input sets the timed calls rotate through, where their memory allows (at most this share of
# the free memory); fewer (down to one, said in a note) where it does not.
ROTATE = 3
_ROTATE_MEMORY_SHARE = 0.25

CHECKED, WRONG, NOT_CHECKED = "ok", "wrong", "not checked"


@dataclass
class Verdict:
    status: str                 # CHECKED ("ok"), WRONG, NOT_CHECKED
    detail: str = ""            # one line: for WRONG, which check, which output, the error and where
    max_abs_err: float = math.nan
    where: tuple | None = None
    against: str = ""           # "float64 reference" or "eager float32 (...)"

    @property
    def ok(self) -> bool:
        return self.status == CHECKED

    def fields(self) -> dict:
        """The verdict as a row's (or a profiled call's) verify columns."""
        return dict(verified=self.status, verify_detail=self.detail, verify_max_abs_err=self.max_abs_err,
                    verify_where=list(self.where) if self.where is not None else None, verify_against=self.against)


def _free_bytes(device: torch.device) -> int:
    """Memory a new tensor can have: the device's free memory plus what PyTorch's caching allocator
    holds in reserve (freed blocks it keeps, which the driver counts as used)."""
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(torch.cuda.mem_get_info(device)[0]) + max(0, int(cached))
    return _CPU_REFERENCE_BYTES


def tensors_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def rotation(inputs_bytes: int, device: torch.device, copies: int = 1) -> int:
    """How many input sets the timed calls can rotate through here (1 to ROTATE), with `copies`
    copies of each in memory."""
    if inputs_bytes <= 0:
        return ROTATE
    fits = int(_free_bytes(device) * _ROTATE_MEMORY_SHARE // (inputs_bytes * copies))
    return max(1, min(ROTATE, fits))


def _float64_fits(spec, size, device: torch.device) -> bool:
    numel = sum(math.prod(s) for s in spec.input_shapes(size)) + 2 * sum(math.prod(s) for s in spec.output_shapes(size))
    return 3 * 8 * numel <= _REFERENCE_MEMORY_SHARE * _free_bytes(device)


def eager_step(spec, inputs, attrs: dict, direction: str, grads=None) -> tuple:
    """The op's eager math (PyTorch at the inputs' dtype) for one `direction` step."""
    if direction == "fwd":
        with torch.no_grad():
            return as_tuple(spec.eager(*inputs, **attrs))
    return tuple(g.detach() for g in input_grads(spec, lambda *leaves: spec.eager(*leaves, **attrs), inputs, grads))


def expected(spec, size, inputs, attrs: dict, direction: str, grads=None) -> tuple[tuple, str, int, tuple | None]:
    """(trusted results, what they are, tolerance scale, eager floors) for one `direction` step on
    `inputs`: the forward's outputs ("fwd"), the differentiable inputs' gradients for `grads` ("bwd",
    "fwd+bwd": what the timed call returns)."""
    device = inputs[0].device if inputs else torch.device("cpu")
    if not _float64_fits(spec, size, device):
        dname = str(inputs[0].dtype).replace("torch.", "")
        return (eager_step(spec, inputs, attrs, direction, grads), f"eager {dname} (float64 copies do not fit in "
                f"memory)", 2, None)
    if direction == "fwd":
        refs = spec.run_reference(inputs, attrs)
    else:
        refs = spec.run_reference_backward(grads, inputs, attrs)
    return refs, "float64 reference", 1, eager_floors(spec, inputs, attrs, direction, grads, refs)


# At a timed shape a tensor has up to billions of elements, and the tails of the rounding error
# grow with their number: a float32 GEMM at 8192^3 had one element in 67 million 2.5x beyond the
# check matrix's bound, in cuBLAS's result and every rung's alike. So an element may also be off by
# up to EAGER_FACTOR times PyTorch's own largest error at the same inputs (skipped work, a replayed
# answer or garbage are off by far more, or NaN).
EAGER_FACTOR = 4


def eager_floors(spec, inputs, attrs: dict, direction: str, grads, refs) -> tuple[float, ...]:
    """EAGER_FACTOR x the largest |eager - reference| per output (0 where eager cannot run)."""
    try:
        ours = eager_step(spec, inputs, attrs, direction, grads)
    except Exception:  # noqa: BLE001 - no floor then: the dtype's bound alone
        return tuple(0.0 for _ in refs)
    floors = []
    for e, r in zip(ours, refs):
        if e.shape != r.shape or e.numel() == 0:
            floors.append(0.0)
            continue
        d = (e.detach().to(torch.float64) - r.to(torch.float64)).abs()
        worst = float(torch.nan_to_num(d, nan=0.0, posinf=0.0).max())
        floors.append(EAGER_FACTOR * worst)
    return tuple(floors)


def names_of(spec, direction: str) -> list[str]:
    if direction == "fwd":
        return [o.name for o in spec.outputs]
    return [f"d{t.name}" for t in spec.differentiable]


def judge(spec, size, dname: str, direction: str, got, refs, against: str, scale: int, when: str,
          floors=None) -> Verdict:
    """Compare a step's results with the trusted ones; `when` names the check ("before timing",
    "the last timed call", "after timing"); floors: per output, an absolute error always allowed
    (eager_floors)."""
    got = as_tuple(got)
    names = names_of(spec, direction)
    label = spec.label(size)
    if len(got) != len(refs):
        return Verdict(WRONG, f"{when}: {len(got)} tensors returned, {len(refs)} expected ({label} {dname})",
                       against=against)
    out_terms, grad_terms = spec.terms(size)
    terms = out_terms if direction == "fwd" else grad_terms
    worst = Verdict(CHECKED, f"checked at {label} {dname} against the {against}", 0.0, None, against)
    atol = dtypes_.tolerance(dname)[1]
    for name, g, r, t, floor in zip(names, got, refs, terms, floors or [0.0] * len(refs)):
        # scale**2 terms: the absolute tolerance grows as sqrt(terms), so this is scale x it; at
        # least the floor
        terms_ok = max(max(t, 1) * scale * scale, (floor / atol) ** 2 if atol > 0 else 0)
        passed, _rel, max_abs, where, note = compare(g, r, dname, terms=terms_ok)
        if not passed:
            at = f" at {list(where)}" if where is not None else ""
            return Verdict(WRONG, f"{when}: {name} wrong at {label} {dname}: largest |difference| {max_abs:.3g}{at}"
                           f" ({note}; against the {against})", max_abs, where, against)
        if not math.isnan(max_abs) and max_abs > worst.max_abs_err:
            worst.max_abs_err = max_abs
    return worst


def run_step(call, spec, inputs, attrs: dict, direction: str, grads=None):
    """One `direction` step of `call` (the op's signature) on `inputs`, with autograd where it
    needs it; returns the outputs (fwd) or the differentiable inputs' gradients."""
    if direction == "fwd":  # grad mode left on: torch.compile's guards would recompile under no_grad
        return as_tuple(call(*inputs, **attrs))
    leaves = [t.detach().requires_grad_(s.differentiable) for s, t in zip(spec.inputs, inputs)]
    outs = as_tuple(call(*leaves, **attrs))
    wanted = [x for s, x in zip(spec.inputs, leaves) if s.differentiable]
    return torch.autograd.grad(outs, wanted, grads)


class Probe:
    """Inputs drawn once (and output gradients for a backward) with their trusted results,
    computed on first use: one probe serves every provider of a benchmark group, so the float64
    reference runs once per group, not once per provider."""

    def __init__(self, spec, size, dname: str, direction: str, attrs: dict, gen: torch.Generator,
                 device: torch.device, inputs=None):
        self.spec, self.size, self.dname, self.direction, self.attrs = spec, tuple(size), dname, direction, attrs
        self.inputs = tuple(inputs) if inputs is not None else spec.new_inputs(self.size, dname, device, gen)
        self.grads = None if direction == "fwd" else [
            torch.randn(s, generator=gen, device=device, dtype=torch.float32).to(self.inputs[0].dtype)
            for s in spec.output_shapes(self.size)]
        self._expected = None

    def expected(self) -> tuple[tuple, str, int, tuple | None]:
        """expected() of the probe's inputs, computed once."""
        if self._expected is None:
            self._expected = expected(self.spec, self.size, self.inputs, self.attrs, self.direction, self.grads)
        return self._expected

    def judge(self, got, when: str) -> Verdict:
        refs, against, scale, floors = self.expected()
        return judge(self.spec, self.size, self.dname, self.direction, got, refs, against, scale, when, floors)

    def check(self, call, when: str, *, poison: bool = True) -> Verdict:
        """One step of `call` on the probe's inputs, its outputs poisoned (NaN) unless poison is
        False (PyTorch's own baselines: torch.compile's guards would recompile under the
        deterministic mode the poisoning uses), judged."""
        try:
            with poisoned_outputs() if poison else contextlib.nullcontext():
                got = run_step(call, self.spec, self.inputs, self.attrs, self.direction, self.grads)
        except Exception as e:  # noqa: BLE001 - a call that raises at the timed shape is a wrong row, named
            if "CUDA error" in str(e) or isinstance(e, torch.cuda.OutOfMemoryError):
                raise
            first = str(e).splitlines()[0] if str(e) else ""
            return Verdict(WRONG, f"{when}: raised {type(e).__name__}: {first} ({self.spec.label(self.size)} {self.dname})")
        return self.judge(got, when)


def check_kernel_at(kernel, size, dtype: str, direction: str, *, seed: int = 0) -> Verdict:
    """A loaded variant checked at one size: the step wb.profile measures ("fwd", or "bwd": the
    variant's backward step alone), on fresh inputs with its outputs poisoned, against the float64
    reference (or eager where it does not fit)."""

    spec = kernel.spec
    device = torch.device(kernel.device if kernel.device != "cuda" else f"cuda:{torch.cuda.current_device()}")
    gen = torch.Generator(device=device).manual_seed(seed)
    probe = Probe(spec, size, dtype, direction, spec.sample_attrs()[0], gen, device)
    if direction != "bwd":
        return probe.check(kernel, "the profiled call")
    with poisoned_outputs():
        got = kernel.backward(*probe.grads, *probe.inputs, **probe.attrs)
    return probe.judge(got, "the profiled call")


def with_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values in another memory layout: a strided (non-contiguous) view, a contiguous view
    whose data pointer is offset by one element (misaligned for 16-byte vector loads), or the
    transpose of a contiguous tensor, transposed back (a column-major view; 1-D stays as it is)."""
    if layout == "contiguous" or t.numel() == 0:
        return t
    if layout == "strided":
        if t.dim() == 0:
            return t
        wide = torch.empty((*t.shape[:-1], 2 * t.shape[-1]), dtype=t.dtype, device=t.device)
        view = wide[..., ::2]
        view.copy_(t)
        return view
    if layout == "offset":
        buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        view = buf[1:].view(t.shape)
        view.copy_(t)
        return view
    if layout == "transposed":
        return t if t.dim() < 2 else t.transpose(-1, -2).contiguous().transpose(-1, -2)
    raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")


@contextlib.contextmanager
def poisoned_outputs():
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


def compare(out: torch.Tensor, ref: torch.Tensor, dtype, *, terms: int = 1
            ) -> tuple[bool, float, float, tuple | None, str]:
    """(passed, relative norm error, max abs error, worst index, note) of out against a float64 ref.
    `terms`: how many values each element sums (a sum's rounding error grows as sqrt(terms)).
    Computed where the reference lives (the GPU for a CUDA variant), with one transfer of a few
    numbers back: a check runs hundreds of these."""
    rel_tol, atol, rtol = dtypes_.tolerance(dtype)
    atol *= math.sqrt(max(terms, 1))
    if out.shape != ref.shape:
        return False, math.inf, math.inf, None, f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    if out.numel() == 0:
        return True, 0.0, 0.0, None, "empty"
    r = ref.detach().to(torch.float64)
    o = out.detach().to(r.device, torch.float64)
    nan_o, nan_r = torch.isnan(o), torch.isnan(r)
    nan_mismatch = nan_o != nan_r
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    diff = torch.where(nan_r, zero, (o - r).abs())
    diff = torch.where(torch.isinf(r) & (o == r), zero, diff)
    finite_diff = torch.where(torch.isfinite(diff), diff, zero)
    finite_r = torch.where(torch.isfinite(r), r, zero)
    bound = atol + rtol * r.abs()
    bad = (diff > torch.where(torch.isfinite(bound), bound, torch.full_like(bound, math.inf))) | torch.isnan(diff)
    worst = torch.argmax(torch.nan_to_num(diff, nan=math.inf).reshape(-1))
    first_nan = torch.argmax(nan_mismatch.reshape(-1).to(torch.uint8))
    stats = torch.stack([nan_mismatch.any().double(), finite_r.norm(), finite_diff.norm(), bad.sum().double(),
                         diff.max(), worst.double(), first_nan.double()]).tolist()  # the one sync
    any_nan_mismatch, r_norm, diff_norm, n_bad, max_abs, worst_flat, nan_flat = stats
    if any_nan_mismatch:
        idx = index_of(int(nan_flat), o.shape)
        return False, math.inf, math.inf, idx, "NaN where the reference has none (unwritten element?)" \
            if bool(nan_o[idx]) else "reference is NaN here, output is not"
    # Floor the norm at what the absolute tolerance allows, so a tensor of tiny values (GELU of a
    # very negative input, which fp16 rounds to 0) is not judged by its relative error alone.
    rel = diff_norm / max(r_norm, atol * math.sqrt(r.numel()))
    where = index_of(int(worst_flat), o.shape)
    # The norm criterion needs enough elements to mean something: over a handful, one element
    # near a zero of the function (where any float32 formula cancels) decides it alone. Small
    # tensors are held to the element-wise bound only.
    norm_ok = rel <= rel_tol or r.numel() < 32
    passed = norm_ok and n_bad == 0
    note = "" if passed else (f"{int(n_bad)} elements beyond atol {atol:g} + rtol {rtol:g}" if n_bad
                              else f"relative error above {rel_tol:g}")
    return passed, rel, max_abs, where, note


def index_of(flat: int, shape) -> tuple:
    """The index of element `flat` of a tensor of `shape`, in row-major order."""
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(shape)))
