"""A sweep's plan: its cells (one (variant, dtype, shape, direction) row each), from wb.bench's
arguments, grouped into tasks of one (dtype, shape, direction) with their baselines, so that each
speedup compares times taken on one GPU; and the merge of the tasks' results into what a
one-process run gives."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .. import dtypes as dtypes_
from ..measure.bench_rows import baselines_of, verdict_notes
from ..model import registry
from ..model.opspec import DIRECTIONS

DEVICES = ("cuda", "cpu")


@dataclass(frozen=True)
class Group:
    """One task, and the GPU type it must run on (None: any worker)."""
    index: int
    op: str
    dtype: str
    shape: tuple[int, ...]
    direction: str
    variants: tuple[str, ...]       # every variant of the sweep: the worker's bench skips (and notes) the others
    baselines: tuple[str, ...]
    cells: tuple[tuple, ...]        # (provider, dtype, shape, direction) of the rows this group should give
    gpu_type: str | None = None

    def label(self) -> str:
        where = f" on {self.gpu_type}" if self.gpu_type else ""
        return f"{self.op} {self.direction} {self.dtype} {'x'.join(map(str, self.shape))}{where}"

    def bench_kwargs(self, attrs, device: str, budget_s: float, target_rse: float, isolate: bool) -> dict:
        return dict(op=self.op, variants=list(self.variants), dtypes=[self.dtype], shapes=[list(self.shape)],
                    baselines=list(self.baselines), directions=[self.direction], attrs=attrs, device=device,
                    budget_s=budget_s, target_rse=target_rse, isolate=isolate)


def plan(op: str, variants="all", dtypes=("float32",), shapes=None, baselines=None, directions=("fwd",), *,
         device: str = "cuda", gpu_types=None) -> list[Group]:
    """The sweep's groups, in a one-process bench()'s order. variants: "all" or the op's own
    variants' names. gpu_types: None (any GPU), or names (["H100", "H200"]): each group runs on each."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES} on a cluster; got {device!r}")
    spec = registry.spec(op)
    catalog = {v.name: v for v in registry.variants(op)}
    if isinstance(variants, str) and variants == "all":
        names = [n for n, v in catalog.items() if v.runs_on(device)]
    else:
        names = [variants] if isinstance(variants, str) else list(variants)
        brought = [n for n in names if not isinstance(n, str)]
        if brought:
            raise ValueError(f"variants: a cluster times the op's own variants, by name; {brought[0]!r} exists in "
                             f"this process alone (time it with cluster=None)")
        unknown = [n for n in names if n not in catalog]
        if unknown:
            raise ValueError(f"variants must be among {list(catalog)} or 'all'; unknown: {unknown}")
    baselines = tuple(baselines_of(spec) if baselines is None else baselines)
    unknown = [b for b in baselines if b not in baselines_of(spec)]
    if unknown:
        raise ValueError(f"baselines must be among {list(baselines_of(spec))}; got {unknown[0]!r}")
    for d in directions:
        if d not in DIRECTIONS:
            raise ValueError(f"directions must be among {DIRECTIONS}; got {d!r}")
        if d != "fwd" and not spec.differentiable:
            raise ValueError(f"directions: {op} has no differentiable inputs, so only 'fwd'; got {d!r}")
    shapes = [tuple(s) for s in (shapes or spec.bench_sizes[device])]
    for s in shapes:
        spec.dims(s)  # a size that does not fit the op's pattern fails here, naming it
    types = [None] if not gpu_types else list(gpu_types)
    if device == "cpu" and types != [None]:
        raise ValueError(f"gpu_types: a CPU sweep runs on CPU workers; got {gpu_types!r}")
    groups = []
    for dname in dtypes_.names(dtypes):
        timed = [n for n in names if catalog[n].runs_on(device) and dname in catalog[n].dtypes]
        for shape in shapes:
            for direction in directions:
                cells = tuple((p, dname, shape, direction) for p in (*baselines, *timed))
                for t in types:
                    groups.append(Group(len(groups), op, dname, shape, direction, tuple(names), baselines, cells, t))
    return groups


_ROTATED = re.compile(r"^the timed calls rotated through (\d+) input sets$")
_ONE_SET = "the timed calls used one input set"
# The notes bench() derives from its rows (bench_rows.verdict_notes) and its own wall time: the
# merge derives them again from the merged rows instead of keeping each group's copy.
_DERIVED = ("outputs checked at every timed shape", "WRONG ", "IMPOSSIBLE ", "clocks ", "the output checks took")


def merged_notes(notes_per_group: list[list[str]], rows: list[dict], wall_s: float) -> list[str]:
    """The notes a one-process run gives: each group's own once, in plan order, then those derived
    from every row."""
    plain, rotated = [], set()
    for notes in notes_per_group:
        for n in notes:
            m = _ROTATED.match(n)
            if m:
                rotated.add(int(m.group(1)))
            elif n.startswith(_ONE_SET):
                rotated.add(1)
            elif not n.startswith(_DERIVED) and n not in plain:
                plain.append(n)
    checks = sum(r.get("check_seconds", 0.0) for r in rows)
    return plain + verdict_notes(rows, rotated) + [
        f"the output checks took {checks:.1f} s of the sweep's {wall_s:.1f} s ({100 * checks / max(wall_s, 1e-9):.0f}%)"]
