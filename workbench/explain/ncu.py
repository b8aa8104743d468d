"""Hardware counters for one call of a variant, from Nsight Compute (ncu).

measure() serves the variant from a runner started under ncu (judge.start.isolated) and drives the
call from here (profiled_call): a warm-up, then one checked call inside the runner's NVTX range
RANGE, the only kernels ncu profiles (not torch's inputs, copies or reference). Returns one dict
per kernel: its name and the metrics, in base units (bytes, sectors, ns).

NcuUnavailable: ncu missing, or no access to the counters (ERR_NVGPUCTRPERM); NcuTimeout: the run
took too long (ncu and the runner are stopped). A metric this ncu or GPU lacks is left out and the
run repeated (the result's `dropped`). source_lines=True also samples warp stalls per instruction;
parse_source_csv() reads ncu's source page of that report (lines only where built with -lineinfo).
"""
from __future__ import annotations

import contextlib
import csv
import io
import pathlib
import re
import subprocess
import tempfile
import time

from ..build import toolchain
from ..errors import IsolatedRunError, WorkbenchError

RANGE = "wb_measure"
# Global-memory traffic: bytes the kernels' load instructions asked for (32-byte sectors at L1,
# whether they then hit or missed), and what actually moved to and from DRAM.
LOAD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
STORE_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
DURATION = "gpu__time_duration.sum"
TRAFFIC = (LOAD_SECTORS, STORE_SECTORS, DRAM_READ, DRAM_WRITE, DURATION)


# How to go on without the counters: said by every NcuUnavailable.
WITHOUT_NCU = ("Without the counters: time the variant (wb.bench or python -m workbench bench), read its "
               "ptxas report (registers, spills: -Xptxas=-v in its build log) and its SASS, and place it "
               "on the roofline from timing alone (wb.profile.roofline)")


class NcuUnavailable(WorkbenchError):
    """ncu is not installed, or cannot read this GPU's counters here."""


class NcuTimeout(WorkbenchError):
    """The profiled run did not finish in time; ncu and the runner were stopped."""


class Kernels(list):
    """The profiled kernels (one dict each, as parse_csv returns them)."""

    dropped: tuple[str, ...] = ()   # the requested metrics this ncu or GPU lacks, left out of the run
    source_csv: str = ""            # ncu's source page (--print-source cuda,sass) where asked for
    measured: dict | None = None    # profiled_call's check of the call (its verified, verify_detail ...)


def find() -> str | None:
    """ncu: $WORKBENCH_NCU, PATH, or the CUDA toolkit's bin/."""
    return toolchain.cuda_tool("ncu", "WORKBENCH_NCU")


def require() -> str:
    """ncu's path, or NcuUnavailable saying where it was looked for and how to go on without it."""
    exe = find()
    if exe is None:
        raise NcuUnavailable("Nsight Compute (ncu) not found: it ships with the CUDA toolkit (bin/ncu under "
                             f"CUDA_HOME); put it on PATH or set WORKBENCH_NCU. {WITHOUT_NCU}")
    return exe


def parse_csv(text: str) -> list[dict]:
    """ncu --csv --page raw --print-units base: a header row of metric names, a row of units, then
    one row per profiled kernel. Numbers lose their thousands separators."""
    start = text.find('"ID"')
    if start < 0:
        return []
    rows = list(csv.reader(io.StringIO(text[start:])))
    return [{k: number(v, v) for k, v in zip(rows[0], r)} for r in rows[2:] if len(r) == len(rows[0])]


def parse_source_csv(text: str) -> list[dict]:
    """ncu --page source --csv --print-source cuda,sass (per function and file: a header, then each
    CUDA line followed by its SASS rows): one dict per sampled source line: function, file, line,
    text, samples (all warp-state samples at it), stalls ({reason: samples}, without the "(Not
    Issued)" twins)."""
    out: list[dict] = []
    file = function = ""
    header: list[str] | None = None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] in ("File Path", "File Name") and len(row) > 1:
            file, header = row[1], None
        elif row[0] in ("Function Name", "Kernel Name") and len(row) > 1:
            function, header = row[1], None
        elif row[0] == "Line No":
            header = row
        elif header is not None and row[0].strip().isdigit() and len(row) == len(header):
            cells = dict(zip(header[2:], row[2:]))  # "Source" twice: the line's text is row[1]
            samples = number(cells.get("Warp Stall Sampling (All Samples)"))
            if not samples:
                continue
            stalls = {h[len("stall_"):]: n for h, v in cells.items()
                      if h.startswith("stall_") and "(" not in h and (n := number(v))}
            out.append({"function": function, "file": file, "line": int(row[0]), "text": row[1].strip(),
                        "samples": samples, "stalls": stalls})
    return out


def number(v, default=0.0):
    """ncu's number (thousands separators dropped), or `default` where it is not one."""
    try:
        return float(str(v).replace(",", ""))
    except (TypeError, ValueError):
        return default


def _source_page(exe: str, report: pathlib.Path, timeout_s: float) -> str:
    """ncu's source page of a saved report, CUDA lines with their SASS, as CSV ("" if it fails)."""
    try:
        proc = subprocess.run([exe, "--import", str(report), "--page", "source", "--csv", "--print-source", "cuda,sass"],
                              capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def _permission_problem(text: str) -> str | None:
    if "ERR_NVGPUCTRPERM" in text:
        return ("the driver does not let this user read the GPU's performance counters (ERR_NVGPUCTRPERM); "
                "run as an administrator or with the NVreg_RestrictProfilingToAdminUsers=0 module option")
    if "==ERROR== Profiling is not supported" in text or "not supported on this device" in text:
        return "ncu cannot profile this GPU or runtime"
    return None


_UNKNOWN_METRIC = re.compile(r"Failed to find metrics?\s*:?\s*['\"]?(?:regex:)?\^?([A-Za-z0-9_]+)")


def unknown_metrics(text: str, metrics) -> list[str]:
    """The requested metrics ncu's output says it cannot find ("Failed to find metric ...")."""
    missing = set(_UNKNOWN_METRIC.findall(text))
    return [m for m in metrics if m.split(".")[0] in missing]


def _run(op: str, variant, call: dict, ncu_args: list[str], line_info: bool, timeout_s: float):
    """The profiled call of the variant served from a runner behind ncu (ncu_args), stopped after
    timeout_s: (its check, what the runner and ncu printed, the error that ended the runner or
    None, whether the time ran out). A lost runner is not restarted: ncu's report is the first one's."""
    from ..judge.remote import TOOL_GRACE_S, time_limit
    from ..judge.start import isolated

    kernel = isolated(op, variant, prefix=[*time_limit(timeout_s), *ncu_args], line_info=line_info)
    remote = kernel.module
    remote.MAX_RESTARTS = 0
    started = time.monotonic()
    try:
        remote.ensure()  # ncu's own refusals (a metric it lacks, no permission) end it here
        reported = profiled_call(op, kernel, **call)
        runner = remote.ensure()
        runner.finish(TOOL_GRACE_S)  # the runner ends, ncu writes its report and exits
        return reported, runner.log_tail(1 << 20), None, False
    except IsolatedRunError as e:
        return None, e.full_output, e, time.monotonic() - started >= timeout_s
    finally:
        remote.close()


def measure(op: str, variant, size, dtype: str, direction: str = "fwd", metrics=TRAFFIC, *,
            timeout_s: float = 300, keep_csv=None, extra_args=(), source_lines: bool = False,
            line_info: bool = False) -> Kernels:
    """Per-kernel counters of one `direction` call of the variant at `size`, `dtype` (see module).
    keep_csv: a path to copy ncu's raw CSV to (and the source page beside it as <name>_source.csv).
    extra_args: more ncu options. line_info: the runner's build made with nvcc -lineinfo."""
    exe = require()
    name = getattr(variant, "name", variant)
    metrics, dropped = list(metrics), []
    call = dict(size=tuple(size), dtype=dtype, direction=direction)
    with tempfile.TemporaryDirectory(prefix="workbench-ncu-") as tmp:
        log = pathlib.Path(tmp) / "ncu.csv"
        report = pathlib.Path(tmp) / "report"  # ncu adds .ncu-rep
        sampling = ["--section", "SourceCounters", "--import-source", "yes", "--export", str(report),
                    "--force-overwrite"] if source_lines else []
        while True:
            log.unlink(missing_ok=True)
            args = [exe, "--target-processes", "all", "--nvtx", "--nvtx-include", f"{RANGE}/",
                    "--metrics", ",".join(metrics), "--csv", "--page", "raw", "--print-units", "base",
                    *sampling, *extra_args, "--log-file", str(log)]
            reported, output, failed, timed_out = _run(op, variant, call, args, line_info, timeout_s)
            if timed_out:
                raise NcuTimeout(
                    f"ncu did not finish profiling {op}/{name} within {timeout_s:.0f} s; it and the runner were "
                    f"stopped. A kernel that never ends hangs under ncu too (check it first: wb.check); a long kernel "
                    f"at a large size is replayed once per group of metrics: profile a smaller shape or allow more "
                    f"time (timeout_s, --timeout). {WITHOUT_NCU}") from None
            text = log.read_text(errors="replace") if log.exists() else ""
            why = _permission_problem(text + output)
            if why:
                raise NcuUnavailable(f"ncu cannot read the counters here: {why}. {WITHOUT_NCU}")
            unknown = unknown_metrics(text + output, metrics)
            if unknown and len(unknown) < len(metrics):  # leave out what this ncu or GPU lacks, once each
                dropped += unknown
                metrics = [m for m in metrics if m not in unknown]
                continue
            break
        if keep_csv:
            pathlib.Path(keep_csv).write_text(text)
        if failed is not None:
            failed.args = (f"measure of {op}/{name} under ncu: {failed}",)
            raise failed
        kernels = Kernels(parse_csv(text))
        kernels.dropped = tuple(dropped)
        kernels.measured = reported
        saved = report.with_name(report.name + ".ncu-rep")
        if source_lines and saved.is_file():
            kernels.source_csv = _source_page(exe, saved, min(timeout_s, 120))
            if keep_csv:
                keep = pathlib.Path(keep_csv)
                keep.with_name(keep.stem + "_source.csv").write_text(kernels.source_csv)
        if not kernels:
            raise WorkbenchError(f"ncu profiled no kernel in the NVTX range {RANGE!r} of {op}/{name}; "
                                 f"its output:\n" + "\n".join((text + output).splitlines()[-15:]))
        return kernels


def total(kernels: list[dict], metric: str) -> float:
    return sum(float(k.get(metric, 0.0)) for k in kernels)


def profiled_call(op: str, kernel, size, dtype: str, direction: str) -> dict:
    """measure()'s call: warm-ups, then one call inside the NVTX range RANGE (inputs made before it
    opens). Checked at its shape (issue 23): first on fresh inputs with poisoned outputs
    (verify.check_kernel_at), then the profiled call's own output, on inputs drawn after the
    warm-up (an answer replayed from it is wrong for them). Returns the verdict (Kernels.measured)."""
    import torch

    from ..measure import verify

    if direction not in ("fwd", "bwd"):
        raise ValueError(f"direction must be 'fwd' or 'bwd'; got {direction!r}")
    spec = kernel.spec
    size = tuple(size)
    before = verify.check_kernel_at(kernel, size, dtype, direction, seed=1)
    device = torch.device(kernel.device if kernel.device != "cuda" else f"cuda:{torch.cuda.current_device()}")
    gen = torch.Generator(device).manual_seed(0)
    attrs = spec.sample_attrs()[0]

    def step(p):
        if direction == "fwd":
            return kernel(*p.inputs, **attrs)
        return kernel.backward(*p.grads, *p.inputs, **attrs)

    warm = verify.Probe(spec, size, dtype, direction, attrs, gen, device)
    for _ in range(2):
        step(warm)
    del warm
    probe = verify.Probe(spec, size, dtype, direction, attrs, gen, device)  # fresh inputs for the profiled call
    with kernel.module.nvtx_range(RANGE) if kernel.kind == "runner" else contextlib.nullcontext():
        out = step(probe)
    last = probe.judge(out, "the profiled call")
    del out, probe
    if not before.ok:  # check_kernel_at's own run, before the warm-up: say which of the two it was
        before.detail = before.detail.replace("the profiled call:", "before profiling (fresh inputs, outputs "
                                              "poisoned):", 1)
    verdict = next((v for v in (before, last) if not v.ok), last)
    if verdict.ok and before.ok:
        verdict.max_abs_err = max((e for e in (before.max_abs_err, last.max_abs_err) if e == e), default=verdict.max_abs_err)
    return {"size": list(size), "dtype": dtype, "direction": direction, **verdict.fields()}
