"""What Nsight Compute is asked for (METRICS, STALLS, the launch statistics; the whole tensor pipe
on Hopper) and how one kernel's row of its CSV is read into figures by short name."""
from __future__ import annotations

import math
import re

from .. import ncu

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
    """A finite number, or None ("-", "n/a", "": not collected)."""
    x = None if isinstance(v, bool) else ncu.number(v, None)
    return x if x is not None and math.isfinite(x) else None


def short_name(name: str) -> str:
    """'forward_kernel<float>' for 'void <unnamed>::forward_kernel<float>(const float *, ...)' (ncu's
    demangled name), or for a mangled one."""
    from ..ptxas import kernel_label

    name = re.sub(r"^void\s+", "", kernel_label(str(name)).strip())
    depth, start = 0, 0
    for i, ch in enumerate(name):  # outside template brackets: the last '::' before the first '('
        depth += (ch == "<") - (ch == ">")
        if depth == 0 and ch == "(" and i > 0:
            return name[start:i] or name[:i]
        if depth == 0 and name.startswith("::", i):
            start = i + 2
    return name[start:] or name


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
