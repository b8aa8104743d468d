"""The verdict (verdict(), a pure function of one kernel's metrics and the op's declared bytes and
FLOPs) is, first rule that holds:
    uncoalesced     global loads or stores use < 50% of the bytes of the 32-byte sectors they move
                    (sector efficiency), and that access kind carries >= 15% of the kernel's global
                    sectors (a few stores, one per block, waste little however they are laid out);
                    of loads and stores, the one wasting more bytes; unless the kernel is at >= 90%
                    of the copy ceiling anyway
    compute-bound   compute is at least the memory's share and: >= 50% of the GEMM ceiling (cuBLAS
                    for the dtype; ops declared compute_bound) or the tensor pipe >= 60%; for other
                    ops (or without a ceiling) SM throughput >= 60% of peak, which for an op that
                    should be limited by its bytes is named instruction issue
    memory-bound    the op's declared bytes per second >= 60% of the copy ceiling (the measured
                    copy rate, cached per GPU, as wb.bench uses), or DRAM >= 60% of peak
    latency-bound   none of these: a grid under one wave, occupancy under 50% possible (with its
                    limiter: registers, shared memory, block size), or warps stalled (top 3 reasons)
each with what to try next. A kernel whose profiled call computed the wrong output (ncu.profiled_call's
check) gets the verdict "wrong" instead (wrong_verdict): no performance verdict.
"""
from __future__ import annotations

from dataclasses import dataclass

from .metrics import occupancy_limiter, tensor_pipe, top_stalls

# The verdict's thresholds (see the module's docstring).
BOUND = 0.6              # a roof is the limit from 60% of it
COMPUTE_BOUND = 0.5      # of the GEMM ceiling
AT_ROOF = 0.9
UNCOALESCED_PCT = 50.0
MATERIAL_SHARE = 0.15    # of the kernel's global sectors: below it, an access's waste cannot be its bottleneck
LOW_OCCUPANCY_PCT = 50.0


@dataclass
class Verdict:
    kind: str         # "memory-bound", "compute-bound", "latency-bound" or "uncoalesced"
    summary: str      # what the counters say, in words
    advice: str       # what to try next

    @property
    def line(self) -> str:
        return f"{self.summary}. Try: {self.advice}"

    def __str__(self) -> str:
        return self.line


_STALL_ADVICE = {
    "long_scoreboard": "warps wait on global memory: keep more loads in flight per thread (unroll, 16-byte "
                       "loads, several independent elements per thread) or reuse data from shared memory",
    "lg_throttle": "too many global memory instructions queue up: fewer, wider (16-byte) loads and stores",
    "short_scoreboard": "warps wait on shared memory or special math: fewer shared-memory accesses per FMA "
                        "(register tiles), no bank conflicts",
    "mio_throttle": "the shared-memory/special-math queue is full: wider shared accesses, fewer of them",
    "barrier": "warps wait at __syncthreads: more work between barriers, double-buffered tiles",
    "math_pipe_throttle": "a math pipe is saturated: that pipe is the limit (a cheaper instruction mix)",
    "wait": "fixed-latency dependencies: more independent instructions per thread (ILP)",
    "no_instruction": "instruction fetch: a very short kernel or large unrolled code",
    "branch_resolving": "branches: less divergent control flow",
    "drain": "stores at the kernel's end wait to drain: coalesced stores",
    "membar": "memory fences: fewer of them",
    "not_selected": "enough eligible warps: the issue rate itself is the limit",
}


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.0f}%"


def _sectors(m: dict, op: str) -> float | None:
    s = m.get(f"{op}_sectors")
    if s is None and m.get(f"{op}_requests") is not None and m.get(f"{op}_bytes_per_request") is not None:
        s = m[f"{op}_requests"] * m[f"{op}_bytes_per_request"] / 32
    return s


def access_findings(m: dict) -> list[dict]:
    """The global loads and stores of one kernel (those with requests), each with its sector
    efficiency, its share of the kernel's global sectors (None where a count is missing), the sector
    bytes it wastes, and whether it is material (a share of at least MATERIAL_SHARE, or unknown)."""
    sectors = {op: _sectors(m, op) for op in ("ld", "st")}
    known = all(v is not None for v in sectors.values())
    total = sum(sectors.values()) if known else None
    out = []
    for op, what in (("ld", "loads"), ("st", "stores")):
        eff, req = m.get(f"{op}_efficiency"), m.get(f"{op}_requests")
        if eff is None or (req is not None and req <= 0) or sectors[op] == 0:
            continue
        share = sectors[op] / total if total else None
        wasted = 32 * sectors[op] * (1 - eff / 100) if sectors[op] is not None else None
        out.append(dict(op=op, what=what, efficiency=eff, share=share, bytes_per_request=m.get(f"{op}_bytes_per_request"),
                        wasted=wasted if wasted is not None else -1.0,  # unknown: ranks below any known
                        material=share is None or share >= MATERIAL_SHARE))
    return out


def verdict(m: dict, *, nbytes: float | None = None, flops: float | None = None, copy_GBps: float | None = None,
            gemm_TFLOPs: float | None = None, compute_bound: bool = False) -> Verdict:
    """The verdict for one kernel (the module's rules). m: kernel_metrics() (a key may be missing or
    None); nbytes, flops: this kernel's share of the op's declared work; gemm_TFLOPs: cuBLAS's rate."""
    g = m.get
    dur_s = (g("duration_ns") or 0) * 1e-9
    gbps = nbytes / dur_s / 1e9 if nbytes and dur_s > 0 else None
    tflops = flops / dur_s / 1e12 if flops and dur_s > 0 else None
    mem_frac = gbps / copy_GBps if gbps is not None and copy_GBps else None
    dram = g("dram_pct") / 100 if g("dram_pct") is not None else None
    gemm_frac = tflops / gemm_TFLOPs if tflops is not None and gemm_TFLOPs and compute_bound else None
    sm = g("sm_pct") / 100 if g("sm_pct") is not None else None
    tensor = tensor_pipe(m) / 100 if tensor_pipe(m) is not None else None
    memory = max([x for x in (mem_frac, dram) if x is not None], default=None)
    spill = g("spill_bytes") or 0.0
    spill_note = (f"; and {spill / 1e3:.0f} KB go through local memory (spilled registers or a local array): "
                  "fewer live values per thread, or __launch_bounds__") if spill > 0 else ""
    where = []
    if mem_frac is not None:
        where.append(f"{_pct(mem_frac)} of the copy ceiling")
    if dram is not None:
        where.append(f"DRAM {_pct(dram)} of peak")

    # 1. uncoalesced: sectors fetched whose bytes the threads do not use, in the accesses (loads or
    #    stores) that carry a material share of the kernel's global traffic; of those, the one that
    #    wastes the most bytes. One partial sum stored per block (reduce_sum/first_add) wastes most
    #    of its sector, but the stores are a sliver of the kernel's bytes: that is not its bottleneck.
    worst = None
    low = [f for f in access_findings(m) if f["efficiency"] < UNCOALESCED_PCT]
    for f in low:
        if f["material"] and (worst is None or (f["wasted"], -f["efficiency"]) > (worst["wasted"], -worst["efficiency"])):
            worst = f
    # What was weighed and found too small to matter, said so with the verdict that does
    minor_note = "".join(f"; the global {f['what']} use {f['efficiency']:.0f}% of each sector's bytes, but carry "
                         f"{100 * f['share']:.1f}% of the kernel's global sectors: not its bottleneck"
                         for f in low if not f["material"])
    if worst is not None and not (mem_frac is not None and mem_frac >= AT_ROOF):
        eff, what, bpr = worst["efficiency"], worst["what"], worst["bytes_per_request"]
        per = f", {bpr:.0f} bytes of sectors per warp-wide request" if bpr is not None else ""
        share = [f"{_pct(worst['share'])} of the kernel's global sectors"] if worst["share"] is not None else []
        return Verdict("uncoalesced", f"uncoalesced: the global {what} use {eff:.0f}% of the bytes of each 32-byte "
                       f"sector they move{per} ({', '.join(share + where) or 'no ceiling known'})",
                       "make the 32 threads of a warp touch consecutive addresses (threadIdx.x along the "
                       "contiguous, last dimension); where the algorithm walks columns, stage a tile through "
                       "shared memory and read it transposed" + spill_note)

    # 2. compute-bound: the arithmetic is the larger share and near its roof
    if compute_bound and gemm_frac is not None:
        compute = max(gemm_frac, tensor or 0.0)
        compute_hit = gemm_frac >= COMPUTE_BOUND or (tensor or 0.0) >= BOUND
    else:
        compute = max(sm or 0.0, tensor or 0.0)
        compute_hit = compute >= BOUND
    if compute_hit and compute >= (memory or 0.0):
        units = ", ".join(x for x in (f"SM {_pct(sm)}" if sm is not None else "",
                                      f"tensor pipe {_pct(tensor)}" if tensor is not None else "") if x)
        if gemm_frac is not None:
            head = (f"compute-bound at {_pct(gemm_frac)} of the GEMM ceiling ({tflops:.1f} of {gemm_TFLOPs:.1f} "
                    f"TFLOP/s, cuBLAS)" + (f"; {units} of peak" if units else ""))
            near = gemm_frac >= AT_ROOF
        else:
            head = f"compute-bound: {units} of peak" + (f", {tflops:.2f} TFLOP/s" if tflops else "")
            near = compute >= AT_ROOF
        if not compute_bound:
            # an op that should be limited by its bytes, held back by its instructions instead
            head += (f", above the memory's {_pct(memory)}" if memory is not None else "") + " (instruction issue)"
            advice = ("fewer instructions per byte: 16-byte accesses move 4x the bytes per instruction; index math "
                      "(64-bit division or modulo) once per vector or row, not per element; cheaper math")
        elif near:
            advice = "at the compute roof: fewer operations (a cheaper formula) or faster units (tensor cores for 16-bit types)"
        else:
            advice = ("more independent multiply-adds per thread (larger register tiles), fewer shared-memory loads "
                      "per FMA, the next tile's loads in flight during this one's math (double buffering); tensor "
                      "cores for 16-bit types")
        return Verdict("compute-bound", head + minor_note, advice + spill_note)

    # 3. memory-bound: near the copy ceiling (the op's own bytes) or DRAM near its peak
    if memory is not None and memory >= BOUND:
        if mem_frac is not None and (mem_frac >= BOUND or dram is None or mem_frac >= dram):
            head = (f"memory-bound at {_pct(mem_frac)} of the copy ceiling ({gbps:.0f} of {copy_GBps:.0f} GB/s "
                    f"for the op's {nbytes / 1e6:.0f} MB" + (f"; DRAM {_pct(dram)} of peak)" if dram is not None else ")"))
        else:  # DRAM busy, while the op's own bytes arrive slower than a copy's (or no ceiling is known)
            head = f"memory-bound: DRAM at {_pct(dram)} of peak" + (
                f" (the op's own bytes at {_pct(mem_frac)} of the copy ceiling)" if mem_frac is not None else
                f", {gbps:.0f} GB/s for the op's bytes" if gbps else "")
        extra = g("dram_bytes")
        if extra and nbytes and extra > 1.5 * nbytes:
            advice = (f"it moves {extra / nbytes:.1f}x the bytes the op must move: read each input once (keep it "
                      "in registers or shared memory), write each output once")
        elif (mem_frac if mem_frac is not None else memory) >= AT_ROOF:
            advice = ("it is at the memory roof: only moving fewer bytes makes it faster (fuse it with the op "
                      "before or after it, a narrower dtype)")
        else:
            advice = ("room left under the roof: 16-byte (vector) loads and stores, more bytes in flight per "
                      "thread, a grid that fills every SM")
        return Verdict("memory-bound", head + minor_note, advice + spill_note)

    # 4. latency-bound: no roof is near
    parts = []
    if where or sm is not None:
        parts.append("no roof is near (" + ", ".join(where + ([f"SM {_pct(sm)}"] if sm is not None else [])) + ")")
    occ, theo, waves = g("occupancy"), g("occupancy_theoretical"), g("waves")
    limiter = g("limiter") if "limiter" in m else occupancy_limiter(m)
    if waves is not None and waves < 1:
        grid = f"{g('grid_size'):.0f} blocks" if g("grid_size") is not None else "the grid"
        sms = f" for {g('sm_count'):.0f} SMs" if g("sm_count") is not None else ""
        parts.append(f"{grid}{sms} fill {waves:.0%} of one wave")
        advice = "more, smaller blocks (or more work split across blocks) so every SM has warps to switch between"
    elif theo is not None and theo < LOW_OCCUPANCY_PCT:
        parts.append(f"occupancy {occ if occ is not None else float('nan'):.0f}% achieved, {theo:.0f}% possible, "
                     f"limited by {limiter or 'the launch'}")
        advice = {"registers": "fewer registers per thread (__launch_bounds__, fewer live values)",
                  "shared memory": "less shared memory per block (smaller tiles) or more warps per block",
                  "block size": "a block size that packs the SM (a multiple of 64 threads, 128 to 512)",
                  }.get((limiter or "").split(" (")[0].split(":")[0], "more resident warps per SM")
        advice += "; or more independent work per thread to hide latency with fewer warps"
    elif occ is not None and theo is not None and occ < 0.6 * theo:
        parts.append(f"occupancy {occ:.0f}% achieved of {theo:.0f}% possible (blocks finish unevenly, or the tail)")
        advice = "even work per block and enough blocks for several waves"
    else:
        if occ is not None:
            parts.append(f"occupancy {occ:.0f}%")
        advice = "more independent work per thread (ILP): unrolled loops, several elements per thread"
    stalls = top_stalls(m)
    if stalls:
        parts.append("warps stall most on " + ", ".join(f"{r} ({v:.1f})" for r, v in stalls))
        if "wave" not in advice and not (theo is not None and theo < LOW_OCCUPANCY_PCT):
            advice = _STALL_ADVICE.get(stalls[0][0], advice)
    return Verdict("latency-bound", "latency-bound: " + "; ".join(parts or ["no roof is near"]) + minor_note,
                   advice + spill_note)


def wrong_verdict(op: str, variant: str, shape, dtype: str, check: dict) -> Verdict:
    """A wrong call's verdict: no performance verdict (its counters may describe work skipped)."""
    size = "x".join(map(str, shape))
    return Verdict("wrong", f"WRONG OUTPUT at the profiled shape ({size} {dtype}): "
                            f"{check.get('verify_detail') or 'the output differs from the trusted result'}; "
                            "no performance verdict for a call that computes the wrong thing",
                   f"make it right at this shape first: wb.check({op!r}, {variant!r}, shapes=[{tuple(shape)!r}], "
                   f"dtypes=[{dtype!r}]) and compute-sanitizer (python -m workbench sanitize)")


