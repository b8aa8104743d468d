"""What the cache reads is checked against one schema before any field is used (issue 45).

A damaged build record is rebuilt, never a traceback; a shared cache's record or library that is
not what the manifest vouches for is built here instead; a manifest that is not one is refused with
one message; nothing is written into a cache before it is accepted, nor through a link; a failed
marker write leaves no staging folder. The record fuzz runs without a compiler: a build folder with
a small hand-made ELF library stands in for a real build.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import pathlib
import random
import shutil
import struct
import subprocess
import sys
import time

import pytest

from conftest import REPO_ROOT
from workbench import build
from workbench.build import cache, clean, nvrtc_kernels, records, shared, toolchain

LIB = "wb_probe-0123abcd.so"


def _elf(size: int = 256) -> bytes:
    """A 64-bit ELF file with one loadable segment covering it: what build.elf_problem accepts."""
    head = bytearray(64)
    head[:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<HHIQQQIHHHHHH", head, 16, 3, 62, 1, 0, 64, 0, 0, 64, 56, 1, 64, 0, 0)
    return bytes(head) + struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, size, size, 4096) + bytes(size - 120)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _build(builds: pathlib.Path, dep: pathlib.Path, name: str = "fuzz-probe-0123456789abcdef0123") -> tuple:
    """A published build folder (library + a valid record) under `builds`; (folder, record)."""
    d = builds / name
    d.mkdir(parents=True, mode=0o700)
    data = _elf()
    (d / LIB).write_bytes(data)
    st = dep.stat()
    record = {"format": 2, "library": LIB, "size": len(data), "sha256": _sha(data), "key": "ab" * 32,
              "label": "fuzz/probe", "kind": "variant", "arch_list": None, "build_seconds": 0.5, "created": 1.0e9,
              "toolchain": {"torch": "2.14.1", "cxx11_abi": True, "nvcc": None}, "sources": [str(dep)],
              "flags": ["-O3"], "deps": [[str(dep), st.st_size, st.st_mtime_ns, _sha(dep.read_bytes())]]}
    (d / "meta.json").write_text(json.dumps(record))
    return d, record


@pytest.fixture
def private(tmp_path, monkeypatch):
    """A private cache of the test's own, with one build in it; (cache, build folder, record)."""
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    monkeypatch.delenv("WORKBENCH_SHARED_CACHE", raising=False)
    dep = tmp_path / "probe.h"
    dep.write_text("#define PROBE 1\n")
    d, record = _build(root / "builds", dep)
    assert build.lookup(d) == (d / LIB, record, None)
    return root, d, record


# ------------------------------------------------------------------ damaged records: named, rebuilt

DAMAGE = {
    "deps path null": lambda r: r["deps"][0].__setitem__(0, None),
    "deps path a list": lambda r: r["deps"][0].__setitem__(0, ["/etc/passwd"]),
    "deps path an integer": lambda r: r["deps"][0].__setitem__(0, 7),
    "deps path with NUL": lambda r: r["deps"][0].__setitem__(0, "/usr/include/stdio.h\0x"),
    "deps entry short": lambda r: r["deps"][0].pop(),
    "size a string": lambda r: r.__setitem__("size", "256"),
    "library outside": lambda r: r.__setitem__("library", "../other/lib.so"),
    "nvrtc_unit a path": lambda r: r.__setitem__("nvrtc_unit", "../../etc/passwd"),
    "older format": lambda r: r.__setitem__("format", 1),
}
FIELD = {"deps path null": "deps[0][0]", "deps path a list": "deps[0][0]", "deps path an integer": "deps[0][0]",
         "deps path with NUL": "deps[0][0]", "deps entry short": "deps[0]", "size a string": "size",
         "library outside": "library", "nvrtc_unit a path": "nvrtc_unit", "older format": "format"}


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_record_is_named_by_its_field_and_rebuilt(private, how):
    _, d, record = private
    DAMAGE[how](record)
    (d / "meta.json").write_text(json.dumps(record))
    lib, meta, problem = build.lookup(d)
    assert lib is None and problem.startswith(f"damaged build record: {d / 'meta.json'}: {FIELD[how]} "), problem


@pytest.mark.parametrize("depth", [9, 5000, 200_000])
def test_a_deeply_nested_record_is_refused_before_it_is_parsed(private, depth):
    _, d, record = private
    (d / "meta.json").write_text(json.dumps(dict(record, extra="x"))[:-1] + ', "deep": ' + "[" * depth
                                 + "]" * depth + "}")
    lib, _, problem = build.lookup(d)
    assert lib is None and problem.endswith("nested deeper than 8 levels"), problem
    assert clean.workbench_build(d) == "carries no workbench build record"


def test_a_record_that_is_not_a_regular_file_is_never_read(private):
    _, d, _ = private
    (d / "meta.json").unlink()
    os.mkfifo(d / "meta.json")                         # a reader that opened it would wait forever
    with pytest.raises(cache.RecordError, match=r"not a regular file \(mode p"):
        cache.load_checked(d / "meta.json", cache.RECORD)
    assert build.lookup(d)[0] is None and clean.workbench_build(d) == "carries no workbench build record"


def _value(rng: random.Random, depth: int = 0):
    """A random JSON value: every type, odd numbers and strings, sometimes nested deep."""
    kind = rng.randrange(12 if depth < 3 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 255, 2**63, -(2**63) - 1, 2**70, rng.randrange(-10**6, 10**6)])
    if kind == 3:
        return rng.choice([0.5, -0.0, 1e308, float("nan"), float("inf"), -float("inf")])
    if kind in (4, 5, 6):
        return rng.choice(["", ".", "..", "a/b", "/etc/passwd", "x\0y", "é" * 300, "a" * 5000, "ab" * 32, "ab" * 16,
                           LIB, "planted.so", "../planted.so", "/dev/zero"])
    if kind in (7, 8):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    if kind in (9, 10):
        return {rng.choice(["library", "deps", "size", "x", ""]): _value(rng, depth + 1) for _ in range(rng.randrange(4))}
    n = rng.choice([2, 9, 50, 3000])
    return json.loads("[" * n + "]" * n) if n < 500 else "[" * n + "]" * n  # the deepest only as text


def _slots(v):
    """(container, key) of every value inside the JSON value `v`, at any depth."""
    for k, x in list(v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()):
        yield v, k
        yield from _slots(x)


def _mutant(rng: random.Random, good: dict) -> bytes:
    """`good` with one random change: a value at any depth replaced or removed, a field added, the
    text cut short, or the whole wrapped in lists."""
    r = json.loads(json.dumps(good))
    container, k = rng.choice(list(_slots(r)))
    how, deep = rng.randrange(5), None
    if how == 0:
        container[k] = v = _value(rng)
        deep = v if isinstance(v, str) and v.startswith("[[[") else None
    elif how == 1:
        del container[k]
    elif how == 2:
        r[rng.choice(["extra", "nvrtc_unit", "kernels", "imported_from"])] = _value(rng)
    text = json.dumps(r)
    if deep is not None:
        text = text.replace(json.dumps(deep), deep)
    if how == 3:
        text = text[:rng.randrange(len(text))]
    if how == 4:
        n = rng.choice([1, 8, 100_000])
        text = "[" * n + text + "]" * n
    return text.encode()


def test_record_fuzz_is_refused_with_one_error_never_a_traceback(private, tmp_path, monkeypatch):
    """600 random records (each field's type at any depth, truncations, nesting; a planted library
    beside the real one), each as a build's own record and as a shared cache's: every reader of a
    record answers (a problem, never an exception but RecordError), the only library ever vouched
    for is the real one, and an import brings in only a record that lookup then accepts."""
    root, d, record = private
    (d / "planted.so").write_bytes(_elf(512))
    folder, name = tmp_path / "shared", "fuzz-probe-shared-0123456789abcdef"
    shutil.copytree(d, folder / "builds" / name)
    manifest = tmp_path / "trusted.json"
    manifest.write_text(json.dumps(cache.manifest_of(folder)))
    manifest.chmod(0o600)
    monkeypatch.setenv("WORKBENCH_SHARED_CACHE", str(folder))
    monkeypatch.setenv("WORKBENCH_SHARED_CACHE_MANIFEST", str(manifest))
    final, real = root / "builds" / name, (d / LIB).read_bytes()
    rng, started, refused, imported = random.Random(45), time.monotonic(), 0, 0
    for _ in range(600):
        text = _mutant(rng, record)
        (d / "meta.json").write_bytes(text)
        lib, meta, problem = build.lookup(d)
        assert (lib is None) == (problem is not None)
        assert lib is None or lib == d / LIB and meta["sha256"] == record["sha256"], (lib, meta)
        refused += lib is None
        assert clean.workbench_build(d) in (None, "carries no workbench build record")
        assert nvrtc_kernels.unit_named_by(d) in (None, *([meta.get("nvrtc_unit")] if meta else []))
        try:
            cache.load_checked(d / "meta.json", cache.RECORD)
        except cache.RecordError as e:
            assert str(e).startswith(f"{d / 'meta.json'}: ") and "\n" not in str(e)
        assert set(cache.manifest_of(root)["builds"]) <= {d.name}
        (folder / "builds" / name / "meta.json").write_bytes(text)
        if shared.import_shared(final, "fuzz/probe"):
            imported += 1
            lib, meta, problem = build.lookup(final)      # the shared cache's record, checked: it answers
            assert lib is None or lib.read_bytes() == real, (lib, meta)
            shutil.rmtree(final)
    assert refused > 400 and 0 < imported < 200 and time.monotonic() - started < 60, \
        (refused, imported, time.monotonic() - started)


def test_manifest_fuzz_is_refused_with_one_message(tmp_path, monkeypatch):
    manifest = tmp_path / "manifest.json"
    good = {"format": 2, "builds": {"fuzz-probe-0123456789abcdef0123": {"sha256": "ab" * 32, "size": 256}}}
    monkeypatch.setenv("WORKBENCH_SHARED_CACHE", str(tmp_path / "shared"))
    monkeypatch.setenv("WORKBENCH_SHARED_CACHE_MANIFEST", str(manifest))
    rng = random.Random(7)
    for _ in range(300):
        manifest.write_bytes(_mutant(rng, good))
        manifest.chmod(0o600)
        try:
            folder, builds = shared.shared_cache()
            assert all(set(v) >= {"sha256", "size"} for v in builds.values())
        except cache.CacheError as e:
            assert "WORKBENCH_SHARED_CACHE_MANIFEST is not a manifest the workbench can use: " in str(e), e


# ------------------------------------------------------------------ a shared cache: nothing unchecked comes in

def _shared(tmp_path, monkeypatch, private, record_change=None):
    """A shared cache holding a copy of the private build (its record changed by `record_change`),
    a manifest the user trusts for it, and the user's own cache without that build."""
    root, d, record = private
    folder = tmp_path / "shared"
    (folder / "builds").mkdir(parents=True)
    src = folder / "builds" / d.name
    os.rename(d, src)
    manifest = tmp_path / "trusted.json"
    manifest.write_text(json.dumps(cache.manifest_of(folder)))
    manifest.chmod(0o600)
    if record_change:
        record_change(record)
        (src / "meta.json").write_text(json.dumps(record))
    monkeypatch.setenv("WORKBENCH_SHARED_CACHE", str(folder))
    monkeypatch.setenv("WORKBENCH_SHARED_CACHE_MANIFEST", str(manifest))
    monkeypatch.setenv("WORKBENCH_QUIET", "0")
    return root / "builds" / d.name, src


@pytest.mark.parametrize("how", ["deps path null", "deps path with NUL", "library outside"])
def test_a_damaged_shared_record_is_not_imported(private, tmp_path, monkeypatch, capsys, how):
    final, src = _shared(tmp_path, monkeypatch, private, DAMAGE[how])
    assert shared.import_shared(final, "fuzz/probe") is False
    assert f"the shared cache's build {src} is unusable ({src / 'meta.json'}: {FIELD[how]} " in capsys.readouterr().err
    assert not os.path.lexists(final) and not list(final.parent.glob(".staging-*"))
    monkeypatch.delenv("WORKBENCH_SHARED_CACHE")       # switched off: the user's cache is as it was
    assert build.lookup(final) == (None, None, None)


def test_a_shared_build_the_manifest_vouches_for_is_imported_and_checked(private, tmp_path, monkeypatch):
    final, src = _shared(tmp_path, monkeypatch, private)
    assert shared.import_shared(final, "fuzz/probe") is True
    lib, meta, problem = build.lookup(final)
    assert problem is None and lib.read_bytes() == (src / LIB).read_bytes() and meta["imported_from"] == str(src)


def test_a_deeply_nested_manifest_is_refused_with_one_message(tmp_path, monkeypatch):
    manifest = tmp_path / "trusted.json"
    manifest.write_text('{"format": 2, "builds": ' + "[" * 100_000 + "]" * 100_000 + "}")
    manifest.chmod(0o600)
    monkeypatch.setenv("WORKBENCH_SHARED_CACHE", str(tmp_path))
    monkeypatch.setenv("WORKBENCH_SHARED_CACHE_MANIFEST", str(manifest))
    with pytest.raises(cache.CacheError, match="nested deeper than 8 levels"):
        shared.shared_cache()


# Each in a child with a bounded address space and a time limit: the library read whole (before)
# hung on a FIFO and ran out of memory on /dev/zero.
IMPORT = r"""
import pathlib, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from workbench.build import shared
print(shared.import_shared(pathlib.Path(sys.argv[1]), "fuzz/probe"))
"""


@pytest.mark.parametrize("what", ["fifo", "/dev/zero", "a folder", "longer", "a link", "other bytes"])
def test_a_shared_library_that_is_not_the_regular_file_vouched_for_is_refused(private, tmp_path, monkeypatch, what):
    final, src = _shared(tmp_path, monkeypatch, private)
    lib = src / LIB
    data = lib.read_bytes()
    lib.unlink()
    if what == "fifo":
        os.mkfifo(lib)
    elif what == "/dev/zero":
        os.symlink("/dev/zero", lib)
    elif what == "a folder":
        lib.mkdir()
    elif what == "longer":
        lib.write_bytes(data + bytes(64))
    elif what == "other bytes":
        lib.write_bytes(data[:-1] + b"x")
    else:
        (tmp_path / "elsewhere.so").write_bytes(data)
        os.symlink(tmp_path / "elsewhere.so", lib)
    proc = subprocess.run([sys.executable, "-c", IMPORT, str(final)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT), WORKBENCH_QUIET="0"))
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stdout + proc.stderr
    says = {"longer": f"is unusable ({lib}: 320 bytes, not 256)", "fifo": f"is unusable ({lib}: not a regular file",
            "a folder": f"is unusable ({lib}: not a regular file", "/dev/zero": f"is unusable ({lib}: cannot be read",
            "a link": f"is unusable ({lib}: cannot be read",
            "other bytes": f"{lib} does not match the sha256 your manifest trusts"}[what]
    assert says in proc.stderr, proc.stderr
    assert not os.path.lexists(final)


# ------------------------------------------------------------------ nothing is written before the cache is accepted

@pytest.fixture
def fake_nvcc(tmp_path, monkeypatch):
    """A stand-in nvcc that says its version (no CUDA needed), and a fresh memo to write."""
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.0'\necho 'Build cuda_13.0.r13.0/x_0'\n")
    nvcc.chmod(0o755)
    monkeypatch.setattr(toolchain, "nvcc_path", lambda: str(nvcc))
    return nvcc


def test_a_cache_that_is_not_private_gets_no_toolchain_memo(tmp_path, monkeypatch, fake_nvcc):
    root = tmp_path / "open"
    root.mkdir(mode=0o777)
    root.chmod(0o777)
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    assert toolchain.nvcc_version() == "cuda_13.0.r13.0/x_0"
    assert list(root.iterdir()) == []
    with pytest.raises(cache.CacheError, match="is not private"):
        cache.root()


@pytest.mark.parametrize("planted", ["toolchain/ a link", "a temporary file a link", "the memo a link"])
def test_the_toolchain_memo_is_never_written_through_a_link(tmp_path, monkeypatch, fake_nvcc, planted):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "mine.txt").write_text("the user's")
    if planted == "toolchain/ a link":
        os.symlink(victim, root / "toolchain")
    else:
        (root / "toolchain").mkdir(mode=0o700)
        name = f"nvcc.{os.getpid()}.tmp" if planted == "a temporary file a link" else "nvcc.json"
        os.symlink(victim / "mine.txt", root / "toolchain" / name)
    assert toolchain.nvcc_version() == "cuda_13.0.r13.0/x_0"
    assert [p.name for p in victim.iterdir()] == ["mine.txt"] and (victim / "mine.txt").read_text() == "the user's"


def test_a_damaged_toolchain_memo_is_asked_again(tmp_path, monkeypatch, fake_nvcc):
    root = tmp_path / "cache"
    (root / "toolchain").mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    for text in ("[]", '{"stamp": 3}', "[" * 10_000, "\xff"):
        (root / "toolchain" / "nvcc.json").write_text(text, errors="surrogateescape")
        assert toolchain.nvcc_version() == "cuda_13.0.r13.0/x_0"
    assert json.loads((root / "toolchain" / "nvcc.json").read_text())["version"] == "cuda_13.0.r13.0/x_0"


# ------------------------------------------------------------------ a full disk leaves no staging folder

def test_a_failed_marker_write_leaves_no_staging_folder(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(pathlib.Path, "write_text", full)
    with pytest.raises(cache.CacheError, match="is full"):
        records.new_staging_dir("fuzz/probe", "ab" * 32)
    assert list((root / "builds").iterdir()) == []
