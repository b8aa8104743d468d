"""The NVRTC tier: a CUDA variant's two halves each rebuilt only when they changed. A device edit is
NVRTC's alone, the host library reused; a launcher edit is the host compiler's alone (no nvcc); a
comment or whitespace edit rebuilds nothing; what NVRTC or the host compiler cannot take is nvcc's
build, in one line; the cache's key, lock and publish hold for this tier too.

NVRTC and the host compiler need no GPU, so everything but running the kernels is tested on the CPU
(the routing included: a launch there asks the provider for the right kernel, then fails to load it)."""
from __future__ import annotations

import ctypes
import pathlib
import re
import shutil
import threading
import time

import pytest

from conftest import HAS_GPU, REPO_ROOT
from workbench.build import BuildOptions, get_or_build, nvrtc, nvrtc_kernels, nvrtc_split, nvrtc_tier, toolchain
from workbench.build import cache
from workbench.build.piece import CPP_EXTENSION, NVRTC, RAW, tokens
from workbench.build import variant_piece
from workbench.errors import BuildError
from workbench.model import registry
from workbench.run import nvrtc_routes

SCALAR = REPO_ROOT / "kernels" / "vector_add" / "scalar.cu"
KERNEL_SUM = "c[i] = wb_from_acc<T>(wb_to_acc(a[i]) + wb_to_acc(b[i]));"
LAUNCHER_GRID = "const int64_t need = wb_ceil_div(n, kThreads);"
OPTIONS = BuildOptions(compiler="nvrtc", arch="sm_90a")
# A launch the tests can make through ctypes: forward_kernel<float> over nothing.
TEST_LAUNCH = ('\nextern "C" __attribute__((visibility("default"))) int wb_test_launch() {\n'
               '  forward_kernel<float><<<1, 32>>>(nullptr, nullptr, nullptr, 0);\n  return wb_launch_status();\n}\n')

can_compile = pytest.mark.skipif(not (toolchain.can_build_cuda() and nvrtc.available()),
                                 reason="needs nvcc, a host compiler and NVRTC (torch's CUDA wheels)")


# In every copy, so a build cache kept from an earlier session has none of this session's builds.
SESSION = f"\nconstexpr long long wb_test_session = {time.time_ns()}LL;\n"


def _copy(tmp_path, text=None, name="scalar_edit.cu") -> pathlib.Path:
    path = tmp_path / name
    path.write_text((SCALAR.read_text() if text is None else text) + SESSION)
    return path


def _build(path, name="scalar_edit", options=OPTIONS):
    r = registry.resolve("vector_add")
    return get_or_build(variant_piece(r, name, path, options))


def _said(capsys, words: str) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if words in ln]


# ------------------------------------------------------------------ the split (text alone)

def test_the_split_tells_device_code_from_host_code():
    text = SCALAR.read_text()
    macros = nvrtc_split.space_macros([text])
    spaces = {f.name: f.space for f in nvrtc_split.functions(text, macros)}
    assert spaces["forward_kernel"] == spaces["backward_kernel"] == "global"
    assert spaces["grid_for"] == spaces["forward"] == spaces["backward"] == "host"
    host, device = nvrtc_split.host_view(text, macros), nvrtc_split.device_view(text, macros)
    assert KERNEL_SUM not in host and LAUNCHER_GRID in host          # kernels emptied for the host compiler
    assert KERNEL_SUM in device and LAUNCHER_GRID not in device      # launchers gone for NVRTC
    assert "launchers = {forward, backward}" not in device           # the table naming them too
    assert host.count("\n") == device.count("\n") == text.count("\n")  # every line where it was
    assert "<<<" not in host and "wb_route::launch_here(&&wb_here, a, b, c, n);" in host


@pytest.mark.parametrize("launch, call", [
    ("k<<<g, b>>>(x, y);", "(wb_route::configure(g, b), k(x, y));"),
    ("ns::k<T, 4><<<g, b, 0, s>>>();", "(wb_route::configure(g, b, 0, s), ns::k<T, 4>());"),
    ("if (v) return kernel\n    <<<grid, block>>>(f(a), b);", "if (v) return (wb_route::configure(grid, block), kernel\n    (f(a), b));"),
    ("table[i]<<<1, 2>>>(a); (*fn)<<<1, 2>>>(b);", "(wb_route::configure(1, 2), table[i](a)); (wb_route::configure(1, 2), (*fn)(b));"),
])
def test_a_launch_becomes_a_call_of_the_kernel(launch, call):
    text = f"void launcher() {{ {launch} }}\n"
    assert nvrtc_split.host_view(text, {}) == f"void launcher() {{ {call} }}\n"


def test_a_kernel_body_launches_itself_with_its_parameters_unnamed_ones_named():
    text = "template <class... A> __global__ void k(const float*, int n, A... rest, float4 v) { n += 1; }\n"
    host = nvrtc_split.host_view(text, {})
    assert host.startswith("template <class... A> __global__ void k(const float* wb_p0, int n, A... rest, float4 v) {")
    assert "wb_route::launch_here(&&wb_here, wb_p0, n, rest..., v);" in host and "n += 1" not in host


def test_host_key_moves_with_the_launchers_not_the_kernels_the_comments_or_the_name(tmp_path):
    def key(text, name="scalar_edit.cu"):
        path = _copy(tmp_path, text, name)
        return nvrtc_split.split(nvrtc_split.closure(path, [REPO_ROOT / "kernels" / "common", SCALAR.parent])).host_key

    text = SCALAR.read_text()
    base = key(text)
    assert key(text.replace(KERNEL_SUM, KERNEL_SUM.replace("+ wb_to_acc(b[i])", "+ 2.0f * wb_to_acc(b[i])"))) == base
    assert key(text.replace(KERNEL_SUM, KERNEL_SUM + "\n    // a line more in the kernel")) == base
    assert key(text + "\n// a comment at the end\n") == base
    assert key(text.replace("int forward(", "int\n    forward(")) == base   # layout
    assert key(text, name="scalar_edit-0123456789abcdef.cu") == base          # load_inline names a file by its hash
    assert key(text.replace(LAUNCHER_GRID, LAUNCHER_GRID.replace("kThreads)", "2 * kThreads)"))) != base


def test_tokens_leave_out_comments_and_layout_but_not_strings_lines_where_lines_show():
    base = tokens('#define N 4\nint f() { return N; } // the answer\nconst char* s = "a  b";\n')
    assert tokens('/* doc */ #define N 4\nint f()\n{\n  return N;\n}\nconst char* s = "a  b";') == base
    assert tokens('#define N 4\nint f() { return N; }\nconst char* s = "a b";\n') != base  # inside a string
    assert tokens('#define N 4 int f() { return N; }\nconst char* s = "a  b";\n') != base  # a directive's end
    with_line = "int f() { return __LINE__; }\n"
    assert tokens("// moved\n" + with_line) != tokens(with_line)


def test_host_macros_count_as_execution_spaces():
    text = "#define HD __host__ __device__\nHD inline float f(float x) { return x; }\n"
    (f,) = nvrtc_split.functions(text, nvrtc_split.space_macros([text]))
    assert f.space == "both"


def test_the_device_view_drops_host_declarations_and_keeps_types():
    text = ("typedef int (*Fwd)(const float*, int);\nint host_proto(int);\nusing G = int (*)(int);\n"
            "__device__ float d(float);\nstatic int launch(int n) { return n; }\nconst Fwd table[] = {launch};\n")
    device = nvrtc_split.device_view(text, {}).splitlines()
    assert device[0].startswith("typedef") and device[2].startswith("using") and device[3].startswith("__device__")
    assert not device[1].strip() and not device[4].strip() and not device[5].strip()


def test_kernel_names_become_name_expressions():
    assert nvrtc_tier.name_expression(
        "void (anonymous namespace)::k<(anonymous namespace)::Plan<1, 2>, float, true>(matmul::Gemm<float>, long)"
    ) == "&k<Plan<1, 2>, float, true>"
    assert nvrtc_tier.demangle("_ZN12wb_row_tiles17sum_slices_kernelIffEEvPKT0_PT_ll") == \
        "void wb_row_tiles::sum_slices_kernel<float, float>(float const*, float*, long, long)"


# ------------------------------------------------------------------ the key

def test_the_key_carries_nvrtc_version_options_and_arch(tmp_path):
    path = _copy(tmp_path)
    r = registry.resolve("vector_add")
    piece = variant_piece(r, "scalar_edit", path, OPTIONS)
    assert piece.compiler == NVRTC and piece.command[0] == f"nvrtc-{nvrtc.version()}"
    assert "-arch=sm_90a" in piece.flags and "-std=c++20" in piece.flags
    tc = {"fixed": "toolchain"}
    other_arch = variant_piece(r, "scalar_edit", path, BuildOptions(compiler="nvrtc", arch="sm_80"))
    line_info = variant_piece(r, "scalar_edit", path, BuildOptions(compiler="nvrtc", arch="sm_90a", line_info=True))
    nvcc = variant_piece(r, "scalar_edit", path, BuildOptions(compiler="nvcc"))
    keys_ = {piece.key(tc), other_arch.key(tc), line_info.key(tc), nvcc.key(tc)}
    assert len(keys_) == 4
    newer = type(piece)(**{**piece.__dict__, "command": ("nvrtc-99.9", *piece.command[1:])})
    assert newer.key(tc) != piece.key(tc)


def test_the_key_reads_tokens_but_where_lines_are_compiled_in(tmp_path):
    r = registry.resolve("vector_add")
    tc = {"fixed": "toolchain"}

    def key(text, options=OPTIONS):
        return variant_piece(r, "scalar_edit", _copy(tmp_path, text), options).key(tc)

    text = SCALAR.read_text()
    assert key(text + "\n// a comment\n\n") == key(text) != key(text.replace("kThreads = 256", "kThreads = 128"))
    line_info = BuildOptions(compiler="nvrtc", arch="sm_90a", line_info=True)
    assert key(text + "\n// a comment\n", line_info) != key(text, line_info)   # -lineinfo: lines matter
    assert variant_piece(r, "x", _copy(tmp_path, text + "\n// c\n"), BuildOptions()).key(tc) != \
        variant_piece(r, "x", _copy(tmp_path, text), BuildOptions()).key(tc)      # nvcc's key: bytes, as before


def test_the_key_carries_the_headers_nvrtc_is_given(tmp_path, monkeypatch):
    path = _copy(tmp_path)
    r = registry.resolve("vector_add")
    before = variant_piece(r, "scalar_edit", path, OPTIONS).key({"fixed": "toolchain"})
    monkeypatch.setitem(nvrtc.SYSTEM_HEADERS, "stdint.h", nvrtc.SYSTEM_HEADERS["stdint.h"] + "// changed\n")
    assert variant_piece(r, "scalar_edit", path, OPTIONS).key({"fixed": "toolchain"}) != before


def test_build_options_name_a_bad_compiler_or_arch():
    with pytest.raises(ValueError, match="compiler must be one of"):
        BuildOptions(compiler="clang")
    with pytest.raises(ValueError, match="arch must look like sm_90a"):
        BuildOptions(compiler="nvrtc", arch="9.0")


# ------------------------------------------------------------------ builds (host compiler + NVRTC, no GPU needed)

def _unit(built):
    return nvrtc_kernels.unit(nvrtc_routes.unit_of(built.library))


def _host(built) -> dict:
    """The record of the host library's build."""
    import json

    folder = cache.build_dir_for(f"{built.record['label']}@host", built.record["host_build"])
    return json.loads((folder / "meta.json").read_text())


@can_compile
def test_a_device_edit_is_rebuilt_by_nvrtc_with_the_host_library_reused(tmp_path):
    path = _copy(tmp_path)
    first = _build(path)
    assert first.record["device_compiler"] == "nvrtc" and first.record["kernels"] == 8   # 4 dtypes x 2 kernels
    unit = _unit(first)
    assert unit.key == first.record["nvrtc_unit"] and len(unit.kernels) == first.record["kernels"]
    host = _host(first)
    assert host["kind"] == "variant-host" and "nvcc" not in " ".join(host["command"])   # the host compiler's
    nvrtc_kernels.compile_all(unit.key)
    cubins = {name: nvrtc_kernels.compiled(unit, name)[0].read_bytes() for name in unit.kernels}
    assert all(cubins.values())
    path.write_text(path.read_text().replace(KERNEL_SUM, KERNEL_SUM.replace("+ wb_to_acc", "- wb_to_acc")))
    second = _build(path)
    assert second.built and second.key != first.key
    assert second.record["host_build"] == first.record["host_build"] and not second.record["host_rebuilt"]
    edited = _unit(second)
    assert edited.key != unit.key and edited.kernels == unit.kernels
    name = sorted(unit.kernels)[0]
    assert nvrtc_kernels.provide(edited.key, name)[0].read_bytes() != cubins[name]
    assert not _build(path).built                                        # a warm hit, as any piece


@can_compile
def test_a_comment_or_whitespace_edit_rebuilds_nothing(tmp_path, monkeypatch, capsys):
    path = _copy(tmp_path)
    first = _build(path)
    path.write_text("// a new first line\n" + path.read_text().replace("int forward(", "int   forward(") + "\n\n")
    monkeypatch.setenv("WORKBENCH_QUIET", "0")
    again = _build(path)
    assert not again.built and again.library == first.library and not _said(capsys, "compiling")
    inline = cache.write_source("vector_add", path.read_text() + "// and one more\n", ".cu", "scalar_edit")
    assert not _build(inline).built                                      # load_inline's way: a new file, its hash


@can_compile
def test_kernels_compile_when_launched_first_and_the_rest_when_drained(tmp_path, monkeypatch):
    """The build stops after NVRTC's front end; a launch's kernel compiles alone, at once; the
    timers' drain compiles the others (here no background thread runs, so nothing else does)."""
    queue = nvrtc_kernels._Queue()
    monkeypatch.setattr(queue, "workers", lambda: 0)
    monkeypatch.setattr(nvrtc_kernels, "_queue", queue)
    path = _copy(tmp_path, SCALAR.read_text() + "\n__device__ int lazily_compiled() { return 1; }\n")
    built = _build(path)
    unit = _unit(built)
    assert "front end" in (built.build_dir / "build.log").read_text()
    assert all(nvrtc_kernels.compiled(unit, n) is None for n in unit.kernels)       # nothing past the front end
    assert nvrtc_kernels.pending() == 0                                  # nor queued before a launch
    first, *rest = sorted(unit.kernels)
    cubin, lowered = nvrtc_kernels.provide(unit.key, first)
    assert cubin.stat().st_size > 0 and lowered
    assert [n for n in unit.kernels if nvrtc_kernels.compiled(unit, n)] == [first]  # that kernel alone
    assert nvrtc_kernels.pending() == len(rest)                          # the others, queued by that launch
    nvrtc_kernels.drain()
    assert nvrtc_kernels.pending() == 0 and all(nvrtc_kernels.compiled(unit, n) for n in rest)
    assert "registers" in cubin.with_suffix(".log").read_text()          # ptxas's report, per kernel


@can_compile
def test_an_edit_starts_on_the_kernels_its_last_launch_asked_for_and_the_background_yields(tmp_path, monkeypatch):
    queue = nvrtc_kernels._Queue()
    monkeypatch.setattr(queue, "workers", lambda: 0)
    monkeypatch.setattr(nvrtc_kernels, "_queue", queue)
    path = _copy(tmp_path, SCALAR.read_text() + "\n__device__ int remembered() { return 1; }\n")
    before = _unit(_build(path))
    launched = sorted(before.kernels)[3]
    nvrtc_kernels.provide(before.key, launched)                          # what a first call asked for
    assert {k for k, _ in queue.queued} == {before.key} and len(queue.queued) == len(before.kernels) - 1
    path.write_text(path.read_text().replace("return 1;", "return 2;"))
    after = _unit(_build(path))
    assert list(queue.queued) == [(after.key, launched)]                 # the older edit's work gone; this first
    queue.launching = 1                                                  # a launch compiles its own kernel:
    threading.Thread(target=queue._work, daemon=True).start()
    time.sleep(0.5)
    assert list(queue.queued) == [(after.key, launched)]                 # no background compile starts beside it
    with queue.cond:
        queue.launching = 0
        queue.cond.notify_all()
    deadline = time.time() + 300
    while nvrtc_kernels.compiled(after, launched) is None and time.time() < deadline:
        time.sleep(0.1)
    assert nvrtc_kernels.compiled(after, launched) and not queue.queued


def _launch_through_the_library(built):
    """wb_test_launch() of the built library, its provider attached as the loader attaches it: the launch
    rewritten as a call, the kernel's body asking the provider for its kernel by an offset in its code."""
    assert nvrtc_routes.attach(built.library, built.record["nvrtc_unit"])
    return ctypes.CDLL(str(built.library)).wb_test_launch()


@can_compile
def test_a_launch_asks_the_provider_for_its_own_kernel(tmp_path):
    path = _copy(tmp_path, SCALAR.read_text() + TEST_LAUNCH, name="routed.cu")
    built = _build(path, "routed")
    unit = _unit(built)
    (wanted,) = [n for n, e in unit.kernels.items() if e == "&forward_kernel<float>"]
    status = _launch_through_the_library(built)
    assert [n for n in unit.kernels if nvrtc_kernels.compiled(unit, n)] == [wanted]   # that kernel, compiled
    # With a GPU the launch runs; without one the cubin cannot be loaded: cudaErrorInvalidKernelImage.
    assert status == (0 if HAS_GPU else 200)


@can_compile
def test_a_kernel_that_fails_past_the_front_end_names_itself(tmp_path, capfd):
    """ptxas's error (here: more shared memory than a block may have) comes after the front end the
    build ran: the kernel's launch, and the CLI's build, name the kernel and the reason."""
    import subprocess
    import sys

    big = ("{ __shared__ float wb_too_big[1 << 20]; wb_too_big[(i * 7) & 1023] = 1.0f;"
           " if (wb_too_big[i & 1023] > 2.0f) return; " + KERNEL_SUM + " }")
    path = _copy(tmp_path, SCALAR.read_text().replace(KERNEL_SUM, big) + TEST_LAUNCH, name="too_big.cu")
    built = _build(path, "too_big")
    unit = _unit(built)
    (name,) = [n for n, e in unit.kernels.items() if e == "&forward_kernel<float>"]
    with pytest.raises(nvrtc_kernels.KernelCompileError, match="too_big.*NVRTC could not compile .*error"):
        nvrtc_kernels.provide(unit.key, name)
    assert _launch_through_the_library(built) == 200                     # cudaErrorInvalidKernelImage
    assert re.search(r"workbench: a kernel of an NVRTC tier library: KernelCompileError: .*error", capfd.readouterr().err)
    cli = subprocess.run([sys.executable, "-m", "workbench", "build", "vector_add", str(path), "--compiler", "nvrtc",
                          "--arch", "sm_90a"], capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert cli.returncode != 0 and "did not compile" in cli.stderr, cli.stderr


@can_compile
def test_the_provider_knows_the_kernels_by_where_their_code_lies(tmp_path):
    path = _copy(tmp_path, SCALAR.read_text() + "\n__device__ int provided() { return 1; }\n")
    built = _build(path)
    unit = _unit(built)
    handle = ctypes.CDLL(str(built.library))
    assert handle.wb_nvrtc_set_provider                                  # the setter the loader calls
    functions = {symbol: (start, size) for start, size, symbol in nvrtc_tier.functions(built.library)}
    assert set(unit.kernels) <= set(functions)
    name = sorted(unit.kernels)[-1]
    provider = nvrtc_routes._provider(unit.key, [(*functions[name], name)])
    out, lowered = ctypes.create_string_buffer(4096), ctypes.create_string_buffer(4096)
    start, size = functions[name]
    assert provider(start + size - 1, ctypes.addressof(out), 4096, ctypes.addressof(lowered), 4096) == 0
    assert (pathlib.Path(out.value.decode()), lowered.value.decode()) == nvrtc_kernels.compiled(unit, name)
    assert provider(start + size, ctypes.addressof(out), 4096, ctypes.addressof(lowered), 4096) == 2  # not a kernel
    assert nvrtc_routes.unit_of(built.library) == unit.key and nvrtc_routes.unit_of(tmp_path / "x.so") is None


@can_compile
def test_clean_removes_the_kernels_of_units_no_build_names(tmp_path, monkeypatch):
    import os
    import time

    from conftest import private_cache
    from workbench.build import clean

    monkeypatch.setenv("WORKBENCH_CACHE", str(private_cache(tmp_path / "cache", labels=("vector_add-scalar_edit",))))
    path = _copy(tmp_path)
    kept = _unit(_build(path))
    nvrtc_kernels.compile_all(kept.key)
    path.write_text(path.read_text().replace(KERNEL_SUM, KERNEL_SUM.replace("+ wb_to_acc", "- wb_to_acc")))
    gone = _unit(_build(path))
    nvrtc_kernels.compile_all(gone.key)
    gone_files = nvrtc_kernels.unit_files(gone.key)
    assert len(gone_files) == 3 * len(gone.kernels) + 1 and all(f.exists() for f in gone_files)
    for build in cache.builds_root().iterdir():          # the edited build's folder is gone from the cache
        if nvrtc_routes.unit_of(build / "any.so") == gone.key:
            shutil.rmtree(build)
    clean.clean(older_than_s=10**9)
    assert all(f.exists() for f in gone_files)                           # under an hour old: a build may be on its way
    old = time.time() - 7200
    for unit in (gone, kept):
        os.utime(cache.subdir("nvrtc-kernels") / f"{unit.key}.json", (old, old))
    report = clean.clean(older_than_s=10**9)
    assert not any(f.exists() for f in gone_files) and any(gone.key in r for r in report["removed"])
    assert all(f.exists() for f in nvrtc_kernels.unit_files(kept.key))   # a build still names it


@pytest.mark.parametrize("key", ["ex02", "ex06", "vec4"])
def test_the_edit_loops_edits_touch_the_half_they_say(tmp_path, key):
    """scripts/edit_loop.py's edits of a student's file: a kernel's constant leaves the host side as it
    was, a launcher's changes it, a comment changes no token, a header's and a new kernel reach the
    kernels; every edit keeps the file a variant the split reads."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("edit_loop", REPO_ROOT / "scripts" / "edit_loop.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    op, source, _ = script.FILES[key]
    source = REPO_ROOT / source
    include_dirs = variant_piece(registry.resolve(op), "x", source).include_dirs
    texts = {source.name: source.read_text(), **script.headers_beside(source, include_dirs)}

    def views(files, folder):
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text)
        return nvrtc_split.split(nvrtc_split.closure(folder / source.name, include_dirs))

    base = views(texts, tmp_path / "base")
    edits = {kind: script.edited(kind, texts, 12345)[0] for kind in script.KINDS}
    got = {kind: views(files, tmp_path / kind) for kind, files in edits.items()}
    assert got["kernel"].host_key == base.host_key and got["kernel"].device != base.device
    assert got["launcher"].host_key != base.host_key
    assert all(tokens(edits["comment"][n]) == tokens(texts[n]) for n in texts)
    assert got["header"].device != base.device
    assert got["new_kernel"].kernels == base.kernels | {"wb_new_kernel_12345"}


def test_the_timers_wait_for_background_compiles(monkeypatch):
    from workbench.measure import timing

    calls = []
    monkeypatch.setattr(nvrtc_kernels, "drain", lambda: calls.append("drain"))
    timing.time_cpu(lambda: calls.append("call"), warmup=1, min_samples=3, max_samples=3)
    assert calls == ["call", "drain", "call", "call", "call"]   # the warm-up may share it; no sample does


@can_compile
def test_a_launcher_edit_rebuilds_the_host_side_with_the_host_compiler_in_one_line(tmp_path, monkeypatch, capsys):
    path = _copy(tmp_path)
    first = _build(path)
    path.write_text(path.read_text().replace(LAUNCHER_GRID, LAUNCHER_GRID.replace("kThreads)", "2 * kThreads)")))
    monkeypatch.setenv("WORKBENCH_QUIET", "0")
    second = _build(path)
    said = _said(capsys, "host side changed")
    assert len(said) == 1 and "the host compiler rebuilt it in" in said[0], said
    assert second.record["host_build"] != first.record["host_build"] and second.record["host_rebuilt"]
    assert second.record["nvrtc_unit"] == first.record["nvrtc_unit"]   # the same kernels: none compiled again
    assert second.record["device_compiler"] == "nvrtc"


@can_compile
@pytest.mark.parametrize("added, why", [
    ("#include <vector>\n", "NVRTC cannot compile .*vector"),   # a host header NVRTC does not have
    ("__device__ unsigned wb_counter;\n", r"device variables \(__device__ unsigned wb_counter;\)"),  # one per cubin
    ("#include <cooperative_groups.h>\n", r"<cooperative_groups.h>: libcu\+\+"),  # seconds per NVRTC program
])
def test_what_nvrtc_cannot_compile_falls_back_to_nvcc_in_one_line(tmp_path, monkeypatch, capsys, added, why):
    path = _copy(tmp_path, added + SCALAR.read_text())
    monkeypatch.setenv("WORKBENCH_QUIET", "0")
    built = _build(path)
    said = _said(capsys, "nvcc builds it")
    assert len(said) == 1 and re.search(why, said[0]), said
    assert built.record["device_compiler"] == "nvcc" and re.search(why, built.record["nvrtc_fallback"])
    assert nvrtc_routes.unit_of(built.library) is None


# What nvcc's implicit cuda_runtime.h gives a .cu file, and the C/C++ headers device code reads.
NVCC_GIVES = """#include <cstdint>
#include <cfloat>
#include <algorithm>
#include <cstdio>
#include <cassert>
__global__ void wb_gives(float* y, std::int64_t n) {
  const int i = threadIdx.x;
  assert(n >= 0);
  if (n < 0) printf("n = %lld\\n", static_cast<long long>(n));
  float best = -INFINITY, low = FLT_MAX;
  if (i < n) best = std::max(std::sqrt(y[i]) * float(M_PI), best) + (INT_MAX > 0) + isnan(y[i]) + std::fabs(NAN);
  low = std::min(low, expf(best)) + (UINT32_MAX > 0);
  y[i] = best + low + HUGE_VALF;
}
"""


@can_compile
def test_what_nvcc_gives_a_file_nvrtc_builds_too(tmp_path, monkeypatch, capsys):
    path = _copy(tmp_path, NVCC_GIVES + SCALAR.read_text().replace(
        "return wb_launch_status();\n  });\n}\n\nint backward",
        "wb_gives<<<1, 32>>>(nullptr, 0);\n    return wb_launch_status();\n  });\n}\n\nint backward"), "gives.cu")
    monkeypatch.setenv("WORKBENCH_QUIET", "0")
    built = _build(path, "gives")
    assert built.record["device_compiler"] == "nvrtc", built.record.get("nvrtc_fallback")
    unit = _unit(built)
    assert "&wb_gives" in unit.kernels.values()
    nvrtc_kernels.compile_all(unit.key)                                  # past the front end too
    assert not _said(capsys, "nvcc builds it")


@can_compile
def test_a_compile_error_is_nvccs_naming_file_and_line(tmp_path, monkeypatch, capsys):
    """NVRTC refuses it; nvcc, which decides what a .cu file may hold, refuses it too: its BuildError."""
    text = SCALAR.read_text().replace(KERNEL_SUM, KERNEL_SUM + "\n    undefined_in_the_kernel(n);")
    path = _copy(tmp_path, text)
    line = text.splitlines().index("    undefined_in_the_kernel(n);") + 1
    monkeypatch.setenv("WORKBENCH_QUIET", "0")
    with pytest.raises(BuildError) as e:
        _build(path)
    assert pathlib.Path(e.value.file).name == path.name and e.value.line == line
    assert "undefined_in_the_kernel" in e.value.first_error
    assert e.value.log_path.parent == cache.subdir("logs")                # kept where the message says
    assert not list(cache.builds_root().glob(".staging-vector_add-scalar_edit*"))  # none of its staging left
    said = _said(capsys, "nvcc builds it")
    assert len(said) == 1 and f"{path.name}:{line}" in said[0] and "undefined_in_the_kernel" in said[0], said


@can_compile
def test_concurrent_builds_of_one_nvrtc_piece_compile_once(tmp_path):
    """Two threads ask for the same piece: the key's lock lets one compile; the other finds its build."""
    path = _copy(tmp_path, SCALAR.read_text() + "\n// concurrent\n")
    _build(path)  # the host side first, so the race is over the NVRTC piece itself
    path.write_text(path.read_text().replace(KERNEL_SUM, KERNEL_SUM.replace("+ wb_to_acc", "* wb_to_acc")))
    results = []
    threads = [threading.Thread(target=lambda: results.append(_build(path))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(b.built for b in results) == [False, True]
    assert results[0].library == results[1].library


# ------------------------------------------------------------------ on the GPU

def _sum_kernel(op_text_edit, tmp_path, name):
    from workbench.run import loader

    path = _copy(tmp_path, SCALAR.read_text().replace(KERNEL_SUM, op_text_edit), name=f"{name}.cu")
    return loader.load_source("vector_add", path, name, options=BuildOptions(compiler="nvrtc"))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_a_device_edit_changes_the_result(tmp_path):
    import torch

    a = torch.randn(1 << 20, device="cuda")
    b = torch.randn(1 << 20, device="cuda")
    plain = _sum_kernel(KERNEL_SUM, tmp_path, "nvrtc_edit")
    assert plain.built and plain.info["device"] == "cuda"
    torch.testing.assert_close(plain(a, b), a + b)
    tripled = _sum_kernel(KERNEL_SUM.replace("+ wb_to_acc(b[i])", "+ 3.0f * wb_to_acc(b[i])"), tmp_path, "nvrtc_edit")
    torch.testing.assert_close(tripled(a, b), a + 3 * b)
    torch.testing.assert_close(plain(a, b), a + b)   # the older handle keeps its own module
    for dtype in (torch.float16, torch.bfloat16, torch.float64):   # every instantiation routed
        x, y = a.to(dtype), b.to(dtype)
        torch.testing.assert_close(tripled(x, y), (x.double() + 3 * y.double()).to(dtype))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("qualified", ["bias_gelu/vec4", "rmsnorm/vectorized", "matmul/warptile",
                                       "bias_gelu/02_vec4_loads", "matmul/06_smem_tiling"])
def test_nvrtc_builds_pass_the_checks_nvcc_builds_pass(qualified):
    """Tree variants and exercise solutions (occupancy queries, shared-memory attributes, template
    kernels: every routed runtime call) check as nvcc's builds do."""
    import workbench as wb
    from workbench.run import loader

    op, _, variant = qualified.partition("/")
    exercise = REPO_ROOT / "exercises" / variant / "solution.cu"
    source = exercise if exercise.is_file() else registry.resolve(op).variant_source(variant)
    k = loader.load_source(op, source, f"{variant[3:] if exercise.is_file() else variant}_nvrtc",
                           options=BuildOptions(compiler="nvrtc"))
    assert nvrtc_routes.unit_of(k.library) is not None
    report = wb.check(op, k)
    assert report.ok, report


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_a_routed_launch_error_reaches_the_launcher(tmp_path):
    """A launch the driver refuses (too many threads per block) is the variant's error, as with nvcc."""
    import torch

    from workbench.errors import WorkbenchError

    path = _copy(tmp_path, SCALAR.read_text().replace("constexpr int kThreads = 256;", "constexpr int kThreads = 4096;"),
                 name="too_wide.cu")
    from workbench.run import loader

    k = loader.load_source("vector_add", path, "too_wide", options=BuildOptions(compiler="nvrtc"))
    a = torch.ones(1024, device="cuda")
    with pytest.raises((WorkbenchError, RuntimeError), match="invalid|configuration|argument"):
        k(a, a)
    torch.cuda.synchronize()



@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_a_first_call_compiles_its_own_kernel_alone(tmp_path, monkeypatch):
    import torch

    queue = nvrtc_kernels._Queue()
    monkeypatch.setattr(queue, "workers", lambda: 0)   # no background: what compiles is what the launch asked for
    monkeypatch.setattr(nvrtc_kernels, "_queue", queue)
    k = _sum_kernel(KERNEL_SUM + "  // compiled on its first launch", tmp_path, "nvrtc_first_launch")
    unit = nvrtc_kernels.unit(nvrtc_routes.unit_of(k.library))
    a = torch.randn(4096, device="cuda")
    torch.testing.assert_close(k(a, a), a + a)
    assert len([n for n in unit.kernels if nvrtc_kernels.compiled(unit, n)]) == 1
    assert nvrtc_kernels.pending() == len(unit.kernels) - 1
    nvrtc_kernels.drain()
    x = a.double()
    torch.testing.assert_close(k(x, x), x + x)           # another kernel, already compiled by the drain


# ------------------------------------------------------------------ where the tier is chosen

@can_compile
def test_the_cli_builds_with_a_tier_and_prints_the_build_time():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "workbench", "build", "vector_add", "scalar", "--compiler", "nvrtc",
                          "--arch", "sm_90a"], capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    assert re.search(r"vector_add/scalar\s+(built|cached)\s+\d+\.\d\d s\s+device code: nvrtc", out.stdout), out.stdout


def test_load_inline_and_the_magic_use_the_nvrtc_tier_by_default():
    import inspect

    from workbench.run import loader

    assert inspect.signature(loader.load_inline).parameters["options"].default.compiler == "nvrtc"


@pytest.mark.parametrize("options, compiler", [(None, NVRTC), (BuildOptions(compiler="nvcc"), CPP_EXTENSION),
                                               (BuildOptions(compiler="nvrtc", arch="sm_80"), NVRTC)])
def test_wb_load_inline_builds_with_the_compiler_its_options_name(monkeypatch, options, compiler):
    """wb.load_inline(..., options=BuildOptions(compiler="nvcc")) is nvcc's whole-file build: the piece
    handed to the pipeline says so (the build itself stops there)."""
    import workbench as wb
    from workbench.run import loader

    class Stop(Exception):
        pass

    def capture(piece, **_):
        pieces.append(piece)
        raise Stop

    pieces = []
    monkeypatch.setattr(loader, "ensure_op", lambda r, python=True: r)
    monkeypatch.setattr(loader, "_check_can_build", lambda *a: None)
    monkeypatch.setattr(nvrtc, "available", lambda: True)
    monkeypatch.setattr(nvrtc, "version", lambda: "13.0")
    monkeypatch.setattr(loader, "get_or_build", capture)
    with pytest.raises(Stop):
        wb.load_inline("vector_add", SCALAR.read_text(), "opted", **({"options": options} if options else {}))
    assert pieces[0].compiler == compiler
    with pytest.raises(TypeError, match="unexpected keyword argument.*dtypes"):
        wb.load_inline("vector_add", SCALAR.read_text(), "opted", dtypes=["float32"])


def test_without_nvrtc_the_tier_is_nvcc_with_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(nvrtc, "available", lambda: False)
    monkeypatch.setenv("WORKBENCH_QUIET", "0")
    piece = variant_piece(registry.resolve("vector_add"), "scalar_edit", _copy(tmp_path), OPTIONS)
    assert piece.compiler != NVRTC
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and "no NVRTC library" in said[0], said


def test_a_torch_extension_asked_for_nvrtc_is_nvccs_with_one_line(monkeypatch, capsys, tmp_path):
    from workbench.build import cuda_source_piece

    monkeypatch.setenv("WORKBENCH_QUIET", "0")
    piece = cuda_source_piece(label="vector_add/torch_extension", kind="extension", source=_copy(tmp_path),
                              include_dirs=[tmp_path], options=OPTIONS)
    assert piece.compiler == CPP_EXTENSION
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and "nvcc builds it: a torch extension" in said[0], said


def test_the_fallback_shares_the_nvcc_tiers_cache_entry(tmp_path):
    path = _copy(tmp_path)
    r = registry.resolve("vector_add")
    tc = {"fixed": "toolchain"}
    for line_info in (False, True):
        tiered = variant_piece(r, "scalar_edit", path, BuildOptions(compiler="nvrtc", arch="sm_90a", line_info=line_info))
        nvcc = variant_piece(r, "scalar_edit", path, BuildOptions(compiler="nvcc", line_info=line_info))
        assert nvrtc_tier.nvcc_piece(tiered).key(tc) == nvcc.key(tc)


@can_compile
def test_kernel_cost_script_times_a_kernel_each_way(tmp_path, monkeypatch, capsys):
    """scripts/nvrtc_kernel_cost.py (the edit loop's floor): a kernel compiled alone in a fresh
    process with the tier's options, to PTX only and with --Ofast-compile=mid, then the whole unit in
    one program; each row's seconds are positive; a bad --kernels is refused by name."""
    import importlib.util
    import json
    import sys

    spec = importlib.util.spec_from_file_location("nvrtc_kernel_cost", REPO_ROOT / "scripts" / "nvrtc_kernel_cost.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(sys, "argv", ["nvrtc_kernel_cost.py", "vector_add/scalar", "--kernels", "1", "--out", str(tmp_path)])
    assert script.main() == 0
    rows = [json.loads(line) for line in (tmp_path / "kernel_cost.jsonl").read_text().splitlines()]
    assert [r["options"] for r in rows] == ["tier", "ptx", "fast-mid", "tier"]
    assert rows[-1]["kernel"].startswith("all ") and len({r["kernel"] for r in rows[:3]}) == 1
    assert all(r["wall_s"] > 0 and r["user_s"] >= 0 for r in rows)
    monkeypatch.setattr(sys, "argv", ["nvrtc_kernel_cost.py", "vector_add/scalar", "--kernels", "0"])
    with pytest.raises(SystemExit):
        script.main()
    assert "--kernels must be at least 1; got 0" in capsys.readouterr().err
