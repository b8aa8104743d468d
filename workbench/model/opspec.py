"""The op model: an op declared once, in its Python spec, and everything derived from it.

A spec (workbench/specs/<op>.py, or one built in a notebook) is torch-free data: the op's tensor
inputs with dims patterns ("... n"), scalar attributes, outputs, which inputs are differentiable,
and MathRefs to its float64 reference and eager PyTorch math (workbench/specs/<op>_math.py,
imported on first call, so the NumPy front end and export never import torch). From it come the
schemas and the harness's checks (fields()), the fakes and autograd (torchops.py), inputs for any
size, tolerances, the bytes a direction moves, the bad-input cases and the baselines.

A *size* fills the op's size pattern (by default its first input's dims): for bias_gelu, "... n"
with (127, 129) is x [127, 129] and bias [129].
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import dtypes as dtypes_
from .error_cases import ErrorCase, derived_error_cases
from .opmath import MathField, MathModule, MathRef, declared
from .shapes import ELLIPSIS, DimPattern, ShapeBinder, attr_problem, check_call, shape_text

REQUIRED = object()  # an attribute without a default
DIRECTIONS = ("fwd", "bwd", "fwd+bwd")
LAYOUTS = ("contiguous", "strided", "offset", "transposed")
_KINDS = {float: "float", int: "int", bool: "bool"}


@dataclass(frozen=True)
class Tensor:
    """A tensor input. `grad_terms`: dims whose product is how many terms each element of this
    input's gradient sums (bias_gelu's dbias sums every row: "..."); "" for one."""
    name: str
    dims: str
    differentiable: bool = True
    grad_terms: str = ""
    read_by_backward: bool = True   # False: the backward needs only its shape
    scale: float = 1.0              # default inputs: standard normal times this

    @functools.cached_property  # parsed once: the fakes and checks read it on every call
    def pattern(self) -> DimPattern:
        return DimPattern.parse(self.dims)


@dataclass(frozen=True)
class Attr:
    """A scalar attribute (float, int or bool). `samples`: the values the check matrix cycles
    through (default: the default value)."""
    name: str
    kind: type
    default: Any = REQUIRED
    min: float | None = None
    max: float | None = None
    finite: bool = True
    samples: tuple = ()
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def value(self, v, op: str):
        """v checked against the kind (an int is taken for a float; a bool never for a number)."""
        ok = (isinstance(v, bool) if self.kind is bool else
              isinstance(v, (int, float)) and not isinstance(v, bool) if self.kind is float else
              isinstance(v, int) and not isinstance(v, bool))
        if not ok:
            raise TypeError(f"{op}: attribute {self.name} must be a {_KINDS[self.kind]}; got {type(v).__name__} {v!r}")
        if self.kind is int and not -2**63 <= v < 2**63:
            raise ValueError(f"{op}: attribute {self.name} must fit in a 64-bit int; got an int of {len(str(abs(v)))} digits")
        try:
            return self.kind(v)
        except OverflowError:
            raise ValueError(f"{op}: attribute {self.name} must be a number a float can hold (at most about 1.8e308); "
                             f"got an int of {len(str(abs(v)))} digits") from None

    def problem(self, v) -> str:
        """The harness's complaint about a value of the right kind ("" if none): same words as C++."""
        return attr_problem(self.name, _KINDS[self.kind], v, self.min, self.max, self.finite)


@dataclass(frozen=True)
class Output:
    """An output; `terms`: dims whose product is how many terms each element sums ("" for one)."""
    name: str
    dims: str
    terms: str = ""

    @functools.cached_property
    def pattern(self) -> DimPattern:
        return DimPattern.parse(self.dims)


@dataclass(frozen=True)
class Layer:
    """An nn.Module over the op, wb.nn.<cls>: its first input is the layer's input, the others are
    its learnable parameters, sized by the constructor arguments `size_args` names (features -> n).
    Attributes become keyword arguments. `init(parameters)` fills a fresh layer's parameters."""
    cls: str
    size_args: dict
    init: Callable | None = None


def as_tuple(out) -> tuple:
    """An op's result as a tuple: a single tensor, or the tuple a multi-output schema returns."""
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def one_or_tuple(out):
    """A step's result as the schemas return it: a tensor alone, else a tuple."""
    out = as_tuple(out)
    return out[0] if len(out) == 1 else out


def input_grads(spec, forward: Callable, inputs, grads) -> tuple:
    """Gradients of spec's differentiable inputs through forward(*inputs) by autograd (zeros where unused)."""
    import torch

    with torch.enable_grad():
        leaves = [t.detach().requires_grad_(s.differentiable) for s, t in zip(spec.inputs, inputs)]
        outs = as_tuple(forward(*leaves))
        wanted = [x for s, x in zip(spec.inputs, leaves) if s.differentiable]
        got = torch.autograd.grad(outs, wanted, grads, allow_unused=True)
    return tuple(torch.zeros_like(w) if g is None else g for g, w in zip(got, wanted))


def _default_flops(dims, direction: str) -> int:
    return 0


# Sizes of a memory-bound op over [rows, cols] (2-D sizes, 2M to 268M elements), and the CPU's.
ROW_BENCH_SIZES = {
    "cuda": [(512, 4096), (2048, 4096), (4096, 4096), (8192, 8192), (16384, 16384)],
    "cpu": [(64, 1024), (256, 4096), (1024, 4096)],
}


@dataclass(frozen=True)
class OpSpec:
    name: str
    doc: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Output, ...]
    # The math fields (reference, eager, make_inputs, reference_backward, baselines' values,
    # double_backward, bytes_moved, error cases' builders, the layer's init) take a function or a
    # MathRef to one. float64 math: (*inputs, **attrs) -> output, or a tuple of outputs
    reference: Callable = MathField()
    # the same math in PyTorch at the inputs' dtype: the "eager" baseline (torch.compile is derived)
    eager: Callable = MathField()
    attrs: tuple[Attr, ...] = ()
    # (dims, direction) -> flops, dims a ShapeBinder over the size (dims.product("... n"))
    flops: Callable = _default_flops
    size: str | None = None
    # (size, dtype, device, generator) -> tuple of inputs; default: standard normal times each scale
    make_inputs: Callable | None = MathField(None)
    # (grads of outputs, inputs, attrs) -> grads of the differentiable inputs; default: float64
    # autograd through `reference`
    reference_backward: Callable | None = MathField(None)
    # op-specific baselines beside eager and compile: name -> callable like eager
    baselines: dict = MathField(None)   # None is taken for {} (a field's default cannot be a dict)
    check_sizes: tuple = ()
    bench_sizes: dict = field(default_factory=lambda: dict(ROW_BENCH_SIZES))  # "cuda"/"cpu" -> sizes
    error_cases: tuple[ErrorCase, ...] = ()               # besides those every op gets (all_error_cases)
    # (device type, dtype name or None) -> variant names, in order of preference (nn layers' default)
    preferred: dict = field(default_factory=dict)
    # (upstream grads of the backward's outputs, grads of outputs, inputs, attrs) -> grads for
    # (grads of outputs..., inputs...): makes the backward differentiable (create_graph=True)
    double_backward: Callable | None = MathField(None)
    # (dims, dtype, direction) -> bytes; default: every tensor a direction must read and write, once
    bytes_moved: Callable | None = MathField(None)
    layer: Layer | None = None
    # variant names in teaching order, first rung to last: the ladder plot draws them in this order
    # with the step-to-step speedup (python -m workbench plot; plot.ladder_figure)
    ladder: tuple[str, ...] = ()
    # directions the GPU script benchmarks (default: fwd, and bwd where the op has one); an op whose
    # eager backward is a view (reduce_sum's: dy expanded, no kernel) leaves bwd out: nothing to time
    bench_directions: tuple[str, ...] | None = None
    # True for an op whose FLOPs, not bytes, decide its speed (matmul): the benchmark reports
    # TFLOP/s against the device's cuBLAS rate per dtype (TF32 off) beside GB/s
    compute_bound: bool = False

    def __post_init__(self):
        if declared(self, "baselines") is None:  # not read: a read would import the op's math
            object.__setattr__(self, "baselines", {})
        names = [t.name for t in self.inputs] + [a.name for a in self.attrs]
        if len(set(names)) != len(names) or "variant" in names:
            raise ValueError(f"{self.name}: input and attribute names must be distinct and not 'variant'")
        if not self.name.isidentifier() or not self.inputs or not self.outputs:
            raise ValueError(f"op spec {self.name!r}: needs an identifier name, inputs and outputs")
        for a in self.attrs:
            if a.kind not in _KINDS:
                raise ValueError(f"{self.name}: attribute {a.name} must be float, int or bool")
        bound = {n for t in self.inputs for n in t.pattern.names}
        for o in self.outputs:
            free = set(o.pattern.names) - bound
            if free:
                raise ValueError(f"{self.name}: output {o.name} uses dims {sorted(free)} that no input binds")
        if len(set(self.ladder)) != len(self.ladder) or not all(isinstance(v, str) for v in self.ladder):
            raise ValueError(f"{self.name}: ladder must be distinct variant names; got {self.ladder!r}")
        if len(self.inputs) + len(self.outputs) > 8 or len(self.attrs) > 8:
            raise ValueError(f"{self.name}: at most 8 tensors and 8 attributes")

    @property
    def differentiable(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.inputs if t.differentiable)

    @property
    def benched_directions(self) -> tuple[str, ...]:
        if self.bench_directions is not None:
            return tuple(self.bench_directions)
        return ("fwd", "bwd") if self.differentiable else ("fwd",)

    @property
    def size_pattern(self) -> DimPattern:
        return DimPattern.parse(self.size or self.inputs[0].dims)

    def schema(self) -> str:
        args = [f"Tensor {t.name}" for t in self.inputs] + [f"{_KINDS[a.kind]} {a.name}" for a in self.attrs]
        rets = "Tensor" if len(self.outputs) == 1 else "(" + ", ".join("Tensor" for _ in self.outputs) + ")"
        return f"{self.name}({', '.join(args + ['str variant'])}) -> {rets}"

    def backward_schema(self) -> str | None:
        diff = self.differentiable
        if not diff:
            return None
        args = ([f"Tensor grad_{o.name}" for o in self.outputs] + [f"Tensor {t.name}" for t in self.inputs]
                + [f"{_KINDS[a.kind]} {a.name}" for a in self.attrs])
        rets = "Tensor" if len(diff) == 1 else "(" + ", ".join("Tensor" for _ in diff) + ")"
        return f"{self.name}_backward({', '.join(args + ['str variant'])}) -> {rets}"

    def fields(self) -> tuple:
        """The declaration as data, a column per field of bindings/harness/op_decl.h's OpFields."""
        ins, outs, attrs = self.inputs, self.outputs, self.attrs
        lo = [None if a.min is None else float(a.min) for a in attrs]
        hi = [None if a.max is None else float(a.max) for a in attrs]
        return (self.name, self.schema(), self.backward_schema() or "",
                [t.name for t in ins], [t.dims for t in ins], [bool(t.differentiable) for t in ins],
                [bool(t.read_by_backward) for t in ins], [o.name for o in outs], [o.dims for o in outs],
                [a.name for a in attrs], [_KINDS[a.kind] for a in attrs], lo, hi, [bool(a.finite) for a in attrs])

    def declaration(self) -> str:
        """The declaration as tab-separated lines (op_decl.h), for the runner pipe and exported packages."""
        lines = [f"op\t{self.name}", f"schema\t{self.schema()}"]
        if self.backward_schema():
            lines.append(f"backward_schema\t{self.backward_schema()}")
        for t in self.inputs:
            lines.append(f"input\t{t.name}\t{t.dims}\t{int(t.differentiable)}\t{int(t.read_by_backward)}")
        for o in self.outputs:
            lines.append(f"output\t{o.name}\t{o.dims}")
        for a in self.attrs:
            lo = "-" if a.min is None else repr(float(a.min))
            hi = "-" if a.max is None else repr(float(a.max))
            lines.append(f"attr\t{a.name}\t{_KINDS[a.kind]}\t{lo}\t{hi}\t{int(a.finite)}")
        return "\n".join(lines)

    def call_args(self, args: tuple, kwargs: dict, *, grads: int = 0) -> tuple[tuple, tuple]:
        """(tensors, attribute values in order) from a call like k(x, bias, scale=2.0), defaults filled in."""
        n = grads + len(self.inputs)
        if len(args) < n:
            names = [f"grad_{o.name}" for o in self.outputs][:grads] + [t.name for t in self.inputs]
            raise TypeError(f"{self.name}: expected tensors {', '.join(names)}; got {len(args)} argument(s)")
        tensors, extra = tuple(args[:n]), list(args[n:])
        if len(extra) > len(self.attrs):
            raise TypeError(f"{self.name}: takes {n} tensors and {len(self.attrs)} attribute(s) "
                            f"({', '.join(a.name for a in self.attrs) or 'none'}); got {len(args)} positional arguments")
        unknown = set(kwargs) - {a.name for a in self.attrs}
        if unknown:
            raise TypeError(f"{self.name}: unknown attribute(s) {sorted(unknown)}; attributes: "
                            f"{[a.name for a in self.attrs]}")
        values = []
        for i, a in enumerate(self.attrs):
            if i < len(extra):
                if a.name in kwargs:
                    raise TypeError(f"{self.name}: attribute {a.name} given twice")
                v = extra[i]
            elif a.name in kwargs:
                v = kwargs[a.name]
            elif not a.required:
                v = a.default
            else:
                raise TypeError(f"{self.name}: missing attribute {a.name} (a {_KINDS[a.kind]}"
                                f"{': ' + a.doc if a.doc else ''})")
            values.append(a.value(v, self.name))
        return tensors, tuple(values)

    def attr_dict(self, values) -> dict:
        return {a.name: v for a, v in zip(self.attrs, values)}

    def sample_attrs(self) -> list[dict]:
        """The attribute settings the check matrix cycles through."""
        columns = [a.samples or ((a.default,) if not a.required else ()) for a in self.attrs]
        for a, col in zip(self.attrs, columns):
            if not col:
                raise ValueError(f"{self.name}: attribute {a.name} has no default and no samples to check with")
        n = max((len(c) for c in columns), default=1)
        return [{a.name: col[i % len(col)] for a, col in zip(self.attrs, columns)} for i in range(n)]

    def dims(self, size) -> ShapeBinder:
        """The dims a size binds (ValueError naming the pattern if it does not fit)."""
        b = ShapeBinder()
        err = b.bind("size", self.size_pattern, tuple(size))
        if err:
            raise ValueError(f"{self.name}: {err}")
        missing = {n for t in self.inputs for n in t.pattern.names} - set(b.values)
        if missing:
            raise ValueError(f"{self.name}: the size pattern {self.size_pattern.display()} leaves dims "
                             f"{sorted(missing)} unbound")
        return b

    def input_shapes(self, size) -> tuple[tuple, ...]:
        b = self.dims(size)
        return tuple(b.shape_of(t.pattern) for t in self.inputs)

    def output_shapes(self, size) -> tuple[tuple, ...]:
        b = self.dims(size)
        return tuple(b.shape_of(o.pattern) for o in self.outputs)

    @staticmethod
    def label(size) -> str:
        return "x".join(map(str, size)) or "scalar"

    def new_inputs(self, size, dtype, device, generator) -> tuple:
        import torch

        dtype = dtypes_.to_torch(dtype)
        if self.make_inputs is not None:
            return as_tuple(self.make_inputs(tuple(size), dtype, device, generator))
        return tuple(torch.randn(shape, generator=generator, device=device, dtype=torch.float32).mul_(t.scale).to(dtype)
                     for t, shape in zip(self.inputs, self.input_shapes(size)))

    def terms(self, size) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(terms each output element sums, per output; terms each gradient element sums, per
        differentiable input): a float sum of n terms carries ~sqrt(n) times one rounding."""
        b = self.dims(size)
        return (tuple(b.product(o.terms) for o in self.outputs),
                tuple(b.product(t.grad_terms) for t in self.differentiable))

    def run_reference(self, inputs, attrs: dict) -> tuple:
        return as_tuple(self.reference(*[t.detach().double() for t in inputs], **attrs))

    def run_reference_backward(self, grads, inputs, attrs: dict) -> tuple:
        """Float64 gradients of the differentiable inputs, independent of any kernel's backward."""
        grads, inputs = tuple(g.detach().double() for g in grads), tuple(t.detach().double() for t in inputs)
        if self.reference_backward is not None:
            return as_tuple(self.reference_backward(grads, inputs, attrs))
        return input_grads(self, lambda *leaves: self.reference(*leaves, **attrs), inputs, grads)

    def bytes(self, size, dtype, direction: str) -> int:
        """Bytes `direction` must move at least: every tensor it reads, once, and every one it writes."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}; got {direction!r}")
        if self.bytes_moved is not None:
            return int(self.bytes_moved(self.dims(size), dtypes_.name_of(dtype), direction))
        import torch

        item = torch.empty((), dtype=dtypes_.to_torch(dtype)).element_size()
        ins = [math.prod(s) for s in self.input_shapes(size)]
        outs = [math.prod(s) for s in self.output_shapes(size)]
        fwd = sum(ins) + sum(outs)
        bwd = sum(outs) + sum(n for t, n in zip(self.inputs, ins) if t.read_by_backward) \
            + sum(n for t, n in zip(self.inputs, ins) if t.differentiable)
        return item * {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[direction]

    def flop_count(self, size, direction: str) -> int:
        b = self.dims(size)
        if direction == "fwd+bwd":
            return int(self.flops(b, "fwd")) + int(self.flops(b, "bwd"))
        return int(self.flops(b, direction))

    def check_call(self, step: str, tensors, attrs) -> ShapeBinder:
        """The C++ harness's checks of a call of torch tensors, in its order and words (shapes.check_call)."""
        bwd = step == "bwd"
        names = ([f"grad_{o.name}" for o in self.outputs] if bwd else []) + [t.name for t in self.inputs]
        patterns = ([o.pattern for o in self.outputs] if bwd else []) + [t.pattern for t in self.inputs]
        return check_call(f"workbench::{self.name}: ", names, patterns, tensors, len(names) - len(self.inputs),
                          [(a.name, _KINDS[a.kind], a.min, a.max, a.finite) for a in self.attrs], attrs,
                          device_of=lambda t: t.device, dtype_of=lambda t: dtypes_.name_of(t.dtype),
                          float_dtypes=dtypes_.NAMES)

    def all_error_cases(self, device: str = "cpu") -> list[ErrorCase]:
        """Bad input every op is held to, derived from its declaration, then the op's own cases."""
        return derived_error_cases(self, device) + list(self.error_cases)

    def sample_size(self) -> tuple:
        """A small size with distinct values per dim (so a swapped dim shows), for error cases."""
        values, i = [], 0
        for t in self.size_pattern.tokens:
            if t == ELLIPSIS:
                values.append(3)
            elif t.isdigit():
                values.append(int(t))
            else:
                values.append((5, 7, 6, 9, 4, 11)[i % 6])
                i += 1
        return tuple(values)


__all__ = ["Attr", "DIRECTIONS", "ErrorCase", "LAYOUTS", "Layer", "MathModule", "MathRef", "OpSpec", "Output",
           "REQUIRED", "Tensor", "as_tuple", "shape_text"]
