"""NVRTC's SASS beside nvcc's (issue 27, item 2: nvcc stays the compiler of the SASS reports; the
NVRTC build's SASS is shown where it differs): workbench/explain/sass_diff.py and
`python -m workbench build OP VARIANT --compiler nvrtc --sass-diff`.

The listings' normalization is tested on text; the comparison builds vector_add/scalar both ways for
sm_90a (no GPU needed: nvcc and NVRTC compile here)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import REPO_ROOT
from workbench.build import BuildOptions, nvrtc, nvrtc_tier, toolchain
from workbench.explain import ptxas, sass_diff

SCALAR = REPO_ROOT / "kernels" / "vector_add" / "scalar.cu"
KERNEL_SUM = "c[i] = wb_from_acc<T>(wb_to_acc(a[i]) + wb_to_acc(b[i]));"
ARCH = "sm_90a"

can_compile = pytest.mark.skipif(
    not (toolchain.can_build_cuda() and nvrtc.available() and ptxas.cuobjdump()),
    reason="needs nvcc, NVRTC (torch's CUDA wheels) and cuobjdump")

# A cuobjdump -sass listing of one kernel: a branch, a call to a subroutine and a barrier, addresses
# and encodings as cuobjdump writes them.
LISTING = """
\tcode for sm_90a
\t\tFunction : _ZN12_GLOBAL__N_16kernelEv
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90"
        /*{0:04x}*/                   LDC R1, c[0x0][0x28] ;          /* 0x00000a00ff017b82 */
                                                                     /* 0x000fe20000000800 */
        /*{1:04x}*/              @!P0 BRA 0x{4:x} ;                   /* 0x0000000000308947 */
        /*{2:04x}*/                   CALL.REL.NOINC 0x{5:x} ;        /* 0x0000000c00fc7944 */
        /*{3:04x}*/                   BSSY B0, 0x{4:x} ;              /* 0x0000000c00fc7945 */
        /*{4:04x}*/                   EXIT ;                          /* 0x000fea0003800000 */
        /*{5:04x}*/                   RET.REL.NODEC R20 0x0 ;         /* 0x000fea0003c3ffff */
"""


def _listing(start: int) -> str:
    return LISTING.format(*(start + 16 * k for k in range(6)))


def test_addresses_encodings_and_code_addresses_are_not_compared():
    here, shifted = sass_diff.kernel_code(_listing(0), ARCH), sass_diff.kernel_code(_listing(0x40), ARCH)
    assert here == shifted
    (code,) = here.values()
    assert code == ["LDC R1, c[0x0][0x28]", "@!P0 BRA L0", "CALL.REL.NOINC L1", "BSSY B0, L0", "EXIT",
                    "RET.REL.NODEC R20 0x0"]


def test_a_listing_of_several_arches_gives_the_one_asked_for():
    both = _listing(0) + _listing(0).replace("sm_90a", "sm_80").replace("LDC R1", "MOV R1")
    assert sass_diff.kernel_code(both, ARCH) == sass_diff.kernel_code(_listing(0), ARCH)
    assert sass_diff.kernel_code(both, "sm_80")["_ZN12_GLOBAL__N_16kernelEv"][0].startswith("MOV R1")


def test_a_lone_cubins_listing_names_its_arch_and_keeps_each_instructions_text():
    """A cubin's listing says "code for sm_XX" and no "arch =": that names the arch of its kernels."""
    ((arch, name), code), = ptxas.sass_instructions(_listing(0)).items()
    assert (arch, name) == (ARCH, "_ZN12_GLOBAL__N_16kernelEv")
    assert [i.text for i in code[:2]] == ["LDC R1, c[0x0][0x28]", "@!P0 BRA 0x40"] and code[1].target == 0x40


def test_each_kind_of_difference_has_its_status():
    code = ["S2R R0, SR_TID.X", "IMAD R2, R0, 0x4, RZ", "@!P0 EXIT", "STG.E [R2.64], R0"]
    other_registers = [line.replace("R2", "R6") for line in code]
    other_operand = [*code[:1], "IMAD R2, R0, 0x8, RZ", *code[2:]]
    other_opcode = [*code[:3], "STG.E.64 [R2.64], R0", "NOP"]
    assert sass_diff.diff_kernel("k", code, list(code)).status == sass_diff.IDENTICAL
    assert sass_diff.diff_kernel("k", code, other_registers).status == sass_diff.RENAMED
    assert sass_diff.diff_kernel("k", code, other_operand).status == sass_diff.OPERANDS
    found = sass_diff.diff_kernel("k", code, other_opcode)
    assert found.status == sass_diff.DIFFERS
    assert found.opcodes == {"STG.E": (1, 0), "STG.E.64": (0, 1), "NOP": (0, 1)}
    assert "-STG.E [R2.64], R0" in found.diff and "+STG.E.64 [R2.64], R0" in found.diff
    assert [k.status for k in sass_diff.diff_codes({"a": code}, {"b": code})] == [sass_diff.NVCC_ONLY,
                                                                                  sass_diff.NVRTC_ONLY]


@can_compile
def test_a_variant_whose_builds_agree_is_identical_for_every_kernel():
    found = sass_diff.compare("vector_add", "scalar", ARCH)
    assert found.fallback is None and (found.nvcc_arch, found.nvrtc_arch) == (ARCH, ARCH)
    assert len(found.kernels) == 8  # forward and backward, four dtypes each
    assert {k.status for k in found.kernels} == {sass_diff.IDENTICAL} and found.identical
    assert all(k.registers[0] == k.registers[1] and k.registers[0] > 0 and not k.resources for k in found.kernels)
    report = found.text()
    assert f"for {ARCH} vs NVRTC" in report and "8 kernels: 8 identical" in report
    assert "forward_kernel<float>: identical" in report


@can_compile
def test_a_difference_names_its_kernel(tmp_path):
    edited = tmp_path / "scalar_edit.cu"  # forward_kernel multiplies: nvcc builds the file, NVRTC the edit
    edited.write_text(SCALAR.read_text().replace(KERNEL_SUM, KERNEL_SUM.replace(" + ", " * ")))
    code, facts, record = sass_diff.nvrtc_build("vector_add", str(edited), ARCH)
    assert record["device_compiler"] == "nvrtc"
    found = {k.label: k for k in sass_diff.diff_builds(sass_diff.nvcc_build("vector_add", "scalar", ARCH), (code, facts))}
    for dtype in ("float", "double", "wb_half_t", "wb_bf16_t"):
        assert found[f"backward_kernel<{dtype}>"].status == sass_diff.IDENTICAL
        forward = found[f"forward_kernel<{dtype}>"]
        assert forward.status != sass_diff.IDENTICAL and forward.diff, dtype
    forward = found["forward_kernel<float>"]  # the add became a multiply (unrolled: five of each)
    assert forward.status == sass_diff.DIFFERS and set(forward.opcodes) == {"FADD", "FMUL"}
    assert forward.opcodes["FADD"][1] == forward.opcodes["FMUL"][0] == 0
    assert forward.loops[0] == forward.loops[1] and forward.loops[0]  # the grid-stride loop, its size kept
    assert set(forward.loop_opcodes) == {"FADD", "FMUL"} and forward.loop_opcodes["FMUL"][1] > 0
    assert "forward_kernel<float>: differs" in sass_diff.Comparison("vector_add/scalar_edit", ARCH, ARCH, "nvcc", "nvrtc",
                                                                     [], list(found.values())).text()


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="vector_add has no variant 'nope'"):
        sass_diff.compare("vector_add", "nope")
    with pytest.raises(ValueError, match="rmsnorm/triton is a Python variant"):
        sass_diff.compare("rmsnorm", "triton")
    with pytest.raises(ValueError, match="vector_add/cpu is a CPU variant"):
        sass_diff.compare("vector_add", "cpu")
    with pytest.raises(ValueError, match="arch must look like sm_90a"):
        sass_diff.compare("vector_add", "scalar", "90a")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "workbench", "build", *args], capture_output=True, text=True,
                          timeout=900, cwd=REPO_ROOT)


@can_compile
def test_the_cli_prints_the_comparison_for_the_tiers_own_arch():
    out = _cli("vector_add", "scalar", "--compiler", "nvrtc", "--sass-diff")
    assert out.returncode == 0, out.stderr
    arch = nvrtc_tier.exact_arch(BuildOptions(compiler="nvrtc"))  # as --compiler nvrtc builds without --arch
    assert f"SASS of vector_add/scalar: nvcc {toolchain.nvcc_version()} for {arch} vs NVRTC" in out.stdout, out.stdout
    assert f"for {arch} (-arch={arch} " in out.stdout and "8 kernels: 8 identical" in out.stdout, out.stdout


def test_the_cli_refuses_what_it_cannot_compare():
    out = _cli("rmsnorm", "triton", "--compiler", "nvrtc", "--sass-diff")
    assert out.returncode == 1 and "rmsnorm/triton is a Python variant" in out.stderr, out.stderr
    out = _cli("vector_add", "scalar", "--compiler", "nvcc", "--sass-diff")
    assert out.returncode == 1 and "use --compiler nvrtc, not nvcc" in out.stderr, out.stderr


@can_compile
def test_several_variants_end_with_a_line_each(capsys):
    assert sass_diff.main(["vector_add/scalar", "vector_add/scalar", "--diff-lines", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3] == "per variant, nvcc vs NVRTC:"
    assert all(re.fullmatch(r"vector_add/scalar\s+8 kernels: 8 identical", line) for line in lines[-2:]), lines[-2:]


def test_the_module_names_variants_as_op_slash_variant_and_goes_on_past_a_bad_one(capsys):
    with pytest.raises(SystemExit):
        sass_diff.main(["vector_add", "scalar"])
    assert "name variants as OP/VARIANT" in capsys.readouterr().err
    assert sass_diff.main(["vector_add/nope", "rmsnorm/triton"]) == 1
    out, err = capsys.readouterr()
    assert "vector_add/nope: no SASS diff: ValueError" in err and "rmsnorm/triton is a Python variant" in err
    assert re.search(r"vector_add/nope\s+not compared: ValueError", out), out
