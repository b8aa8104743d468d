"""Hardware counters for one call of a variant, from Nsight Compute (ncu).

`measure(op, variant, size, dtype, direction, metrics)` runs the variant in a child process under
ncu: the child (profiled_call, the "measure" job of jobs.py) warms the call up, then makes it once
more inside the NVTX range "wb_measure", checked at its shape, and
ncu profiles exactly the kernels launched in that range (the warm-up, the inputs' creation and
anything torch launches outside it are left out). Returns one dict per kernel: its name and the
metrics, in base units (bytes, sectors, ns).

Where ncu is missing, or the driver does not let it read the counters (ERR_NVGPUCTRPERM, a
sandboxed container), NcuUnavailable says so and how to go on without it; the child has a time
limit (NcuTimeout: ncu and everything it started are stopped), so a stuck profiler fails instead
of hanging. A metric this ncu or this GPU does not know ("Failed to find metric") is left out and
the run repeated without it; the result's `dropped` names what was left out.

With source_lines=True the same run also samples warp stalls per instruction (the SourceCounters
section) into a report, and ncu's source page of that report (CUDA lines with their SASS) comes
back as `source_csv`: parse_source_csv() turns it into stall samples per source line. Lines exist
only where the build carries line info (nvcc -lineinfo); without it the page has none.
"""
from __future__ import annotations

import csv
import io
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile

from .. import config
from ..run import isolate
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
    """The profiled child did not finish in time; ncu and its child were stopped."""


class Kernels(list):
    """The profiled kernels (one dict each, as parse_csv returns them); `dropped`: the requested
    metrics this ncu or GPU does not have, left out of the run."""

    dropped: tuple[str, ...] = ()
    source_csv: str = ""            # ncu's source page (--print-source cuda,sass) where asked for
    # What the profiled child reported (profiled_call): the size, dtype and direction, and the check
    # of the profiled call's output at that shape (verified: "ok", "wrong", "not checked";
    # verify_detail, verify_max_abs_err, verify_where, verify_against). None: the child reported nothing.
    measured: dict | None = None


def find() -> str | None:
    """ncu: $WORKBENCH_NCU, PATH, or the CUDA toolkit's bin/."""
    env = os.environ.get("WORKBENCH_NCU")
    if env:
        return env if pathlib.Path(env).is_file() else None
    home = toolchain.cuda_home()
    for cand in (shutil.which("ncu"), home and str(pathlib.Path(home) / "bin" / "ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and pathlib.Path(cand).is_file():
            return cand
    return None


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
    header, body = rows[0], [r for r in rows[2:] if len(r) == len(rows[0])]
    out = []
    for r in body:
        d = {}
        for k, v in zip(header, r):
            try:
                d[k] = float(v.replace(",", ""))
            except ValueError:
                d[k] = v
        out.append(d)
    return out


def parse_source_csv(text: str) -> list[dict]:
    """ncu --page source --csv --print-source cuda,sass: blocks of "File Path" / "Function Name"
    lines, a header, then a row per CUDA source line (its number and text, the stall samples of its
    instructions) followed by its SASS rows (no line number). Returns one dict per source line that
    was sampled: function, file, line, text, samples (all warp-state samples at it), stalls
    ({reason: samples}, the stall_* columns without the "(Not Issued)" twins)."""
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
            samples = _count(cells.get("Warp Stall Sampling (All Samples)"))
            if not samples:
                continue
            stalls = {h[len("stall_"):]: n for h, v in cells.items()
                      if h.startswith("stall_") and "(" not in h and (n := _count(v))}
            out.append({"function": function, "file": file, "line": int(row[0]), "text": row[1].strip(),
                        "samples": samples, "stalls": stalls})
    return out


def _count(v) -> float:
    try:
        return float(str(v).replace(",", ""))
    except (TypeError, ValueError):
        return 0.0


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
    """The requested metrics ncu's output says it cannot find ("==ERROR== Failed to find metric
    regex:^NAME\\.(sum|...)$" or "... metric NAME.sum")."""
    missing = set(_UNKNOWN_METRIC.findall(text))
    return [m for m in metrics if m.split(".")[0] in missing]


def _run_child(address: dict, call: dict, prefix: list[str], timeout_s: float
               ) -> tuple[int, str, dict | None]:
    """The "measure" job (profiled_call, with the arguments `call`) in a child under `prefix` (ncu
    and its options): (exit status, everything it printed, the job's result or None). Started in a
    session of its own, so that on a timeout (or an interrupt) ncu and the child it started are
    stopped together, not only ncu. Not isolate.run: a child under ncu is judged by ncu's log."""
    with tempfile.TemporaryDirectory(prefix="workbench-child-") as tmp:
        job_file = pathlib.Path(tmp) / "job.json"
        result = pathlib.Path(tmp) / "result.json"
        job_file.write_text(json.dumps(isolate.job_message("measure", address, call, result)))
        proc = subprocess.Popen(isolate.child_command(job_file, prefix), env=isolate.child_env(), cwd=config.REPO_ROOT,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            raise NcuTimeout(
                f"ncu did not finish profiling {address['op']}/{address['name']} within {timeout_s:.0f} s; it and its child were "
                f"stopped. A kernel that never ends hangs under ncu too (check it first: wb.check); a long kernel "
                f"at a large size is replayed once per group of metrics: profile a smaller shape or allow more "
                f"time (timeout_s, --timeout). {WITHOUT_NCU}") from None
        except BaseException:
            _stop(proc)
            raise
        try:
            reported = json.loads(result.read_text()) if result.is_file() else None
        except ValueError:
            reported = None
        return proc.returncode, out, reported


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: ncu and the child it started
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def measure(op: str, variant, size, dtype: str, direction: str = "fwd", metrics=TRAFFIC, *,
            timeout_s: float = 300, keep_csv=None, extra_args=(), source_lines: bool = False) -> Kernels:
    """Per-kernel counters of one `direction` call of the variant at `size`, `dtype` (see module).
    keep_csv: a path to copy ncu's raw CSV to (test fixtures are captured this way; the source page
    goes beside it as <name>_source.csv). extra_args: more ncu options (e.g. ["--clock-control",
    "none"]). timeout_s: for the whole profiled run. source_lines: also the stall samples per
    source line (the result's source_csv)."""
    exe = require()
    address = isolate.variant_address(op, variant)
    metrics, dropped = list(metrics), []
    call = dict(size=list(size), dtype=dtype, direction=direction)
    with tempfile.TemporaryDirectory(prefix="workbench-ncu-") as tmp:
        log = pathlib.Path(tmp) / "ncu.csv"
        report = pathlib.Path(tmp) / "report"  # ncu adds .ncu-rep
        sampling = ["--section", "SourceCounters", "--import-source", "yes", "--export", str(report),
                    "--force-overwrite"] if source_lines else []
        while True:
            log.unlink(missing_ok=True)
            prefix = [exe, "--target-processes", "all", "--nvtx", "--nvtx-include", f"{RANGE}/",
                      "--metrics", ",".join(metrics), "--csv", "--page", "raw", "--print-units", "base",
                      *sampling, *extra_args, "--log-file", str(log)]
            code, output, reported = _run_child(address, call, prefix, timeout_s)
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
        if code != 0:
            full = text + output
            tail = "\n".join(full.strip().splitlines()[-25:])
            raise IsolatedRunError(f"measure of {op}/{address['name']} under ncu", code, tail, full)
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
            raise WorkbenchError(f"ncu profiled no kernel in the NVTX range {RANGE!r} of {op}/{address['name']}; "
                                 f"its output:\n" + "\n".join((text + output).splitlines()[-15:]))
        return kernels


def total(kernels: list[dict], metric: str) -> float:
    return sum(float(k.get(metric, 0.0)) for k in kernels)


def profiled_call(op: str, kernel, size, dtype: str, direction: str) -> dict:
    """The child's side of measure(): warm the call up (builds, CUDA's lazy module loading, the
    allocator), then make it once inside the NVTX range RANGE; inputs and gradients are made before
    the range opens. The profiled call is checked at its shape (issue 23): first on fresh inputs
    with its outputs poisoned (verify.check_kernel_at), then the profiled call's own output, on
    inputs drawn after the warm-up (an answer replayed from the warm-up is wrong for them), against
    the trusted result (float64 reference, or eager where that does not fit). The result carries
    the verdict (Kernels.measured on the parent's side)."""
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
    cuda = device.type == "cuda"  # a CPU variant runs here too (tests of the check, without a GPU)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE)
    out = step(probe)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    last = probe.judge(out, "the profiled call")
    del out, probe
    if not before.ok:  # check_kernel_at's own run, before the warm-up: say which of the two it was
        before.detail = before.detail.replace("the profiled call:", "before profiling (fresh inputs, outputs "
                                              "poisoned):", 1)
    verdict = next((v for v in (before, last) if not v.ok), last)
    if verdict.ok and before.ok:
        verdict.max_abs_err = max((e for e in (before.max_abs_err, last.max_abs_err) if e == e), default=verdict.max_abs_err)
    return {"size": list(size), "dtype": dtype, "direction": direction, "verified": verdict.status,
            "verify_detail": verdict.detail, "verify_max_abs_err": verdict.max_abs_err,
            "verify_where": list(verdict.where) if verdict.where is not None else None,
            "verify_against": verdict.against}
