"""The conditions of a measurement: SM and memory clocks, temperature, power and the clock-event
(throttle) reasons, sampled through NVML (nvidia-ml-py's `pynvml`) while a row is timed. A median
means little if the GPU changed speed under it, so each row carries what NVML saw and a warning
when the clocks moved or something other than idle throttled them."""
from __future__ import annotations

import functools
import threading

# NVML's clock-event reasons (nvmlClocksEventReason*, formerly ClocksThrottleReason*).
REASONS = {
    0x1: "gpu idle", 0x2: "applications clocks setting", 0x4: "software power cap", 0x8: "hardware slowdown",
    0x10: "sync boost", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
    0x80: "hardware power brake", 0x100: "display clock setting",
}
BENIGN = 0x1 | 0x2 | 0x100  # idle between launches; a fixed application clock and the display's are settings
CLOCK_MOVE = 0.05  # an SM clock range wider than 5% of its maximum is worth a warning
INSTALL_HINT = "pip install nvidia-ml-py"

@functools.cache
def _nvml() -> tuple:
    """(pynvml, initialised, ""), once; (None, why) where it cannot be."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml, ""
    except ImportError:
        return None, f"NVML not available: nvidia-ml-py is not installed ({INSTALL_HINT})"
    except Exception as e:  # noqa: BLE001 - no driver, no permission: say why and go on without
        return None, f"NVML not available: {e}"


def unavailable() -> str:
    """Why conditions cannot be recorded here ("" when they can)."""
    return _nvml()[1]


def _handle(device_index: int):
    """NVML's handle of the CUDA device `device_index`, matched by UUID (CUDA and NVML may number
    devices differently, e.g. under CUDA_VISIBLE_DEVICES)."""
    import torch

    nv = _nvml()[0]
    uuid = str(getattr(torch.cuda.get_device_properties(device_index), "uuid", "") or "")
    if uuid:
        try:
            return nv.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except Exception:  # noqa: BLE001 - fall back to the index
            pass
    return nv.nvmlDeviceGetHandleByIndex(device_index)


def _reasons(nv, h) -> int:
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(fn(h))


def read(device_index: int) -> dict:
    """One reading: SM and memory clocks (MHz), temperature (C), power (W), reasons (bit mask)."""
    nv = _nvml()[0]
    h = _handle(device_index)
    return {"sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "reasons": _reasons(nv, h)}


def max_sm_mhz(device_index: int) -> float:
    """The highest SM clock the device may run at (MHz), or 0 where NVML cannot say."""
    nv = _nvml()[0]
    if nv is None:
        return 0.0
    try:
        return float(nv.nvmlDeviceGetMaxClockInfo(_handle(device_index), nv.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 - unknown: the caller falls back
        return 0.0


def summarize(readings: list[dict]) -> dict:
    """What a row records of its readings (pure: tests feed it readings)."""
    if not readings:
        return {}
    mask = 0
    for r in readings:
        mask |= int(r["reasons"])
    return {"sm_mhz_min": min(r["sm_mhz"] for r in readings), "sm_mhz_max": max(r["sm_mhz"] for r in readings),
            "mem_mhz_min": min(r["mem_mhz"] for r in readings), "mem_mhz_max": max(r["mem_mhz"] for r in readings),
            "temp_c_max": max(r["temp_c"] for r in readings), "power_w_max": round(max(r["power_w"] for r in readings), 1),
            "throttle": [name for bit, name in REASONS.items() if mask & bit], "samples": len(readings)}


def warning(c: dict) -> str:
    """"" when the clocks held still and nothing throttled, else what moved or throttled."""
    if not c:
        return ""
    out = []
    lo, hi = c["sm_mhz_min"], c["sm_mhz_max"]
    if hi and (hi - lo) / hi > CLOCK_MOVE:
        out.append(f"SM clock moved {lo}-{hi} MHz")
    if c["mem_mhz_max"] and c["mem_mhz_min"] != c["mem_mhz_max"]:
        out.append(f"memory clock moved {c['mem_mhz_min']}-{c['mem_mhz_max']} MHz")
    bad = [name for bit, name in REASONS.items() if not bit & BENIGN and name in c["throttle"]]
    if bad:
        out.append("throttled: " + ", ".join(bad))
    return "; ".join(out)


class Sampler:
    """Readings of one GPU every `period_s` on a thread while the block runs:
        with Sampler(0) as s: ...timed work...
        s.conditions  (summarize's dict; {} where NVML is unavailable)."""

    def __init__(self, device_index: int, period_s: float = 0.02):
        self.device_index, self.period_s = device_index, period_s
        self.readings: list[dict] = []
        self.conditions: dict = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while True:
            try:
                self.readings.append(read(self.device_index))
            except Exception:  # noqa: BLE001 - a failed reading is a missing sample, not a failed row
                pass
            if self._stop.wait(self.period_s):
                return

    def __enter__(self) -> "Sampler":
        if _nvml()[0] is not None:
            self._thread = threading.Thread(target=self._loop, name="workbench-nvml", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            try:
                self.readings.append(read(self.device_index))  # the state at the end, always
            except Exception:  # noqa: BLE001
                pass
        self.conditions = summarize(self.readings)

