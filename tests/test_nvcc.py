"""Every CUDA variant compiles with nvcc for sm_80 and sm_90 without spills; the vectorized ones
use 128-bit global loads and stores (read from the SASS). The ptxas reports are kept under
$WORKBENCH_ARTIFACTS (default artifacts/) as build artifacts."""
from __future__ import annotations

import os
import pathlib

import pytest

from workbench import config

from workbench.explain import ptxas

from workbench.build import toolchain

SOURCES = sorted(config.KERNELS_DIR.glob("*/*.cu"))
ARTIFACTS = pathlib.Path(os.environ.get("WORKBENCH_ARTIFACTS", config.REPO_ROOT / "artifacts")) / "ptxas"

pytestmark = pytest.mark.skipif(toolchain.nvcc_path() is None, reason="nvcc not installed")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_compiles_without_spills(source, arch):
    report = ptxas.compile_report(source, arch)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{source.parent.name}-{source.stem}-{arch}.txt").write_text(report.text)
    assert report.kernels, f"no kernels found in ptxas output for {source}"
    assert report.spills == {}, f"register spills in {source.name} ({arch}): {report.spills}"
    assert all(k.stack_bytes == 0 for k in report.kernels.values()), "a kernel uses a stack frame (local memory)"


# (variant, the template instantiations that must be vectorized: V = 4 for float, 8 for 16-bit)
VECTOR_KERNELS = {"vec4": ["IfLi4E"], "half": ["I9wb_half_tLi8E", "I9wb_bf16_tLi8E"]}


VECTOR_SOURCES = [p for p in SOURCES if p.stem in VECTOR_KERNELS]


@pytest.mark.parametrize("source", VECTOR_SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_vector_variants_use_128_bit_global_accesses(source):
    if ptxas.cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    variant = source.stem
    ops = ptxas.global_memory_ops(source, "sm_90")
    for marker in VECTOR_KERNELS[variant]:
        # An op's own kernels are forward_kernel/backward_kernel; the shared elementwise family's are
        # wb_elementwise::flat_kernel<T, V, <Op>Forward[Step]>: the step is named either way.
        for kind in ("forward", "backward"):
            kernels = [k for k in ops if kind in k.lower() and marker in k]
            assert kernels, f"{variant}: no {kind} instantiated with {marker}; kernels: {list(ops)}"
            for k in kernels:
                assert 128 in ptxas.widths(ops[k], "LDG"), f"{k}: no 128-bit global load: {sorted(ops[k])}"
                assert 128 in ptxas.widths(ops[k], "STG"), f"{k}: no 128-bit global store: {sorted(ops[k])}"
                assert ptxas.widths(ops[k], "LDG") == {128}, f"{k}: loads are not all 128-bit: {sorted(ops[k])}"


def test_scalar_variant_keeps_its_teaching_shape():
    ops = ptxas.global_memory_ops(config.KERNELS_DIR / "bias_gelu" / "scalar.cu", "sm_90")
    fwd = [k for k in ops if "forward_kernel" in k]
    assert fwd and all(128 not in ptxas.widths(ops[k], "LDG") for k in fwd), "scalar forward should not vectorize"
