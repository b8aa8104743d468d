"""The device's own ceilings, each measured once per GPU model and cached: its copy bandwidth,
its read-only bandwidth and cuBLAS's matmul throughput per dtype (the %ceil columns, the physics
guard and the roofline are drawn against them); and the driver version the results record."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import re
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

from .timing import _require_cuda, _resolve_cuda_device, time_cuda


def driver_version() -> str:
    """NVIDIA driver version ("550.54.15"), or "": torch does not say, so nvidia-smi, then the kernel module."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=5, check=True,
            ).stdout.strip().splitlines()
            if out and out[0].strip():
                return out[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        text = pathlib.Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return ""
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", text)
    return m.group(1) if m else ""


def _sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_.") or "unknown"


def _cached_ceiling(device: Any, what: str, cache_dir: pathlib.Path, refresh: bool, key: str,
                    measure: Callable[[Any, Any, str], dict[str, Any]]) -> dict[str, Any]:
    """A ceiling of the device, measured once per GPU model and kept in
    ``cache_dir/ceilings/<device name><what>.json``: a cached entry for the same device name is
    returned without touching the GPU unless ``refresh``. ``measure(torch, dev, name)`` returns the
    figures (``key`` among them); provenance is added here and the file is written atomically."""
    torch = _require_cuda("a ceiling measurement")
    dev = _resolve_cuda_device(torch, device)
    name = torch.cuda.get_device_name(dev)
    path = pathlib.Path(cache_dir) / "ceilings" / f"{_sanitize(name)}{what}.json"
    if not refresh and path.is_file():
        try:
            cached = json.loads(path.read_text())
            if cached.get("device_name") == name and isinstance(cached.get(key), (int, float)):
                return cached
        except (OSError, ValueError, AttributeError):
            pass  # unreadable or foreign file: measure again and overwrite it
    result: dict[str, Any] = {"device_name": name, **measure(torch, dev, name),
                              "driver_version": driver_version(), "torch_version": torch.__version__,
                              "cuda_version": torch.version.cuda or "",
                              "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new, never half
    return result


def _stream_bytes(torch: Any, dev: Any, name: str) -> int:
    """Bytes for a streaming measurement: 1 GiB, less where free memory is short (leaving room
    for the L2 flush buffer and other users of the device)."""
    free, _total = torch.cuda.mem_get_info(dev)
    nbytes = min(2**30, int(free * 0.4))
    nbytes -= nbytes % 2**20
    if nbytes < 2**20:
        raise RuntimeError(f"not enough free memory on {name} ({free} bytes) to measure its bandwidth")
    return nbytes


def copy_bandwidth_gbps(
    device: Any = None, *, cache_dir: pathlib.Path, refresh: bool = False
) -> dict[str, Any]:
    """The device's device-to-device copy bandwidth (GB/s, read + written bytes): ``dst.copy_(src)``
    on 1 GiB buffers (less if memory is short), cached in ``<device name>.json``."""
    def measure(torch: Any, dev: Any, name: str) -> dict[str, Any]:
        nbytes = _stream_bytes(torch, dev, name)
        with torch.cuda.device(dev):
            src = torch.ones(nbytes, dtype=torch.uint8, device=dev)
            dst = torch.empty_like(src)
            # 1 GiB is far beyond any L2, so no flush is needed; no graph, a copy this long is not
            # launch-bound.
            m = time_cuda(lambda: dst.copy_(src), flush_l2=False, use_graph=False)
            src = dst = None  # release the 2 GiB before empty_cache
            torch.cuda.empty_cache()
        return {"total_memory_bytes": int(torch.cuda.mem_get_info(dev)[1]), "buffer_bytes": nbytes,
                "copy_GBps": 2 * nbytes / (m.median_ms * 1e-3) / 1e9, "measurement": m.to_dict()}

    return _cached_ceiling(device, "", cache_dir, refresh, "copy_GBps", measure)


def read_bandwidth_gbps(
    device: Any = None, *, cache_dir: pathlib.Path, refresh: bool = False
) -> dict[str, Any]:
    """The device's read-only bandwidth (GB/s): a max-reduction over 1 GiB of int32, cached in
    ``<device name>-read.json``. Ops that mostly read can beat a copy, which turns the bus around."""
    def measure(torch: Any, dev: Any, name: str) -> dict[str, Any]:
        nbytes = _stream_bytes(torch, dev, name)
        with torch.cuda.device(dev):
            buf = torch.ones(nbytes // 4, dtype=torch.int32, device=dev)
            m = time_cuda(lambda: buf.max(), flush_l2=False, use_graph=False)
            buf = None
            torch.cuda.empty_cache()
        return {"buffer_bytes": nbytes, "read_GBps": nbytes / (m.median_ms * 1e-3) / 1e9, "measurement": m.to_dict()}

    return _cached_ceiling(device, "-read", cache_dir, refresh, "read_GBps", measure)


MATMUL_CEILING_SIZE = 8192


def matmul_ceiling_tflops(
    device: Any = None, dtype: str = "float32", *, cache_dir: pathlib.Path, refresh: bool = False
) -> dict[str, Any]:
    """The device's cuBLAS matmul throughput (TFLOP/s) for `dtype` at MATMUL_CEILING_SIZE^3, float32
    with TF32 off (what a kernel on CUDA cores is held to); cached in ``<device name>-gemm-<dtype>.json``."""
    def measure(torch: Any, dev: Any, name: str) -> dict[str, Any]:
        n = MATMUL_CEILING_SIZE
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            with torch.cuda.device(dev):
                a = torch.randn(n, n, device=dev).to(getattr(torch, dtype))
                b = torch.randn(n, n, device=dev).to(getattr(torch, dtype))
                m = time_cuda(lambda: torch.matmul(a, b), flush_l2=False, use_graph=False)
                a = b = None
                torch.cuda.empty_cache()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        return {"dtype": dtype, "size": n, "tf32": False, "TFLOPs": 2 * n**3 / (m.median_ms * 1e-3) / 1e12,
                "measurement": m.to_dict()}

    return _cached_ceiling(device, f"-gemm-{dtype}", cache_dir, refresh, "TFLOPs", measure)
