"""Compiler evidence for kernels: ptxas's resource report (registers, spills) and the global
memory instructions in the SASS, per kernel. Used by tests and by scripts/ptxas_report.py."""
from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

from . import config, toolchain

_PROPS = re.compile(r"Function properties for (\S+)\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Compiling entry function '(\S+)' for '(sm_\d+)'|Used (\d+) registers")


@dataclass
class KernelResources:
    name: str
    registers: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0


@dataclass
class Report:
    source: pathlib.Path
    arch: str
    text: str
    kernels: dict[str, KernelResources] = field(default_factory=dict)

    @property
    def spills(self) -> dict[str, int]:
        return {k: r.spill_store_bytes + r.spill_load_bytes for k, r in self.kernels.items()
                if r.spill_store_bytes + r.spill_load_bytes}


def nvcc_flags(source: pathlib.Path, arch: str) -> list[str]:
    return ["-std=c++17", "-O3", f"-arch={arch}", "-Xptxas", "-v", f"-I{config.COMMON_DIR}", f"-I{source.parent}"]


def compile_report(source: pathlib.Path, arch: str = "sm_90", *, cubin: pathlib.Path | None = None) -> Report:
    """Compile one variant source with nvcc for `arch`, returning ptxas's report, parsed."""
    nvcc = toolchain.nvcc_path()
    if nvcc is None:
        raise RuntimeError("nvcc not found (set CUDA_HOME)")
    with tempfile.TemporaryDirectory() as tmp:
        out = cubin or pathlib.Path(tmp) / "out.cubin"
        proc = subprocess.run([nvcc, *nvcc_flags(source, arch), "-cubin", "-o", str(out), str(source)],
                              capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed on {source} for {arch}:\n{proc.stderr}")
    text = proc.stderr + proc.stdout
    report = Report(source, arch, text)
    current = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            current = report.kernels.setdefault(m.group(1), KernelResources(m.group(1)))
        m = re.search(r"Used (\d+) registers", line)
        if m and current is not None:
            current.registers = int(m.group(1))
    for name, stack, st, ld in _PROPS.findall(text):
        r = report.kernels.setdefault(name, KernelResources(name))
        r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes = int(stack), int(st), int(ld)
    return report


def cuobjdump() -> str | None:
    """cuobjdump from the CUDA toolkit, or the copy Triton's wheel carries."""
    home = toolchain.cuda_home()
    candidates = [shutil.which("cuobjdump"), home and str(pathlib.Path(home) / "bin" / "cuobjdump")]
    try:
        import triton
        candidates.append(str(pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"))
    except ImportError:
        pass
    return next((c for c in candidates if c and pathlib.Path(c).is_file()), None)


def global_memory_ops(source: pathlib.Path, arch: str = "sm_90") -> dict[str, set[str]]:
    """kernel (mangled name) -> the set of global load/store opcodes in its SASS, e.g. 'LDG.E.128'."""
    tool = cuobjdump()
    if tool is None:
        raise RuntimeError("cuobjdump not found (CUDA toolkit or the triton package carries it)")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = pathlib.Path(tmp) / "out.cubin"
        compile_report(source, arch, cubin=cubin)
        sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, timeout=300, check=True).stdout
    ops: dict[str, set[str]] = {}
    kernel = None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            kernel = m.group(1)
            ops.setdefault(kernel, set())
            continue
        m = re.search(r"\b((?:LDG|STG)(?:\.[A-Z0-9]+)*)", line)
        if m and kernel:
            ops[kernel].add(m.group(1))
    return ops


def widths(opcodes: set[str], prefix: str) -> set[int]:
    """Access widths in bits of the LDG or STG opcodes in a set (32 when no width is written)."""
    out = set()
    for op in opcodes:
        if op.startswith(prefix):
            m = re.search(r"\.(128|64|U16|S16|U8|S8)\b", op)
            out.add({"128": 128, "64": 64, "U16": 16, "S16": 16, "U8": 8, "S8": 8}[m.group(1)] if m else 32)
    return out
