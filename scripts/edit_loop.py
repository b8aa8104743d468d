"""The edit loop, timed per build tier (issue 27): nvrtc (device code by NVRTC, the host library
reused) against nvcc (the whole file).

For each variant, a copy of its file is edited N times: each edit changes a constant in device code
(a `(void)N;` at the top of the first device function the file defines; a file without one, such
as bias_gelu/vec4 whose kernels live in a shared header, gets a one-line device function returning
N). With a GPU, each edit is timed from the edited file to a rebuilt, loaded variant whose first
call has returned (wb.load_source + one call + synchronize); without one, to the build's return
(the build pipeline's get_or_build, nothing loaded). The nvrtc tier compiles the kernels that call
did not need in the background (build/nvrtc_kernels.py): a second column times each edit until
every kernel is compiled (on the 2-core machine, the "compile alone" figure). The first build of
each copy (the host side's, for nvrtc) is not timed: the loop is about the edits after it. "its
kernels" is what NVRTC took over the kernels the first call asked for (an edit's build starts on
those the previous edit's first call asked for, beside NVRTC's front end).

--gpu-time (GPU only) also times every committed CUDA variant built both ways, side by side: the
forward's GPU time at one size (workbench.measure.timing.time_cuda), and the ratio nvrtc / nvcc.

Writes OUT/edit_loop.jsonl (one row per timed edit, per variant and tier, per GPU time) and
OUT/edit_loop.txt (the tables).
    python3 scripts/edit_loop.py --edits 5 --out results/edit_loop
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

VARIANTS = ("bias_gelu/vec4", "rmsnorm/vectorized", "matmul/warptile")
TIERS = ("nvrtc", "nvcc")


def edited(text: str, n: int) -> str:
    """The file's text with device constant number n (see the module's docstring)."""
    from workbench.build import nvrtc_split

    macros = nvrtc_split.space_macros([text])
    for f in nvrtc_split.functions(text, macros):
        if f.space == "device":
            return text[:f.body_open + 1] + f" (void){n};" + text[f.body_open + 1:]
    return text + f"\n__device__ int wb_edit_loop_constant() {{ return {n}; }}\n"


def first_call(op: str, kernel) -> None:
    import torch

    from workbench.model import registry

    spec = registry.spec(op)
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = spec.new_inputs(spec.sample_size(), kernel.dtypes[0], "cuda", gen)
    kernel(*inputs)
    torch.cuda.synchronize()


def time_edits(op: str, variant: str, tier: str, edits: int, arch: str | None, gpu: bool,
               rows: list) -> tuple[list[float], list[float], list[float]]:
    """Per edit: (seconds until the first call returned, or the build returned without a GPU;
    seconds until every kernel is compiled; seconds NVRTC took over the kernels the first call asked
    for, beside the rest or before it). The nvrtc tier compiles kernels past the first call's
    in the background (build/nvrtc_kernels.py); each edit starts with none of them pending."""
    from workbench.build import BuildOptions, get_or_build, nvrtc_kernels
    from workbench.build.tree import variant_piece
    from workbench.model import registry
    from workbench.run import loader, nvrtc_routes

    r = registry.resolve(op)
    original = r.variant_source(variant).read_text()
    options = BuildOptions(compiler=tier, arch=arch)
    first, whole, kernels = [], [], []
    base = time.time_ns() % 10**9  # constants no earlier run used: no edit is a warm hit in a kept cache
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / f"{variant}_edit.cu"
        for n in range(edits + 1):
            path.write_text(edited(original, base + n))
            nvrtc_kernels.drain()
            start = time.perf_counter()
            if gpu:
                k = loader.load_source(op, path, f"{variant}_{tier}_edit", options=options)
                first_call(op, k)
                unit = nvrtc_routes.unit_of(k.library)
            else:
                unit = get_or_build(variant_piece(r, f"{variant}_{tier}_edit", path, options)).record.get("nvrtc_unit")
            ready = time.perf_counter() - start
            launched = [(unit, n) for n in nvrtc_kernels._queue.launched.get(f"{op}/{variant}_{tier}_edit", [])]
            kernel_s = [nvrtc_kernels.compile_seconds.get(k) for k in launched]
            if unit:
                nvrtc_kernels.compile_all(unit)  # the kernels no call asked for yet
            took = time.perf_counter() - start
            if n == 0:
                continue  # the copy's first build (its host side, for nvrtc): not an edit
            first.append(ready)
            whole.append(took)
            kernels.append(sum(x for x in kernel_s if x is not None))
            rows.append({"kind": "edit", "variant": f"{op}/{variant}", "tier": tier, "edit": n, "seconds": ready,
                         "all_kernels_seconds": took, "first_call_kernels_compile_seconds": kernel_s,
                         "measured": "rebuilt+loaded+first call" if gpu else "build returned (front end)"})
    return first, whole, kernels


def gpu_times(rows: list, lines: list, only: list[str] | None = None) -> None:
    """Every committed CUDA variant's forward (or those in `only`, OP/VARIANT), built by each tier,
    timed at the op's third CUDA bench size."""
    import torch

    from workbench.build import BuildOptions
    from workbench.measure.timing import time_cuda
    from workbench.model import registry
    from workbench.run import loader

    lines += ["", f"{'variant':28s} {'nvcc ms':>10s} {'nvrtc ms':>10s} {'ratio':>7s}  size dtype  (nvrtc tier's device compiler)"]
    for op in registry.ops():
        r = registry.resolve(op)
        spec = r.spec
        sizes = spec.bench_sizes.get("cuda") or [spec.sample_size()]
        size = sizes[min(2, len(sizes) - 1)]
        for name, source in sorted(r.variant_files.items()):
            if source.suffix != ".cu" or only and f"{op}/{name}" not in only:
                continue
            times, dtype, device_compiler = {}, None, None
            try:
                for tier in TIERS:
                    k = loader.load_source(op, source, f"{name}_{tier}", options=BuildOptions(compiler=tier))
                    dtype = k.dtypes[0]
                    gen = torch.Generator(device="cuda").manual_seed(0)
                    inputs = spec.new_inputs(size, dtype, "cuda", gen)
                    attrs = spec.sample_attrs()[0]  # an op with attributes (scale_bias_relu's scale) needs them
                    times[tier] = time_cuda(lambda: k(*inputs, **attrs)).median_ms
                    if tier == "nvrtc":  # the build's record says whether NVRTC compiled it or it fell back to nvcc
                        record = json.loads((k.library.parent / "meta.json").read_text())
                        device_compiler = record.get("device_compiler", "nvrtc")
            except Exception as e:  # noqa: BLE001 - a variant this GPU cannot run is listed as such
                lines.append(f"{op + '/' + name:28s} skipped: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
                continue
            ratio = times["nvrtc"] / times["nvcc"]
            rows.append({"kind": "gpu_time", "variant": f"{op}/{name}", "size": list(size), "dtype": dtype,
                         "nvcc_ms": times["nvcc"], "nvrtc_ms": times["nvrtc"], "ratio": ratio,
                         "nvrtc_tier_device_compiler": device_compiler})
            lines.append(f"{op + '/' + name:28s} {times['nvcc']:10.4f} {times['nvrtc']:10.4f} {ratio:7.3f}  "
                         f"{'x'.join(map(str, size))} {dtype}  ({device_compiler})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edits", type=int, default=5, help="edits per variant and tier (default 5)")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS), help="OP/VARIANT ... (default: %(default)s)")
    ap.add_argument("--arch", help="the arch both tiers compile for without a GPU (default sm_90a)")
    ap.add_argument("--gpu-time", action="store_true", help="also time every committed CUDA variant built both ways")
    ap.add_argument("--gpu-time-only", nargs="*", metavar="OP/VARIANT", help="--gpu-time for these variants alone")
    ap.add_argument("--out", default="artifacts/edit_loop", help="folder for edit_loop.jsonl and edit_loop.txt")
    args = ap.parse_args()
    if args.edits < 1:
        ap.error(f"--edits must be at least 1; got {args.edits}")
    from workbench.build import toolchain

    gpu = toolchain.gpu_available()
    if not gpu:
        # The same one arch for both tiers (nvcc would otherwise build the whole JIT arch list).
        from workbench.build.nvrtc_tier import arch_list_entry

        args.arch = args.arch or "sm_90a"
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list_entry(args.arch).rstrip("a")
    machine = torch_device() if gpu else f"{platform.node()} ({_cores()} cores, no GPU)"
    rows: list = []
    ready = "first call returned" if gpu else "build returned"
    lines = [f"edit loop on {machine}: median seconds per edit over {args.edits} edits, from the edited file to "
             f"a rebuilt variant ({'loaded, ' if gpu else ''}{ready}; nvrtc: its other kernels compile after, "
             f"in the background) and to every kernel compiled",
             f"{'variant':24s} {'nvrtc ' + ready[:5]:>12s} {'its kernels':>12s} {'nvrtc all':>10s} {'nvcc s':>8s} "
             f"{'nvcc / nvrtc ' + ('first call' if gpu else 'all'):>22s}"]
    for qualified in args.variants:
        op, _, variant = qualified.partition("/")
        medians, wholes, kernel_s = {}, {}, {}
        for tier in TIERS:
            first, whole, kernels = time_edits(op, variant, tier, args.edits, args.arch, gpu, rows)
            medians[tier], wholes[tier], kernel_s[tier] = map(statistics.median, (first, whole, kernels))
        lines.append(f"{qualified:24s} {medians['nvrtc']:12.3f} {kernel_s['nvrtc']:12.3f} {wholes['nvrtc']:10.3f} {medians['nvcc']:8.3f} "
                     f"{medians['nvcc'] / (medians if gpu else wholes)['nvrtc']:21.1f}x")
        rows.append({"kind": "median", "variant": qualified, "machine": machine, "measured": ready,
                     **{f"{t}_s": medians[t] for t in TIERS}, **{f"{t}_all_kernels_s": wholes[t] for t in TIERS}})
    if args.gpu_time and gpu:
        gpu_times(rows, lines, args.gpu_time_only)
    from workbench.measure import results

    results.write_report(args.out, "edit_loop", rows, lines)
    return 0


def torch_device() -> str:
    import torch
    return torch.cuda.get_device_name()


def _cores() -> int:
    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
