"""Why is it slow: Nsight Compute's counters for one call of a variant, a verdict per kernel, the
roofline.

    p = wb.profile("bias_gelu", "vec4", shape=(8192, 8192), dtype="float32")   # direction="fwd"
    p                                   # the table (a notebook shows it as HTML), then a verdict per kernel
    wb.profile("bias_gelu", ["scalar", "vec4"], shape=(8192, 8192))   # side by side, with the deltas
    p.roofline("roofline.png")          # the profiled variants on the roofline (a Figure, and a PNG)
    wb.profile.roofline(["bias_gelu", "matmul"])   # every variant of any ops, from timing alone (no ncu)

    python -m workbench profile bias_gelu scalar vec4 --shape 8192x8192 --dtype float32 [--direction fwd]

The variant is built here (a compile error is raised before anything is profiled), then
ncu.measure profiles one checked call of it in a runner with the GPU clocks left as they are
(NCU_ARGS), so durations compare with wb.bench's and the measured ceilings; with the runner's build
made with -lineinfo, each kernel's table ends with its source lines with the most stall samples.
Modules: metrics (what ncu is asked for, how a row is read), rules (the verdict), report (the
tables), this one (the runs).
"""
from __future__ import annotations

import pathlib

from ... import config
from .. import ncu
from ...model import registry
from ... import dtypes as dtypes_
from .. import roofline as roofline_
from .metrics import NCU_ARGS, device_capability, kernel_metrics, requested_metrics, short_name
from .report import KernelProfile, Profile, hot_lines
from .rules import verdict, wrong_verdict

TIMEOUT_S = 300.0


def default_shape(spec) -> tuple:
    """The middle of the op's GPU benchmark sizes (large enough to fill the GPU, small enough that a
    slow rung's replays stay short)."""
    sizes = spec.bench_sizes["cuda"]
    return tuple(sizes[len(sizes) // 2])


def from_reports(op: str, reports: dict, shape, dtype: str = "float32", direction: str = "fwd", *,
                 copy_GBps: float | None = None, gemm_TFLOPs: float | None = None, notes=(),
                 sources: dict | None = None, checks: dict | None = None) -> Profile:
    """A Profile from ncu's rows per variant ({variant: ncu.parse_csv(text)}; no GPU needed): the
    metrics, each kernel's share of the op's declared bytes and FLOPs (split by DRAM traffic and by
    duration where a call launches several kernels), and the verdicts. sources: {variant:
    ncu.parse_source_csv(...)}, matched to the kernels by name (else by order). checks: {variant:
    ncu.Kernels.measured}: a variant whose output was wrong gets the verdict "wrong" for each kernel."""
    spec = registry.spec(op)
    shape = tuple(shape)
    dtype = dtypes_.name_of(dtype)
    nbytes = float(spec.bytes(shape, dtype, direction))
    flops = float(spec.flop_count(shape, direction))
    kernels = []
    for variant, rows in reports.items():
        ks = [KernelProfile(str(variant), "", kernel_metrics(r), dict(r)) for r in rows]
        for k in ks:
            k.name = k.metrics["name"]
        dur = sum(k.metrics.get("duration_ns") or 0 for k in ks)
        dram = sum(k.metrics.get("dram_bytes") or 0 for k in ks)
        for k in ks:
            share_t = (k.metrics.get("duration_ns") or 0) / dur if dur else 1 / len(ks)
            share_b = (k.metrics.get("dram_bytes") or 0) / dram if dram else share_t
            k.nbytes = nbytes * (1.0 if len(ks) == 1 else share_b) or None
            k.flops = flops * (1.0 if len(ks) == 1 else share_t) or None
            k.verdict = verdict(k.metrics, nbytes=k.nbytes, flops=k.flops, copy_GBps=copy_GBps,
                                gemm_TFLOPs=gemm_TFLOPs, compute_bound=spec.compute_bound)
            check = (checks or {}).get(variant) or {}
            if check.get("verified") == "wrong":
                k.verdict = wrong_verdict(op, variant, shape, dtype, check)
        _attach_lines(ks, (sources or {}).get(variant) or [])
        kernels += ks
    given = checks is not None  # profile() passes each call's check; from committed CSVs there is none
    checks = {str(v): c for v, c in (checks or {}).items() if c}
    notes = list(notes) + [
        f"{v}: the profiled call's output was not checked at this shape"
        + (f" ({checks[v]['verify_detail']})" if (checks.get(v) or {}).get("verify_detail") else
           " (no check of it was made)")
        for v in map(str, reports) if given and (checks.get(v) or {}).get("verified") not in ("ok", "wrong")]
    return Profile(op, shape, dtype, direction, [str(v) for v in reports], kernels, nbytes or None, flops or None,
                   copy_GBps, gemm_TFLOPs, spec.compute_bound, notes, checks)


def _attach_lines(ks: list[KernelProfile], lines: list[dict]) -> None:
    functions = list(dict.fromkeys(ln["function"] for ln in lines))
    by_name = {short_name(f): f for f in functions}
    for i, k in enumerate(ks):
        f = by_name.get(k.name) or (functions[i] if len(functions) == len(ks) else None)
        k.lines = hot_lines([ln for ln in lines if ln["function"] == f]) if f else []


def from_csv(op: str, texts: dict, shape, dtype: str = "float32", direction: str = "fwd", *,
             sources: dict | None = None, **kw) -> Profile:
    """from_reports over ncu's raw CSV text (and source page, where captured) per variant."""
    parsed = {v: ncu.parse_source_csv(t) for v, t in (sources or {}).items()}
    return from_reports(op, {v: ncu.parse_csv(t) for v, t in texts.items()}, shape, dtype, direction,
                        sources=parsed, **kw)


def ceilings(spec, dtype: str) -> tuple[float | None, float | None, list[str]]:
    """(copy GB/s, GEMM TFLOP/s or None, notes): the device's measured ceilings as wb.bench uses
    them; the GEMM one only for an op declared compute_bound."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None, None, ["no GPU visible here: no copy or GEMM ceiling; the verdict uses DRAM % of peak"]
        from ...measure import ceilings as measured

        copy = measured.copy_bandwidth_gbps(None, cache_dir=config.cache_dir())["copy_GBps"]
        gemm = measured.matmul_ceiling_tflops(None, dtype, cache_dir=config.cache_dir())["TFLOPs"] \
            if spec.compute_bound else None
        return copy, gemm, []
    except Exception as e:  # noqa: BLE001 - a ceiling that cannot be measured leaves the counters' verdict
        return None, None, [f"ceilings not measured ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                            "the verdict uses DRAM % of peak"]


def profile(op: str, variant, shape=None, dtype: str = "float32", direction: str = "fwd", *,
            timeout_s: float = TIMEOUT_S, keep_csv=None, lines: bool = True) -> Profile:
    """Nsight Compute on one `direction` call of the variant (a name, a Kernel, or a list of them
    side by side) at `shape` (default: default_shape); see the module. Returns a Profile.
    keep_csv: a folder for ncu's raw CSV (profile_<op>_<variant>_<direction>.csv). lines: the hot
    source lines, for which the runner's build is made with nvcc -lineinfo (same machine code).
    Raises ncu.NcuUnavailable (saying how to go on without) and ncu.NcuTimeout."""
    from ...run import byo, loader
    from ...ship import ndarray_build

    spec = registry.spec(op)
    if direction not in ("fwd", "bwd"):
        raise ValueError(f"direction must be 'fwd' or 'bwd'; got {direction!r}")
    if direction == "bwd" and not spec.differentiable:
        raise ValueError(f"direction: {op} has no differentiable inputs, so only 'fwd'")
    dtype = dtypes_.name_of(dtype)
    shape = tuple(int(s) for s in shape) if shape is not None else default_shape(spec)
    spec.dims(shape)  # a size that does not fit the op's pattern fails here, naming it
    items = list(variant) if isinstance(variant, (list, tuple)) else [variant]
    if not items:
        raise ValueError("profile: name at least one variant")
    ncu.require()  # before any build: say at once where ncu is missing
    notes: list[str] = []
    # Loaded here to say what each is; the profiled calls go to a runner's build of it (ncu.measure).
    kernels = [loader.get(op, k) if isinstance(k, str) else k for k in (byo.as_variant(op, v) for v in items)]
    if lines and not ndarray_build.can_build_cuda():
        # e.g. an installed wheel where no nvcc exists: its prebuilt libraries carry no line table
        notes.append("no source lines: the variants cannot be built with -lineinfo here (no nvcc)")
        lines = False
    for k in kernels:
        if k.device == "cpu":
            raise ValueError(f"profile: {op}/{k.name} runs on the CPU; Nsight Compute profiles CUDA kernels")
        if dtype not in k.dtypes:
            raise ValueError(f"profile: {op}/{k.name} takes {', '.join(k.dtypes)}; got dtype {dtype!r}")
        if direction == "bwd" and "backward" not in k.steps:
            raise ValueError(f"profile: {op}/{k.name} is a forward-only variant")
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise ValueError(f"profile: the variants must differ; got {names}")
    capability = device_capability()  # HOPPER_METRICS on 9.x only
    reports, sources, checks = {}, {}, {}
    for k in kernels:
        keep = None
        if keep_csv is not None:
            pathlib.Path(keep_csv).mkdir(parents=True, exist_ok=True)
            keep = pathlib.Path(keep_csv) / f"profile_{op}_{k.name}_{direction}.csv"
        rows = ncu.measure(op, k, shape, dtype, direction, metrics=requested_metrics(capability), timeout_s=timeout_s,
                           keep_csv=keep, extra_args=NCU_ARGS, source_lines=lines, line_info=lines)
        if rows.dropped:
            notes.append(f"{k.name}: this ncu or GPU lacks {', '.join(rows.dropped)} (left out)")
        reports[k.name] = rows
        checks[k.name] = rows.measured
        sources[k.name] = ncu.parse_source_csv(rows.source_csv)
        if lines and k.kind == "c++" and not sources[k.name]:
            notes.append(f"{k.name}: ncu's source page has no sampled CUDA lines (no line info in this build?)")
    copy, gemm, why = ceilings(spec, dtype)
    return from_reports(op, reports, shape, dtype, direction, copy_GBps=copy, gemm_TFLOPs=gemm, notes=notes + why,
                        checks=checks, sources=sources)


def prebuild(op: str, variant, lines: bool = True) -> None:
    """The builds profile() makes of `variant` (its own, the runner and the runner's), made now."""
    from ...judge.start import isolated, runner_executable
    from ...run import byo, loader

    v = byo.as_variant(op, variant)
    isolated(op, loader.get(op, v) if isinstance(v, str) else v, line_info=lines)
    runner_executable()


def command(op: str, variants, shape, dtype: str, direction: str = "fwd", source=None) -> str:
    """The shell command that profiles `variants` (the first built from `source` where given)."""
    import shlex

    names = [variants] if isinstance(variants, str) else list(variants)
    return (f"python -m workbench profile {op} {' '.join(names)}"
            + (f" --source {shlex.quote(str(source))}" if source else "")
            + f" --shape {'x'.join(map(str, shape))} --dtype {dtype} --direction {direction}")


def roofline(ops, variants="all", shape=None, dtype: str = "float32", direction: str = "fwd", *, rows=None,
             path=None, budget_s: float = 0.3):
    """The roofline of every variant of `ops` (an op or a list) from timing alone (roofline.figure;
    also a PNG at `path`). rows: benchmark rows (a list or a JSONL path) to draw instead of timing
    each op now (wb.bench, no baselines, at `shape` for one op, default_shape for several)."""
    from ...measure import bench_rows

    ops = [ops] if isinstance(ops, str) else list(ops)
    if rows is None:
        from ...measure.benchmark import bench

        rows = []
        for op in ops:
            spec = registry.spec(op)
            size = tuple(shape) if shape is not None and len(ops) == 1 else default_shape(spec)
            rows += bench(op, variants=variants if len(ops) == 1 else "all", dtypes=[dtype], shapes=[size],
                          baselines=[], directions=[direction], budget_s=budget_s).rows
    elif isinstance(rows, (str, pathlib.Path)):
        rows = bench_rows.read_rows(rows)
    return roofline_.figure(list(rows), path, ops=ops, direction=direction, every=True)


# wb.profile(...) is this function; wb.profile.roofline(...) draws every variant from timing alone.
profile.roofline = roofline
