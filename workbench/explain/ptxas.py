"""Compiler evidence for kernels: ptxas's resource report (registers, spills) and the
instructions in the SASS, per kernel. Used by tests, scripts/ptxas_report.py and the exercise
checker (which reads a variant's build log and its built library)."""
from __future__ import annotations

import pathlib
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field

from .. import config
from ..build import toolchain

_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(sm_\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
# A SASS instruction line: "/*0070*/   @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;" -> 0x70, "LDG.E.128",
# its operands. A branch's operands end with its target's address: "@P0 BRA 0x5d0 ;", "BRA.U !UP0, 0x1d0 ;".
_SASS_OP = re.compile(r"/\*([0-9a-f]{4,})\*/\s+((?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)([^;]*))")
BRANCH_TARGET = re.compile(r"\b0x([0-9a-f]+)\s*$")


@dataclass
class KernelResources:
    name: str
    arch: str = ""
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


def parse_resources(text: str) -> list[KernelResources]:
    """Every kernel (and non-inlined device function) ptxas -v reported in `text`, one entry per
    (kernel, arch), in the order reported."""
    out: list[KernelResources] = []
    current = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _ENTRY.search(line)
        if m:
            current = KernelResources(m.group(1), m.group(2))
            out.append(current)
            continue
        m = _PROPS.search(line)
        if m:
            frame = _FRAME.search(lines[i + 1]) if i + 1 < len(lines) else None
            target = current
            if current is None or current.name != m.group(1):
                target = KernelResources(m.group(1), current.arch if current else "")
                out.append(target)
            if frame:
                target.stack_bytes, target.spill_store_bytes, target.spill_load_bytes = map(int, frame.groups())
            continue
        m = _USED.search(line)
        if m and current is not None:
            current.registers = int(m.group(1))
    return out


def compile_report(source: pathlib.Path, arch: str = "sm_90", *, cubin: pathlib.Path | None = None) -> Report:
    """Compile one variant source with nvcc for `arch`, returning ptxas's report, parsed."""
    if source.suffix != ".cu":  # a Python variant's Triton kernels are compiled by Triton, not nvcc
        raise ValueError(f"ptxas reports are for CUDA C++ sources (.cu); got {source}")
    nvcc = toolchain.nvcc_path()
    if nvcc is None:
        raise RuntimeError("nvcc not found (set CUDA_HOME)")
    with tempfile.TemporaryDirectory() as tmp:
        out = cubin or pathlib.Path(tmp) / "out.cubin"
        flags = ["-std=c++17", "-O3", f"-arch={arch}", "-Xptxas", "-v", f"-I{config.COMMON_DIR}", f"-I{source.parent}"]
        proc = subprocess.run([nvcc, *flags, "-cubin", "-o", str(out), str(source)], capture_output=True, text=True,
                              timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed on {source} for {arch}:\n{proc.stderr}")
    text = proc.stderr + proc.stdout
    return Report(source, arch, text, {k.name: k for k in parse_resources(text)})


def cuobjdump() -> str | None:
    """cuobjdump from the CUDA toolkit, or the copy Triton's wheel carries."""
    try:
        import triton
        bundled = str(pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")
    except ImportError:
        bundled = None
    return toolchain.cuda_tool("cuobjdump", None, bundled)


def sass(binary: pathlib.Path, what: str = "-sass") -> str:
    """cuobjdump -sass (or `what`: -res-usage) of a cubin, or of a shared library with device code
    (a built variant)."""
    tool = cuobjdump()
    if tool is None:
        raise RuntimeError("cuobjdump not found (CUDA toolkit or the triton package carries it)")
    return subprocess.run([tool, what, str(binary)], capture_output=True, text=True, timeout=300, check=True).stdout


def sass_opcodes(text: str) -> dict[tuple[str, str], set[str]]:
    """(arch, kernel) -> the set of opcodes (with their modifiers, e.g. 'LDG.E.128') in a SASS
    listing; arch is '' where the listing does not say."""
    return {key: set(counts) for key, counts in sass_counts(text).items()}


def sass_counts(text: str) -> dict[tuple[str, str], Counter]:
    """(arch, kernel) -> how many instructions of each opcode (with its modifiers) the kernel's
    machine code holds, as written: a loop's body counts once however often it runs."""
    return {key: Counter(i.opcode for i in code) for key, code in sass_instructions(text).items()}


@dataclass(frozen=True)
class Instruction:
    address: int               # its offset in the kernel's code, in bytes
    opcode: str                # with its modifiers: "LDG.E.128"
    target: int | None = None  # a branch (BRA...) to a written address: where it goes
    text: str = ""             # as written, spaces collapsed: "@!P0 BRA 0x5d0"


def sass_instructions(text: str) -> dict[tuple[str, str], list[Instruction]]:
    """(arch, kernel) -> the kernel's instructions in the order of its machine code (a
    cuobjdump -sass listing: arch is '' where the listing does not say)."""
    code: dict[tuple[str, str], list[Instruction]] = {}
    arch, key = "", None
    for line in text.splitlines():
        m = re.search(r"\barch = (sm_\w+)|code for (sm_\w+)", line)
        if m:
            arch, key = m.group(1) or m.group(2), None
            continue
        m = re.search(r"Function : (\S+)", line)
        if m:
            key = (arch, m.group(1))
            code.setdefault(key, [])
            continue
        m = _SASS_OP.search(line)
        if m and key:
            target = BRANCH_TARGET.search(m.group(4)) if re.match(r"BRA\b", m.group(3)) else None
            code[key].append(Instruction(int(m.group(1), 16), m.group(3), int(target.group(1), 16) if target else None,
                                         " ".join(m.group(2).split())))
    return code


def loops(code: list[Instruction]) -> list[tuple[int, int]]:
    """The loops of one kernel's machine code as (first, last) addresses: each backward branch closes
    a loop from its target to the last branch back there (not a branch to itself: the final trap)."""
    ends: dict[int, int] = {}
    for i in code:
        if i.target is not None and i.target < i.address:
            ends[i.target] = max(ends.get(i.target, i.address), i.address)
    return sorted(ends.items())


def inner_loops(code: list[Instruction]) -> list[tuple[int, int]]:
    """The innermost loops of one kernel's machine code (loops(): those that hold no other loop)."""
    found = loops(code)
    return [s for s in found if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in found)]


def global_memory_ops(source: pathlib.Path, arch: str = "sm_90") -> dict[str, set[str]]:
    """kernel (mangled name) -> the set of global load/store opcodes in its SASS, e.g. 'LDG.E.128'."""
    with tempfile.TemporaryDirectory() as tmp:
        cubin = pathlib.Path(tmp) / "out.cubin"
        compile_report(source, arch, cubin=cubin)
        listing = sass(cubin)
    return {kernel: {op for op in ops if op.startswith(("LDG", "STG"))}
            for (_, kernel), ops in sass_opcodes(listing).items()}


def kernel_label(mangled: str) -> str:
    """A short readable name for a mangled kernel name: 'backward_kernel<float>' for
    _ZN..._GLOBAL__N_...15backward_kernelIfEEv...; the name itself when it is not mangled."""
    if not mangled.startswith("_Z"):
        return mangled
    i, names = 2 + (mangled[2:3] == "N"), []
    while i < len(mangled) and mangled[i].isdigit():
        m = re.match(r"\d+", mangled[i:])
        n = int(m.group(0))
        i += len(m.group(0))
        names.append(mangled[i:i + n])
        i += n
    names = [n for n in names if not n.startswith("_GLOBAL__N")]
    if not names:
        return mangled
    label = names[-1]
    if mangled[i:i + 1] == "I":  # template arguments: name the first one
        builtin = {"f": "float", "d": "double", "i": "int", "j": "unsigned", "l": "long", "b": "bool"}
        m = re.match(r"\d+", mangled[i + 1:])
        if m:
            start = i + 1 + len(m.group(0))
            first, after = mangled[start:start + int(m.group(0))], start + int(m.group(0))
        else:
            first, after = builtin.get(mangled[i + 1:i + 2], "..."), i + 2
        label += f"<{first}{'' if mangled[after:after + 1] == 'E' else ', ...'}>"
    return label


def widths(opcodes: set[str], prefix: str) -> set[int]:
    """Access widths in bits of the LDG or STG opcodes in a set (32 when no width is written)."""
    out = set()
    for op in opcodes:
        if op.startswith(prefix):
            m = re.search(r"\.(128|64|U16|S16|U8|S8)\b", op)
            out.add({"128": 128, "64": 64, "U16": 16, "S16": 16, "U8": 8, "S8": 8}[m.group(1)] if m else 32)
    return out
