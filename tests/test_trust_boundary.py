"""The cache, the files and the NumPy front end as a trust boundary (issue 24).

A second user is simulated as `nobody` (os.chown, as root) where the machine allows, else the
tests that need it are skipped; everything else goes by modes. Each test is one finding of the
issue: planted code never runs (a planted library, planted bytecode, a planted lock link), the
cache key follows what the compiler read (<...> and macro includes), and every raw error became one
that names the argument or the file and what to do.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.util
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO_ROOT, describe, private_cache, run_cli, run_python, wait_for_line
from workbench.build import cache, elf_problem, guard, lookup, records
from workbench.ship import ndarray_build

NOBODY = 65534
AS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not AS_ROOT, reason="simulating a second user (chown to nobody) needs root")

PLANTED_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
  const char* path = getenv("PLANT_MARKER");
  FILE* f = path ? fopen(path, "w") : NULL;
  if (f) { fputs("planted code ran", f); fclose(f); }
}
"""

LOAD_CPU = r"""
import json, torch, workbench as wb
from workbench.specs.bias_gelu import SPEC as spec
k = wb.load("bias_gelu", "cpu")
x, b = spec.new_inputs((17, 33), torch.float32, "cpu", torch.Generator().manual_seed(0))
err = (k(x, b).double() - spec.reference(x, b)).abs().max().item()
print(json.dumps({"built": k.built, "library": str(k.library), "err": err}))
"""


def _planted_library(tmp_path: pathlib.Path) -> pathlib.Path:
    src = tmp_path / "planted.c"
    src.write_text(PLANTED_C)
    lib = tmp_path / "planted.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    return lib


def _sha(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cpu_build(root: pathlib.Path) -> pathlib.Path:
    found = [d for d in (root / "builds").iterdir() if d.name.startswith("bias_gelu-cpu-")]
    assert len(found) == 1, found
    return found[0]


def _plant(build_dir: pathlib.Path, planted: pathlib.Path, *, library: str | None = None) -> None:
    """Put the planted library in a build folder, with a record that vouches for it (its own size and
    sha256: all an attacker who can write the folder needs)."""
    meta = json.loads((build_dir / "meta.json").read_text())
    target = build_dir / meta["library"]
    shutil.copyfile(planted, target)
    meta.update(size=planted.stat().st_size, sha256=_sha(planted))
    if library is not None:
        meta["library"] = library
    (build_dir / "meta.json").write_text(json.dumps(meta))


def _chown_tree(path: pathlib.Path, uid: int) -> None:
    for dirpath, dirs, files in os.walk(path):
        os.chown(dirpath, uid, -1)
        for name in files:
            os.chown(os.path.join(dirpath, name), uid, -1, follow_symlinks=False)


# ------------------------------------------------------------------ planted code never runs

@needs_root
def test_cache_owned_by_another_user_is_refused_and_its_library_never_runs(cpu_kernel, tmp_path):
    root = private_cache(tmp_path / "cache")
    _plant(_cpu_build(root), _planted_library(tmp_path))
    _chown_tree(root, NOBODY)
    marker = tmp_path / "PWNED"
    proc = run_python(LOAD_CPU, env_extra={"WORKBENCH_CACHE": root, "PLANT_MARKER": marker})
    assert not marker.exists(), "the planted library ran in the victim's process"
    assert proc.returncode != 0, describe(proc)
    assert "CacheError" in proc.stderr and f"the build cache {root} is not private" in proc.stderr, describe(proc)
    assert "belongs to nobody (uid 65534)" in proc.stderr and "WORKBENCH_CACHE" in proc.stderr, describe(proc)


@pytest.mark.parametrize("mode, who", [(0o777, "group and others"), (0o770, "group"), (0o702, "others")])
def test_cache_writable_by_group_or_others_is_refused(tmp_path, monkeypatch, mode, who):
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, mode)
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    with pytest.raises(cache.CacheError, match=rf"is not private: it is writable by {who} \(mode 0{mode:o}\).*"
                                               rf"chmod 700 {re.escape(str(root))}"):
        cache.builds_root()
    os.chmod(root, 0o700)
    assert cache.builds_root() == root / "builds"


def test_cache_in_a_folder_others_could_replace_is_refused(tmp_path, monkeypatch):
    parent = tmp_path / "open"
    parent.mkdir()
    os.chmod(parent, 0o777)  # world-writable, no sticky bit: anyone could rename the cache away
    (parent / "cache").mkdir(mode=0o700)
    monkeypatch.setenv("WORKBENCH_CACHE", str(parent / "cache"))
    with pytest.raises(cache.CacheError, match="writable by others without the sticky bit"):
        cache.builds_root()


def test_a_new_cache_and_its_folders_are_created_0700(tmp_path, monkeypatch):
    old = os.umask(0o002)  # a common umask: group-writable by default
    try:
        monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "a" / "new" / "cache"))
        assert cache.builds_root().is_dir()
        assert records.lock_path("0" * 64).parent.is_dir()
    finally:
        os.umask(old)
    for p in (tmp_path / "a/new/cache", tmp_path / "a/new/cache/builds", tmp_path / "a/new/cache/locks"):
        assert p.stat().st_mode & 0o777 == 0o700, (p, oct(p.stat().st_mode))


@needs_root
def test_planted_build_folder_in_a_private_cache_is_rebuilt_never_loaded(cpu_kernel, tmp_path):
    root = private_cache(tmp_path / "cache")
    build_dir = _cpu_build(root)
    _plant(build_dir, _planted_library(tmp_path))
    _chown_tree(build_dir, NOBODY)  # the cache is yours; this one folder in it is not
    marker = tmp_path / "PWNED"
    proc = run_python(LOAD_CPU, env_extra={"WORKBENCH_CACHE": root, "PLANT_MARKER": marker, "WORKBENCH_QUIET": "0"})
    assert proc.returncode == 0, describe(proc)
    assert not marker.exists(), "the planted library ran"
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["built"] is True and res["err"] < 1e-5, res
    assert "not the workbench's own build" in proc.stderr and "belongs to uid 65534" in proc.stderr, proc.stderr


def test_record_naming_a_library_outside_its_folder_is_not_loaded(cpu_kernel, tmp_path, monkeypatch):
    root = private_cache(tmp_path / "cache")
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    planted = _planted_library(tmp_path)
    build_dir = _cpu_build(root)
    assert lookup(build_dir)[2] is None
    for name in (str(planted), "../../../planted.so", "..", ""):
        meta = json.loads((build_dir / "meta.json").read_text())
        meta.update(library=name, size=planted.stat().st_size, sha256=_sha(planted))
        (build_dir / "meta.json").write_text(json.dumps(meta))
        lib, _, problem = lookup(build_dir)
        assert lib is None and "library must be a file name (no '/'" in problem, (name, problem)


def test_library_that_is_a_link_or_writable_by_others_is_not_loaded(cpu_kernel, tmp_path, monkeypatch):
    root = private_cache(tmp_path / "cache")
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    build_dir = _cpu_build(root)
    meta = json.loads((build_dir / "meta.json").read_text())
    lib = build_dir / meta["library"]
    os.chmod(lib, 0o777)
    assert "writable by group or others" in lookup(build_dir)[2]
    os.chmod(lib, 0o755)
    assert lookup(build_dir)[2] is None
    real = tmp_path / "elsewhere.so"
    shutil.move(lib, real)
    os.symlink(real, lib)
    assert "not a regular file" in lookup(build_dir)[2]


def _planted_pyc(target: pathlib.Path, source: pathlib.Path) -> None:
    """Bytecode for `source` that Python accepts (its header has the source's mtime and size) and
    that writes $PLANT_MARKER when imported."""
    code = compile("import os\nopen(os.environ['PLANT_MARKER'], 'w').write('planted bytecode ran')\n"
                   "def main():\n    return 0\n", str(source), "exec")
    st = source.stat()
    data = importlib._bootstrap_external._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _pyc_path(prefix: pathlib.Path, source: pathlib.Path) -> pathlib.Path:
    saved = sys.pycache_prefix
    try:
        sys.pycache_prefix = str(prefix)
        return pathlib.Path(importlib.util.cache_from_source(str(source)))
    finally:
        sys.pycache_prefix = saved


def test_bytecode_is_never_read_from_the_cache(tmp_path):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    cli = REPO_ROOT / "workbench" / "cli.py"
    _planted_pyc(_pyc_path(root / "pycache", cli), cli)
    marker, xdg = tmp_path / "PWNED", tmp_path / "xdg"
    env = {"WORKBENCH_CACHE": root, "PLANT_MARKER": marker, "PYTHONDONTWRITEBYTECODE": "1", "XDG_CACHE_HOME": xdg}
    proc = run_cli("clean", env_extra=env)
    assert not marker.exists(), "bytecode planted in the cache ran"
    assert proc.returncode == 2 and "say what to remove" in proc.stderr, describe(proc)
    # The bytecode went to a private folder of its own, outside the cache.
    written = list((xdg / "workbench-pycache").rglob("*.pyc"))
    assert written and (xdg / "workbench-pycache").stat().st_mode & 0o777 == 0o700
    assert [p for p in (root / "pycache").rglob("*.pyc")] == [_pyc_path(root / "pycache", cli)]


@needs_root
def test_a_pycache_folder_that_is_not_private_is_not_used(tmp_path):
    xdg = tmp_path / "xdg"
    pycache = xdg / "workbench-pycache"
    cli = REPO_ROOT / "workbench" / "cli.py"
    _planted_pyc(_pyc_path(pycache, cli), cli)
    _chown_tree(pycache, NOBODY)
    marker = tmp_path / "PWNED"
    env = {"PLANT_MARKER": marker, "PYTHONDONTWRITEBYTECODE": "1", "XDG_CACHE_HOME": xdg, "WORKBENCH_QUIET": "0"}
    proc = run_cli("clean", env_extra=env)
    assert not marker.exists(), "bytecode planted in another user's folder ran"
    assert proc.returncode == 2 and f"no bytecode cache: {pycache} is not private" in proc.stderr, describe(proc)


def test_lock_file_planted_as_a_link_is_refused_never_followed(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    lock = records.lock_path("ab" * 32)
    lock.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(victim, lock)
    try:
        with records.file_lock(lock, what="bias_gelu/cpu"):
            err = None
    except Exception as e:  # noqa: BLE001 - checked below, after the victim
        err = e
    assert victim.read_text() == "the user's file\n", "the lock was taken through the link: the victim was truncated"
    assert isinstance(err, cache.CacheError), err
    assert re.search(rf"{re.escape(str(lock))} is a symbolic link .*victim.txt.*rm {re.escape(str(lock))}", str(err))
    # the in-use mark beside a build: never opened through a link either
    build = cache.builds_root() / "some-build"
    build.mkdir()
    os.symlink(victim, build / "inuse")
    cache.mark_in_use(build)
    assert build not in cache._in_use_fds and victim.read_text() == "the user's file\n"


# ------------------------------------------------------------------ stale builds: what the compiler read

def _gain_source(cpu_source_text: str) -> str:
    """bias_gelu's cpu variant times two gains from headers the old regex could not see: one
    included as <...> (found through CPATH), one through a macro."""
    body = cpu_source_text.replace(
        "y[r * cols + c] = wb_from_acc<T>(wb_gelu_tanh(",
        "y[r * cols + c] = wb_from_acc<T>(WBT_GAIN_ANGLE * WBT_GAIN_MACRO * wb_gelu_tanh(")
    body = body.replace("C++ on torch's CPU thread pool", "stale-header probe on torch's CPU thread pool")
    assert "WBT_GAIN_ANGLE" in body
    return "#include <wbt_gain_angle.h>\n#define WBT_MACRO_HEADER \"wbt_gain_macro.h\"\n#include WBT_MACRO_HEADER\n" + body


def test_headers_included_as_angle_or_through_a_macro_make_a_build_stale(wb, cpu_kernel, cpu_source_text, tmp_path,
                                                                         monkeypatch):
    import torch

    from workbench.specs.bias_gelu import SPEC as spec

    # A cache of its own: the session's may be kept between runs (WORKBENCH_TEST_CACHE) with a build
    # whose record names the last run's headers, which pytest keeps, as they were edited last.
    monkeypatch.setenv("WORKBENCH_CACHE", str(private_cache(tmp_path / "cache")))
    inc = tmp_path / "inc"
    inc.mkdir()
    monkeypatch.setenv("CPATH", str(inc))
    src = tmp_path / "gain_probe.cpp"
    src.write_text(_gain_source(cpu_source_text))
    x, b = spec.new_inputs((9, 31), torch.float32, "cpu", torch.Generator().manual_seed(0))
    ref = spec.reference(x, b)

    def ratio(k):
        return (k(x, b).double() / ref).nanmedian().item()

    (inc / "wbt_gain_angle.h").write_text("#define WBT_GAIN_ANGLE 1.0f\n")
    (tmp_path / "wbt_gain_macro.h").write_text("#define WBT_GAIN_MACRO 1.0f\n")
    k1 = wb.load_source("bias_gelu", src, name="gain_probe")
    assert abs(ratio(k1) - 1.0) < 1e-4
    (inc / "wbt_gain_angle.h").write_text("#define WBT_GAIN_ANGLE 2.0f\n")       # <...> header edited
    k2 = wb.load_source("bias_gelu", src, name="gain_probe")
    assert k2.built and abs(ratio(k2) - 2.0) < 1e-4, "an edit of a <...> header returned the old build"
    (tmp_path / "wbt_gain_macro.h").write_text("#define WBT_GAIN_MACRO 3.0f\n")  # macro-included header edited
    k3 = wb.load_source("bias_gelu", src, name="gain_probe")
    assert k3.built and abs(ratio(k3) - 6.0) < 1e-4, "an edit of a macro-included header returned the old build"
    k4 = wb.load_source("bias_gelu", src, name="gain_probe")
    assert not k4.built and abs(ratio(k4) - 6.0) < 1e-4                       # unchanged: a warm hit
    meta = json.loads((k4.library.parent / "meta.json").read_text())
    recorded = {pathlib.Path(d[0]).name for d in meta["deps"]}
    assert {"wbt_gain_angle.h", "wbt_gain_macro.h", "gain_probe.cpp", "wb_cpu.h"} <= recorded, recorded


NDARRAY_PROBE = """#include <wbt_value.h>
#define WBT_OTHER "wbt_other.h"
#include WBT_OTHER
extern "C" int wbt_value() { return WBT_VALUE * 10 + WBT_OTHER_VALUE; }
"""


def test_numpy_front_end_builds_follow_the_compilers_depfile(tmp_path, monkeypatch):
    import ctypes

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    inc = tmp_path / "inc"
    inc.mkdir()
    src = tmp_path / "probe.cpp"
    src.write_text(NDARRAY_PROBE)

    def build(value, other):
        (inc / "wbt_value.h").write_text(f"#define WBT_VALUE {value}\n")
        (tmp_path / "wbt_other.h").write_text(f"#define WBT_OTHER_VALUE {other}\n")
        lib, _, built, _ = ndarray_build.build_host_library("ndarray-probe/value", "ndarray-probe", src, [inc])
        return ctypes.CDLL(str(lib)).wbt_value(), built

    assert build(1, 2) == (12, True)
    assert build(1, 2) == (12, False)
    assert build(3, 2) == (32, True), "an edit of a <...> header returned the old build"
    assert build(3, 5) == (35, True), "an edit of a macro-included header returned the old build"


# ------------------------------------------------------------------ damaged records and libraries

def test_record_that_is_not_an_object_is_rebuilt_not_a_type_error(cpu_kernel, tmp_path, monkeypatch):
    root = private_cache(tmp_path / "cache")
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    build_dir = _cpu_build(root)
    for text in ("[]", "null", "3", '"library"'):
        (build_dir / "meta.json").write_text(text)
        lib, meta, problem = lookup(build_dir)
        assert lib is None and f"{build_dir / 'meta.json'}: the whole file must be a JSON object" in problem


def test_truncated_library_with_a_matching_record_is_rebuilt_not_a_sigbus(cpu_kernel, tmp_path):
    root = private_cache(tmp_path / "cache")
    build_dir = _cpu_build(root)
    meta = json.loads((build_dir / "meta.json").read_text())
    lib = build_dir / meta["library"]
    data = lib.read_bytes()
    lib.write_bytes(data[: len(data) * 3 // 5])
    meta.update(size=lib.stat().st_size, sha256=_sha(lib))  # the record agrees with the damage
    (build_dir / "meta.json").write_text(json.dumps(meta))
    damaged = shutil.copyfile(lib, tmp_path / "damaged.so")
    proc = run_python(LOAD_CPU, env_extra={"WORKBENCH_CACHE": root, "WORKBENCH_QUIET": "0"})
    assert proc.returncode == 0, describe(proc)  # -7 (SIGBUS) before
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["built"] is True and res["err"] < 1e-5
    assert "damaged library" in proc.stderr and "rebuilding" in proc.stderr, proc.stderr
    assert "truncated" in elf_problem(damaged, damaged.stat().st_size)


def test_elf_check_accepts_every_library_the_cache_holds(cpu_kernel):
    for d in cache.builds_root().iterdir():
        meta_path = d / "meta.json"
        if meta_path.is_file():
            meta = json.loads(meta_path.read_text())
            lib = d / meta["library"]
            if lib.is_file():
                assert elf_problem(lib, lib.stat().st_size) is None, lib


@pytest.mark.parametrize("err, says", [(errno.EROFS, "is read-only"), (errno.ENOSPC, "is full"),
                                       (errno.EACCES, "is not writable")])
def test_read_only_or_full_cache_names_the_folder_and_what_to_do(wb, cpu_kernel, cpu_source_text, tmp_path,
                                                                 monkeypatch, err, says):
    root = private_cache(tmp_path / "cache")
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    real_mkdir, real_open = os.mkdir, os.open

    def fake_mkdir(path, *args, **kwargs):  # what a read-only or full filesystem answers
        if str(path).startswith(str(root)):
            raise OSError(err, os.strerror(err), str(path))
        return real_mkdir(path, *args, **kwargs)

    def fake_open(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and str(path).startswith(str(root)):
            raise OSError(err, os.strerror(err), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", fake_mkdir)
    monkeypatch.setattr(os, "open", fake_open)
    src = cpu_source_text.replace("parallel over rows;", f"parallel over rows (storage probe {err});")
    with pytest.raises(cache.CacheError) as info:
        wb.load_inline("bias_gelu", src, name=f"storage_probe_{err}")
    text = str(info.value)
    assert f"the build cache {root} {says}" in text and ("WORKBENCH_CACHE" in text), text
    if err == errno.ENOSPC:
        assert "clean --older-than" in text


# ------------------------------------------------------------------ names

def test_over_long_variant_name_is_refused_by_its_length(wb, cpu_source_text):
    with pytest.raises(ValueError, match=r"variant name must be at most 64 characters .*got a 240-character name"):
        wb.load_inline("bias_gelu", cpu_source_text, name="v" * 240)


@pytest.mark.parametrize("name", ["abc\n", "abc\r\n", "a b", "9abc", ""])
def test_variant_name_with_a_trailing_newline_is_refused(wb, cpu_source_text, name):
    with pytest.raises(ValueError, match="variant name must be an identifier"):
        wb.load_inline("bias_gelu", cpu_source_text, name=name)


def test_export_names_with_a_trailing_newline_are_refused(wb, tmp_path):
    with pytest.raises(ValueError, match="name must be an identifier"):
        wb.export("bias_gelu", "cpu", tmp_path / "pkg", name="wb_x\n")
    assert not (tmp_path / "pkg").exists()


SHADOW = r"""
import json, sys, workbench as wb
src = open("kernels/bias_gelu/cpu.cpp").read().replace("parallel over rows;", "parallel over rows (shadow probe);")
try:
    wb.load_inline("bias_gelu", src, name="cpu")
    print("not refused")
except ValueError as e:
    print("refused:", e)
k = wb.load_inline("bias_gelu", src, name="cpu", replace=True)
desc = {v.name: v.description for v in wb.variants("bias_gelu")}
print(json.dumps({"inline": desc["cpu"], "library": str(k.library)}))
wb.load("bias_gelu", "cpu")
desc = {v.name: v.description for v in wb.variants("bias_gelu")}
print(json.dumps({"tree": desc["cpu"]}))
"""


def test_load_inline_may_not_shadow_a_tree_variant_unless_replace(cpu_kernel):
    proc = run_python(SHADOW)
    assert proc.returncode == 0, describe(proc)
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("refused: load_inline('bias_gelu', ..., name='cpu'): name='cpu' is a variant of the "
                               "tree") and "replace=True" in lines[0], lines[0]
    inline, tree = json.loads(lines[1]), json.loads(lines[2])
    assert "shadow probe" in inline["inline"] and inline["inline"].endswith("(inline)")   # wb.variants says so
    assert "shadow probe" not in tree["tree"] and not tree["tree"].endswith("(inline)")


@pytest.mark.parametrize("front_end", ["torch", "numpy"])
def test_attribute_too_large_for_a_float_names_the_attribute(wb, front_end):
    if front_end == "torch":
        import torch

        k = wb.load("scale_bias_relu", "cpu")
        call = lambda: k(torch.ones(4, 8), torch.ones(8), scale=10**400)  # noqa: E731
    else:
        import numpy as np

        from workbench.ship import ndarray as wbn

        f = wbn.load("scale_bias_relu", "cpu")
        call = lambda: f(np.ones((4, 8), np.float32), np.ones(8, np.float32), scale=10**400)  # noqa: E731
    with pytest.raises(ValueError, match=r"scale_bias_relu: attribute scale must be a number a float can hold .*"
                                         r"got an int of 401 digits"):
        call()


# ------------------------------------------------------------------ a killed build takes its compilers with it

FAKE_CXX = """#!/bin/sh
# A compiler that hangs on a compile (and records its pid); anything else goes to the real one.
for a in "$@"; do
  if [ "$a" = "-c" ] || [ "$a" = "-shared" ]; then
    echo $$ > "$HANG_PIDFILE"
    exec sleep 300
  fi
done
exec c++ "$@"
"""

# The build process runs again only seconds after its command started (a loaded machine): the
# compiler is running before the build's next line, and that is when the test kills the build.
SLOW_AFTER_START = r"""
import subprocess, sys, time
_start = subprocess.Popen.__init__
def _slow(self, args, *a, **k):
    _start(self, args, *a, **k)
    if k.get("start_new_session") and "-I" not in args:   # the build's command, not its watchdog
        time.sleep(3)
subprocess.Popen.__init__ = _slow
"""
BUILD_FOREVER = {
    "numpy": SLOW_AFTER_START + r"""
import pathlib
from workbench.ship import ndarray_build
src = pathlib.Path(sys.argv[1])
ndarray_build.build_host_library("ndarray-probe/hang", "ndarray-probe", src, [])
""",
    "torch": SLOW_AFTER_START + r"""
import workbench as wb
wb.load_source("bias_gelu", sys.argv[1], name="hang_probe")
""",
}


def _status(pid: int) -> dict | None:
    try:
        text = pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _alive(pid: int) -> bool:
    status = _status(pid)
    return status is not None and not status["State"].startswith(("Z", "X"))


def _killed(pid: int) -> bool:
    """Gone, a zombie, or with SIGKILL pending: what kill -9 has done, however busy the machine."""
    status = _status(pid)
    return not _alive(pid) or any(int(status[k], 16) >> (signal.SIGKILL - 1) & 1 for k in ("SigPnd", "ShdPnd"))


def _watchdog_of(parent: int) -> int:
    for d in pathlib.Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            stat = (d / "stat").read_text()
            if int(stat[stat.rindex(")") + 2:].split()[1]) == parent and b"kill_session" in (d / "cmdline").read_bytes():
                return int(d.name)
    raise AssertionError(f"the build (pid {parent}) has no watchdog")


@pytest.mark.parametrize("front_end", ["numpy", "torch"])
def test_killed_build_takes_its_process_group_with_it(cpu_kernel, cpu_source_text, tmp_path, front_end):
    fake = tmp_path / "bin" / "c++"
    fake.parent.mkdir()
    fake.write_text(FAKE_CXX)
    fake.chmod(0o755)
    pidfile = tmp_path / "compiler.pid"
    src = tmp_path / "hang.cpp"
    src.write_text(cpu_source_text.replace("parallel over rows;", f"parallel over rows (hang {front_end} {time.time()});")
                   if front_end == "torch" else 'extern "C" int hang() { return 1; }\n')
    root = private_cache(tmp_path / "cache") if front_end == "torch" else tmp_path / "cache"
    # The fake is reached through CXX; the `c++` it passes other calls to is the real one, on PATH.
    env = dict(os.environ, WORKBENCH_CACHE=str(root), WORKBENCH_QUIET="1", CXX=str(fake), HANG_PIDFILE=str(pidfile),
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    child = subprocess.Popen([sys.executable, "-c", BUILD_FOREVER[front_end], str(src)], cwd=REPO_ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the compiler never started"
            time.sleep(0.1)
        compiler = int(pidfile.read_text())
        assert _alive(compiler)
        watchdog = _watchdog_of(child.pid)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        # The event: the watchdog ends (its pipe closed with the build); by then it has killed the session.
        deadline = time.monotonic() + 600
        while _alive(watchdog):
            assert time.monotonic() < deadline, f"the watchdog (pid {watchdog}) never ended"
            time.sleep(0.05)
        assert _killed(compiler), f"the compiler (pid {compiler}) outlived the killed build"
    finally:
        if child.poll() is None:
            child.kill()
        if pidfile.exists() and pidfile.read_text().strip() and _alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_own_clock_counts_cpu_time_for_a_spinning_child_and_wall_time_for_a_sleeping_one(tmp_path):
    """A child's time limit (guard.own_clock) does not depend on how busy the machine is: a child
    that spins on a CPU it shares with three others is charged its CPU time, not the wall time;
    one that sleeps is charged the wall time."""
    def start(code):
        p = subprocess.Popen([sys.executable, "-c", f"print('ready', flush=True)\n{code}"], stdout=subprocess.PIPE)
        assert p.stdout.readline() == b"ready\n"
        return p

    procs = [start("while True: pass") for _ in range(4)] + [start("import time; time.sleep(60)")]
    try:
        cpu = min(os.sched_getaffinity(0))
        for p in procs[:4]:
            os.sched_setaffinity(p.pid, {cpu})          # four spinners on one CPU: each gets a quarter
        spinner, sleeper = (guard.own_clock(p.pid) for p in (procs[0], procs[4]))
        on_cpu = lambda: int(pathlib.Path(f"/proc/{procs[0].pid}/schedstat").read_text().split()[0]) / 1e9  # noqa: E731
        cpu0, t0 = on_cpu(), time.monotonic()
        time.sleep(2)
        wall, spun, slept, cpu_s = time.monotonic() - t0, spinner(), sleeper(), on_cpu() - cpu0
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert spun < 0.6 * wall and abs(spun - cpu_s) < 0.15, (spun, cpu_s, wall)
    assert 0.9 * wall < slept <= wall + 0.05, (slept, wall)


# ------------------------------------------------------------------ a warm hit stays fast

def test_warm_hit_checks_cost_little(cpu_kernel, spawn_python):
    """Importing the workbench and a warm load (the record, size, sha256, ELF and dependency checks)
    in a fresh process, timed in that child's own time (guard.own_clock: the time it waited for a
    CPU is not counted), so a busy machine does not fail it."""
    code = ("import sys, torch\nprint('ready', flush=True)\nsys.stdin.readline()\nimport workbench as wb\n"
            "wb.load('bias_gelu', 'cpu')\nprint('done', flush=True)\n")
    for _ in range(2):  # the first warms the file cache
        child = spawn_python(code)
        wait_for_line(child, "ready")
        clock = guard.own_clock(child.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        wait_for_line(child, "done")
        took = clock()
    assert took < 0.3 * 4, took  # 0.3 s of wall time on the H100's host; 2 slow cores here


# ------------------------------------------------------------------ a shared read-only cache, by explicit opt-in

SHARED_LOAD = r"""
import json, subprocess
import torch.utils.cpp_extension as cpp_extension

def refuse(*args, **kwargs):
    raise AssertionError("an import from the shared cache must not build")

cpp_extension.load = cpp_extension._jit_compile = refuse
import workbench as wb
from workbench.build import compilers
compilers.COMPILERS.update(dict.fromkeys(compilers.COMPILERS, refuse))  # every compiler kind refused
from workbench.run import loader
from workbench.run.process_state import STATE
k = wb.load("bias_gelu", "cpu")
print(json.dumps({"built": k.built, "harness_built": STATE.harness["built"], "library": str(k.library)}))
"""


@needs_root
def test_shared_cache_is_used_only_through_a_manifest_the_user_trusts(cpu_kernel, tmp_path):
    shared = private_cache(tmp_path / "shared")
    manifest = tmp_path / "trusted.json"
    manifest.write_text(json.dumps(cache.manifest_of(shared)))
    manifest.chmod(0o600)
    _chown_tree(shared, NOBODY)                       # someone else's cache: never trusted as a cache
    mine = tmp_path / "mine"
    env = {"WORKBENCH_CACHE": mine, "WORKBENCH_SHARED_CACHE": shared, "WORKBENCH_QUIET": "0"}

    proc = run_python(LOAD_CPU, env_extra=env)       # no manifest: refused, saying what is missing
    assert proc.returncode != 0 and "without WORKBENCH_SHARED_CACHE_MANIFEST" in proc.stderr, describe(proc)

    env["WORKBENCH_SHARED_CACHE_MANIFEST"] = manifest
    proc = run_python(SHARED_LOAD, env_extra=env)
    assert proc.returncode == 0, describe(proc)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["built"] is False and res["harness_built"] is False, res
    assert res["library"].startswith(str(mine)), res  # a checked copy in the user's cache, never the shared file
    assert "imported from the shared cache" in proc.stderr

    # A library changed in the shared cache (its record agreeing) no longer matches the manifest.
    os.chown(shared, 0, -1)
    _chown_tree(shared, 0)
    _plant(_cpu_build(shared), _planted_library(tmp_path))
    _chown_tree(shared, NOBODY)
    shutil.rmtree(_cpu_build(mine))
    marker = tmp_path / "PWNED"
    proc = run_python(LOAD_CPU, env_extra={**env, "PLANT_MARKER": marker})
    assert proc.returncode == 0, describe(proc)
    assert not marker.exists(), "a library changed in the shared cache ran"
    assert json.loads(proc.stdout.strip().splitlines()[-1])["built"] is True
    assert "is unusable" in proc.stderr and "bytes, not" in proc.stderr, proc.stderr  # the manifest's size

    manifest.chmod(0o666)                            # a manifest others can write vouches for nothing
    shutil.rmtree(_cpu_build(mine))                  # (it is read on a miss: a warm hit needs no shared cache)
    proc = run_python(LOAD_CPU, env_extra=env)
    assert proc.returncode != 0 and "is not yours alone" in proc.stderr, describe(proc)


# ------------------------------------------------------------------ a real read-only or full filesystem (root: tmpfs)

@pytest.fixture
def tmpfs(tmp_path):
    """Mount a small tmpfs (root only; skipped where mounting is not allowed); unmounted after."""
    mounted = []

    def mount(size_kb: int, read_only: bool = False) -> pathlib.Path:
        point = tmp_path / f"mnt{len(mounted)}"
        point.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k,mode=0700", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(point)
        (point / "cache").mkdir(mode=0o700)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)
        return point / "cache"

    yield mount
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


PROBE_SOURCE = 'extern "C" int probe() { return 42; }\n' + "".join(
    f'extern "C" int pad{i}(int x) {{ return x * {i} + {i * 7}; }}\n' for i in range(400))


@needs_root
def test_a_real_read_only_cache_names_the_folder(tmpfs, tmp_path, monkeypatch):
    root = tmpfs(64, read_only=True)
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    src = tmp_path / "probe.cpp"
    src.write_text(PROBE_SOURCE)
    with pytest.raises(cache.CacheError, match=rf"the build cache {re.escape(str(root))} is read-only \(Read-only file "
                                               rf"system.*point WORKBENCH_CACHE at a writable folder"):
        ndarray_build.build_host_library("ndarray-probe/ro", "ndarray-probe", src, [])


@needs_root
def test_a_real_full_cache_names_the_folder_and_what_to_do(tmpfs, tmp_path, monkeypatch):
    root = tmpfs(24)
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    src = tmp_path / "probe.cpp"
    src.write_text(PROBE_SOURCE)
    with pytest.raises(cache.CacheError, match=rf"the build ran out of disk space: the build cache {re.escape(str(root))} "
                                               rf".*is full.*clean --older-than 7"):
        ndarray_build.build_host_library("ndarray-probe/full", "ndarray-probe", src, [])
