"""The exercise's optional counter rule, [global_loads] in exercise.toml: how many bytes one call's
global load instructions may ask for, measured on the GPU by Nsight Compute (workbench/explain/ncu.py) and
counted at L1, so a second read that hits in L2 still counts. Parsed by registration.py, checked
by check()."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .. import dtypes as dtypes_
from ..explain import ptxas
from ..model import registry
from .report import Check


@dataclass(frozen=True)
class GlobalLoads:
    direction: str
    dtype: str
    shape: tuple[int, ...]
    reads: tuple[tuple[str, object], ...]   # (input name, a count or "rows")
    slack: float
    message: str
    hint: str = ""

    def allowed_bytes(self, spec) -> int:
        """The bytes the rule allows: each named input's bytes times its count, times the slack."""
        item = dtypes_.itemsize(self.dtype)
        shapes = dict(zip((t.name for t in spec.inputs), spec.input_shapes(self.shape)))
        rows = math.prod(self.shape[:-1])
        total = sum(math.prod(shapes[name]) * item * (rows if count == "rows" else count) for name, count in self.reads)
        return int(total * self.slack)

    def reads_text(self) -> str:
        return " + ".join(f"{name}" if c == 1 else f"{name} once per row" if c == "rows" else f"{c} x {name}"
                          for name, c in self.reads)


def check(ex, kernels, why_not: str = "") -> Check:
    """The bytes the kernels' global load instructions requested in the rule's call, as Nsight
    Compute counted them at L1 (every load, hit or miss) while the checker watched the student's
    runner (rule_calls.observe_rules: `kernels`, the judge.ncu_watch.RanKernel list of that call), against
    what the rule allows. why_not: why nothing was observed (the check is skipped)."""
    from ..explain import ncu

    rule = ex.global_loads
    if kernels is None:
        return Check("global loads", "skipped", why_not or "nothing was observed")
    shape = "x".join(map(str, rule.shape))
    loaded = sum(float(k.metrics.get(ncu.LOAD_SECTORS) or 0) for k in kernels) * 32
    allowed = rule.allowed_bytes(registry.spec(ex.op))
    unit = allowed / rule.slack
    lines = [f"{rule.direction} {rule.dtype} {shape}: your kernels' global loads asked for {loaded / 1e6:.1f} MB "
             f"({loaded / unit:.2f}x {rule.reads_text()}); allowed {allowed / 1e6:.1f} MB ({rule.slack:.2f}x)"]
    for k in kernels:
        lines.append(f"  {ptxas.kernel_label(k.name)}: {float(k.metrics.get(ncu.LOAD_SECTORS) or 0) * 32 / 1e6:.1f} MB loaded")
    if loaded <= allowed:
        return Check("global loads", "ok", f"{loaded / unit:.2f}x {rule.reads_text()} (allowed {rule.slack:.2f}x)",
                     lines, show=True)
    return Check("global loads", "FAIL", rule.message, lines + ([f"hint: {rule.hint}"] if rule.hint else []))
