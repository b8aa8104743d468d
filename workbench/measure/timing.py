"""The one place timing lives: adaptive sampling, CPU and CUDA timers, peak memory. As in Triton's
do_bench and nvbench: warm-up outside the timed region, CUDA events around each sample, L2 flushed
between samples, median with p20/p80 spread, samples drawn until the median is stable. torch is
imported inside the functions so that importing this module stays cheap."""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

_log = logging.getLogger(__name__)

# sqrt(pi/2): the asymptotic standard error of a sample median is sqrt(pi/2) * sigma / sqrt(n)
# for normal data, i.e. ~1.2533 times that of the mean.
_MEDIAN_SE_FACTOR = 1.2533

# Auto CUDA-graph mode: below this per-call time launch overhead (~5-20 us) would dominate.
# Graph replay only where event timing itself breaks down: a replay cannot flush L2 between calls,
# so it measures a warm cache, unlike the event rows around it (a 10 us op measured both ways
# differed by 18% between runs). Host launch time no longer needs graphs: the spin hides it.
_GRAPH_THRESHOLD_MS = 0.006
_GRAPH_TARGET_MS = 1.0  # how long one graph replay should run
_GRAPH_MAX_CALLS = 1000
_MAX_WARMUP_CALLS = 10_000

# Used when the device does not report its L2 size; larger than the L2 of any current GPU.
_FALLBACK_L2_BYTES = 128 * 2**20

# One flush buffer per device index, allocated on first use and kept: allocating ~100 MB per
# measurement would churn the caching allocator and cost more than the measurement.
_flush_buffers: dict[int, torch.Tensor] = {}


@dataclass
class Measurement:
    """Summary of one timed quantity. All times are in milliseconds per call."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    mean_ms: float
    std_ms: float
    n_samples: int
    rel_std_err: float  # standard error of the median / median (1.2533 * std / sqrt(n) / median)
    method: str  # "cuda-events", "cuda-graph" or "cpu"
    stop_reason: str  # "stable", "budget" or "max-samples"
    samples_ms: list[float] = field(default_factory=list, repr=False)
    # GPU work per call that the timed stream's events did not see (time_cuda: the device-wide
    # synchronised time per call beyond the events' median and the host's enqueue time); 0 when
    # none, NaN where not measured (CPU timing).
    unseen_ms: float = math.nan
    synced_ms: float = math.nan  # per call, back to back, the whole device synchronised after them
    # The host's time to issue one call, back to back, no sync (NaN in time_cpu: there it is median_ms)
    host_ms: float = math.nan

    def to_dict(self, include_samples: bool = False) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not include_samples:
            del d["samples_ms"]
        return d


def _rel_std_err(median: float, std: float, n: int) -> float:
    if n < 2:
        return math.inf  # one sample says nothing about spread
    if std == 0.0:
        return 0.0  # identical samples: perfectly stable, even if the median is 0
    if median <= 0.0:
        return math.inf
    return _MEDIAN_SE_FACTOR * std / math.sqrt(n) / median


def summarize(samples_ms: Sequence[float], *, method: str, stop_reason: str) -> Measurement:
    """Percentiles interpolate linearly (numpy's default); std is ddof=1."""
    if len(samples_ms) == 0:
        raise ValueError("summarize() needs at least one sample")
    a = np.asarray(samples_ms, dtype=np.float64)
    p20, median, p80 = (float(x) for x in np.percentile(a, [20.0, 50.0, 80.0]))
    n = int(a.size)
    std = float(a.std(ddof=1)) if n > 1 else 0.0
    return Measurement(
        median_ms=median,
        p20_ms=p20,
        p80_ms=p80,
        mean_ms=float(a.mean()),
        std_ms=std,
        n_samples=n,
        rel_std_err=_rel_std_err(median, std, n),
        method=method,
        stop_reason=stop_reason,
        samples_ms=[float(x) for x in a],
    )


def sample_until_stable(
    run_once: Callable[[], float],
    *,
    min_samples: int = 10,
    max_samples: int = 2000,
    target_rse: float = 0.01,
    budget_s: float = 2.0,
    clock: Callable[[], float] = time.perf_counter,
    method: str = "cpu",
) -> Measurement:
    """Call ``run_once()`` (one sample in ms) until, checked after every sample in this order:
    "stable" (n >= min_samples and the median's relative standard error <= target_rse),
    "max-samples", or "budget" (``clock()``, injectable for tests, has run budget_s, and at least
    min(3, max_samples) samples exist)."""
    if max_samples < 1:
        raise ValueError(f"max_samples must be >= 1, got {max_samples}")
    if min_samples < 1:
        raise ValueError(f"min_samples must be >= 1, got {min_samples}")
    if target_rse < 0 or budget_s < 0:
        raise ValueError(f"target_rse and budget_s must be >= 0, got {target_rse}, {budget_s}")

    from ..build import nvrtc_kernels  # its background compiles end first: no sample shares the CPU with one
    nvrtc_kernels.drain()
    floor = min(3, max_samples)
    samples: list[float] = []
    start = clock()
    while True:
        samples.append(float(run_once()))
        n = len(samples)
        # np.median/std take microseconds, outside run_once's timed region: per sample costs no accuracy.
        if n >= min_samples:
            a = np.asarray(samples)
            std = float(a.std(ddof=1)) if n > 1 else 0.0
            if _rel_std_err(float(np.median(a)), std, n) <= target_rse:
                reason = "stable"
                break
        if n >= max_samples:
            reason = "max-samples"
            break
        if n >= floor and clock() - start >= budget_s:
            reason = "budget"
            break
    return summarize(samples, method=method, stop_reason=reason)


def time_cpu(fn: Callable[[], object], *, warmup: int = 3, between: Callable[[], object] | None = None,
             **stop_kwargs: Any) -> Measurement:
    """Wall-clock time per call of ``fn`` (no device sync); ``between()`` runs before each sample,
    untimed; ``stop_kwargs`` go to sample_until_stable."""
    for _ in range(warmup):
        fn()

    def run_once() -> float:
        if between is not None:
            between()
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    return sample_until_stable(run_once, method="cpu", **stop_kwargs)


def _require_cuda(what: str) -> Any:
    """Import torch and fail with a clear message when there is no usable CUDA device."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{what} needs a CUDA GPU, but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}). "
            "Run on a machine with an NVIDIA GPU and driver, or use time_cpu() for CPU timing."
        )
    return torch


def _l2_flush_buffer(torch: Any, device: int) -> torch.Tensor:
    buf = _flush_buffers.get(device)
    if buf is None:
        props = torch.cuda.get_device_properties(device)
        l2 = int(getattr(props, "L2_cache_size", 0) or _FALLBACK_L2_BYTES)
        # 2x L2 so that, whatever the replacement policy, nothing of the previous sample survives.
        n = (2 * l2 + 3) // 4
        buf = torch.ones(n, dtype=torch.int32, device=device)
        _flush_buffers[device] = buf
    return buf


def _flush_l2(buf: torch.Tensor) -> None:
    # Read, don't write: a write (zero_/fill_) leaves dirty lines in L2 whose write-back would
    # then land inside the next timed region. A reduction reads every byte and writes 4.
    buf.max()


def _events_per_call_ms(torch: Any, fn: Callable[[], object], calls: int) -> float:
    """Mean time per call of ``calls`` back-to-back calls, from one event pair."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def _capture_graph(torch: Any, fn: Callable[[], object], calls: int) -> Any | None:
    """Capture ``calls`` back-to-back calls of ``fn`` into a CUDA graph, or None if not capturable."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    try:
        # torch requires warm-up on a side stream before capture (lazy init, cuBLAS workspaces,
        # autotuning must not happen during capture); then capture on that side stream too.
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=side):
            for _ in range(calls):
                fn()
        graph.replay()  # first replay uploads the graph; keep it out of the samples
        torch.cuda.synchronize()
        return graph
    except Exception as exc:  # not capturable (sync, host<->device copy, dynamic alloc, ...)
        _log.debug("CUDA graph capture failed (%s: %s); timing with events", type(exc).__name__, exc)
        try:
            torch.cuda.synchronize()
        except Exception:  # capture errors are not sticky, but do not let cleanup mask the fallback
            pass
        return None


def time_cuda(
    fn: Callable[[], object],
    *,
    flush_l2: bool = True,
    use_graph: bool | None = None,
    warmup_ms: float = 25.0,
    between: Callable[[], object] | None = None,
    **stop_kwargs: Any,
) -> Measurement:
    """GPU time per call of ``fn`` (work on the current CUDA device and stream): after ~warmup_ms of
    warm-up, each sample is one call between two CUDA events, the L2 flushed before it (flush_l2)
    and its launch hidden behind a GPU spin. ``between()`` runs before each sample, untimed (the
    benchmark's fresh inputs). ``use_graph=None`` (auto) times a CUDA graph of K calls (a ~1 ms
    replay, method "cuda-graph") where a warm call's GPU time is under 6 us. host_ms and synced_ms
    come from loops of calls back to back (loop_ms_per_call). ``stop_kwargs`` go to
    sample_until_stable."""
    torch = _require_cuda("time_cuda")
    device = torch.cuda.current_device()

    fn()  # first call may compile, autotune or allocate: never part of the estimate
    torch.cuda.synchronize()
    estimate_ms = max(_events_per_call_ms(torch, fn, 5), 1e-6)
    for _ in range(min(max(1, math.ceil(warmup_ms / estimate_ms)), _MAX_WARMUP_CALLS)):
        fn()
    torch.cuda.synchronize()
    # Back-to-back per-call time of a warm call: max(GPU time, host launch cost). Re-measured
    # only where it can matter (graph decision or K); ~1 ms of calls, 5 to 100 of them.
    warm_ms = estimate_ms
    if use_graph is not False and estimate_ms < 1.0:
        n_calls = max(5, min(100, int(1.0 / estimate_ms)))
        warm_ms = max(_events_per_call_ms(torch, fn, n_calls), 1e-6)

    spin_cycles = _host_hiding_cycles(torch, fn, device)
    if use_graph is None:
        # Decide on GPU time, with the host's launch time hidden behind a spin: back-to-back time
        # is the host's for tiny ops (a 2 us add takes ~7 us to launch from Python).
        use_graph = _gpu_ms(torch, fn, spin_cycles) < _GRAPH_THRESHOLD_MS

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)

    if use_graph:
        calls = min(max(1, round(_GRAPH_TARGET_MS / warm_ms)), _GRAPH_MAX_CALLS)
        graph = _capture_graph(torch, fn, calls)
        if graph is not None:
            # No L2 flush here: an op this short touches little enough data that in a real model
            # its inputs are usually still in L2, and a flush per call is impossible inside a graph.
            def run_graph() -> float:
                if between is not None:
                    between()
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                return start.elapsed_time(end) / calls

            m = sample_until_stable(run_graph, method="cuda-graph", **stop_kwargs)
            return _with_unseen_work(torch, fn, m)

    buf = _l2_flush_buffer(torch, device) if flush_l2 else None

    def run_events() -> float:
        if between is not None:
            between()
        if buf is not None:
            _flush_l2(buf)
        # A GPU spin queued ahead of the start event (nvbench's "blocking kernel"): while it runs,
        # the host enqueues all of fn's work, so the sample is GPU time, not the host's launch
        # time (autograd's backward takes ~60 us to launch three small kernels).
        torch.cuda._sleep(spin_cycles)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    return _with_unseen_work(torch, fn, sample_until_stable(run_events, method="cuda-events", **stop_kwargs))


# Work the timer cannot see: a kernel launched on a stream of its own (or left running past the end
# event) is outside the events' region, so such a call looks free. Back-to-back calls followed by a
# synchronisation of the whole device take at least the GPU time of everything the calls started;
# an honest call takes about max(its GPU time, the host's enqueue time) that way, so a synchronised
# time well beyond both is work the events did not count.
_UNSEEN_FACTOR = 1.5
_UNSEEN_SLACK_MS = 0.02   # the device synchronisation's own latency, spread over the calls
_SYNCED_TARGET_MS = 5.0   # how long the synchronised calls run together (2 to 50 calls)


def unseen_work_ms(median_ms: float, host_ms: float, synced_ms: float) -> float:
    """GPU time per call beyond what the events saw (0 when within the honest bound)."""
    honest = max(median_ms, host_ms)
    return max(0.0, synced_ms - honest) if synced_ms > _UNSEEN_FACTOR * honest + _UNSEEN_SLACK_MS else 0.0


def loop_ms_per_call(fn: Callable[[], object], gpu_ms: float, *, sync: Callable[[], object],
                     clock: Callable[[], float] = time.perf_counter, loops: int = 3) -> tuple[float, float]:
    """(host, synced) ms per call of calls back to back: the wall time to issue them and the time
    until ``sync()`` (also run, untimed, before each loop) returned after them; medians of `loops`
    loops of ~5 ms of GPU work (2 to 50 calls: the launch queue never fills and blocks the host)."""
    calls = min(50, max(2, math.ceil(_SYNCED_TARGET_MS / max(gpu_ms, 1e-3))))
    host, synced = [], []
    for _ in range(loops):
        sync()
        t0 = clock()
        for _ in range(calls):
            fn()
        t1 = clock()
        sync()
        host.append((t1 - t0) * 1e3 / calls)
        synced.append((clock() - t0) * 1e3 / calls)
    return float(np.median(host)), float(np.median(synced))


def _with_unseen_work(torch: Any, fn: Callable[[], object], m: Measurement) -> Measurement:
    m.host_ms, m.synced_ms = loop_ms_per_call(fn, m.median_ms, sync=torch.cuda.synchronize)  # all streams
    m.unseen_ms = unseen_work_ms(m.median_ms, m.host_ms, m.synced_ms)
    return m


def _gpu_ms(torch: Any, fn: Callable[[], object], spin_cycles: int) -> float:
    """Median GPU time of one warm call, its launch hidden behind a spin (5 calls)."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        torch.cuda._sleep(spin_cycles)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[2]


def _host_hiding_cycles(torch: Any, fn: Callable[[], object], device: int) -> int:
    """GPU clock cycles that outlast the host's enqueue time of one fn() call, with margin."""
    torch.cuda.synchronize()
    host_s = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn()
        host_s.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    clock_hz = torch.cuda.get_device_properties(device).clock_rate * 1e3 if hasattr(
        torch.cuda.get_device_properties(device), "clock_rate") else 2e9
    # x2 and +50 us: the enqueue time varies; a spin that ends early would let host time leak in
    return int((2 * max(host_s) + 50e-6) * max(clock_hz, 1e9))


def _resolve_cuda_device(torch: Any, device: Any) -> torch.device:
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"expected a CUDA device, got {dev}")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def peak_memory_bytes(fn: Callable[[], object], device: Any = None) -> int:
    """Peak CUDA memory allocated by one call of ``fn`` above what was allocated before it; -1
    (``fn`` not called) on a CPU device, or where device=None and CUDA is unavailable."""
    import torch

    if device is None:
        if not torch.cuda.is_available():
            return -1
    elif torch.device(device).type == "cpu":
        return -1
    torch = _require_cuda("peak_memory_bytes")
    dev = _resolve_cuda_device(torch, device)
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    baseline = torch.cuda.memory_allocated(dev)
    fn()
    torch.cuda.synchronize(dev)
    return max(0, int(torch.cuda.max_memory_allocated(dev)) - int(baseline))

