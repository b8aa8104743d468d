"""The edit loop as a student edits: each kind of edit of a self-contained file, timed per tier.

For each file (exercise 02's and 06's solutions, the tree's bias_gelu/vec4; --files), a copy in a
temporary folder (the headers with device code it includes copied beside it, where the compiler
finds them first) is edited in each way, several rounds, interleaved: each edit is timed with the NVRTC tier (load_inline's default) and
with nvcc's whole-file build, in alternating order, every edit made to the original text with a
constant no earlier run used (so no edit is a warm hit of another):
  kernel      a constant in a kernel body (the file's first kernel; for one whose kernels live in
              a header, as vec4's in wb_row_tiles.cuh, that header's)
  launcher    a constant in the launcher (and exercise 02's block size, kBlock)
  comment     a comment and blank lines added: the same tokens (nothing to rebuild)
  header      a constant in a device function of a header the file includes
  new_kernel  a kernel added and launched by the launcher
With a GPU, from the edited file to a rebuilt, loaded variant whose first call has returned
(wb.load_source + one forward + synchronize). Without one, to "built and loaded", and for NVRTC the
kernels that first call launches compiled too (what the first call would wait for), the call
itself left out. Before each edit, every background compile has ended. Each row says whether the
host side was rebuilt and whether the tier fell back to nvcc.

--gpu-time (GPU only) then times every committed CUDA variant's forward built both ways, side by
side (NVRTC's machine code against nvcc's).

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


def edited(kind: str, texts: dict[str, str], n: int) -> tuple[dict[str, str], str]:
    """({file name: text}, what was edited) for edit number n of this kind: `texts` holds the file
    first, then the headers with device code it includes, copied beside it."""
    out, (main, text) = dict(texts), next(iter(texts.items()))
    headers = [name for name in texts if name != main]
    if kind in ("kernel", "header"):  # a kernel: the file's first (a header's, where it has none)
        where = [main, *headers] if kind == "kernel" else headers
        spaces = ("global",) if kind == "kernel" else ("device", "global", "both")
        name, f = next((name, f) for name in where for f in _functions(texts[name]) if f.space in spaces)
        out[name] = _insert_in_body(texts[name], f, f"(void){n};")
        return out, f"a constant in {f.name}" + (f" ({name})" if name != main else "")
    launcher = _launcher(text)
    if kind == "launcher":
        out[main] = _insert_in_body(text, launcher, f"(void){n};")
        if "constexpr int kBlock = 256;" in text:
            out[main] = out[main].replace("kBlock = 256;", f"kBlock = {(128, 512, 64, 1024)[n % 4]};")
            return out, "the block size, kBlock, and a constant in the launcher"
        return out, "a constant in the launcher"
    if kind == "comment":
        out[main] = f"// edit {n}: a note\n{text}\n\n   // and one more\n"
        return out, "a comment and blank lines"
    if kind == "new_kernel":  # defined before the file's first kernel (or launcher), launched by the launcher first
        at = next((f.head_start for f in _functions(text) if f.space == "global"), launcher.head_start)
        body = _insert_in_body(text, launcher, f"wb_new_kernel_{n}<<<1, 32>>>(nullptr);")
        out[main] = f"{body[:at]}__global__ void wb_new_kernel_{n}(float* p) {{ if (p) p[threadIdx.x] = {n}.0f; }}\n{body[at:]}"
        return out, "a kernel, launched"
    raise ValueError(kind)


def headers_beside(source: pathlib.Path, include_dirs) -> dict[str, str]:
    """{name: text} of the headers with device code the file includes by a quoted #include, found as
    the compiler finds them: copied beside the file, they are the ones it reads, and a student's to edit."""
    found = []
    for name in re.findall(r'^#include "([^"]+)"', source.read_text(), re.M):
        path = next((d / name for d in (source.parent, *include_dirs) if (d / name).is_file()), None)
        if path and any(f.space in ("device", "global", "both") for f in _functions(path.read_text())):
            found.append((path.parent.name == "common", name, path.read_text()))
    return {name: text for _, name, text in sorted(found, key=lambda h: h[0])}  # the op's own headers first


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
    from workbench.build import variant_piece
    from workbench.model import registry

    op, source, first_kernel = FILES[key]
    source = ROOT / source
    include_dirs = variant_piece(registry.resolve(op), "x", source).include_dirs
    texts = {source.name: source.read_text(), **headers_beside(source, include_dirs)}
    folder = tmp / key
    folder.mkdir()
    base = time.time_ns() % 10**9 * 100  # constants no earlier run used
    for tier in TIERS:  # the first build of each copy: not an edit
        for name, text in texts.items():
            (folder / name).write_text(text)
        timed_edit(op, folder / source.name, f"{key}_{tier}", tier, gpu, [first_kernel])
    for r in range(rounds):
        for k, kind in enumerate(kinds):
            n = base + r * len(kinds) + k
            new, what = edited(kind, texts, n)
            for tier in TIERS if (r + k) % 2 == 0 else TIERS[::-1]:
                for name, text in new.items():
                    (folder / name).write_text(text)
                first = [first_kernel] + ([rf"^&wb_new_kernel_{n}$"] if kind == "new_kernel" else [])
                row = timed_edit(op, folder / source.name, f"{key}_{tier}", tier, gpu, first)
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


def gpu_times(rows: list, lines: list, only: list[str] | None = None) -> None:
    """Every committed CUDA variant's forward (or those in `only`, OP/VARIANT), built by each tier,
    timed at the op's third CUDA bench size: NVRTC's machine code against nvcc's."""
    import torch

    from workbench.build import BuildOptions
    from workbench.measure.timing import time_cuda
    from workbench.model import registry
    from workbench.run import loader

    lines += ["", f"{'variant':28s} {'nvcc ms':>10s} {'nvrtc ms':>10s} {'ratio':>7s}  size dtype  (nvrtc tier's device compiler)"]
    for op in registry.ops():
        r = registry.resolve(op)
        sizes = r.spec.bench_sizes.get("cuda") or [r.spec.sample_size()]
        size = sizes[min(2, len(sizes) - 1)]
        for name, source in sorted(r.variant_files.items()):
            if source.suffix != ".cu" or only and f"{op}/{name}" not in only:
                continue
            times = {}
            try:
                for tier in TIERS:
                    k = loader.load_source(op, source, f"{name}_{tier}", options=BuildOptions(compiler=tier))
                    inputs = r.spec.new_inputs(size, k.dtypes[0], "cuda", torch.Generator(device="cuda").manual_seed(0))
                    times[tier] = time_cuda(lambda: k(*inputs, **r.spec.sample_attrs()[0])).median_ms
                    if tier == "nvrtc":  # the build's record says whether NVRTC compiled it or nvcc did
                        device_compiler = json.loads((k.library.parent / "meta.json").read_text()).get("device_compiler")
            except Exception as e:  # noqa: BLE001 - a variant this GPU cannot run is listed as such
                lines.append(f"{op + '/' + name:28s} skipped: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
                continue
            ratio = times["nvrtc"] / times["nvcc"]
            rows.append({"kind": "gpu_time", "variant": f"{op}/{name}", "size": list(size), "dtype": k.dtypes[0],
                         "nvcc_ms": times["nvcc"], "nvrtc_ms": times["nvrtc"], "ratio": ratio,
                         "nvrtc_tier_device_compiler": device_compiler})
            lines.append(f"{op + '/' + name:28s} {times['nvcc']:10.4f} {times['nvrtc']:10.4f} {ratio:7.3f}  "
                         f"{'x'.join(map(str, size))} {k.dtypes[0]}  ({device_compiler})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="edits of each kind per file and tier (default 5)")
    ap.add_argument("--files", nargs="*", default=list(FILES), choices=list(FILES), help="(default: all)")
    ap.add_argument("--kinds", nargs="*", default=list(KINDS), choices=list(KINDS), help="(default: all)")
    ap.add_argument("--gpu-time", nargs="*", metavar="OP/VARIANT", help="also time every committed CUDA variant "
                    "(or these) built both ways on the GPU, after the edits")
    ap.add_argument("--out", default="artifacts/edit_loop", help="folder for edit_loop.jsonl, .txt and README.md")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1; got {args.rounds}")
    from workbench.build import toolchain
    from workbench.measure import bench_rows

    commit = bench_rows.commit(ROOT)  # the code that runs: taken before it does
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
    if args.gpu_time is not None and gpu:
        gpu_times(rows, lines, args.gpu_time)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text(
        f"# The edit loop as a student edits (issue 39)\n\nCommit {commit}, {time.strftime('%Y-%m-%d %H:%M %Z')}, "
        f"{machine}; torch {__import__('torch').__version__}, nvcc {toolchain.nvcc_version()}.\n\n"
        f"Made by `{command}`; each row of edit_loop.jsonl is one timed edit, to {measured}.\n"
        f"The table (edit_loop.txt):\n\n```\n" + "\n".join(lines) + "\n```\n")
    bench_rows.write_report(out, "edit_loop", [dict(r, commit=commit, machine=machine, measured=measured) for r in rows],
                         lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
