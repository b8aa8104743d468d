"""Benchmarks: every requested variant against PyTorch eager and torch.compile, in one run.

The op's spec supplies inputs and byte/flop counts; timing lives in workbench.measure.timing; the rows,
their speedups, physics guard, table and results file are bench_rows'; plots come from workbench.explain.plot.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import sys
import time

import torch

from .. import __version__, config
from . import ceilings, conditions, timing, verify
from ..run import loader, process_state
from ..model import registry
from ..build import toolchain
from .. import dtypes as dtypes_
from ..explain.plot import BenchResult
from .bench_rows import Limits, add_speedups, baselines_of, host_bound, provenance, verdict_notes
from ..model.opspec import DIRECTIONS, as_tuple


def _progress(i: int, n: int, what: str) -> None:
    if config.quiet():
        return
    width = 24
    bar = "#" * (width * i // max(n, 1)) + "." * (width - width * i // max(n, 1))
    line = f"[bench] [{bar}] {i}/{n} {what}"
    # A carriage return redraws the line on a terminal and in a Jupyter cell (whose stderr is
    # ipykernel's stream; saved notebooks keep only the last state when streams are coalesced).
    if sys.stderr.isatty() or type(sys.stderr).__module__.startswith("ipykernel"):
        print("\r" + line.ljust(110), end="\n" if i >= n else "", file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr, flush=True)


class _Compiled:
    """torch.compile of the op's eager math, compiled afresh for each timed group: one compiled
    function reused across many shapes and directions hits dynamo's recompile limit and then
    silently runs eager, which would make the baseline a copy of eager."""

    def __init__(self, fn):
        self.fn = fn

    def fresh(self):
        torch.compiler.reset()
        return torch.compile(self.fn, dynamic=False, fullgraph=True)


def _providers(op: str, spec, names: list[str], baselines, device: torch.device, dname: str, own=None):
    """({name: (kind, callable or _Compiled)}, {name: why it is not timed here}); own: the variants
    brought by the user, by name."""
    out, skipped = {}, {}
    for b in baselines:
        if b == "eager":
            out["eager"] = ("baseline", spec.eager)
        elif b == "compile":
            out["compile"] = ("baseline", _Compiled(spec.eager))
        elif b in spec.baselines:
            out[b] = ("baseline", spec.baselines[b])
        else:
            raise ValueError(f"baselines must be among {list(baselines_of(spec))}; got {b!r}")
    for name in names:
        k = (own or {}).get(name) or loader.get(op, name)
        if not k.runs_on(device.type):
            skipped[name] = f"runs on {k.device}" + ("; no GPU is visible here" if k.device == "cuda" and
                                                     not toolchain.gpu_available() else "")
        elif not k.dtypes and getattr(k, "probe", ""):
            skipped[name] = f"nothing to time: {k.probe}"
        elif dname not in k.dtypes:
            skipped[name] = f"no {dname}"
        elif toolchain.unmet_arch(getattr(k, "source", None), device):  # e.g. sm_90a code off Hopper
            skipped[name] = toolchain.unmet_arch(k.source, device)
        else:
            out[name] = ("variant", k)
    return out, skipped


@contextlib.contextmanager
def _tf32_off(active: bool):
    """float32 matmuls on CUDA cores inside (cuBLAS may not use TF32 tensor cores), restored after."""
    was = torch.backends.cuda.matmul.allow_tf32
    if active:
        torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = was


def _no_donated_buffers():
    """torch.compile's backward may donate its saved buffers, which forbids retain_graph=True; the
    bwd timing replays one graph's backward many times (retain_graph=True), so donation is off
    inside the benchmark (CPU inductor donated them for rmsnorm's formula and refused)."""
    try:  # imported by name: torch does not import it before the first compile
        import torch._functorch.config as config
    except ImportError:
        return contextlib.nullcontext()
    if not hasattr(config, "donated_buffer"):
        return contextlib.nullcontext()
    return config.patch(donated_buffer=False)


class _Timed:
    """One `direction` step of a provider, as timed: each call takes the next of the group's input
    sets, and refresh() (run between samples, outside the timed region) gives the set the next
    call will take other values, in place: an answer cached by pointer is then the answer to other
    inputs. The newest call's result is kept, so that the output of the timed calls themselves is
    checked. A backward ("bwd") replays one forward graph per set, so there the output gradients
    change (the forward's saved tensors must stay as they were); "fwd+bwd" runs both each call."""

    def __init__(self, fn, group: "_Group", attrs: dict):
        self.group, self.calls = group, []
        diff = [t.differentiable for t in group.spec.inputs]
        for inputs, g in group.live:
            if group.direction == "fwd":
                self.calls.append(lambda inputs=inputs: fn(*inputs, **attrs))
                continue
            leaves = [t.detach().requires_grad_(d) for t, d in zip(inputs, diff)]
            wanted = [t for t, d in zip(leaves, diff) if d]
            if group.direction == "bwd":
                outs = as_tuple(fn(*leaves, **attrs))
                self.calls.append(lambda outs=outs, wanted=wanted, g=g:
                                  torch.autograd.grad(outs, wanted, g, retain_graph=True))
            else:
                self.calls.append(lambda leaves=leaves, wanted=wanted, g=g:
                                  torch.autograd.grad(as_tuple(fn(*leaves, **attrs)), wanted, g))
        self.index, self.last = -1, None

    def __call__(self):
        self.index = (self.index + 1) % len(self.calls)
        self.last = self.calls[self.index]()
        return self.last

    def refresh(self) -> None:
        self.group.switch((self.index + 1) % len(self.calls))


class _Group:
    """What every provider of one (dtype, size, direction) shares. The input sets the timed calls
    rotate through ("live": the tensors the calls read, at fixed addresses) and, per set, two
    versions of its values (verify.Probe: inputs, output gradients, the trusted result computed
    once on first use): switching a set copies the other version in. The trusted results are then
    computed at most twice per set and group, whichever provider's call they judge. And the probes
    checked before and after timing."""

    VERSIONS = 2

    def __init__(self, spec, shape, dname, direction, attrs, gen, device, sets):
        self.spec, self.direction = spec, direction
        probe = lambda inputs=None: verify.Probe(spec, shape, dname, direction, attrs, gen, device, inputs)  # noqa: E731
        # A backward's versions share their inputs (its forward graphs are built once) and differ in
        # their output gradients; the other directions' versions differ in their inputs.
        self.versions = [[probe(s)] + [probe(s if direction == "bwd" else None) for _ in range(self.VERSIONS - 1)]
                         for s in sets]
        self.current = [0] * len(sets)
        self.live = [([t.clone() for t in v[0].inputs] if direction != "bwd" else list(v[0].inputs),
                      None if v[0].grads is None else [g.clone() for g in v[0].grads]) for v in self.versions]
        self.before, self.after = probe(), probe()

    def timed(self, fn, attrs) -> _Timed:
        return _Timed(fn, self, attrs)

    def switch(self, i: int) -> None:
        self.current[i] = (self.current[i] + 1) % self.VERSIONS
        v, (inputs, grads) = self.versions[i][self.current[i]], self.live[i]
        pairs = [] if self.direction == "bwd" else list(zip(inputs, v.inputs))  # a backward's inputs stay
        pairs += [] if grads is None else list(zip(grads, v.grads))
        with torch.no_grad():
            for dst, src in pairs:
                dst.copy_(src)

    def check_timed(self, timed: _Timed) -> verify.Verdict:
        return self.versions[timed.index][self.current[timed.index]].judge(timed.last, "the last timed call")


_NOT_TIMED = dict(median_ms=math.nan, p20_ms=math.nan, p80_ms=math.nan, n_samples=0, rel_std_err=math.nan,
                  method="not timed", peak_mem_bytes=-1, unseen_ms=math.nan, synced_ms=math.nan, host_ms=math.nan)


def _measure_provider(kind_fn, group: _Group, attrs: dict, device: torch.device, stop: dict) -> dict:
    """One provider of a group: checked, timed (the GPU's clocks sampled meanwhile), its last timed
    call's output checked, checked again on new inputs; one wrong before timing is not timed."""
    kind, fn = kind_fn
    if isinstance(fn, _Compiled):
        fn = fn.fresh()
    poison = kind == "variant"
    # One call first, outside the checks' account: torch.compile compiles here, CUDA loads the
    # variant's module here; the timing would pay both in its warm-up otherwise.
    try:
        verify.run_step(fn, group.spec, group.before.inputs, attrs, group.direction, group.before.grads)
    except Exception as e:  # noqa: BLE001 - the check below calls it again and reports the error as a wrong row
        if "CUDA error" in str(e):
            raise
    started = time.perf_counter()
    verdict = group.before.check(fn, "before timing", poison=poison)
    if not verdict.ok:
        return dict(_NOT_TIMED, **verdict.fields(), clocks={}, clock_warning="",
                    check_seconds=time.perf_counter() - started)
    check_s = time.perf_counter() - started
    timed = group.timed(fn, attrs)
    clocks: dict = {}
    if device.type == "cuda":
        with conditions.Sampler(device.index if device.index is not None else torch.cuda.current_device()) as s:
            m = timing.time_cuda(timed, between=timed.refresh, **stop)
        clocks = s.conditions
    else:
        m = timing.time_cpu(timed, between=timed.refresh, **stop)
    started = time.perf_counter()
    last = group.check_timed(timed)
    after = group.after.check(fn, "after timing", poison=poison)
    check_s += time.perf_counter() - started  # the trusted results included, where this provider computed them
    verdict = next((v for v in (last, after) if not v.ok), after)
    if verdict.ok:
        verdict.max_abs_err = max(last.max_abs_err, after.max_abs_err)
    out = dict(median_ms=m.median_ms, p20_ms=m.p20_ms, p80_ms=m.p80_ms, n_samples=m.n_samples,
               rel_std_err=m.rel_std_err, method=m.method, unseen_ms=m.unseen_ms, synced_ms=m.synced_ms,
               host_ms=m.host_ms,
               peak_mem_bytes=timing.peak_memory_bytes(timed, device) if device.type == "cuda" else -1,
               **verdict.fields(), clocks=clocks, clock_warning=conditions.warning(clocks),
               check_seconds=check_s)
    if m.unseen_ms > 0:
        out["impossible_reason"] = (
            f"{m.unseen_ms:.3f} ms of GPU work per call ran outside the timed stream: back to back, with the "
            f"whole device synchronised, a call took {m.synced_ms:.3f} ms, while the stream's events saw "
            f"{m.median_ms:.3f} ms (launch on the caller's stream, WbLaunch.stream, and finish before returning)")
    return out


def bench(op: str, variants="all", dtypes=("float32",), shapes=None, baselines=None,
          directions=("fwd",), *, attrs: dict | None = None, device=None, budget_s: float = 1.0,
          target_rse: float = 0.01, save: bool = False, results_path=None, isolate: bool = False,
          cluster: str | None = None) -> BenchResult:
    """Time variants of `op` against its baselines (eager, torch.compile, and the spec's own) over a
    sweep of sizes, all in one run.

    variants: "all" (every variant that runs on the device), names, Kernel handles, or callables
    and extensions brought from outside (workbench/run/byo.py: wb.variant), alone or mixed. shapes:
    sizes for the op's size pattern (default: the spec's bench sizes for the device). attrs: the
    op's attributes (default: the spec's first sample). device: "cuda" if a GPU is visible, else
    "cpu" (CPU variants, CPU timers). isolate=True first calls each variant in a runner process
    (_preflight: a fault raises IsolatedRunError naming it); the timing then runs here, as without
    isolate. Returns a BenchResult (.table() .frame() .figure() .plot()
    .save()). baselines: names (default: every baseline the op has, baselines_of(spec)). cluster:
    "local", "auto" or "ray://HOST:PORT" spreads the sweep over a Ray cluster's workers, one per GPU
    (workbench/cluster; needs Ray); None runs it here."""
    if cluster is not None:  # Ray is imported on this path alone; each worker runs this function per group
        from ..cluster import sweep
        return sweep.bench(bench, op, variants, dtypes, shapes, baselines, directions, cluster=cluster, attrs=attrs,
                           device=device, budget_s=budget_s, target_rse=target_rse, save=save,
                           results_path=results_path, isolate=isolate)
    sweep_started = time.perf_counter()
    if baselines is None:
        baselines = baselines_of(registry.spec(op))
    variants, own, unusable = _own_variants(op, variants)
    spec = registry.spec(op)
    device = torch.device(device or ("cuda" if toolchain.gpu_available() else "cpu"))
    if device.type == "cuda" and not toolchain.gpu_available():
        raise RuntimeError("bench: device='cuda' but no GPU is visible (torch.cuda.is_available() is False)")
    for d in directions:
        if d not in DIRECTIONS:
            raise ValueError(f"directions must be among {DIRECTIONS}; got {d!r}")
        if d != "fwd" and not spec.differentiable:
            raise ValueError(f"directions: {op} has no differentiable inputs, so only 'fwd'; got {d!r}")
    dtypes = dtypes_.names(dtypes)
    _, attr_values = spec.call_args((None,) * len(spec.inputs), attrs if attrs is not None else spec.sample_attrs()[0])
    attrs = spec.attr_dict(attr_values)
    all_names = [v.name for v in process_state.variants(op)]
    if variants == "all":
        names = [v.name for v in process_state.variants(op) if v.runs_on(device.type)]
    else:
        names = [variants] if isinstance(variants, str) else list(variants)
        unknown = [n for n in names if n not in all_names and n not in own]
        if unknown:
            raise ValueError(f"variants must be among {all_names} or 'all'; unknown: {unknown}")
    shapes = [tuple(s) for s in (shapes or spec.bench_sizes[device.type])]
    for s in shapes:
        spec.dims(s)  # a size that does not fit the op's pattern fails here, naming it
    if isolate:
        _preflight(op, spec, names, own, dtypes, shapes, directions, attrs, device)
    result = BenchResult()
    result.notes += [f"skipped {name}: {why}" for name, why in unusable.items()]
    if device.type == "cpu":
        result.notes.append("no GPU visible: CPU variants timed on the CPU; no copy ceiling")
    ceiling = ceilings.copy_bandwidth_gbps(device, cache_dir=config.cache_dir())["copy_GBps"] \
        if device.type == "cuda" else math.nan
    # A compute-bound op is measured in TFLOP/s against the device's own cuBLAS matmul rate for
    # the dtype, with TF32 off (float32 on CUDA cores, for kernels and cuBLAS alike).
    compute = spec.compute_bound and device.type == "cuda"
    peaks = {d: ceilings.matmul_ceiling_tflops(device, d, cache_dir=config.cache_dir())["TFLOPs"]
             for d in dtypes} if compute else {}
    if compute:
        result.notes.append("compute-bound: TFLOP/s against cuBLAS's own rate at 8192^3 per dtype (%peak); "
                            "float32 with TF32 off (allow_tf32 = False)")
    limits = Limits(device, config.cache_dir(), dtypes, gemm_tflops=peaks) if device.type == "cuda" else None
    if device.type == "cuda" and conditions.unavailable():
        result.notes.append(f"clocks not recorded: {conditions.unavailable()}")
    prov = provenance(config.REPO_ROOT, __version__)
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    # At least 30 samples: with fewer, a 15 us op's median moved by up to 8% between runs.
    stop = {"budget_s": budget_s, "target_rse": target_rse, "min_samples": 30}
    providers, skipped = {}, {}
    for dname in dtypes:
        providers[dname], skipped[dname] = _providers(op, spec, names, baselines, device, dname, own)
    total = sum(len(p) for p in providers.values()) * len(shapes) * len(directions)
    done, rotated = 0, set()
    with _tf32_off(compute), _no_donated_buffers():
        for dname, provs in providers.items():
            for why in dict.fromkeys(skipped[dname].values()):
                result.notes.append(f"{dname}: skipped {', '.join(n for n, w in skipped[dname].items() if w == why)} "
                                    f"({why})")
            for shape in shapes:
                first = spec.new_inputs(shape, dname, device, gen)
                numel = first[0].numel()
                # the live sets and two versions of each (_Group) in memory
                n_sets = verify.rotation(verify.tensors_bytes(first), device, copies=1 + _Group.VERSIONS)
                sets = [first] + [spec.new_inputs(shape, dname, device, gen) for _ in range(n_sets - 1)]
                rotated.add(n_sets)
                for direction in directions:
                    group = _Group(spec, shape, dname, direction, attrs, gen, device, sets)
                    for name, kind_fn in provs.items():
                        done += 1
                        if direction != "fwd" and kind_fn[0] == "variant" and "backward" not in kind_fn[1].steps:
                            note = f"{dname} {direction}: skipped {name} (a forward-only variant)"
                            if note not in result.notes:
                                result.notes.append(note)
                            continue
                        _progress(done, total, f"{op} {direction} {dname} {spec.label(shape)} {name}")
                        row = dict(prov, op=op, variant=name, kind=kind_fn[0], dtype=dname, shape=spec.label(shape),
                                   numel=numel, direction=direction, attrs=dict(attrs),
                                   bytes=spec.bytes(shape, dname, direction), flops=spec.flop_count(shape, direction))
                        row.update(_measure_provider(kind_fn, group, attrs, device, stop))
                        row.update(host_bound=host_bound(row))
                        seconds = row["median_ms"] * 1e-3
                        row.update(GBps=row["bytes"] / seconds / 1e9, TFLOPs=row["flops"] / seconds / 1e12)
                        if compute:
                            row.update(matmul_ceiling_TFLOPs=peaks[dname],
                                       pct_of_matmul_ceiling=100 * row["TFLOPs"] / peaks[dname])
                        row.update(ceiling_GBps=ceiling, pct_of_ceiling=100 * row["GBps"] / ceiling)
                        if limits is not None:
                            row.update(limits.fields())
                            why = row.get("impossible_reason") or limits.judge(row, bytes_floor=kind_fn[0] == "variant")
                            row.update(impossible=bool(why), impossible_reason=why)
                        result.rows.append(row)
    add_speedups(result.rows)
    result.notes += verdict_notes(result.rows, rotated)
    checks = sum(r["check_seconds"] for r in result.rows)
    wall = time.perf_counter() - sweep_started
    result.notes.append(f"the output checks took {checks:.1f} s of the sweep's {wall:.1f} s ({100 * checks / wall:.0f}%)")
    if save:
        result.save(results_path)
    return result


def _own_variants(op: str, variants):
    """(the variants by name, {name: a brought variant (byo.variant: a callable or an extension)},
    {name: why it cannot run here})."""
    if isinstance(variants, str):
        return variants, {}, {}
    from ..errors import WorkbenchError
    from ..run import byo

    items = list(variants) if isinstance(variants, (list, tuple)) else [variants]
    own, names, unusable = {}, [], {}
    for v in items:
        try:
            v = byo.as_variant(op, v)
        except WorkbenchError as e:
            unusable[byo.qualified_name(v)] = str(e).replace("\n", " ")
            continue
        if isinstance(v, byo.CallableKernel):
            if v.name in own and own[v.name] is not v:
                raise ValueError(f"variants: two different callables are both named {v.name!r}; name one with "
                                 f"wb.variant(fn, op={op!r}, name=...)")
            own[v.name] = v
        names.append(v.name if isinstance(v, loader.Kernel) else v)  # a loaded Kernel: its name, as before
    return names, own, unusable


def _preflight(op: str, spec, names, own: dict, dtypes, shapes, directions, attrs: dict, device) -> None:
    """isolate=True: each variant called once in a runner of its own at every point the sweep will
    time; a call that ends the runner raises IsolatedRunError naming it. The timing stays here (a
    runner's copies would be in the numbers)."""
    from ..errors import IsolatedRunError
    from ..judge.start import isolated

    gen = torch.Generator(device=device).manual_seed(0)
    for name in names:
        k = isolated(op, own.get(name) or loader.STATE.newest(op, name) or name)
        if k.device != device.type or toolchain.unmet_arch(getattr(k, "source", None), device):
            continue
        try:
            for dname, shape, direction in itertools.product([d for d in dtypes if d in k.dtypes], shapes, directions):
                probe = verify.Probe(spec, shape, dname, direction, attrs, gen, device)
                try:
                    verify.run_step(k, spec, probe.inputs, attrs, direction, probe.grads)
                except IsolatedRunError as e:
                    e.args = (f"bench of {op}/{name}, {direction} {spec.label(shape)} {dname}: {e}",)
                    raise
                except Exception:  # noqa: BLE001 - a call the variant refused: the sweep's own row says so
                    pass
        finally:
            k.module.close()
