"""Physics as a guard: a benchmark row faster than the device can move its bytes or do its FLOPs is
impossible, and is marked so, never reported as a speedup.

Bandwidth. A row's rate is the op's declared bytes (each tensor read once, each written once) over
its median. The DRAM limit is the larger of the device's measured copy rate (read + written bytes)
and its read-only rate (ceilings.read_bandwidth_gbps: an op that only reads, like a sum, can beat a
copy, which turns the bus around), plus BANDWIDTH_MARGIN for run-to-run spread: the medians of
these ceilings moved by up to a few percent between runs of the GPU script, so 10% above the
better of the two is beyond noise. Rows that move less than L2_MULTIPLE times the L2 are not held
to it: their data can stay in the L2 (written lines need not reach DRAM inside the timed region).

FLOPs. A row's FLOP rate may not exceed the chip's peak for the dtype: FLOPs per SM per clock
(below, from the vendors' datasheets: dense tensor-core rates for fp16/bf16 and float64, CUDA
cores for float32, since the benchmark turns TF32 off) x SMs x the maximum SM clock (NVML), plus
FLOP_MARGIN. Where the architecture is not in the table the limit is 1.5x the measured cuBLAS rate.
"""
from __future__ import annotations

import math

BANDWIDTH_MARGIN = 0.10
FLOP_MARGIN = 0.02
L2_MULTIPLE = 4
UNKNOWN_ARCH_FACTOR = 1.5

# FLOPs per SM per clock, dense: (major, minor) -> dtype -> rate. A100 (8.0): 312 TF fp16 dense
# at 1.41 GHz x 108 SMs = 2048; H100 (9.0): 989 TF at 1.83 GHz x 132 SMs = 4096. float32 without
# TF32: 64 (8.0) / 128 (9.0) FMA lanes x 2. float64: the tensor-core rate (DMMA).
FLOPS_PER_SM_CLOCK = {
    (8, 0): {"float16": 2048, "bfloat16": 2048, "float32": 128, "float64": 128},
    (9, 0): {"float16": 4096, "bfloat16": 4096, "float32": 256, "float64": 256},
}


def peak_tflops(capability: tuple[int, int], sms: int, max_sm_mhz: float, dtype: str) -> float | None:
    """The chip's peak TFLOP/s for dtype, or None where the table does not know the chip."""
    rate = FLOPS_PER_SM_CLOCK.get(tuple(capability), {}).get(dtype)
    if rate is None or not max_sm_mhz:
        return None
    return rate * sms * max_sm_mhz * 1e6 / 1e12


def judge(row: dict, *, bandwidth_limit_GBps: float, l2_bytes: int, flops_limit_TFLOPs: float | None,
          bytes_floor: bool = True) -> str:
    """"" if the row is physically possible, else why not (pure: tests feed it rows). bytes_floor:
    whether the op's declared bytes are a floor for this provider. They are for a variant, whose
    launcher is handed exactly the tensors the op declares; not for PyTorch's baselines, whose
    autograd may save other tensors than the op's contract reads (torch.compile keeps a 1-byte
    mask where the backward of a ReLU is declared to read x), so only their FLOPs are held."""
    gbps, nbytes = row.get("GBps"), row.get("bytes") or 0
    if (bytes_floor and gbps is not None and not math.isnan(gbps) and bandwidth_limit_GBps and not math.isnan(bandwidth_limit_GBps)
            and nbytes >= L2_MULTIPLE * l2_bytes and gbps > bandwidth_limit_GBps):
        return (f"{gbps:.0f} GB/s is {gbps / bandwidth_limit_GBps * (1 + BANDWIDTH_MARGIN):.2f}x the device's "
                f"memory bandwidth ({bandwidth_limit_GBps / (1 + BANDWIDTH_MARGIN):.0f} GB/s measured): the "
                f"{nbytes / 1e6:.0f} MB the op must move cannot move that fast, so part of the work was not done")
    tflops = row.get("TFLOPs")
    if (flops_limit_TFLOPs and tflops is not None and not math.isnan(tflops) and row.get("flops")
            and tflops > flops_limit_TFLOPs):
        return (f"{tflops:.1f} TFLOP/s is above the chip's peak for {row.get('dtype')} "
                f"({flops_limit_TFLOPs / (1 + FLOP_MARGIN):.1f} TFLOP/s): part of the work was not done")
    return ""


class Limits:
    """The limits of one CUDA device, measured or computed once per benchmark."""

    def __init__(self, device, cache_dir, dtypes, *, gemm_tflops: dict | None = None):
        import torch

        from . import ceilings, conditions

        props = torch.cuda.get_device_properties(device)
        copy = ceilings.copy_bandwidth_gbps(device, cache_dir=cache_dir)["copy_GBps"]
        read = ceilings.read_bandwidth_gbps(device, cache_dir=cache_dir)["read_GBps"]
        self.copy_GBps, self.read_GBps = copy, read
        self.bandwidth_limit_GBps = max(copy, read) * (1 + BANDWIDTH_MARGIN)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)
        max_mhz = conditions.max_sm_mhz(device.index if device.index is not None else torch.cuda.current_device())
        if not max_mhz:
            max_mhz = float(getattr(props, "clock_rate", 0) or 0) / 1e3
        self.flops_limit_TFLOPs = {}
        for d in dtypes:
            peak = peak_tflops((props.major, props.minor), props.multi_processor_count, max_mhz, d)
            if peak is None and gemm_tflops and d in gemm_tflops:
                peak = UNKNOWN_ARCH_FACTOR * gemm_tflops[d]
            self.flops_limit_TFLOPs[d] = None if peak is None else peak * (1 + FLOP_MARGIN)

    def judge(self, row: dict, *, bytes_floor: bool = True) -> str:
        return judge(row, bandwidth_limit_GBps=self.bandwidth_limit_GBps, l2_bytes=self.l2_bytes,
                     flops_limit_TFLOPs=self.flops_limit_TFLOPs.get(row.get("dtype")), bytes_floor=bytes_floor)

    def fields(self) -> dict:
        return {"copy_GBps": self.copy_GBps, "read_GBps": self.read_GBps,
                "bandwidth_limit_GBps": self.bandwidth_limit_GBps}
