"""Why is it slow: Nsight Compute's counters for one call of a variant, a verdict per kernel, the
roofline.

    p = wb.profile("bias_gelu", "vec4", shape=(8192, 8192), dtype="float32")   # direction="fwd"
    p                                   # the table (a notebook shows it as HTML), then a verdict per kernel
    wb.profile("bias_gelu", ["scalar", "vec4"], shape=(8192, 8192))   # side by side, with the deltas
    p.roofline("roofline.png")          # the profiled variants on the roofline (a Figure, and a PNG)
    wb.profile.roofline(["bias_gelu", "matmul"])   # every variant of any ops, from timing alone (no ncu)

    python -m workbench profile bias_gelu scalar vec4 --shape 8192x8192 --dtype float32 [--direction fwd]

How: the variant is built here (a compile error is raised before anything is profiled), then ncu
runs a child that warms the call up and makes it once more inside the NVTX range ncu.RANGE; only the
kernels launched in that range are profiled (not the warm-up, not the inputs' creation), with one
set of metrics (METRICS, STALLS) that ncu collects by replaying each kernel a few times. GPU clocks
are left as they are (--clock-control none), so durations compare with wb.bench's and with the
measured ceilings. The child has a time limit; where ncu is missing or cannot read the counters,
ncu.NcuUnavailable says so and how to go on without them (wb.bench, the ptxas report, roofline()).
The same run samples warp stalls per instruction (ncu's SourceCounters section); with the
variant built with nvcc -lineinfo (profile does that build, cached), each kernel's table ends with
its source lines that collected the most stall samples, and why (lines=False leaves this out).

The verdict (verdict(), a pure function of one kernel's metrics and the op's declared bytes and
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
each with what to try next.

The profiled call is checked at its shape first (jobs._measure, verify.check_kernel_at: fresh inputs,
outputs poisoned, the float64 reference or eager where that does not fit), and the profiled call's
own output on inputs drawn after the warm-up; the table's first row says "ok", "WRONG" or "not
checked". A variant whose output is wrong is named above the table, its kernels' verdict is "wrong"
(no performance verdict for a call that computed the wrong thing), and the CLI exits 1.
"""
from __future__ import annotations

import html
import math
import pathlib
import re
import sys
import types
from dataclasses import dataclass, field

from . import build, config, isolate, ncu, registry
from . import dtypes as dtypes_
from . import roofline as roofline_
from .errors import WorkbenchError

# The metrics requested from ncu (base units), by the short names the table and the verdict use.
# Names as in Nsight Compute's metrics reference and its own rule files (sm_70 and later).
METRICS = {
    "duration_ns": ncu.DURATION,                                                   # ns
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",              # % of peak DRAM bandwidth
    "dram_read": ncu.DRAM_READ,                                                    # bytes
    "dram_write": ncu.DRAM_WRITE,
    "ld_sectors": ncu.LOAD_SECTORS,                                                # 32-byte sectors at L1
    "ld_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",              # warp-wide load instructions
    "st_sectors": ncu.STORE_SECTORS,
    "st_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "ld_efficiency": "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",  # % of sector bytes used
    "st_efficiency": "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct",
    "l2_hit": "lts__t_sector_hit_rate.pct",
    "occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",              # achieved, % of max warps
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "tensor_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "issue_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active",            # cycles issuing an instruction
    "cycles_per_issue": "smsp__average_warp_latency_per_inst_issued.ratio",        # warp cycles per instruction
    "local_ld_sectors": "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",           # spills (and local arrays)
    "local_st_sectors": "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
}
# Asked for on compute capability 9.x only (ncu fails the whole run for a metric a chip lacks). The
# hmma counter above is the sub-pipe mma.sync runs on; this one is the whole tensor pipe, which
# Nsight Compute's pipe-utilization rule calls "the logical aggregation of individual tensor
# pipelines", Hopper's wgmma (HGMMA) included: 57.8% for wgmma_tma at 8192^3 bf16 on the H100
# (results/gpu/3efe340/ncu_hopper.txt). The tensor figure is the larger of the two (tensor_pipe()).
HOPPER_METRICS = {
    "tensor_all_pct": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
}
# Warp stall reasons (Nsight Compute's WarpStateStats): warps stalled for the reason per issued instruction.
STALLS = ("long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle", "math_pipe_throttle", "wait",
          "barrier", "membar", "not_selected", "no_instruction", "branch_resolving", "dispatch_stall", "drain",
          "imc_miss", "tex_throttle", "sleeping", "misc")
# In every raw page without being asked for (launch statistics and occupancy).
LAUNCH = {
    "registers": "launch__registers_per_thread",
    "smem_static": "launch__shared_mem_per_block_static",
    "smem_dynamic": "launch__shared_mem_per_block_dynamic",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "waves": "launch__waves_per_multiprocessor",
    "sm_count": "launch__sm_count",
    "occupancy_theoretical": "sm__maximum_warps_per_active_cycle_pct",
    "limit_registers": "launch__occupancy_limit_registers",     # blocks per SM each resource allows
    "limit_shared_mem": "launch__occupancy_limit_shared_mem",
    "limit_warps": "launch__occupancy_limit_warps",
    "limit_blocks": "launch__occupancy_limit_blocks",
}
NCU_ARGS = ("--clock-control", "none")

# The verdict's thresholds (see the module's docstring).
BOUND = 0.6              # a roof is the limit from 60% of it
COMPUTE_BOUND = 0.5      # of the GEMM ceiling
AT_ROOF = 0.9
UNCOALESCED_PCT = 50.0
MATERIAL_SHARE = 0.15    # of the kernel's global sectors: below it, an access's waste cannot be its bottleneck
LOW_OCCUPANCY_PCT = 50.0
TIMEOUT_S = 300.0


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


def requested_metrics(capability: tuple[int, int] | None = None) -> list[str]:
    """Every metric name profile() asks ncu for (one run; ncu replays each kernel per group) on a
    GPU of this compute capability (major, minor): HOPPER_METRICS too on 9.x."""
    hopper = list(HOPPER_METRICS.values()) if capability is not None and capability[0] == 9 else []
    return list(dict.fromkeys([*METRICS.values(), *hopper, *(stall_metric(r) for r in STALLS)]))


def device_capability() -> tuple[int, int] | None:
    """The compute capability of the GPU the profiled child runs on (the current device), or None."""
    try:
        import torch

        return tuple(torch.cuda.get_device_capability()) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - no usable CUDA here: ask for the metrics every GPU has
        return None


def tensor_pipe(m: dict) -> float | None:
    """The tensor pipe's busy share (% of peak): the larger of the mma.sync (hmma) counter and the
    whole pipe's (HOPPER_METRICS, where collected); None where neither was."""
    values = [m[k] for k in ("tensor_pct", "tensor_all_pct") if m.get(k) is not None]
    return max(values, default=None)


def _num(v) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, str):
        try:
            x = float(v.replace(",", ""))
        except ValueError:
            return None  # "-", "n/a", "": not collected
        return x if math.isfinite(x) else None
    return None


def short_name(name: str) -> str:
    """'forward_kernel<float>' for 'void <unnamed>::forward_kernel<float>(const float *, ...)' (ncu's
    demangled name), or for a mangled one."""
    from .ptxas import kernel_label

    name = kernel_label(str(name)).strip()
    name = re.sub(r"^void\s+", "", name)
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the argument list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            cut = i
            break
    name = name[:cut]
    depth, start = 0, 0
    for i, ch in enumerate(name):  # namespaces: the last '::' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0 and name[i:i + 2] == "::":
            start = i + 2
    return name[start:] or str(name)


def kernel_metrics(row: dict) -> dict:
    """One kernel's metrics by short name (None where ncu did not collect one), from a row of
    ncu.parse_csv, plus what follows from them: bytes per request, DRAM bytes, spilled bytes, the
    occupancy limiter, the stall reasons."""
    m = {k: _num(row.get(raw)) for k, raw in {**METRICS, **HOPPER_METRICS, **LAUNCH}.items()}
    m["name"] = short_name(row.get("Kernel Name", "?"))
    m["tensor_pipe"] = tensor_pipe(m)
    m["stalls"] = {r: v for r in STALLS if (v := _num(row.get(stall_metric(r)))) is not None}
    for op in ("ld", "st"):
        s, r = m[f"{op}_sectors"], m[f"{op}_requests"]
        m[f"{op}_bytes_per_request"] = 32 * s / r if s is not None and r else None
    rd, wr = m["dram_read"], m["dram_write"]
    m["dram_bytes"] = None if rd is None and wr is None else (rd or 0.0) + (wr or 0.0)
    lo, ls = m["local_ld_sectors"], m["local_st_sectors"]
    m["spill_bytes"] = None if lo is None and ls is None else 32 * ((lo or 0.0) + (ls or 0.0))
    m["limiter"] = occupancy_limiter(m)
    return m


_LIMITS = {"limit_registers": "registers", "limit_shared_mem": "shared memory", "limit_warps": "block size",
           "limit_blocks": "blocks per SM"}


def occupancy_limiter(m: dict) -> str | None:
    """What bounds the resident blocks per SM: the launch limit with the fewest blocks (ncu's
    launch__occupancy_limit_*), named with its amount; None where occupancy is not limited."""
    limits = {k: m.get(k) for k in _LIMITS if m.get(k) is not None}
    theo = m.get("occupancy_theoretical")
    if not limits or (theo is not None and theo >= 99.5):
        return None
    low = min(limits.values())
    names = []
    for k, v in limits.items():
        if v != low:
            continue
        if k == "limit_registers" and m.get("registers") is not None:
            names.append(f"registers ({m['registers']:.0f} per thread)")
        elif k == "limit_shared_mem" and (m.get("smem_static") is not None or m.get("smem_dynamic") is not None):
            names.append(f"shared memory ({(m.get('smem_static') or 0) + (m.get('smem_dynamic') or 0):.0f} B per block)")
        elif k == "limit_warps" and m.get("block_size") is not None:
            names.append(f"block size ({m['block_size']:.0f} threads)")
        else:
            names.append(_LIMITS[k])
    return " and ".join(names) + f": {low:.0f} blocks per SM"


def top_stalls(m: dict, n: int = 3) -> list[tuple[str, float]]:
    """The n largest stall reasons (warps stalled per issued instruction); 'selected' is not a stall."""
    return sorted(((r, v) for r, v in (m.get("stalls") or {}).items() if v > 0), key=lambda rv: -rv[1])[:n]


# ----------------------------------------------------------------------------------------- the verdict

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
    """The global loads and the global stores of one kernel, each weighed by the traffic it carries:
    its sector efficiency, its share of the kernel's global sectors (loads + stores; None where
    a count is missing), the sector bytes it wastes, and whether it is material (a share of at least
    MATERIAL_SHARE, or an unknown share). An access kind with no requests is left out."""
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
    """The verdict for one kernel (rules in the module's docstring). m: its metrics by short name
    (kernel_metrics(); a key may be missing or None); nbytes, flops: the share of the op's declared
    bytes and FLOPs this kernel does; copy_GBps: the device's copy ceiling; gemm_TFLOPs: cuBLAS's
    rate for the dtype (compute_bound ops)."""
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


# ----------------------------------------------------------------------------------------- the result

@dataclass
class KernelProfile:
    variant: str
    name: str                      # short kernel name
    metrics: dict                  # kernel_metrics()
    raw: dict                      # ncu's row, every column
    nbytes: float | None = None    # this kernel's share of the op's declared bytes and FLOPs
    flops: float | None = None
    verdict: Verdict | None = None
    lines: list = field(default_factory=list)  # its source lines with the most stall samples (hot_lines)

    @property
    def seconds(self) -> float | None:
        d = self.metrics.get("duration_ns")
        return d * 1e-9 if d else None


HOT_LINES = 3  # source lines shown per kernel


def hot_lines(lines: list[dict], n: int = HOT_LINES) -> list[dict]:
    """The n source lines (ncu.parse_source_csv) with the most warp-stall samples, each with its
    share of the kernel's samples and its top stall reasons; a line listed under several files or
    blocks is counted once."""
    merged: dict[tuple, dict] = {}
    for ln in lines:
        key = (ln["file"], ln["line"])
        m = merged.setdefault(key, dict(ln, samples=0.0, stalls={}))
        m["samples"] += ln["samples"]
        for r, v in ln["stalls"].items():
            m["stalls"][r] = m["stalls"].get(r, 0.0) + v
    total = sum(m["samples"] for m in merged.values()) or 1.0
    top = sorted(merged.values(), key=lambda m: -m["samples"])[:n]
    for m in top:
        m["share"] = 100 * m["samples"] / total
        m["top"] = sorted(m["stalls"].items(), key=lambda kv: -kv[1])[:2]
    return top


def _line_text(ln: dict) -> str:
    where = f"{pathlib.Path(ln['file']).name}:{ln['line']}"
    why = ", ".join(f"{r} {100 * v / ln['samples']:.0f}%" for r, v in ln["top"])
    return f"{where}  {ln['share']:.0f}% of the stall samples ({why})  {ln['text']}"


def _fmt(v, spec: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, spec) if not isinstance(v, str) else v


def _stall_text(m: dict) -> str:
    return ", ".join(f"{r} {v:.1f}" for r, v in top_stalls(m)) or "-"


@dataclass
class Profile:
    """wb.profile's result: per kernel its metrics and verdict; table() for a shell, the HTML table
    in a notebook; compare() (two or more variants); rows() and roofline()."""
    op: str
    shape: tuple
    dtype: str
    direction: str
    variants: list[str]
    kernels: list[KernelProfile]
    nbytes: float | None = None          # the op's declared bytes and FLOPs for this call
    flops: float | None = None
    copy_GBps: float | None = None
    gemm_TFLOPs: float | None = None
    compute_bound: bool = False
    notes: list[str] = field(default_factory=list)
    # per variant, the check of the profiled call's output at this shape (ncu.Kernels.measured:
    # verified "ok" / "wrong" / "not checked", verify_detail, ...); a variant missing: not checked
    checks: dict = field(default_factory=dict)

    def checked(self, variant: str) -> str:
        """"ok", "wrong" or "not checked": the profiled call's output at this shape."""
        return (self.checks.get(variant) or {}).get("verified") or "not checked"

    def wrong(self) -> list[str]:
        return [v for v in self.variants if self.checked(v) == "wrong"]

    def _wrong_lines(self) -> list[str]:
        return [f"WRONG OUTPUT: {v} at {'x'.join(map(str, self.shape))} {self.dtype} {self.direction}: "
                f"{self.checks[v].get('verify_detail') or 'its output differs from the trusted result'}. Its counters "
                f"describe a call that computed the wrong thing: no performance verdict" for v in self.wrong()]

    def of(self, variant: str) -> list[KernelProfile]:
        """The kernels of one variant, in launch order."""
        return [k for k in self.kernels if k.variant == variant]

    def verdict(self, variant: str | None = None) -> Verdict:
        """The verdict of the variant's longest kernel (the first variant's by default)."""
        ks = self.of(variant or self.variants[0])
        return max(ks, key=lambda k: k.metrics.get("duration_ns") or 0).verdict

    def totals(self, variant: str) -> dict:
        """The variant's call: durations, requests, sectors and bytes summed over its kernels;
        percentages weighted by duration; the call's GB/s and TFLOP/s for the declared work."""
        ks = self.of(variant)
        ms = [k.metrics for k in ks]
        dur = sum(m.get("duration_ns") or 0 for m in ms)
        out = {"kernels": len(ks), "duration_ns": dur or None}
        for key in ("ld_requests", "st_requests", "ld_sectors", "st_sectors", "dram_bytes", "spill_bytes"):
            vals = [m.get(key) for m in ms if m.get(key) is not None]
            out[key] = sum(vals) if vals else None
        for key in ("dram_pct", "occupancy", "sm_pct", "tensor_pipe", "issue_pct", "l2_hit", "ld_efficiency",
                    "st_efficiency", "cycles_per_issue"):  # efficiencies weighted by requests, the rest by time
            weight = {"ld_efficiency": "ld_requests", "st_efficiency": "st_requests"}.get(key, "duration_ns")
            pairs = [(m[key], m.get(weight) or 0) for m in ms if m.get(key) is not None]
            w = sum(d for _, d in pairs)
            out[key] = sum(v * d for v, d in pairs) / w if w else (pairs[0][0] if pairs else None)
        for op in ("ld", "st"):
            s, r = out[f"{op}_sectors"], out[f"{op}_requests"]
            out[f"{op}_bytes_per_request"] = 32 * s / r if s is not None and r else None
        out["registers"] = max((m["registers"] for m in ms if m.get("registers") is not None), default=None)
        stalls: dict[str, float] = {}
        for m in ms:
            for r, v in (m.get("stalls") or {}).items():
                stalls[r] = stalls.get(r, 0.0) + v * (m.get("duration_ns") or 0) / (dur or 1)
        out["stalls"] = stalls
        sec = dur * 1e-9
        out["GBps"] = self.nbytes / sec / 1e9 if self.nbytes and sec else None
        out["TFLOPs"] = self.flops / sec / 1e12 if self.flops and sec else None
        return out

    def compare(self) -> list[str]:
        """For each variant after the first: how its call differs from the first's (deltas())."""
        if len(self.variants) < 2:
            return []
        base = self.variants[0]
        a, out = self.totals(base), []
        for v in self.variants[1:]:
            bad = [x for x in (base, v) if self.checked(x) == "wrong"]
            if bad:  # no speed comparison with a call that computed the wrong thing
                out.append(f"{base} -> {v}: not compared ({' and '.join(bad)} computed the wrong output)")
                continue
            parts = deltas(a, self.totals(v))
            if self.verdict(base).kind != self.verdict(v).kind:
                parts.append(f"verdict {self.verdict(base).kind} -> {self.verdict(v).kind}")
            out.append(f"{base} -> {v}: " + "; ".join(parts))
        return out

    # -- the table
    def _columns(self) -> list[tuple[str, str, KernelProfile | None]]:
        return [(k.variant, k.name, k) for k in self.kernels]

    def _rows(self) -> list[tuple[str, list, str]]:
        """(label, one value per kernel, format) for every row of the table."""
        ks = self.kernels

        def col(fn):
            return [fn(k) for k in ks]

        def per_s(k, total):
            return total / k.seconds if total and k.seconds else None

        rows = [("output at this shape", col(lambda k: {"ok": "ok", "wrong": "WRONG"}.get(self.checked(k.variant),
                                                                                          "not checked")), "s"),
                ("duration (us)", col(lambda k: (k.metrics.get("duration_ns") or 0) / 1e3 or None), ".1f")]
        if self.nbytes:
            rows.append(("GB/s (declared bytes)", col(lambda k: (per_s(k, k.nbytes) or 0) / 1e9 or None), ".0f"))
            if self.copy_GBps:
                rows.append(("% of copy ceiling", col(lambda k: 100 * (per_s(k, k.nbytes) or 0) / 1e9 / self.copy_GBps
                                                       or None), ".0f"))
        if self.flops and (self.compute_bound or self.gemm_TFLOPs):
            rows.append(("TFLOP/s (declared FLOPs)", col(lambda k: (per_s(k, k.flops) or 0) / 1e12 or None), ".2f"))
            if self.gemm_TFLOPs:
                rows.append(("% of GEMM ceiling", col(lambda k: 100 * (per_s(k, k.flops) or 0) / 1e12 / self.gemm_TFLOPs
                                                       or None), ".0f"))
        g = lambda key: col(lambda k: k.metrics.get(key))  # noqa: E731
        rows += [
            ("DRAM throughput (% of peak)", g("dram_pct"), ".0f"),
            ("DRAM read + write (MB)", col(lambda k: (k.metrics.get("dram_bytes") or 0) / 1e6
                                           if k.metrics.get("dram_bytes") is not None else None), ".1f"),
            ("L2 hit rate (%)", g("l2_hit"), ".0f"),
            ("global load requests", g("ld_requests"), ",.0f"),
            ("bytes per load request", g("ld_bytes_per_request"), ".0f"),
            ("load sector efficiency (%)", g("ld_efficiency"), ".0f"),
            ("global store requests", g("st_requests"), ",.0f"),
            ("bytes per store request", g("st_bytes_per_request"), ".0f"),
            ("store sector efficiency (%)", g("st_efficiency"), ".0f"),
            ("occupancy achieved (%)", g("occupancy"), ".0f"),
            ("occupancy possible (%)", g("occupancy_theoretical"), ".0f"),
            ("occupancy limited by", col(lambda k: k.metrics.get("limiter") or "-"), "s"),
            ("SM throughput (% of peak)", g("sm_pct"), ".0f"),
            ("tensor pipe (% of peak)", g("tensor_pipe"), ".0f"),
            ("issue slots busy (%)", g("issue_pct"), ".0f"),
            ("cycles per issued instruction", g("cycles_per_issue"), ".1f"),
            ("top stalls (warps per instr.)", col(lambda k: _stall_text(k.metrics)), "s"),
            ("registers per thread", g("registers"), ".0f"),
            ("shared memory per block (B)", col(lambda k: None if k.metrics.get("smem_static") is None
                                                and k.metrics.get("smem_dynamic") is None else
                                                (k.metrics.get("smem_static") or 0) + (k.metrics.get("smem_dynamic") or 0)), ".0f"),
            ("spilled / local bytes", g("spill_bytes"), ",.0f"),
            ("grid x block", col(lambda k: f"{_fmt(k.metrics.get('grid_size'), '.0f')} x "
                                           f"{_fmt(k.metrics.get('block_size'), '.0f')}"), "s"),
        ]
        return rows

    def _ratio_column(self) -> bool:
        return len(self.variants) == 2 and all(len(self.of(v)) == 1 for v in self.variants)

    def header(self) -> str:
        ceil = []
        if self.copy_GBps:
            ceil.append(f"copy ceiling {self.copy_GBps:.0f} GB/s")
        if self.gemm_TFLOPs:
            ceil.append(f"GEMM ceiling {self.gemm_TFLOPs:.1f} TFLOP/s (cuBLAS, {self.dtype})")
        work = []
        if self.nbytes:
            work.append(f"declared {self.nbytes / 1e6:.1f} MB")
        if self.flops:
            work.append(f"{self.flops / 1e9:.2f} GFLOP")
        return (f"profile: {self.op} {self.direction} {self.dtype} {'x'.join(map(str, self.shape))}, one call "
                f"(Nsight Compute)" + (f"; {', '.join(work)}" if work else "") + (f"; {', '.join(ceil)}" if ceil else ""))

    def table(self) -> str:
        """The metrics (rows) of every kernel (columns), a ratio column for two one-kernel variants,
        then a verdict per kernel, the comparison and the notes."""
        rows = self._rows()
        ratio = self._ratio_column()
        heads = [(v, n) for v, n, _ in self._columns()]
        cells = [[_fmt(x, f) for x in vals] for _, vals, f in rows]
        if ratio:
            heads.append((f"{self.variants[1]}/{self.variants[0]}", "ratio"))
            for c, (_, vals, f) in zip(cells, rows):
                a, b = vals
                c.append(f"{b / a:.2f}x" if f != "s" and isinstance(a, (int, float)) and isinstance(b, (int, float))
                         and a else "")
        lw = max(len(label) for label, _, _ in rows)
        widths = [max(len(h[0]), len(h[1]), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
        lines = [self.header(), *self._wrong_lines(), ""]
        lines.append(" " * lw + "  " + "  ".join(h[0].rjust(w) for h, w in zip(heads, widths)))
        lines.append(" " * lw + "  " + "  ".join(h[1].rjust(w) for h, w in zip(heads, widths)))
        lines.append("-" * len(lines[-1]))
        for (label, _, _), c in zip(rows, cells):
            lines.append(label.ljust(lw) + "  " + "  ".join(x.rjust(w) for x, w in zip(c, widths)))
        lines.append("")
        lines += [f"verdict {k.variant}/{k.name}: {k.verdict.line}" for k in self.kernels if k.verdict]
        for k in self.kernels:
            if k.lines:
                lines.append(f"hot source lines {k.variant}/{k.name}:")
                lines += [f"  {_line_text(ln)}" for ln in k.lines]
        lines += self.compare()
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.table()

    def _repr_html_(self) -> str:
        rows = self._rows()
        ratio = self._ratio_column()
        e = html.escape
        head = "".join(f"<th>{e(v)}<br><code>{e(n)}</code></th>" for v, n, _ in self._columns())
        if ratio:
            head += f"<th>{e(self.variants[1])}/{e(self.variants[0])}</th>"
        body = []
        for label, vals, f in rows:
            tds = "".join(f"<td style='text-align:right'>{e(_fmt(x, f))}</td>" for x in vals)
            if ratio:
                a, b = vals
                r = f"{b / a:.2f}x" if f != "s" and isinstance(a, (int, float)) and isinstance(b, (int, float)) and a else ""
                tds += f"<td style='text-align:right'>{r}</td>"
            body.append(f"<tr><th style='text-align:left'>{e(label)}</th>{tds}</tr>")
        verdicts = "".join(f"<li><b>{e(k.variant)}/{e(k.name)}</b>: {e(k.verdict.summary)}. <i>Try:</i> "
                           f"{e(k.verdict.advice)}</li>" for k in self.kernels if k.verdict)
        hot = "".join(f"<p><b>hot source lines {e(k.variant)}/{e(k.name)}</b>:<br>"
                      + "<br>".join(f"<code>{e(_line_text(ln))}</code>" for ln in k.lines) + "</p>"
                      for k in self.kernels if k.lines)
        extra = hot + "".join(f"<p>{e(c)}</p>" for c in self.compare()) + "".join(f"<p><i>note: {e(n)}</i></p>" for n in self.notes)
        wrong = "".join(f"<p style='color:#b00020'><b>{e(w)}</b></p>" for w in self._wrong_lines())
        return (f"<p>{e(self.header())}</p>{wrong}<table><thead><tr><th></th>{head}</tr></thead><tbody>{''.join(body)}"
                f"</tbody></table><ul>{verdicts}</ul>{extra}")

    # -- the roofline
    def rows(self) -> list[dict]:
        """One benchmark-like row per variant (its call's duration under the profiler), for
        roofline.figure / roofline.points."""
        out = []
        for v in self.variants:
            t = self.totals(v)
            ms = (t["duration_ns"] or 0) / 1e6
            r = dict(kind="variant", op=self.op, variant=v, dtype=self.dtype, shape="x".join(map(str, self.shape)),
                     direction=self.direction, median_ms=ms or math.nan, bytes=self.nbytes or 0, flops=self.flops or 0,
                     GBps=t["GBps"] or math.nan, TFLOPs=t["TFLOPs"] or math.nan,
                     ceiling_GBps=self.copy_GBps if self.copy_GBps else math.nan, source="ncu",
                     verified=self.checked(v))
            if self.gemm_TFLOPs:
                r["matmul_ceiling_TFLOPs"] = self.gemm_TFLOPs
            out.append(r)
        return out

    def roofline(self, path=None):
        """The profiled variants on the roofline (a Figure; also a PNG at `path`)."""
        fig = roofline_.figure(self.rows(), direction=self.direction, every=True)
        if path is not None:
            path = pathlib.Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, dpi=120, format="png")
        return fig


def _change(a, b, *, rel: float = 0.1) -> bool:
    """a and b differ by more than `rel` (as a ratio; any difference where one is 0)."""
    if a is None or b is None:
        return False
    if a <= 0 or b <= 0:
        return a != b
    return abs(math.log(b / a)) > math.log1p(rel)


def deltas(a: dict, b: dict) -> list[str]:
    """What changed from call a to call b (Profile.totals of each), in the order that explains a
    speedup: time, then the memory instructions, the bytes, occupancy and issue, the stalls."""
    out = []
    da, db = a.get("duration_ns"), b.get("duration_ns")
    if da and db:
        speed = f"{da / db:.2f}x faster" if db <= da else f"{db / da:.2f}x slower"
        out.append(f"{speed} ({da / 1e3:.1f} -> {db / 1e3:.1f} us)")
    ra = (a.get("ld_requests") or 0) + (a.get("st_requests") or 0)
    rb = (b.get("ld_requests") or 0) + (b.get("st_requests") or 0)
    if ra and rb and _change(ra, rb):
        out.append(f"global memory requests {ra / rb:.2f}x fewer" if rb < ra else f"global memory requests {rb / ra:.2f}x more")
    for key, what in (("ld_bytes_per_request", "bytes per load request"), ("st_bytes_per_request", "bytes per store request")):
        if _change(a.get(key), b.get(key)):
            out.append(f"{what} {a[key]:.0f} -> {b[key]:.0f}")
    for key, what in (("ld_efficiency", "load sector efficiency"), ("st_efficiency", "store sector efficiency"),
                      ("dram_pct", "DRAM throughput"), ("occupancy", "occupancy"), ("issue_pct", "issue slots busy"),
                      ("sm_pct", "SM throughput"), ("tensor_pipe", "tensor pipe"), ("l2_hit", "L2 hit rate")):
        x, y = a.get(key), b.get(key)
        if x is not None and y is not None and abs(y - x) >= 5:
            out.append(f"{what} {x:.0f}% -> {y:.0f}%")
    if _change(a.get("dram_bytes"), b.get("dram_bytes")):
        out.append(f"DRAM traffic {a['dram_bytes'] / 1e6:.1f} -> {b['dram_bytes'] / 1e6:.1f} MB")
    if _change(a.get("cycles_per_issue"), b.get("cycles_per_issue")):
        out.append(f"cycles per issued instruction {a['cycles_per_issue']:.1f} -> {b['cycles_per_issue']:.1f}")
    sa, sb = top_stalls(a, 1), top_stalls(b, 1)
    if sa and sb and (sa[0][0] != sb[0][0] or _change(sa[0][1], sb[0][1], rel=0.25)):
        out.append(f"top stall {sa[0][0]} {sa[0][1]:.1f} -> {sb[0][0]} {sb[0][1]:.1f}")
    if a.get("registers") is not None and b.get("registers") is not None and a["registers"] != b["registers"]:
        out.append(f"registers per thread {a['registers']:.0f} -> {b['registers']:.0f}")
    if (a.get("spill_bytes") or 0) != (b.get("spill_bytes") or 0):
        out.append(f"spilled bytes {a.get('spill_bytes') or 0:,.0f} -> {b.get('spill_bytes') or 0:,.0f}")
    return out or ["no metric changed by more than 10%"]


# ----------------------------------------------------------------------------------------- building one

def default_shape(spec) -> tuple:
    """The middle of the op's GPU benchmark sizes (large enough to fill the GPU, small enough that a
    slow rung's replays stay short)."""
    sizes = spec.bench_sizes["cuda"]
    return tuple(sizes[len(sizes) // 2])


def from_reports(op: str, reports: dict, shape, dtype: str = "float32", direction: str = "fwd", *,
                 copy_GBps: float | None = None, gemm_TFLOPs: float | None = None, notes=(),
                 sources: dict | None = None, checks: dict | None = None) -> Profile:
    """A Profile from ncu's rows per variant ({variant: ncu.parse_csv(text)}): the metrics, each
    kernel's share of the op's declared bytes and FLOPs (all of them for a one-kernel call; split by
    DRAM traffic and by duration where a call launches several), and the verdicts. No GPU needed:
    tests build one from committed CSVs. sources: {variant: ncu.parse_source_csv(...)}, the stall
    samples per source line, matched to the kernels by name (by order where the names differ).
    checks: {variant: the profiled child's report (ncu.Kernels.measured)}: a variant whose output
    was wrong at this shape gets the verdict "wrong" for each kernel, and no performance verdict."""
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
    given = checks is not None  # profile() passes what each child reported; from committed CSVs there is none
    checks = {str(v): c for v, c in (checks or {}).items() if c}
    notes = list(notes) + [
        f"{v}: the profiled call's output was not checked at this shape"
        + (f" ({checks[v]['verify_detail']})" if (checks.get(v) or {}).get("verify_detail") else
           " (the profiled child reported no check)")
        for v in map(str, reports) if given and (checks.get(v) or {}).get("verified") not in ("ok", "wrong")]
    return Profile(op, shape, dtype, direction, [str(v) for v in reports], kernels, nbytes or None, flops or None,
                   copy_GBps, gemm_TFLOPs, spec.compute_bound, notes, checks)


def wrong_verdict(op: str, variant: str, shape, dtype: str, check: dict) -> Verdict:
    """The verdict of a kernel whose call computed the wrong thing at the profiled shape: that, and
    no performance verdict (its counters may describe work skipped or an answer replayed)."""
    size = "x".join(map(str, shape))
    return Verdict("wrong", f"WRONG OUTPUT at the profiled shape ({size} {dtype}): "
                            f"{check.get('verify_detail') or 'the output differs from the trusted result'}; "
                            "no performance verdict for a call that computes the wrong thing",
                   f"make it right at this shape first: wb.check({op!r}, {variant!r}, shapes=[{tuple(shape)!r}], "
                   f"dtypes=[{dtype!r}]) and compute-sanitizer (python -m workbench sanitize)")


def _attach_lines(ks: list[KernelProfile], lines: list[dict]) -> None:
    functions = list(dict.fromkeys(ln["function"] for ln in lines))
    by_name = {short_name(f): f for f in functions}
    for i, k in enumerate(ks):
        f = by_name.get(k.name) or (functions[i] if len(functions) == len(ks) else None)
        k.lines = hot_lines([ln for ln in lines if ln["function"] == f]) if f else []


def from_csv(op: str, texts: dict, shape, dtype: str = "float32", direction: str = "fwd", *,
             sources: dict | None = None, **kw) -> Profile:
    """from_reports over ncu's raw CSV text per variant ({variant: text}); sources: ncu's source
    page per variant ({variant: text}), where captured."""
    parsed = {v: ncu.parse_source_csv(t) for v, t in (sources or {}).items()}
    return from_reports(op, {v: ncu.parse_csv(t) for v, t in texts.items()}, shape, dtype, direction,
                        sources=parsed, **kw)


def ceilings(spec, dtype: str) -> tuple[float | None, float | None, list[str]]:
    """(copy GB/s, GEMM TFLOP/s or None, notes): the device's measured ceilings, cached per GPU
    (ceilings.copy_bandwidth_gbps, ceilings.matmul_ceiling_tflops: what wb.bench uses); the GEMM one
    only for an op declared compute_bound."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None, None, ["no GPU visible here: no copy or GEMM ceiling; the verdict uses DRAM % of peak"]
        from . import ceilings as measured

        copy = measured.copy_bandwidth_gbps(None, cache_dir=config.cache_dir())["copy_GBps"]
        gemm = measured.matmul_ceiling_tflops(None, dtype, cache_dir=config.cache_dir())["TFLOPs"] \
            if spec.compute_bound else None
        return copy, gemm, []
    except Exception as e:  # noqa: BLE001 - a ceiling that cannot be measured leaves the counters' verdict
        return None, None, [f"ceilings not measured ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                            "the verdict uses DRAM % of peak"]


def profile(op: str, variant, shape=None, dtype: str = "float32", direction: str = "fwd", *,
            timeout_s: float = TIMEOUT_S, keep_csv=None, lines: bool = True) -> Profile:
    """Nsight Compute on one `direction` call of the variant (a name, a Kernel, or a list of them to
    compare side by side) at `shape` (default: default_shape) and `dtype`; see the module. Returns
    a Profile. keep_csv: a folder to keep ncu's raw CSV in (profile_<op>_<variant>_<direction>.csv,
    and its source page beside it). lines: the source lines with the most warp stalls per kernel;
    for them each C++ variant is built (once, cached) with nvcc -lineinfo, which leaves the machine
    code as it is and adds the line table, and this build becomes the variant's newest.
    Raises ncu.NcuUnavailable (ncu missing, or no access to the counters: the message says how to go
    on without) and ncu.NcuTimeout (the run took longer than timeout_s)."""
    from . import loader

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
    try:
        # Built here, not profiled; the child resolves each kernel's address (its options with it) to the same build.
        kernels = [isolate.resolve(_line_info(isolate.variant_spec(op, v), lines))
                   if lines or not isinstance(v, loader.Kernel) else v for v in items]
    except WorkbenchError as e:
        if not lines:
            raise
        # e.g. an installed wheel where no nvcc exists: its prebuilt libraries carry no line table
        notes.append(f"no source lines: the variants could not be built with -lineinfo here ({str(e).splitlines()[0]})")
        lines = False
        kernels = [v if isinstance(v, loader.Kernel) else loader.load(op, v) for v in items]
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
        rows = ncu.measure(op, k, shape, dtype, direction, metrics=requested_metrics(capability),
                           timeout_s=timeout_s, keep_csv=keep, extra_args=NCU_ARGS, source_lines=lines)
        if rows.dropped:
            notes.append(f"{k.name}: this ncu or GPU lacks {', '.join(rows.dropped)} (left out)")
        reports[k.name] = rows
        checks[k.name] = rows.measured
        sources[k.name] = ncu.parse_source_csv(rows.source_csv)
        if lines and k.kind == "c++" and not sources[k.name]:
            notes.append(f"{k.name}: ncu's source page has no sampled CUDA lines (no line info in this build?)")
    copy, gemm, why = ceilings(spec, dtype)
    return from_reports(op, reports, shape, dtype, direction, copy_GBps=copy, gemm_TFLOPs=gemm, notes=notes + why,
                        checks=checks,
                        sources=sources)


LINE_INFO = build.BuildOptions(line_info=True)  # the build whose line table ncu's source page reads


def _line_info(address: dict, on: bool) -> dict:
    """A variant's address (isolate.variant_address) with line info among its build options while `on`."""
    return dict(address, options=dict(address.get("options", {}), **LINE_INFO.as_dict())) if on else address


def command(op: str, variants, shape, dtype: str, direction: str = "fwd", source=None) -> str:
    """The shell command that profiles `variants` (the first built from `source` where given)."""
    import shlex

    names = [variants] if isinstance(variants, str) else list(variants)
    return (f"python -m workbench profile {op} {' '.join(names)}"
            + (f" --source {shlex.quote(str(source))}" if source else "")
            + f" --shape {'x'.join(map(str, shape))} --dtype {dtype} --direction {direction}")


def roofline(ops, variants="all", shape=None, dtype: str = "float32", direction: str = "fwd", *, rows=None,
             path=None, budget_s: float = 0.3):
    """The roofline of every variant of `ops` (an op or a list) from timing alone, no profiler:
    each variant placed by arithmetic intensity (declared FLOPs per declared byte) and achieved
    FLOP/s, under the measured copy and GEMM ceilings (roofline.figure). rows: benchmark rows (a
    list, or a JSONL path such as results/bench.jsonl) to draw instead of timing now; otherwise each
    op is timed (wb.bench, no baselines) at `shape` (one op; default and for several ops:
    default_shape), every variant of one op (or `variants`), every variant of several. Returns the
    Figure; path: also a PNG there."""
    from . import results

    ops = [ops] if isinstance(ops, str) else list(ops)
    if rows is None:
        from .benchmark import bench

        rows = []
        for op in ops:
            spec = registry.spec(op)
            size = tuple(shape) if shape is not None and len(ops) == 1 else default_shape(spec)
            rows += bench(op, variants=variants if len(ops) == 1 else "all", dtypes=[dtype], shapes=[size],
                          baselines=[], directions=[direction], budget_s=budget_s).rows
    elif isinstance(rows, (str, pathlib.Path)):
        rows = results.read_rows(rows)
    fig = roofline_.figure(list(rows), ops=ops, direction=direction, every=True)
    if path is not None:
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, format="png")
    return fig


class _CallableModule(types.ModuleType):
    """`wb.profile(...)` calls profile(); `wb.profile.roofline(...)` and the rest are this module's."""

    def __call__(self, *args, **kwargs) -> Profile:
        return profile(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
