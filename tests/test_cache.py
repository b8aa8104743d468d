"""The content-keyed build cache (issue 2, section 8): warm loads never build, an edit rebuilds only
its variant, keys follow flags / arch list / toolchain / headers, broken cache entries are rebuilt,
locks neither hang nor outlive their process, compile errors name file:line and keep the last
good build, and publication is atomic."""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import signal
import threading
import time
import uuid

import pytest
import torch

from conftest import REPO_ROOT, describe, wait_for_line
from workbench.build import cache, toolchain
from workbench import config
from workbench.run import loader
from workbench.run.process_state import STATE
from workbench import build
from workbench.build import piece, records
from workbench.specs.bias_gelu import SPEC as spec


def _last_json(proc) -> dict:
    assert proc.returncode == 0, describe(proc)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, describe(proc)
    return json.loads(lines[-1])


# --- a warm load in a fresh process ------------------------------------------------------------

WARM_LOAD = r"""
import json, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import os, subprocess
import torch.utils.cpp_extension as cpp_extension

def refuse(*args, **kwargs):
    raise AssertionError(f"a warm load must not build or run a tool; called with {args[:1]!r}")

# Anything that could compile: cpp_extension's entry points, and any child process (ninja, nvcc).
cpp_extension.load = cpp_extension.load_inline = cpp_extension._jit_compile = refuse
subprocess.Popen = subprocess.run = subprocess.check_output = subprocess.call = refuse
os.system = refuse

import workbench as wb
from workbench.run import loader
from workbench.run.process_state import STATE
from workbench.build import compilers
compilers.COMPILERS.update(dict.fromkeys(compilers.COMPILERS, refuse))
t2 = time.perf_counter()
k = wb.load("bias_gelu", "cpu")
t3 = time.perf_counter()
from workbench.specs.bias_gelu import SPEC as spec
x, b = spec.new_inputs((17, 33), torch.float32, "cpu", torch.Generator().manual_seed(0))
err = (k(x, b).double() - spec.reference(x, b)).abs().max().item()
print(json.dumps({"built": k.built, "harness_built": STATE.harness["built"], "build_id": k.build_id,
                  "import_torch_s": t1 - t0, "import_workbench_s": t2 - t1, "load_s": t3 - t2, "err": err}))
"""


def test_warm_load_in_fresh_process_never_builds(cpu_kernel, run_python, record_property):
    res = _last_json(run_python(WARM_LOAD))
    assert res["built"] is False and res["harness_built"] is False
    assert res["build_id"] == cpu_kernel.build_id
    assert res["err"] < 1e-5
    print(f"\nwarm load in a fresh process: import torch {res['import_torch_s']:.3f} s, "
          f"import workbench {res['import_workbench_s']:.3f} s, load(bias_gelu, cpu) {res['load_s']:.3f} s")
    record_property("warm_load_s", res["load_s"])
    # Generous: a warm hit is a few file reads and two dlopens (~0.03 s here); a build takes > 0.5 s.
    assert res["load_s"] < 3.0, res


WARM_LOAD_MODULES = r"""
import json, sys
import workbench as wb
k = wb.load("bias_gelu", "cpu")
print(json.dumps({"built": k.built, "modules": sorted(m for m in sys.modules if m.startswith("workbench.build"))}))
"""


def test_a_warm_load_imports_four_build_modules_at_most(cpu_kernel, run_python):
    """A warm hit is a key, a look-up with the trust checks and a library path: the package and
    piece, toolchain and cache. The compile machinery (records, compilers, guard, the NVRTC tier,
    clean ...) is imported on a miss only."""
    res = _last_json(run_python(WARM_LOAD_MODULES))
    assert res["built"] is False
    assert len(res["modules"]) <= 4, res["modules"]
    assert not {"workbench.build.records", "workbench.build.compilers", "workbench.build.guard"} & set(res["modules"])


def test_warm_load_check_is_not_vacuous(cpu_kernel, run_python):
    """The same child, but with the cache pointed at an empty directory: the refusals fire."""
    import tempfile

    with tempfile.TemporaryDirectory() as empty:
        proc = run_python(WARM_LOAD, env_extra={"WORKBENCH_CACHE": empty})
    assert proc.returncode != 0
    assert "a warm load must not build" in proc.stderr, describe(proc)


# --- editing one kernel rebuilds only that variant ---------------------------------------------

EDIT_LOOP = r"""
import json, pathlib, sys
root = pathlib.Path(sys.argv[1])
from workbench import config
config.KERNELS_DIR = root
config.COMMON_DIR = root / "common"
import workbench as wb
from workbench.build import cache
from workbench.run import loader
from workbench.run.process_state import STATE
out = {}
for name in ("cpu", "scalar"):
    k = wb.load("bias_gelu", name)
    out[name] = {"built": k.built, "build_id": k.build_id, "source": str(k.source), "seconds": k.seconds}
out["harness"] = {"built": STATE.harness["built"], "key": STATE.harness["key"]}
out["harness_dirs"] = sorted(d.name for d in cache.builds_root().glob("harness-*"))
print(json.dumps(out))
"""


def test_editing_one_kernel_rebuilds_only_that_variant(cuda_buildable, tmp_path, run_python):
    root = tmp_path / "kernels"
    shutil.copytree(config.KERNELS_DIR, root)
    first = _last_json(run_python(EDIT_LOOP, args=[str(root)]))
    for name in ("cpu", "scalar"):
        assert first[name]["source"].startswith(str(root)), first  # the copied tree is what was loaded

    scalar = root / "bias_gelu" / "scalar.cu"
    with scalar.open("a") as f:  # a one-line edit, unique per run so a reused cache cannot have it
        f.write(f"// edited by test_editing_one_kernel_rebuilds_only_that_variant {uuid.uuid4().hex}\n")

    second = _last_json(run_python(EDIT_LOOP, args=[str(root)]))
    assert second["scalar"]["built"] is True, second
    assert second["scalar"]["build_id"] != first["scalar"]["build_id"]
    assert second["cpu"]["built"] is False and second["cpu"]["build_id"] == first["cpu"]["build_id"], second
    assert second["harness"]["built"] is False, second
    assert second["harness"]["key"] == first["harness"]["key"]
    assert second["harness_dirs"] == first["harness_dirs"]
    print(f"\nscalar rebuilt after a one-line edit in {second['scalar']['seconds']:.2f} s (load included)")

    third = _last_json(run_python(EDIT_LOOP, args=[str(root)]))
    assert third["scalar"]["built"] is False and third["scalar"]["build_id"] == second["scalar"]["build_id"]
    assert third["cpu"]["built"] is False


# --- what the key covers -----------------------------------------------------------------------

def _key(sources, include_dirs=(), flags=("-O3",), arch="8.0;9.0", tc=None, kind="variant"):
    return piece.content_key(kind=kind, sources=list(sources), include_dirs=list(include_dirs), flags=list(flags),
                             arch_list=arch, toolchain=tc or toolchain.current().fields())


def test_key_is_stable_and_location_independent(tmp_path):
    src = REPO_ROOT / "kernels" / "bias_gelu" / "cpu.cpp"
    inc = [REPO_ROOT / "kernels" / "common", REPO_ROOT / "kernels" / "bias_gelu"]
    copy = tmp_path / "k"
    shutil.copytree(REPO_ROOT / "kernels", copy)
    assert _key([src], inc) == _key([src], inc)
    assert _key([src], inc) == _key([copy / "bias_gelu" / "cpu.cpp"], [copy / "common", copy / "bias_gelu"])


def test_key_follows_flags_arch_and_kind():
    src = REPO_ROOT / "kernels" / "bias_gelu" / "cpu.cpp"
    inc = [REPO_ROOT / "kernels" / "common", REPO_ROOT / "kernels" / "bias_gelu"]
    base = _key([src], inc)
    assert _key([src], inc, flags=("-O2",)) != base
    assert _key([src], inc, flags=("-O3", "-DEXTRA")) != base
    assert _key([src], inc, arch="8.0") != base
    assert _key([src], inc, arch=None) != base
    assert _key([src], inc, kind="harness") != base


@pytest.mark.parametrize("field, value", [
    ("torch", "2.0.0+other"), ("torch_cuda", "11.8"), ("nvcc", "cuda_12.4.r12.4/compiler.0_0"),
    ("cxx11_abi", None), ("python", "cpython-39"), ("platform", "darwin")])
def test_key_follows_every_toolchain_field(field, value):
    src = REPO_ROOT / "kernels" / "bias_gelu" / "cpu.cpp"
    tc = toolchain.current().fields()
    other = dict(tc, **{field: (not tc["cxx11_abi"]) if field == "cxx11_abi" else value})
    assert other != tc
    assert _key([src], tc=other) != _key([src], tc=tc)


def test_key_follows_included_headers_only(tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "used.h").write_text('#pragma once\n#include "nested.h"\n')
    (tmp_path / "inc" / "nested.h").write_text("#pragma once\nint nested = 1;\n")
    (tmp_path / "inc" / "unused.h").write_text("#pragma once\nint unused = 1;\n")
    src = tmp_path / "v.cpp"
    src.write_text('#include "used.h"\n#include <vector>\nint f() { return nested; }\n')
    inc = [tmp_path / "inc"]
    base = _key([src], inc)

    (tmp_path / "inc" / "unused.h").write_text("#pragma once\nint unused = 2;\n")
    assert _key([src], inc) == base, "a header the source does not include changed its key"
    (tmp_path / "inc" / "nested.h").write_text("#pragma once\nint nested = 2;\n")
    nested_changed = _key([src], inc)
    assert nested_changed != base, "a header included through another header did not change the key"
    (tmp_path / "inc" / "used.h").write_text('#pragma once\n#include "nested.h"\n// edit\n')
    assert _key([src], inc) not in (base, nested_changed)


def test_key_follows_the_real_kernel_headers(tmp_path):
    root = tmp_path / "kernels"
    shutil.copytree(REPO_ROOT / "kernels", root)
    inc = [root / "common", root / "bias_gelu"]
    cpu, scalar = root / "bias_gelu" / "cpu.cpp", root / "bias_gelu" / "scalar.cu"
    before = {s: _key([s], inc) for s in (cpu, scalar)}

    with (root / "common" / "wb_cuda.h").open("a") as f:  # CUDA helpers: scalar.cu includes it, cpu.cpp does not
        f.write("// edit\n")
    after_cuda = {s: _key([s], inc) for s in (cpu, scalar)}
    assert after_cuda[cpu] == before[cpu]
    assert after_cuda[scalar] != before[scalar]

    with (root / "common" / "wb_math.h").open("a") as f:  # shared math: both include it
        f.write("// edit\n")
    after_math = {s: _key([s], inc) for s in (cpu, scalar)}
    assert after_math[cpu] != after_cuda[cpu]
    assert after_math[scalar] != after_cuda[scalar]


class _KeyComputed(Exception):
    pass


def _loader_key(monkeypatch, wb, variant: str) -> dict:
    """The content key that wb.load(op, variant) computes, taken from the real loader path and then
    stopped before anything is looked up or built."""
    real = piece.content_key
    seen = {}

    def spy(**kwargs):
        seen.update(kwargs, key=real(**kwargs))
        raise _KeyComputed

    monkeypatch.setattr(piece, "content_key", spy)
    real_ensure_op = loader.ensure_op
    monkeypatch.setattr(loader, "ensure_op", lambda op, **kwargs: None)  # declared and bound already (cpu_kernel)
    try:
        with pytest.raises(_KeyComputed):
            wb.load("bias_gelu", variant)
    finally:
        monkeypatch.setattr(piece, "content_key", real)
        monkeypatch.setattr(loader, "ensure_op", real_ensure_op)
    return seen


def test_loader_key_matches_the_loaded_build(wb, cpu_kernel, monkeypatch):
    seen = _loader_key(monkeypatch, wb, "cpu")
    assert seen["key"][:10] == cpu_kernel.build_id
    assert seen["toolchain"] == toolchain.current().fields()


def test_loader_key_changes_with_recorded_torch_version(wb, cpu_kernel, monkeypatch):
    base = _loader_key(monkeypatch, wb, "cpu")["key"]
    real_current = toolchain.current
    fake = dataclasses.replace(real_current(), torch="1.13.0+fake")
    monkeypatch.setattr(toolchain, "current", lambda: fake)
    seen = _loader_key(monkeypatch, wb, "cpu")
    assert seen["toolchain"]["torch"] == "1.13.0+fake"
    assert seen["key"] != base
    monkeypatch.setattr(toolchain, "current", real_current)
    assert _loader_key(monkeypatch, wb, "cpu")["key"] == base


def test_loader_key_changes_with_torch_version_through_the_lru_cache(wb, cpu_kernel, monkeypatch):
    """The toolchain is queried once per process (functools.lru_cache): a changed torch.__version__
    shows up only after cache_clear(), and then changes the key."""
    base = _loader_key(monkeypatch, wb, "cpu")["key"]
    real_version = torch.__version__
    try:
        monkeypatch.setattr(torch, "__version__", "9.9.9+pretend")
        assert _loader_key(monkeypatch, wb, "cpu")["key"] == base  # still the cached toolchain
        toolchain.current.cache_clear()
        seen = _loader_key(monkeypatch, wb, "cpu")
        assert seen["toolchain"]["torch"] == "9.9.9+pretend" and seen["key"] != base
    finally:
        monkeypatch.setattr(torch, "__version__", real_version)
        toolchain.current.cache_clear()
    assert toolchain.current().torch == str(real_version)
    assert _loader_key(monkeypatch, wb, "cpu")["key"] == base


def test_loader_key_changes_with_flags(wb, cpu_kernel, monkeypatch):
    base = _loader_key(monkeypatch, wb, "cpu")["key"]
    monkeypatch.setattr(build, "CPU_FLAGS", ("-O2",))
    seen = _loader_key(monkeypatch, wb, "cpu")
    assert seen["flags"] == ["-O2"] and seen["key"] != base


def test_loader_key_changes_with_cuda_flags_and_arch_list(wb, cpu_kernel, cuda_buildable, monkeypatch):
    base_scalar = _loader_key(monkeypatch, wb, "scalar")
    base_cpu = _loader_key(monkeypatch, wb, "cpu")["key"]
    monkeypatch.setattr(build, "CUDA_FLAGS", (*build.CUDA_FLAGS, "-DWB_TEST_ONLY_FLAG"))
    assert _loader_key(monkeypatch, wb, "scalar")["key"] != base_scalar["key"]
    assert _loader_key(monkeypatch, wb, "cpu")["key"] == base_cpu  # CUDA flags do not touch a CPU build
    monkeypatch.undo()
    monkeypatch.setenv("WORKBENCH_NVCC_FLAGS", "-lineinfo")  # the documented way to add nvcc flags
    seen = _loader_key(monkeypatch, wb, "scalar")
    assert "-lineinfo" in seen["flags"] and seen["key"] != base_scalar["key"]
    assert _loader_key(monkeypatch, wb, "cpu")["key"] == base_cpu
    monkeypatch.undo()
    assert _loader_key(monkeypatch, wb, "scalar")["key"] == base_scalar["key"]
    other_arch = "7.5" if base_scalar["arch_list"] != "7.5" else "8.6"
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", other_arch)
    seen = _loader_key(monkeypatch, wb, "scalar")
    assert seen["arch_list"] == other_arch and seen["key"] != base_scalar["key"]
    assert _loader_key(monkeypatch, wb, "cpu")["key"] == base_cpu  # nor does the arch list


# --- a broken cache entry is detected and rebuilt ----------------------------------------------

INLINE_LOAD = r"""
import json, sys, torch
import workbench as wb
from workbench.specs.bias_gelu import SPEC as spec
k = wb.load_inline("bias_gelu", open(sys.argv[1]).read(), name=sys.argv[2])
x, b = spec.new_inputs((33, 65), torch.float32, "cpu", torch.Generator().manual_seed(0))
err = (k(x, b).double() - spec.reference(x, b)).abs().max().item()
print(json.dumps({"built": k.built, "library": str(k.library), "err": err}))
"""


def _corrupt(build_dir: pathlib.Path, how: str) -> str:
    """Damage a published build; returns the text lookup() must report."""
    meta = json.loads((build_dir / "meta.json").read_text())
    lib = build_dir / meta["library"]
    if how == "truncated":
        data = lib.read_bytes()
        lib.write_bytes(data[: len(data) // 2])
        return "truncated"
    if how == "foreign":  # same size, other bytes: a different library under the same name
        data = bytearray(lib.read_bytes())
        for i in range(len(data) // 3, len(data) // 3 + 64):
            data[i] ^= 0xFF
        lib.write_bytes(bytes(data))
        return "sha256"
    if how == "missing":
        lib.unlink()
        return "is missing"
    if how == "bad-record":
        (build_dir / "meta.json").write_text("{ not json")
        return "damaged build record"
    raise ValueError(how)


@pytest.mark.parametrize("how", ["truncated", "foreign", "missing", "bad-record"])
def test_broken_cached_library_is_detected_and_rebuilt(cpu_kernel, cpu_source_text, tmp_path, run_python, how):
    # A variant that only child processes ever load: a library mapped into this process must not
    # be damaged, and the verdict has to come from a fresh process anyway.
    desc = "C++ on torch's CPU thread pool, parallel over rows; any alignment and column count"
    src = tmp_path / "probe.cpp"
    src.write_text(cpu_source_text.replace(desc, f"cache corruption probe ({how})"))
    name = f"corrupt_{how.replace('-', '_')}"

    first = _last_json(run_python(INLINE_LOAD, args=[str(src), name]))
    build_dir = pathlib.Path(first["library"]).parent
    assert build.lookup(build_dir)[2] is None
    expected = _corrupt(build_dir, how)
    lib, _, problem = build.lookup(build_dir)
    assert lib is None and problem and expected in problem, problem

    proc = run_python(INLINE_LOAD, args=[str(src), name], env_extra={"WORKBENCH_QUIET": "0"})
    second = _last_json(proc)
    assert second["built"] is True, second
    assert second["err"] < 1e-5
    # republished in the same folder, under a file name of its own (never a path already loaded)
    assert pathlib.Path(second["library"]).parent == build_dir and second["library"] != first["library"]
    assert build.lookup(build_dir)[2] is None
    assert "unusable" in proc.stderr and expected in proc.stderr, proc.stderr

    third = _last_json(run_python(INLINE_LOAD, args=[str(src), name]))
    assert third["built"] is False and third["err"] < 1e-5


# --- locks -------------------------------------------------------------------------------------

HOLD_LOCK = r"""
import pathlib, sys
from workbench.build import records
with records.file_lock(pathlib.Path({path!r}), what="test holder"):
    print("locked", flush=True)
    sys.stdin.readline()
print("released", flush=True)
"""


def _hold(spawn_python, path: pathlib.Path):
    """A child process that holds the flock on `path` until a line arrives on its stdin."""
    proc = spawn_python(HOLD_LOCK.format(path=str(path)))
    wait_for_line(proc, "locked")
    return proc


def test_lock_timeout_names_the_lock(wb, spawn_python, tmp_path):
    path = tmp_path / "locks" / "probe.lock"
    holder = _hold(spawn_python, path)
    start = time.monotonic()
    with pytest.raises(wb.LockTimeout) as e:
        with records.file_lock(path, what="bias_gelu/probe", timeout_s=0.3):
            pytest.fail("acquired a lock another process holds")
    waited = time.monotonic() - start
    msg = str(e.value)
    assert str(path) in msg and "bias_gelu/probe" in msg and f"pid {holder.pid}" in msg, msg
    assert "WORKBENCH_LOCK_TIMEOUT" in msg
    assert 0.3 <= waited < 5, waited
    assert isinstance(e.value, wb.WorkbenchError)


def test_lock_second_acquirer_waits_for_release(spawn_python, tmp_path):
    path = tmp_path / "locks" / "wait.lock"
    holder = _hold(spawn_python, path)
    acquired = threading.Event()
    errors = []

    def acquire():
        try:
            with records.file_lock(path, what="waiter", timeout_s=60):
                acquired.set()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=acquire)
    t.start()
    try:
        assert not acquired.wait(0.5), "acquired while another process held the lock"
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert acquired.wait(30), "never acquired after the holder released"
    finally:
        if not acquired.is_set():
            holder.kill()
        t.join(60)
    assert not errors, errors
    wait_for_line(holder, "released")


def test_lock_dies_with_killed_holder(spawn_python, tmp_path):
    path = tmp_path / "locks" / "killed.lock"
    holder = _hold(spawn_python, path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(30)
    assert path.exists()  # the file stays; the flock went with the process
    start = time.monotonic()
    with records.file_lock(path, what="after kill", timeout_s=5):
        pass
    assert time.monotonic() - start < 1.0


RACE_LOAD = r"""
import json, pathlib, sys, torch
from workbench import config
config.KERNELS_DIR = pathlib.Path({root!r})
config.COMMON_DIR = config.KERNELS_DIR / "common"
import workbench as wb
from workbench.specs.bias_gelu import SPEC as spec
print("ready", flush=True)
sys.stdin.readline()  # start together
k = wb.load("bias_gelu", "race")
x, b = spec.new_inputs((33, 65), torch.float32, "cpu", torch.Generator().manual_seed(0))
err = (k(x, b).double() - spec.reference(x, b)).abs().max().item()
print(json.dumps({{"built": k.built, "library": str(k.library), "err": err}}))
"""


@pytest.mark.parametrize("n", [2, 4])
def test_processes_build_the_same_variant_once(cpu_kernel, cpu_source_text, tmp_path, spawn_python, n):
    """Started together on a variant nobody has built: one builds, the others wait on the key's
    lock and load the same published library; every one gets correct results."""
    root = tmp_path / "kernels"
    shutil.copytree(config.KERNELS_DIR, root)
    desc = "C++ on torch's CPU thread pool, parallel over rows; any alignment and column count"
    (root / "bias_gelu" / "race.cpp").write_text(cpu_source_text.replace(desc, f"race probe {uuid.uuid4().hex}"))
    procs = [spawn_python(RACE_LOAD.format(root=str(root))) for _ in range(n)]
    for p in procs:
        wait_for_line(p, "ready")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["built"] for r in results) == [False] * (n - 1) + [True], results
    assert len({r["library"] for r in results}) == 1
    assert all(r["err"] < 1e-5 for r in results)


INLINE_PAUSED_AT_PUBLISH = r"""
import json, pathlib, sys
_replace = pathlib.Path.replace

def paused_replace(self, target):
    # Stop just before load_inline moves its freshly written source file into place.
    if self.name.endswith(".tmp") and "sources" in self.parts:
        print("paused", flush=True)
        sys.stdin.readline()
    return _replace(self, target)

pathlib.Path.replace = paused_replace
import workbench as wb
k = wb.load_inline("bias_gelu", open({src!r}).read(), name="inline_race")
print(json.dumps({{"built": k.built}}))
"""


def test_two_processes_load_inline_the_same_new_source(cpu_kernel, cpu_source_text, tmp_path, spawn_python,
                                                       run_python):
    """Deterministic interleaving: A writes the source file and pauses before moving it into place;
    B loads the same source start to finish; then A goes on. Both must load."""
    desc = "C++ on torch's CPU thread pool, parallel over rows; any alignment and column count"
    src = tmp_path / "race.cpp"
    src.write_text(cpu_source_text.replace(desc, f"inline race probe {uuid.uuid4().hex}"))
    a = spawn_python(INLINE_PAUSED_AT_PUBLISH.format(src=str(src)))
    wait_for_line(a, "paused")
    b = run_python(f"import workbench as wb; wb.load_inline('bias_gelu', open({str(src)!r}).read(), name='inline_race')")
    assert b.returncode == 0, describe(b)
    a.stdin.write("\n")
    a.stdin.flush()
    out, err = a.communicate(timeout=240)
    assert a.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["built"] is False


# --- compile errors ----------------------------------------------------------------------------

def _broken(source: str, anchor: str, bad_line: str) -> tuple[str, int]:
    """Insert `bad_line` just before the line containing `anchor`; return the text and its 1-based line."""
    lines = source.splitlines(keepends=True)
    idx = next(i for i, ln in enumerate(lines) if anchor in ln)
    lines.insert(idx, bad_line + "\n")
    return "".join(lines), idx + 1


def test_compile_error_names_file_line_and_first_error(wb, cpu_kernel, cpu_source_text):
    text, line = _broken(cpu_source_text, "int64_t chunks(int64_t rows)",
                         "int wb_broken = this_identifier_does_not_exist;")
    with pytest.raises(wb.BuildError) as e:
        wb.load_inline("bias_gelu", text, name="broken_cpu")
    err = e.value
    assert "<inline bias_gelu/broken_cpu>" in err.file, err.file
    assert err.line == line, (err.line, line)
    assert "this_identifier_does_not_exist" in err.first_error, err.first_error
    assert err.log_path.exists() and "this_identifier_does_not_exist" in err.log_path.read_text()
    assert config.cache_dir() in err.log_path.parents
    msg = str(err)
    assert f"{err.file}:{line}" in msg and str(err.log_path) in msg, msg
    assert err.last_good is None
    # Its own staging folders only: another test process may be building in this shared cache.
    assert not any(cache.builds_root().glob(".staging-bias_gelu-broken_cpu-*")), "a failed build left its staging directory"


def test_cuda_compile_error_names_file_line(wb, cuda_buildable):
    text = (REPO_ROOT / "kernels" / "bias_gelu" / "scalar.cu").read_text()
    text, line = _broken(text, "constexpr int kThreads", "__device__ int wb_broken = cuda_identifier_missing;")
    with pytest.raises(wb.BuildError) as e:
        wb.load_inline("bias_gelu", text, name="broken_cuda")
    err = e.value
    assert "<inline bias_gelu/broken_cuda>" in err.file and err.line == line, (err.file, err.line, line)
    assert "cuda_identifier_missing" in err.first_error
    assert err.log_path.exists()


def test_broken_edit_keeps_last_good_build(wb, cpu_kernel, cpu_source_text):
    desc = "C++ on torch's CPU thread pool, parallel over rows; any alignment and column count"
    good_src = cpu_source_text.replace(desc, "last-good probe")
    good = wb.load_inline("bias_gelu", good_src, name="keeps_last_good")
    x, b = spec.new_inputs((5, 9), torch.float32, "cpu", torch.Generator().manual_seed(1))
    y_good = good(x, b)

    text, line = _broken(good_src, "int64_t chunks(int64_t rows)", "static_assert(false_identifier, \"edit\");")
    with pytest.raises(wb.BuildError) as e:
        wb.load_inline("bias_gelu", text, name="keeps_last_good")
    err = e.value
    assert err.line == line
    assert err.last_good and f"keeps_last_good@{good.build_id}" in err.last_good, err.last_good
    assert "last good build still available" in str(err) and good.qualified in str(err)
    # The name still resolves to the good build, and the handle is not stale.
    assert torch.equal(torch.ops.workbench.bias_gelu(x, b, "keeps_last_good"), y_good)
    assert torch.equal(good(x, b), y_good)
    assert not good.stale
    torch.testing.assert_close(y_good.double(), spec.reference(x, b), rtol=1e-5, atol=1e-6)
    # Fixing the source and loading again in the same process works, and supersedes the old build.
    fixed = wb.load_inline("bias_gelu", good_src.replace("last-good probe", "fixed probe"), name="keeps_last_good")
    assert fixed.build_id != good.build_id and good.stale
    torch.testing.assert_close(torch.ops.workbench.bias_gelu(x, b, "keeps_last_good"), y_good)
    # In a notebook the cell shows the compiler's message, not the loader's stack.
    rendered = "\n".join(err._render_traceback_())
    assert f":{line}:" in rendered and "full log:" in rendered and "Traceback" not in rendered


# --- publication -------------------------------------------------------------------------------

def test_publication_is_atomic(wb, cpu_kernel):
    k = wb.load("bias_gelu", "cpu")
    root = cache.builds_root()
    mine = f".staging-bias_gelu-cpu-{k.build_id}*"  # another test process may be building in this shared cache
    assert not any(root.glob(mine)), sorted(p.name for p in root.glob(mine))
    published = [d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")]
    assert published
    for d in published:
        meta = json.loads((d / "meta.json").read_text())
        assert (d / meta["library"]).is_file(), d
        assert meta["key"][:20] in d.name
    for lib in (cpu_kernel.library, pathlib.Path(STATE.harness["library"])):
        found, meta, problem = build.lookup(lib.parent)
        assert found == lib and problem is None
        assert meta["size"] == lib.stat().st_size and len(meta["sha256"]) == 64
        assert meta["toolchain"] == toolchain.current().fields()
