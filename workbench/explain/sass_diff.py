"""NVRTC's SASS beside nvcc's, per kernel (issue 27: nvcc stays the compiler of the SASS and ptxas
reports; the NVRTC build's SASS is shown where it differs).

`compare(op, variant, arch)` builds one CUDA variant both ways for one arch (no GPU needed): nvcc's
build (the arch list set to that arch) and the NVRTC tier's (each kernel its own program), reads
each kernel's SASS with cuobjdump and pairs the kernels by nvcc's mangled name (canonical_name).

Addresses, encodings and the code addresses a branch, call or barrier names (as labels in address
order) are left out: one instruction more at the top changes none of what runs. Registers are
compared as written: "same instructions, other registers" where only their numbers differ, "same
opcodes, operands differ", else "differs". Each kernel's resources (cuobjdump -res-usage) and, where
not identical, its innermost loops' opcodes (ptxas.inner_loops: the code that runs most) come along.

`python -m workbench build OP VARIANT --compiler nvrtc --sass-diff [--arch sm_90a]` prints the
report (cli_report); `python -m workbench.explain.sass_diff OP/VARIANT ... | --all [--nvcc-arch sm_90]
[--diff-lines N]` prints several and a line per variant.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import difflib
import functools
import pathlib
import re
import sys

from . import ptxas
from ..build import BuildOptions, build_variant, nvrtc, nvrtc_kernels, nvrtc_tier, toolchain
from ..build.guard import environment
from ..model import registry

DIFF_LINES = 40  # of one kernel's unified diff, at most, in the report
IDENTICAL, RENAMED, OPERANDS, DIFFERS, NVCC_ONLY, NVRTC_ONLY = (
    "identical", "same instructions, other registers", "same opcodes, operands differ", "differs", "nvcc only", "nvrtc only")
# Opcodes whose last operand is an address in the kernel's own code.
_CODE_ADDRESS_OPS = {"BRA", "BRX", "JMP", "JMX", "CALL", "BSSY", "SSY", "PBK", "PCNT"}  # not RET: its 0x0 is an offset
# A register operand: general (R5), uniform (UR4), predicate (P0, UP1), convergence barrier (B0); not
# the zero and true registers (RZ, URZ, PT, UPT), whose names are fixed.
_REGISTER = re.compile(r"\b(U?R|U?P|B)\d+\b")


@dataclasses.dataclass
class KernelDiff:
    name: str                  # nvcc's mangled name, anonymous namespace canonical
    status: str                # IDENTICAL, RENAMED, OPERANDS, DIFFERS, NVCC_ONLY or NVRTC_ONLY
    nvcc_count: int = 0        # instructions (padding NOPs included)
    nvrtc_count: int = 0
    opcodes: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # opcode -> (nvcc, nvrtc), where they differ
    diff: list[str] = dataclasses.field(default_factory=list)                      # unified diff, nvcc -> nvrtc
    registers: tuple[int | None, int | None] = (None, None)                        # nvcc, nvrtc (cuobjdump -res-usage)
    resources: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # others that differ: SHARED, LOCAL ...
    loops: tuple[list[int], list[int]] = ([], [])  # each innermost loop's instructions, nvcc's and nvrtc's
    loop_opcodes: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # in those loops, where they differ

    @property
    def label(self) -> str:
        """The kernel as written, template arguments and all: 'smem_kernel<float, false, true>'."""
        return nvrtc_tier.name_expression(nvrtc_tier.demangle(self.name))[1:]


@dataclasses.dataclass
class Comparison:
    label: str                 # op/variant
    nvcc_arch: str
    nvrtc_arch: str
    nvcc_version: str
    nvrtc_version: str
    nvrtc_options: list[str]
    kernels: list[KernelDiff]
    fallback: str | None = None  # why the NVRTC tier built it with nvcc (then nothing is compared)

    def tally(self) -> str:
        """How many kernels have each status: "3 identical, 1 differs"."""
        return ", ".join(f"{n} {s}" for s, n in collections.Counter(k.status for k in self.kernels).most_common())

    @property
    def identical(self) -> bool:
        return self.fallback is None and all(k.status == IDENTICAL for k in self.kernels)

    def text(self, diff_lines: int = DIFF_LINES) -> str:
        """The report: a header, then one block per kernel (a line where identical)."""
        out = [f"SASS of {self.label}: nvcc {self.nvcc_version} for {self.nvcc_arch} vs NVRTC {self.nvrtc_version} "
               f"for {self.nvrtc_arch} ({' '.join(self.nvrtc_options)})"]
        if self.fallback:
            return "\n".join(out + [f"  nothing to compare: the NVRTC tier built it with nvcc ({self.fallback})"])
        out.append(f"  {len(self.kernels)} kernels: {self.tally()} (instruction addresses, encodings and code "
                   "addresses left out)")
        for k in self.kernels:
            regs = f", {k.registers[0]} / {k.registers[1]} registers" if k.registers != (None, None) else ""
            out.append(f"  {k.label}: {k.status} ({k.nvcc_count} / {k.nvrtc_count} instructions{regs}, nvcc / nvrtc)"
                       f"  {k.name}")
            if k.resources:
                out.append("    resources, nvcc -> nvrtc: " + ", ".join(
                    f"{what} {a}->{b}" for what, (a, b) in sorted(k.resources.items())))
            if k.opcodes:
                out.append("    opcode counts, nvcc -> nvrtc: " + ", ".join(
                    f"{op} {a}->{b}" for op, (a, b) in sorted(k.opcodes.items())))
            if k.status != IDENTICAL and k.loops != ([], []):
                out.append(f"    innermost loops' instructions, nvcc -> nvrtc: {k.loops[0]} -> {k.loops[1]}" + (
                    "; their opcodes: " + ", ".join(f"{op} {a}->{b}" for op, (a, b) in sorted(k.loop_opcodes.items()))
                    if k.loop_opcodes else ""))
            shown = k.diff[:diff_lines]
            out.extend(f"    {line}" for line in shown)
            if len(k.diff) > len(shown):
                out.append(f"    ... {len(k.diff) - len(shown)} more diff lines")
        return "\n".join(out)


_ANON = re.compile(r"(\d+)_GLOBAL__N_")


def canonical_name(name: str) -> str:
    """A mangled name with its anonymous namespace spelled as GCC does (12_GLOBAL__N_1, as the NVRTC
    tier's kernels are named): nvcc names one after the file and a hash, NVRTC its own way."""
    out, at = [], 0
    for m in _ANON.finditer(name):
        if m.start() < at:
            continue
        out.append(name[at:m.start()] + "12_GLOBAL__N_1")
        at = m.start(1) + len(m.group(1)) + int(m.group(1))
    return "".join(out) + name[at:]


def normalize(code: list[ptxas.Instruction]) -> list[str]:
    """One kernel's instructions as 'PRED OPCODE operands', code addresses as labels L0, L1 ... in
    address order."""
    def address(i):  # the code address an instruction names, where it names one
        m = ptxas.BRANCH_TARGET.search(i.text)
        return m if m and i.opcode.split(".")[0] in _CODE_ADDRESS_OPS else None

    targets = sorted({int(m.group(1), 16) for m in map(address, code) if m})
    labels = {a: f"L{k}" for k, a in enumerate(targets)}
    return [i.text[:m.start()] + labels[int(m.group(1), 16)] if (m := address(i)) else i.text for i in code]


def _opcode(text: str) -> str:
    """The opcode with its modifiers of a normalized instruction ('@!P0 BRA L1' -> 'BRA')."""
    words = text.split()
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def _kernels(listing: str, arch: str) -> dict[str, list[ptxas.Instruction]]:
    """Canonical kernel name -> its instructions, from a cuobjdump -sass listing (the ELF for
    `arch`; a listing that names no arch, a lone cubin's, is taken whole)."""
    return {canonical_name(name): code for (listed, name), code in ptxas.sass_instructions(listing).items()
            if listed in ("", arch)}


def kernel_code(listing: str, arch: str) -> dict[str, list[str]]:
    """Canonical kernel name -> its normalized instructions, from a cuobjdump -sass listing."""
    return {name: normalize(code) for name, code in _kernels(listing, arch).items()}


def kernel_resources(binary: pathlib.Path, arch: str) -> dict[str, dict[str, int]]:
    """Canonical kernel name -> its resources as cuobjdump -res-usage reports them (REG, STACK,
    SHARED, LOCAL, CONSTANT[0] ... in bytes but REG), the ELF for `arch` alone (a lone cubin: all)."""
    found: dict[str, dict[str, int]] = {}
    listed, name = "", None
    for line in ptxas.sass(binary, "-res-usage").splitlines():
        if m := re.search(r"\barch = (sm_\w+)", line):
            listed, name = m.group(1), None
        elif m := re.match(r"\s*Function (\S+):", line):
            name = canonical_name(m.group(1)) if listed in ("", arch) else None
        elif name is not None and "REG:" in line:
            found.setdefault(name, {k: int(v) for k, v in re.findall(r"(\S+?):(\d+)", line)})
    return found


def _counts_that_differ(a, b) -> dict:
    return {key: (a.get(key, 0), b.get(key, 0)) for key in a.keys() | b.keys() if a.get(key, 0) != b.get(key, 0)}


@dataclasses.dataclass
class Facts:
    """What one build says of each kernel beside its code, by canonical name: its resources
    (kernel_resources) and the opcodes of each of its innermost loops (ptxas.inner_loops: what runs most)."""
    resources: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    loops: dict[str, list[collections.Counter]] = dataclasses.field(default_factory=dict)


def _read(binary: pathlib.Path, arch: str) -> tuple[dict[str, list[str]], Facts]:
    """(each kernel's normalized SASS, Facts) of a cubin or a library, the ELF for `arch`."""
    kernels = _kernels(ptxas.sass(binary), arch)
    loops = {name: [collections.Counter(i.opcode for i in code if first <= i.address <= last)
                    for first, last in ptxas.inner_loops(code)] for name, code in kernels.items()}
    return {name: normalize(code) for name, code in kernels.items()}, Facts(kernel_resources(binary, arch), loops)


def _with_facts(k: KernelDiff, nvcc: Facts, nvrtc: Facts) -> KernelDiff:
    a, b = nvcc.resources.get(k.name, {}), nvrtc.resources.get(k.name, {})
    k.registers = (a.get("REG"), b.get("REG"))
    k.resources = _counts_that_differ({w: n for w, n in a.items() if w != "REG"}, {w: n for w, n in b.items() if w != "REG"})
    a, b = nvcc.loops.get(k.name, []), nvrtc.loops.get(k.name, [])
    k.loops = ([sum(c.values()) for c in a], [sum(c.values()) for c in b])
    k.loop_opcodes = _counts_that_differ(sum(a, collections.Counter()), sum(b, collections.Counter()))
    return k


def diff_kernel(name: str, nvcc: list[str] | None, nvrtc: list[str] | None) -> KernelDiff:
    """One kernel's two normalized codes compared (None: that build has no such kernel)."""
    if nvcc is None or nvrtc is None:
        return KernelDiff(name, NVRTC_ONLY if nvcc is None else NVCC_ONLY, len(nvcc or []), len(nvrtc or []))
    result = KernelDiff(name, IDENTICAL, len(nvcc), len(nvrtc))
    if nvcc == nvrtc:
        return result
    result.opcodes = _counts_that_differ(collections.Counter(map(_opcode, nvcc)), collections.Counter(map(_opcode, nvrtc)))
    same_opcodes = [_opcode(t) for t in nvcc] == [_opcode(t) for t in nvrtc]
    result.status = (RENAMED if renamed(nvcc, nvrtc) else OPERANDS) if same_opcodes else DIFFERS
    result.diff = list(difflib.unified_diff(nvcc, nvrtc, "nvcc", "nvrtc", n=2, lineterm=""))
    return result


def renamed(a: list[str], b: list[str]) -> bool:
    """Whether a and b are the same instructions but for which registers they use: each one equal
    once every register's number is left out (R5 and R7 alike, R5 and UR5 not)."""
    return len(a) == len(b) and all(_REGISTER.sub(r"\1#", x) == _REGISTER.sub(r"\1#", y) for x, y in zip(a, b))


def diff_codes(nvcc: dict[str, list[str]], nvrtc: dict[str, list[str]]) -> list[KernelDiff]:
    """Every kernel of either build, by name, compared."""
    return [diff_kernel(name, nvcc.get(name), nvrtc.get(name)) for name in sorted(nvcc.keys() | nvrtc.keys())]


def diff_builds(nvcc: tuple[dict[str, list[str]], Facts], nvrtc: tuple[dict[str, list[str]], Facts]) -> list[KernelDiff]:
    """Every kernel of two builds ((code, Facts) each: nvcc_build, nvrtc_build) compared, with its
    resources and innermost loops."""
    return [_with_facts(k, nvcc[1], nvrtc[1]) for k in diff_codes(nvcc[0], nvrtc[0])]


def _require_tools() -> None:
    missing = [what for what, ok in (("nvcc (set CUDA_HOME)", toolchain.nvcc_path()),
                                     ("the NVRTC library (torch's CUDA wheels bring libnvrtc)", nvrtc.available()),
                                     ("cuobjdump (the CUDA toolkit or the triton package)", ptxas.cuobjdump()))
               if not ok]
    if missing:
        raise RuntimeError("a SASS diff needs " + " and ".join(missing))


def cuda_source(op: str, variant: str) -> pathlib.Path:
    """The variant's file (a variant's name, or a path to a file being edited, as the CLI's build takes
    them); ValueError for an unknown op or variant, or one that is not CUDA C++."""
    path = pathlib.Path(variant)
    source = path if path.suffix in registry.SUFFIXES and path.is_file() else registry.variant_source(op, variant)
    if source.suffix != ".cu":
        kind = "a Python variant (Triton compiles it)" if source.suffix == ".py" else "a CPU variant (C++)"
        raise ValueError(f"{op}/{variant} is {kind}: only a CUDA variant (.cu) has nvcc and NVRTC SASS to compare")
    return source


def nvcc_build(op: str, variant: str, arch: str) -> tuple[dict[str, list[str]], Facts]:
    """(each kernel's normalized SASS, Facts) of nvcc's build of the variant (a name, or a path to a
    .cu file) for `arch` alone: the build the nvcc tier makes, with the arch list set to that arch."""
    cuda_source(op, variant)
    with environment(TORCH_CUDA_ARCH_LIST=nvrtc_tier.arch_list_entry(arch)):
        name, built = build_variant(op, variant, BuildOptions(compiler="nvcc"))
    code, facts = _read(built.library, arch)
    if not code:
        raise RuntimeError(f"{op}/{name}: nvcc's build {built.library} holds no SASS for {arch}")
    return code, facts


def nvrtc_build(op: str, variant: str, arch: str) -> tuple[dict[str, list[str]], Facts, dict]:
    """(each kernel's normalized SASS, Facts, the build's record) of the NVRTC tier's build for `arch`;
    the SASS is {} where the tier fell back to nvcc (the record's nvrtc_fallback says why)."""
    cuda_source(op, variant)
    _, built = build_variant(op, variant, BuildOptions(compiler="nvrtc", arch=arch))
    if not built.record.get("nvrtc_unit"):
        return {}, Facts(), built.record
    unit = nvrtc_kernels.unit(built.record["nvrtc_unit"])
    read = functools.cache(lambda cubin: _read(cubin, arch))  # a cubin may hold several kernels
    code, facts = {}, Facts()
    for kernel in unit.kernels:
        cubin, lowered = nvrtc_kernels.compiled(unit, kernel)
        their_code, their_facts = read(cubin)
        lowered = canonical_name(lowered)
        code[kernel] = their_code[lowered]
        facts.resources[kernel] = their_facts.resources.get(lowered, {})
        facts.loops[kernel] = their_facts.loops.get(lowered, [])
    return code, facts, built.record


def compare(op: str, variant: str, arch: str | None = None, *, nvcc_arch: str | None = None) -> Comparison:
    """The variant's kernels' SASS, nvcc's build for `nvcc_arch` (default: `arch`) against the NVRTC
    tier's for `arch` (default: the tier's own, nvrtc_tier.exact_arch: this GPU's, else the arch
    list's newest, sm_90a with no GPU to ask). Raises ValueError for an unknown op or variant, one that is not CUDA C++ or a
    malformed arch, RuntimeError where a tool is missing, BuildError where a build fails."""
    arch = arch or nvrtc_tier.exact_arch(BuildOptions(compiler="nvrtc"))
    nvcc_arch = nvcc_arch or arch
    for what, value in (("arch", arch), ("nvcc_arch", nvcc_arch)):
        if not isinstance(value, str) or not re.fullmatch(r"sm_\d+[a-z]?", value):
            raise ValueError(f"{what} must look like sm_90a or sm_80; got {value!r}")
    cuda_source(op, variant)
    _require_tools()
    nvrtc_side, nvrtc_facts, record = nvrtc_build(op, variant, arch)
    label = record.get("label", f"{op}/{variant}")
    common = dict(label=label, nvcc_arch=nvcc_arch, nvrtc_arch=arch, nvcc_version=toolchain.nvcc_version() or "?",
                  nvrtc_version=nvrtc.version(), nvrtc_options=list(record.get("nvrtc_options", [])))
    if record.get("nvrtc_fallback"):
        return Comparison(**common, kernels=[], fallback=record["nvrtc_fallback"])
    return Comparison(**common, kernels=diff_builds(nvcc_build(op, variant, nvcc_arch), (nvrtc_side, nvrtc_facts)))


def cli_report(op: str, variant: str, compiler: str | None, arch: str | None) -> list[str]:
    """`build OP VARIANT --compiler nvrtc --sass-diff`: print the comparison; returns [variant] where
    it could not be made (the reason on stderr). A difference is a finding, not a failure."""
    if compiler not in (None, "nvrtc"):
        print(f"{op}/{variant}: --sass-diff compares NVRTC's build with nvcc's: use --compiler nvrtc, "
              f"not {compiler}", file=sys.stderr)
        return [variant]
    try:
        print(compare(op, variant, arch).text())
    except Exception as e:  # noqa: BLE001 - reported, and the exit status says so
        print(f"{op}/{variant}: no SASS diff: {type(e).__name__}: {e}", file=sys.stderr)
        return [variant]
    return []


def tree_cuda_variants() -> list[str]:
    """Every CUDA variant of the tree's ops, as OP/VARIANT."""
    return [f"{op}/{name}" for op in registry.ops() for name, source in registry.variant_sources(op).items()
            if source.suffix == ".cu"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workbench.explain.sass_diff", description=__doc__.split("\n\n")[0])
    p.add_argument("variants", nargs="*", metavar="OP/VARIANT", help="a CUDA variant, as `python -m workbench list` names them")
    p.add_argument("--all", action="store_true", help="every CUDA variant of the tree")
    p.add_argument("--arch", help="NVRTC's arch (default: this GPU's, else the arch list's newest: sm_90a)")
    p.add_argument("--nvcc-arch", help="nvcc's arch (default: --arch), e.g. sm_90: what a JIT build on an H100 makes")
    p.add_argument("--diff-lines", type=int, default=DIFF_LINES, help="of each kernel's diff, at most")
    args = p.parse_args(argv)
    if bool(args.variants) == args.all or any(v.count("/") != 1 for v in args.variants):
        p.error("name variants as OP/VARIANT (`python -m workbench list` lists them), or give --all")
    summary, failed = [], 0
    for qualified in tree_cuda_variants() if args.all else args.variants:
        try:
            c = compare(*qualified.split("/"), args.arch, nvcc_arch=args.nvcc_arch)
        except Exception as e:  # noqa: BLE001 - the others are still compared; the exit status says so
            failed += 1
            print(f"{qualified}: no SASS diff: {type(e).__name__}: {e}", file=sys.stderr)
            summary.append(f"{qualified:36s} not compared: {type(e).__name__}")
            continue
        print(c.text(args.diff_lines), flush=True)
        summary.append(f"{c.label:36s} not compared: the NVRTC tier falls back to nvcc ({c.fallback})" if c.fallback
                       else f"{c.label:36s} {len(c.kernels):3d} kernels: {c.tally()}")
    if len(summary) > 1:
        print("\nper variant, nvcc vs NVRTC:\n" + "\n".join(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
