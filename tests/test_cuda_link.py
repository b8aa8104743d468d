"""Where torch has CUDA and nvcc is installed (even with no GPU), every CUDA variant under kernels/
compiles, links and registers through the real loader path (wb.load), and what the harness reads
from each library's descriptor agrees with what registry.static_variant reads from its source.
Nothing here runs a kernel."""
from __future__ import annotations

import pytest

from workbench import build, config

from workbench.run import loader

from workbench.model import registry

from workbench.build import toolchain


def _variants(suffixes):
    return sorted((op, name) for op in registry.ops()
                  for name, path in registry.variant_sources(op).items() if path.suffix in suffixes)


CUDA_VARIANTS = _variants({".cu"})
ALL_VARIANTS = _variants({".cu", ".cpp"})


def test_there_are_cuda_variants():
    assert CUDA_VARIANTS, f"no .cu variant under {config.KERNELS_DIR}"
    assert ("bias_gelu", "scalar") in CUDA_VARIANTS


def test_harness_is_built_with_cuda(wb, cuda_buildable):
    info = loader.ensure_harness()
    assert info["cuda"] is True, info
    assert info["abi_version"] >= 1


def test_harness_cuda_flag_matches_toolchain(wb):
    """Whatever the machine, the harness says it has CUDA exactly when CUDA code can be built."""
    assert loader.ensure_harness()["cuda"] is toolchain.can_build_cuda()


@pytest.mark.parametrize("op, name", CUDA_VARIANTS, ids=[f"{o}/{n}" for o, n in CUDA_VARIANTS])
def test_cuda_variant_builds_links_and_registers(wb, cuda_buildable, op, name):
    k = wb.load(op, name)
    assert k.device == "cuda"
    assert k.library.is_file() and k.library.suffix == ".so"
    static = registry.static_variant(op, k.source, name=name)
    assert static.device == "cuda"
    assert k.dtypes == static.dtypes, f"descriptor {k.dtypes} vs source {static.dtypes}"
    assert k.description == static.description
    assert k.info["name"] == name and k.info["path"] == str(k.library), k.info
    assert k.info["build_id"] == k.build_id
    if op != "bias_gelu":
        return
    # Registered with the harness under its name: the op finds it, and refuses CPU tensors by device.
    import torch

    dtype = torch.float32 if "float32" in k.dtypes else torch.float16
    x, b = torch.ones(2, 4, dtype=dtype), torch.ones(4, dtype=dtype)
    for variant in (name, k.qualified):
        with pytest.raises(RuntimeError, match=f"variant '{name}' runs on CUDA"):
            torch.ops.workbench.bias_gelu(x, b, variant)


@pytest.mark.parametrize("op, name", ALL_VARIANTS, ids=[f"{o}/{n}" for o, n in ALL_VARIANTS])
def test_static_parse_agrees_with_descriptor(wb, op, name):
    static = next(v for v in registry.variants(op) if v.name == name)
    if static.device == "cuda" and not toolchain.can_build_cuda():
        pytest.skip("cannot build CUDA variants here (torch without CUDA, or no nvcc)")
    k = wb.load(op, name)
    assert (k.device, k.dtypes, k.description) == (static.device, static.dtypes, static.description)


def test_cuda_build_records_arch_list_and_ptxas_report(wb, scalar_kernel):
    """The published record names the arch list it was built for, and the build log keeps ptxas's
    register/spill report (-Xptxas=-v) next to the library."""
    import json

    meta = json.loads((scalar_kernel.library.parent / "meta.json").read_text())
    assert meta["arch_list"] == build.arch_list()
    assert "-Xptxas=-v" in meta["cuda_flags"]
    log = scalar_kernel.library.parent / "build.log"
    assert log.is_file(), "the build log is not kept next to the library"
    text = log.read_text(errors="replace")
    assert "ptxas info" in text and "registers" in text, text[-2000:]


def test_cuda_variant_refused_clearly_without_cuda_toolchain(wb, monkeypatch):
    """With no way to build CUDA code, loading a CUDA variant names the reason and the CPU variants."""
    monkeypatch.setattr(toolchain, "can_build_cuda", lambda: False)
    with pytest.raises(wb.WorkbenchError, match="CUDA variant.*CPU variants here: cpu"):
        wb.load("bias_gelu", "scalar")
