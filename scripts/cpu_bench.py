"""Each op's C++ `cpu` variant beside PyTorch eager and torch.compile on this machine's CPU, interleaved.

For every (op, size, direction): the three providers' outputs (forward, or the gradients for a
backward) are checked against the op's float64 reference first; then `--rounds` rounds, each timing
one batch of calls of every provider (about --batch-ms long, the same count for all three within a
group), the providers' order rotated from round to round so that load drift hits them alike. A row
reports each provider's median, p20 and p80 per call over the rounds, and the speedups over eager and
over compile as the median of the per-round ratios (paired: the providers of one round ran within
a few tens of milliseconds), and "best": the fastest eager call over the fastest cpu call, what a
quiet machine would show. The load average before and after each group is recorded, for the noise:
on a machine with more runnable threads than cores, a two-thread OpenMP region (eager's, compile's
and the variants' alike) waits whole scheduler ticks for a descheduled thread, so the table runs
once per --torch-threads count (1: each provider's single-core speed, robust to load). The sizes:
the demo's (the op's first two CPU bench sizes) and matmul at 1024^3. `--sweep` adds the sweep
behind the variants' threading grain: each op's forward at sizes around it, on one thread and on
two (torch.set_num_threads), interleaved the same way.

Usage: python scripts/cpu_bench.py [--ops OP ...] [--rounds 15] [--torch-threads 1 2] [--sweep] [--out DIR]
Appends to cpu_bench.jsonl (one row per group and provider, with provenance: commit, host, CPU model
and flags, torch, threads) and cpu_bench.txt (the tables, as printed) under --out.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import workbench as wb  # noqa: E402
from workbench import config  # noqa: E402
from workbench.measure import bench_rows  # noqa: E402
from workbench.measure.benchmark import _no_donated_buffers  # noqa: E402
from workbench.measure.correctness import compare  # noqa: E402
from workbench.model import registry  # noqa: E402
from workbench.model.opspec import as_tuple  # noqa: E402

MEMORY_BOUND = ["bias_gelu", "elementwise_mul", "vector_add", "swiglu", "scale_bias_relu", "rmsnorm", "reduce_sum"]
EXTRA_SIZES = {"matmul": [(1024, 1024, 1024)]}
PROVIDERS = ("cpu", "eager", "compile")
THREAD_SWEEP = [1 << 12, 1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 18]  # elements, around kWbCpuGrain (2^16)


def cpu_model() -> tuple[str, str]:
    """(model name, the ISA level the variants' clones pick here: x86-64-v4, -v3 or the baseline)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    v3 = {"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"} <= flags
    v4 = v3 and {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= flags
    return model, "x86-64-v4 (AVX-512)" if v4 else "x86-64-v3 (AVX2)" if v3 else "baseline (SSE2)"


def steps(op: str, size, direction: str, gen: torch.Generator):
    """({provider: a no-argument call} for one group, each checked against the float64 reference;
    whether eager's gradients are views of the output gradients, moving no bytes: a + b's backward
    returns dy itself, a sum's an expanded view of it, which no kernel that writes them can match)."""
    spec = registry.spec(op)
    _, values = spec.call_args((None,) * len(spec.inputs), spec.sample_attrs()[0])
    attrs = spec.attr_dict(values)
    inputs = spec.new_inputs(size, "float32", "cpu", gen)
    kernel = wb.load(op, "cpu")
    torch.compiler.reset()  # a fresh compile per group: one function over many shapes hits the recompile limit
    fns = {"cpu": kernel, "eager": spec.eager, "compile": torch.compile(spec.eager, dynamic=False, fullgraph=True)}
    out_terms, grad_terms = spec.terms(size)
    calls = {}
    if direction == "fwd":
        want = spec.run_reference(inputs, attrs)
        for name, fn in fns.items():
            calls[name] = lambda fn=fn: fn(*inputs, **attrs)
            _check(op, name, direction, as_tuple(calls[name]()), want, out_terms)
        return calls, False
    grads = tuple(torch.randn(s, generator=gen) for s in spec.output_shapes(size))
    want = spec.run_reference_backward(grads, inputs, attrs)
    for name, fn in fns.items():
        leaves = [t.detach().requires_grad_(s.differentiable) for s, t in zip(spec.inputs, inputs)]
        wanted = [t for s, t in zip(spec.inputs, leaves) if s.differentiable]
        outs = as_tuple(fn(*leaves, **attrs))
        calls[name] = lambda outs=outs, wanted=wanted: torch.autograd.grad(outs, wanted, grads, retain_graph=True)
        _check(op, name, direction, calls[name](), want, grad_terms)
    ptrs = {g.data_ptr() for g in grads}
    views = all(d.data_ptr() in ptrs or 0 in d.stride() for d in calls["eager"]())
    return calls, views


def _check(op, name, direction, got, want, terms) -> None:
    for g, w, t in zip(got, want, terms):
        ok, rel, _abs, _where, note = compare(g, w, "float32", terms=t)
        if not ok:
            raise SystemExit(f"{op} {direction} {name}: wrong before timing (rel {rel:.2e}, {note}); nothing timed")


def interleaved(calls: dict, rounds: int, batch_ms: float, setup=None) -> dict:
    """{name: per-call ms of each round}: every round times one batch of each call, in rotated order.
    setup(name), where given, runs before a name's batch, outside its timing."""
    names = list(calls)
    for name in names:  # warm-up, and the batch size from the slowest call
        (setup or (lambda n: None))(name)
        for _ in range(3):
            calls[name]()
    slowest = 0.0
    for name in names:
        (setup or (lambda n: None))(name)
        t0 = time.perf_counter()
        calls[name]()
        slowest = max(slowest, (time.perf_counter() - t0) * 1e3)
    reps = max(1, int(batch_ms / max(slowest, 1e-3)))
    samples = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            (setup or (lambda n: None))(name)
            t0 = time.perf_counter()
            for _ in range(reps):
                calls[name]()
            samples[name].append((time.perf_counter() - t0) * 1e3 / reps)
    return samples


def quantile(xs, q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def ratio(samples: dict, base: str, name: str) -> float:
    """The median over rounds of base's time / name's time (> 1: name is faster)."""
    return statistics.median(b / v for b, v in zip(samples[base], samples[name]))


def bench_ops(ops, rounds, batch_ms, prov, out_rows, lines) -> None:
    gen = torch.Generator().manual_seed(0)
    head = (f"{'op':16} {'dir':4} {'size':>14} {'cpu ms':>9} {'eager ms':>9} {'compile ms':>10} {'x eager':>8} "
            f"{'x compile':>9} {'best':>6}  load")
    lines += ["", f"{prov['threads']} torch thread(s)", head, "-" * len(head)]
    print("\n".join(lines[-3:]), flush=True)
    for op in ops:
        spec = registry.spec(op)
        for size in [*spec.bench_sizes["cpu"][:2], *EXTRA_SIZES.get(op, [])]:
            for direction in ("fwd", "bwd") if spec.differentiable else ("fwd",):  # as the demo
                load0 = os.getloadavg()[0]
                with _no_donated_buffers():  # compile's backward keeps its saved tensors: retain_graph
                    calls, views = steps(op, size, direction, gen)
                    samples = interleaved(calls, rounds, batch_ms)
                load1 = os.getloadavg()[0]
                med = {n: statistics.median(s) for n, s in samples.items()}
                x_eager, x_compile = ratio(samples, "eager", "cpu"), ratio(samples, "compile", "cpu")
                best = min(samples["eager"]) / min(samples["cpu"])
                line = (f"{op:16} {direction:4} {spec.label(size):>14} {med['cpu']:9.4f} {med['eager']:9.4f} "
                        f"{med['compile']:10.4f} {x_eager:8.2f} {x_compile:9.2f} {best:6.2f}  {load0:.1f}-{load1:.1f}"
                        + ("  * eager's gradients are views of dy (no bytes moved)" if views else ""))
                lines.append(line)
                print(line, flush=True)
                for name, s in samples.items():
                    out_rows.append(dict(prov, kind="ops", op=op, size=list(size), dtype="float32", direction=direction,
                                         provider=name, median_ms=med[name], p20_ms=quantile(s, 0.2),
                                         p80_ms=quantile(s, 0.8), samples_ms=s, x_eager=ratio(samples, "eager", name),
                                         x_compile=ratio(samples, "compile", name),
                                         x_eager_best=min(samples["eager"]) / min(s), loadavg_before=load0,
                                         loadavg_after=load1, eager_grads_are_views=views,
                                         checked="float64 reference, before timing"))


def thread_sweep(ops, rounds, batch_ms, prov, out_rows, lines) -> None:
    """Each op's cpu forward at THREAD_SWEEP sizes (rows of 1024 where the op has rows) on 1 and 2 threads."""
    gen = torch.Generator().manual_seed(1)
    threads = torch.get_num_threads()
    head = f"{'op':16} {'elements':>9} {'1 thread ms':>12} {'2 threads ms':>13} {'2 vs 1':>7}  load"
    lines += ["", "threading: the cpu variant's forward on one and on two threads", head, "-" * len(head)]
    print("\n" + lines[-3] + "\n" + head, flush=True)
    for op in ops:
        spec = registry.spec(op)
        kernel = wb.load(op, "cpu")
        _, values = spec.call_args((None,) * len(spec.inputs), spec.sample_attrs()[0])
        attrs = spec.attr_dict(values)
        for n in THREAD_SWEEP:
            size = (n,) if len(spec.bench_sizes["cpu"][0]) == 1 else (n // 1024, 1024)
            inputs = spec.new_inputs(size, "float32", "cpu", gen)
            call = lambda: kernel(*inputs, **attrs)  # noqa: E731
            load0 = os.getloadavg()[0]
            try:
                samples = interleaved({"1": call, "2": call}, rounds, batch_ms,
                                      setup=lambda name: torch.set_num_threads(int(name)))
            finally:
                torch.set_num_threads(threads)
            load1 = os.getloadavg()[0]
            one, two = statistics.median(samples["1"]), statistics.median(samples["2"])
            line = f"{op:16} {n:9d} {one:12.4f} {two:13.4f} {ratio(samples, '1', '2'):7.2f}  {load0:.1f}-{load1:.1f}"
            lines.append(line)
            print(line, flush=True)
            out_rows.append(dict(prov, kind="threads", op=op, size=list(size), dtype="float32", direction="fwd",
                                 one_thread_ms=one, two_threads_ms=two, samples_ms=samples,
                                 two_vs_one=ratio(samples, "1", "2"), loadavg_before=load0, loadavg_after=load1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", nargs="+", default=[*MEMORY_BOUND, "matmul"])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--batch-ms", type=float, default=20.0, help="about how long each provider's batch runs")
    p.add_argument("--torch-threads", nargs="+", type=int, default=[torch.get_num_threads()],
                   help="run the table once with each of these torch thread counts (default: torch's)")
    p.add_argument("--sweep", action="store_true", help="also the one-versus-two-threads sweep")
    p.add_argument("--out", type=pathlib.Path, default=None, help="folder (default: results/cpu/<commit>)")
    args = p.parse_args()
    unknown = [o for o in args.ops if o not in registry.ops()]
    if unknown:
        p.error(f"--ops must be among {registry.ops()}; unknown: {unknown}")
    if args.rounds < 3:
        p.error(f"--rounds must be at least 3 for a median; got {args.rounds}")
    if any(n < 1 for n in args.torch_threads):
        p.error(f"--torch-threads must be at least 1; got {args.torch_threads}")
    model, isa = cpu_model()
    prov = dict(bench_rows.provenance(config.REPO_ROOT, wb.__version__), cpu=model, cpu_isa=isa, cores=os.cpu_count(),
                torch_cpu_capability=torch.backends.cpu.get_cpu_capability())
    out = args.out or config.RESULTS_DIR / "cpu" / prov["commit"]
    title = (f"cpu variants vs eager and torch.compile, float32, interleaved ({args.rounds} rounds, medians; "
             f"x = eager or compile time / cpu time, median of per-round ratios)\n"
             f"{model}, {os.cpu_count()} cores, clones: {isa}; torch {torch.__version__}; "
             f"commit {prov['commit']}; {prov['timestamp']}")
    print(title, flush=True)
    rows, lines = [], [title]
    default_threads = torch.get_num_threads()
    try:
        for n in args.torch_threads:
            torch.set_num_threads(n)
            bench_ops(args.ops, args.rounds, args.batch_ms, dict(prov, threads=n), rows, lines)
    finally:
        torch.set_num_threads(default_threads)
    if args.sweep:
        thread_sweep([o for o in args.ops if o in MEMORY_BOUND], args.rounds, args.batch_ms, prov, rows, lines)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "cpu_bench.jsonl").open("a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    with (out / "cpu_bench.txt").open("a") as f:
        f.write("\n".join(lines) + "\n\n")
    print(f"\nrows and tables appended to {out / 'cpu_bench.jsonl'} and {out / 'cpu_bench.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
