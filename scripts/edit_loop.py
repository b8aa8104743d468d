"""The edit loop as a student edits: each kind of edit of a self-contained file, timed per tier.

For each file (exercise 02's and 06's solutions, the tree's bias_gelu/vec4; --files), a copy in a
temporary folder (the headers it includes from its own folder copied beside it) is edited in each
way, several rounds, interleaved: each edit is timed with the NVRTC tier (load_inline's default) and
with nvcc's whole-file build, in alternating order, every edit made to the original text with a
constant no earlier run used (so no edit is a warm hit of another):
  kernel      a constant in a kernel body (a file whose kernels live in a header: in a device
              function of its own)
  launcher    a constant in the launcher (and exercise 02's block size, kBlock)
  comment     a comment and blank lines added: the same tokens (nothing to rebuild)
  header      a constant in a device function of a header the file includes
  new_kernel  a kernel added and launched by the launcher
With a GPU, from the edited file to a rebuilt, loaded variant whose first call has returned
(wb.load_source + one forward + synchronize). Without one, to "built and loaded", and for NVRTC the
kernels that first call launches compiled too (what the first call would wait for), the call
itself left out. Before each edit, every background compile has ended. Each row says whether the
host side was rebuilt and whether the tier fell back to nvcc.

Writes OUT/edit_loop.jsonl (one row per timed edit), OUT/edit_loop.txt (the table: medians per kind
and tier, nvcc / nvrtc) and OUT/README.md (provenance), and prints the table last.
    python3 scripts/edit_loop.py --rounds 5 --out results/edit_loop/cpu-2core
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import re
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# name -> (op, source, the expression of the kernel the first forward call launches)
FILES = {
    "ex02": ("bias_gelu", "exercises/02_vec4_loads/solution.cu", r"^&forward_vec4$"),
    "ex06": ("matmul", "exercises/06_smem_tiling/solution.cu", r"^&tiled_kernel<float, false, false>$"),
    "vec4": ("bias_gelu", "kernels/bias_gelu/vec4.cu", r"^&wb_row_tiles::forward_kernel<float, 4,"),
}
KINDS = ("kernel", "launcher", "comment", "header", "new_kernel")
TIERS = ("nvrtc", "nvcc")


def _functions(text: str):
    """The text's function definitions, classed with the execution-space macros of the tree's common
    headers too (gelu.h's WB_HD is wb_math.h's)."""
    from workbench.build import nvrtc_split

    common = [p.read_text() for p in (ROOT / "kernels" / "common").glob("*.h*")]
    return nvrtc_split.functions(text, nvrtc_split.space_macros([text, *common]))


def _insert_in_body(text: str, f, statement: str) -> str:
    return text[:f.body_open + 1] + f" {statement}" + text[f.body_open + 1:]


def _launcher(text: str):
    """The first host function given a launch's stream: the launcher a forward call runs."""
    return next(f for f in _functions(text) if f.space == "host"
                and re.search(r"WbLaunch|cudaStream_t", text[f.head_start:f.body_open]))


def edited(kind: str, text: str, header: str, n: int) -> tuple[str, str, str]:
    """(file text, header text, what was edited) for edit number n of this kind."""
    if kind == "kernel":
        kernel = next((f for f in _functions(text) if f.space == "global"), None)
        if kernel is None:
            return text + f"\n__device__ int wb_edit_loop_constant() {{ return {n}; }}\n", header, "a device function's constant"
        return _insert_in_body(text, kernel, f"(void){n};"), header, f"a constant in kernel {kernel.name}"
    if kind == "launcher":
        out = _insert_in_body(text, _launcher(text), f"(void){n};")
        if "constexpr int kBlock = 256;" in out:
            out = out.replace("constexpr int kBlock = 256;", f"constexpr int kBlock = {(128, 512, 64, 1024)[n % 4]};")
            return out, header, "the block size and a constant in the launcher"
        return out, header, "a constant in the launcher"
    if kind == "comment":
        return f"// edit {n}: a note\n{text}\n\n   // and one more\n", header, "a comment and blank lines"
    if kind == "header":
        f = next(f for f in _functions(header) if f.space in ("device", "global", "both"))
        return text, _insert_in_body(header, f, f"(void){n};"), f"a constant in the header's {f.name}"
    if kind == "new_kernel":  # defined before the launcher, which launches it first
        launcher, name = _launcher(text), f"wb_new_kernel_{n}"
        out = _insert_in_body(text, launcher, f"{name}<<<1, 32>>>(nullptr);")
        kernel = f"__global__ void {name}(float* p) {{ if (p) p[threadIdx.x] = {n}.0f; }}\n"
        return out[:launcher.head_start] + kernel + out[launcher.head_start:], header, "a kernel, launched"
    raise ValueError(kind)


def local_header(source: pathlib.Path) -> pathlib.Path:
    """The first header the file includes from its op's folder (its own math, gelu.h / gemm.cuh)
    that has device code: the header a student edits beside the file."""
    from workbench.model import registry

    for name in re.findall(r'^#include "([^"]+)"', source.read_text(), re.M):
        for folder in (source.parent, *(registry.resolve(op).sources.kernel_dir for op, *_ in FILES.values())):
            if (folder / name).is_file() and any(f.space in ("device", "global", "both")
                                                 for f in _functions((folder / name).read_text())):
                return folder / name
    raise SystemExit(f"{source}: includes no header with device code beside it")


def first_call(op: str, kernel) -> None:
    import torch

    from workbench.model import registry

    spec = registry.spec(op)
    gen = torch.Generator(device="cuda").manual_seed(0)
    kernel(*spec.new_inputs(spec.sample_size(), kernel.dtypes[0], "cuda", gen), **spec.sample_attrs()[0])
    torch.cuda.synchronize()


def timed_edit(op: str, path: pathlib.Path, name: str, tier: str, gpu: bool, first_kernels: list[str]) -> dict:
    """Build and load the file as it is now (and with a GPU, call it once): seconds and what happened."""
    from workbench.build import BuildOptions, nvrtc_kernels
    from workbench.run import loader, nvrtc_routes

    nvrtc_kernels.drain()
    start = time.perf_counter()
    k = loader.load_source(op, path, name, options=BuildOptions(compiler=tier))
    unit = nvrtc_routes.unit_of(k.library)
    if gpu:
        first_call(op, k)
    elif unit:  # no GPU: what the first call would wait for, its kernels compiled
        u = nvrtc_kernels.unit(unit)
        for symbol, expression in u.kernels.items():
            if any(re.search(p, expression) for p in first_kernels):
                nvrtc_kernels.provide(unit, symbol)
    seconds = time.perf_counter() - start
    record = json.loads((k.library.parent / "meta.json").read_text())
    return {"seconds": seconds, "built": k.built, "host_rebuilt": bool(k.built and record.get("host_rebuilt")),
            "device_compiler": record.get("device_compiler", "nvcc" if tier == "nvcc" else None),
            "nvrtc_fallback": record.get("nvrtc_fallback")}


def run_file(key: str, rounds: int, kinds, gpu: bool, rows: list, tmp: pathlib.Path) -> None:
    op, source, first_kernel = FILES[key]
    source = ROOT / source
    header = local_header(source)
    folder = tmp / key
    folder.mkdir()
    path, header_copy = folder / source.name, folder / header.name  # included from the file's folder first
    text, header_text = source.read_text(), header.read_text()
    base = time.time_ns() % 10**9 * 100  # constants no earlier run used
    for tier in TIERS:  # the first build of each copy: not an edit
        path.write_text(text)
        header_copy.write_text(header_text)
        timed_edit(op, path, f"{key}_{tier}", tier, gpu, [first_kernel])
    for r in range(rounds):
        for k, kind in enumerate(kinds):
            n = base + r * len(kinds) + k
            new_text, new_header, what = edited(kind, text, header_text, n)
            for tier in TIERS if (r + k) % 2 == 0 else TIERS[::-1]:
                path.write_text(new_text)
                header_copy.write_text(new_header)
                first = [first_kernel] + ([rf"^&wb_new_kernel_{n}$"] if kind == "new_kernel" else [])
                row = timed_edit(op, path, f"{key}_{tier}", tier, gpu, first)
                rows.append({"file": key, "source": str(source.relative_to(ROOT)), "kind": kind, "edit": what,
                             "tier": tier, "round": r, **row})
                print(f"  {key} {kind:10s} {tier:5s} {row['seconds']:7.3f} s"
                      f"{'  host rebuilt' if row['host_rebuilt'] else ''}"
                      f"{'  nvcc fallback: ' + row['nvrtc_fallback'] if row['nvrtc_fallback'] else ''}", flush=True)


def table(rows: list, measured: str, machine: str, command: str) -> list[str]:
    lines = [f"edit loop on {machine}: median seconds per edit, from the edited file to {measured}",
             f"({command})",
             f"{'file':6s} {'edit':10s} {'nvrtc':>8s} {'nvcc':>8s} {'nvcc/nvrtc':>11s}  nvrtc per round"]
    for key in dict.fromkeys(r["file"] for r in rows):
        for kind in dict.fromkeys(r["kind"] for r in rows):
            got = {t: [r["seconds"] for r in rows if (r["file"], r["kind"], r["tier"]) == (key, kind, t)] for t in TIERS}
            if not all(got.values()):
                continue
            med = {t: statistics.median(v) for t, v in got.items()}
            fell = any(r["nvrtc_fallback"] for r in rows if (r["file"], r["kind"], r["tier"]) == (key, kind, "nvrtc"))
            lines.append(f"{key:6s} {kind:10s} {med['nvrtc']:8.3f} {med['nvcc']:8.3f} {med['nvcc'] / med['nvrtc']:10.1f}x  "
                         f"{' '.join(f'{s:.2f}' for s in got['nvrtc'])}{'  (nvcc fallback)' if fell else ''}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="edits of each kind per file and tier (default 5)")
    ap.add_argument("--files", nargs="*", default=list(FILES), choices=list(FILES), help="(default: all)")
    ap.add_argument("--kinds", nargs="*", default=list(KINDS), choices=list(KINDS), help="(default: all)")
    ap.add_argument("--out", default="artifacts/edit_loop", help="folder for edit_loop.jsonl, .txt and README.md")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1; got {args.rounds}")
    from workbench.build import toolchain
    from workbench.measure import results

    gpu = toolchain.gpu_available()
    if gpu:
        import torch

        machine = f"{torch.cuda.get_device_name()}, {len(os.sched_getaffinity(0))} host cores"
    else:  # both tiers for the arch NVRTC takes without a GPU (nvcc would otherwise build the whole JIT list)
        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
        machine = f"{platform.node()}, {len(os.sched_getaffinity(0))} cores, no GPU"
    measured = ("a rebuilt, loaded variant whose first call returned" if gpu else
                "built and loaded (no GPU: NVRTC's time includes the first call's kernels compiled; the call is not made)")
    command = "python3 scripts/edit_loop.py " + " ".join(sys.argv[1:])
    rows: list = []
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.files:
            run_file(key, args.rounds, args.kinds, gpu, rows, pathlib.Path(tmp))
    lines = table(rows, measured, machine, command)
    commit = results.commit(ROOT)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text(
        f"# The edit loop as a student edits (issue 39)\n\nCommit {commit}, {time.strftime('%Y-%m-%d %H:%M %Z')}, "
        f"{machine}; torch {__import__('torch').__version__}, nvcc {toolchain.nvcc_version()}.\n\n"
        f"Made by `{command}`; each row of edit_loop.jsonl is one timed edit, to {measured}.\n"
        f"The table (edit_loop.txt):\n\n```\n" + "\n".join(lines) + "\n```\n")
    results.write_report(out, "edit_loop", [dict(r, commit=commit, machine=machine, measured=measured) for r in rows],
                         lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
