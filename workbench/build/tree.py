"""The torch-facing pieces, described once: the harness, an op's binding, a C++ variant, an
extension-style source. The loader builds them from these, and setup.py prebuilds the same
descriptions into a wheel (tree_pieces), so the keys agree."""
from __future__ import annotations

import pathlib

from .. import config
from ..model import registry
from . import nvrtc_tier
from .arch import arch_list, variant_arch_flags
from .piece import DEFAULT_OPTIONS, BuildOptions, Piece

# -fno-trapping-math (as PyTorch's own build): a CPU variant's loop that selects between floats
# (a clamp, relu, a saturated GELU gate) is vectorized only where the compiler may evaluate both
# sides; the values computed are the same (kernels/common/wb_cpu.h, WB_CPU_SIMD).
CPU_FLAGS = ("-O3", "-fno-trapping-math")
# -Xptxas=-v puts the register/spill report in each build log. -lineinfo is left out of the edit
# loop (it costs ~3% of the nvcc time); BuildOptions(line_info=True) or WORKBENCH_NVCC_FLAGS adds it.
CUDA_FLAGS = ("-O3", "-Xptxas=-v")


def harness_sources() -> list[pathlib.Path]:
    return sorted((config.BINDINGS_DIR / "harness").glob("*.cpp"))


def harness_piece(with_cuda: bool) -> Piece:
    # -fopenmp: at::parallel_for, which lends torch's thread pool to the CPU variants, is inline
    # `#pragma omp parallel` code; compiled without it, every CPU variant would run on one thread.
    return Piece(label="harness", kind="harness", sources=harness_sources(),
                 include_dirs=[config.BINDINGS_DIR / "harness", config.COMMON_DIR], with_cuda=with_cuda,
                 cflags=["-O2", "-fopenmp"] + (["-DWORKBENCH_WITH_CUDA"] if with_cuda else []), link=["-fopenmp"],
                 arch_list=arch_list() if with_cuda else None)


def binding_piece(r: registry.ResolvedOp) -> Piece:
    src = r.sources
    return Piece(label=f"binding/{r.op}", kind="binding", sources=[src.binding],
                 include_dirs=[config.BINDINGS_DIR, config.COMMON_DIR, src.kernel_dir], cflags=CPU_FLAGS)


def cuda_source_piece(*, label: str, kind: str, source: pathlib.Path, include_dirs, options: BuildOptions) -> Piece:
    """A variant's (or an extension's) one source: nvcc for a .cu file (or the NVRTC tier, where
    options.compiler says so: nvrtc_tier.py), the host compiler for a .cpp."""
    with_cuda = source.suffix == ".cu"
    if with_cuda and options.compiler == "nvrtc":
        tiered = nvrtc_tier.piece(label=label, kind=kind, source=source, include_dirs=include_dirs, cflags=CPU_FLAGS,
                                  cuda_cflags=[*CUDA_FLAGS, *options.nvcc_flags()], options=options)
        if tiered is not None:
            return tiered
    archs = arch_list() if with_cuda else None  # asked once: it may ask torch about every device
    return Piece(label=label, kind=kind, sources=[source], include_dirs=include_dirs, with_cuda=with_cuda,
                 cflags=CPU_FLAGS, arch_list=archs,
                 cuda_cflags=[*CUDA_FLAGS, *options.nvcc_flags(), *variant_arch_flags(source, archs)]
                 if with_cuda else [])


def variant_piece(r: registry.ResolvedOp, name: str, source: pathlib.Path,
                  options: BuildOptions = DEFAULT_OPTIONS) -> Piece:
    return cuda_source_piece(label=f"{r.op}/{name}", kind="variant", source=source,
                             include_dirs=[config.COMMON_DIR, r.sources.kernel_dir], options=options)


def build_variant(op: str, name_or_path: str, options: BuildOptions):
    """(name, Built) of one variant built with `options`, loading nothing (the CLI's `build --compiler`):
    a variant of the tree, or a path to a file being edited; Built is None for a Python variant. An
    NVRTC tier build gets every kernel compiled now, in parallel: nothing will launch them here."""
    from . import nvrtc_kernels
    from .pipeline import get_or_build

    r, path = registry.resolve(op), pathlib.Path(name_or_path)
    edited = path.suffix in registry.SUFFIXES and path.is_file()
    source, name = (path, path.stem) if edited else (r.variant_source(name_or_path), name_or_path)
    if source.suffix == ".py":
        return name, None
    built = get_or_build(variant_piece(r, name, source, options))
    if built.record.get("nvrtc_unit"):
        nvrtc_kernels.compile_all(built.record["nvrtc_unit"])
    return name, built


def tree_pieces(devices: tuple[str, ...], harness_with_cuda: bool) -> list[Piece]:
    """Every piece a wheel prebuilds (setup.py), found in the tree as the registry finds ops and
    variants: the harness, each op's binding, each .cu (devices has "cuda") and .cpp (devices has
    "cpu") variant. Python variants ship as sources only."""
    pieces = [harness_piece(harness_with_cuda)]
    for op in registry.ops():
        r = registry.resolve(op)
        pieces.append(binding_piece(r))
        for name, source in r.variant_files.items():
            if {".cu": "cuda", ".cpp": "cpu"}.get(source.suffix) in devices:
                pieces.append(variant_piece(r, name, source))
    return pieces
