"""What ran: the kernels a runner launched during the checked calls, and how often each of their
instructions executed, observed by Nsight Compute started by the judge over the runner.

ncu runs in a network namespace of its own (`unshare --net`) and the runner's sandbox shares it
(its targets report to the front end over loopback, which a namespace of the sandbox's own would
cut), while the sandbox keeps its own PID namespace: the student's process can neither see nor
signal the profiler, and its report is written where the sandbox cannot reach. The runner launches
a marker kernel of its own (wb_runner_marker) before the checked calls; the kernels profiled before
it ran while the library loaded (its initializers) and are not counted.

Each kernel's instructions come from ncu's source page: per instruction its executed count (warp
level), its predicated-on thread count, and for a memory access its space, operation and width,
from which the bytes each executed load and store moved follow.
"""
from __future__ import annotations

import csv
import io
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from ..explain import ncu, ptxas

MARKER = "wb_runner_marker"
REPORT_TIMEOUT_S = 300


@dataclass(frozen=True)
class Executed:
    address: int
    opcode: str          # with its modifiers: "LDG.E.128"
    target: int | None   # a branch's written target
    warps: int           # times executed (warp level)
    threads: int         # predicated-on thread executions
    space: str = ""      # "Global", "Shared", ... for a memory access
    access: str = ""     # "Load", "Store", ...
    bits: int = 0        # bits each thread moved

    @property
    def bytes(self) -> int:
        return self.threads * self.bits // 8


@dataclass
class RanKernel:
    name: str                              # as ncu names it (demangled)
    code: list[Executed] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)

    def inner_loops(self) -> list[tuple[int, int]]:
        return ptxas.inner_loops([ptxas.Instruction(i.address, i.opcode, i.target) for i in self.code])


@dataclass
class Observation:
    calls: list[list[RanKernel]]           # per checked call, its launches in order (the raw page's: metrics)
    at_load: int = 0                       # launched before the first call (while the library loaded): not counted
    markers: int = 0                       # marker kernels seen (the judge launched one before each call)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    functions: list[RanKernel] | None = None   # where ncu's source page summed each function's launches

    @property
    def kernels(self) -> list[RanKernel]:
        """What the rules read: each launch during the checked calls with its own instructions and
        counts, or, where ncu's source page gave a function's counts summed over its launches, each
        function that ran during the calls, once."""
        return self.functions if self.functions is not None else [k for call in self.calls for k in call]


def unavailable(gpu: bool) -> str:
    """Why what ran cannot be observed here ("" where it can)."""
    if not gpu:
        return "no GPU here"
    if ncu.find() is None:
        return "Nsight Compute (ncu) was not found"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) was not found"
    return ""


def prefix(report: pathlib.Path, metrics=(ncu.LOAD_SECTORS,)) -> list[str]:
    """ncu in a network namespace of its own, profiling every process the runner's command starts."""
    netns = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--net"]
    return [*netns, "--", ncu.find(), "--target-processes", "all", "--section", "SourceCounters",
            "--metrics", ",".join(metrics), "-f", "-o", str(report)]


def read_report(report: pathlib.Path) -> Observation:
    """The launches of a saved report in order (the raw page: a row per launch, with its metrics),
    each function's instructions (the source page, merged by function), the marker's
    predecessors left out."""
    exe = ncu.find()
    raw = subprocess.run([exe, "--import", str(report), "--page", "raw", "--csv"], capture_output=True, text=True,
                         timeout=REPORT_TIMEOUT_S)
    source = subprocess.run([exe, "--import", str(report), "--page", "source", "--csv", "--print-source", "sass"],
                            capture_output=True, text=True, timeout=REPORT_TIMEOUT_S)
    if raw.returncode != 0 or source.returncode != 0:
        raise RuntimeError(f"ncu could not read its report: {(raw.stderr or source.stderr).strip()[:300]}")
    return observation(ncu.parse_csv(raw.stdout), parse_sass_page(source.stdout))


def observation(rows: list[dict], blocks: list[RanKernel]) -> Observation:
    """The launches (`rows`, the raw page's, in order) with their instructions (`blocks`, the
    source page's), split into the checked calls at the runner's marker kernel."""
    names = [str(row.get("Kernel Name", "?")) for row in rows]
    marks = [i for i, n in enumerate(names) if _is_marker(n)]
    paired = len(blocks) == len(rows)  # a block per launch, in launch order: each launch its own counts
    launches = [RanKernel(n, blocks[i].code if paired else [], row) for i, (n, row) in enumerate(zip(names, rows))]
    if not marks:
        return Observation([launches], notes=["no marker kernel: every kernel the runner launched is counted"],
                           functions=None if paired else [b for b in blocks if not _is_marker(b.name)])
    calls = [launches[a + 1:b] for a, b in zip(marks, marks[1:] + [len(launches)])]
    functions = None
    if not paired:  # a block per function: those that ran during the calls, by their base names
        ran = {_base(n) for n in names[marks[0] + 1:] if not _is_marker(n)}
        functions = [b for b in blocks if _base(b.name) in ran and not _is_marker(b.name)]
    return Observation(calls, at_load=marks[0], markers=len(marks), functions=functions)


def _base(name: str) -> str:
    """A kernel's identifier alone (no namespace, template arguments or parameters): ncu's two pages
    may spell the rest differently."""
    name = _function(name).replace("<unnamed>", "").replace("(anonymous namespace)", "")
    while re.search(r"<[^<>]*>", name):  # template arguments, innermost first
        name = re.sub(r"<[^<>]*>", "", name)
    return name.split("::")[-1].strip()


def _function(name: str) -> str:
    """A kernel's name without its return type and parameter list, as both of ncu's pages agree on."""
    name = name.strip()
    depth, cut = 0, len(name)
    for i in range(len(name) - 1, -1, -1):  # the parameter list: the last balanced (...) at the end
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0 and name[i] == "(" and name.endswith(")"):
            cut = i
            break
    head = name[:cut].strip()
    return head[5:] if head.startswith("void ") else head


def _is_marker(name: str) -> bool:
    return _function(name).split("::")[-1] == MARKER


_PREDICATE = re.compile(r"^@!?U?P\w+\s+")


def parse_sass_page(text: str) -> list[RanKernel]:
    """ncu --page source --print-source sass --csv: a "Kernel Name" line per profiled kernel, a
    header, then a row per instruction."""
    out: list[RanKernel] = []
    header: list[str] | None = None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] in ("Kernel Name", "Function Name") and len(row) > 1:
            out.append(RanKernel(row[1]))
            header = None
        elif row[0] == "Address":
            header = row
        elif header is not None and out and row[0].startswith("0x") and len(row) == len(header):
            cells = dict(zip(header, row))
            text_ = _PREDICATE.sub("", cells.get("Source", "").strip())
            opcode = text_.split(" ")[0] if text_ else ""
            target = re.search(r"\b0x([0-9a-f]+)\s*$", text_) if opcode.startswith("BRA") else None
            out[-1].code.append(Executed(
                int(row[0], 16), opcode, int(target.group(1), 16) if target else None,
                _int(cells.get("Instructions Executed")),
                _int(cells.get("Predicated-On Thread Instructions Executed", cells.get("Thread Instructions Executed"))),
                (cells.get("Address Space") or "").strip("- "), (cells.get("Access Operation") or "").strip("- "),
                _int(cells.get("Access Size"))))
    return out


def _int(v) -> int:
    try:
        return int(float(str(v).replace(",", "")))
    except (TypeError, ValueError):
        return 0


def observe(start, calls) -> Observation:
    """Start a runner behind ncu (start(prefix) -> (runner, reported): a sandbox sharing ncu's network
    namespace), then calls(runner), which makes the checked calls, each after a "marker" command;
    end it and read the report."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="wb-observe-") as tmp:
        report = pathlib.Path(tmp) / "run"
        runner, _ = start(prefix(report))
        try:
            calls(runner)
            runner.finish(REPORT_TIMEOUT_S)
        except BaseException:
            runner.discard()
            raise
        log = runner.log_tail(60)
        runner.discard()
        path = report.with_suffix(".ncu-rep")
        if not path.is_file():
            raise RuntimeError(f"Nsight Compute wrote no report; its last lines:\n{log}")
        seen = read_report(path)
    seen.seconds = time.perf_counter() - started
    return seen
