"""clean by age and by size: idle builds go, a build that a running process has loaded stays; only
what carries the workbench's build record is removed, links are never followed, a home folder or
the filesystem root is refused as a cache (issue 24)."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import time

import pytest

from conftest import private_cache, run_cli, wait_for_line

from workbench.build import cache, clean, records

HOLDER = r"""
import sys, workbench as wb
wb.load("bias_gelu", "cpu")
print("ready", flush=True)
sys.stdin.readline()
"""

EXTRA = r"""
import workbench as wb
src = open("kernels/bias_gelu/cpu.cpp").read().replace("parallel over rows;", "parallel over rows (clean probe);")
print(wb.load_inline("bias_gelu", src, name="clean_probe").library)
"""


def _age(d, seconds):
    old = time.time() - seconds
    for name in ("meta.json", "inuse"):
        if (d / name).exists():
            os.utime(d / name, (old, old))


def test_clean_by_age_and_size_spares_builds_in_use(cpu_kernel, tmp_path, monkeypatch, spawn_python, run_python):
    root = private_cache(tmp_path / "cache")
    env = {"WORKBENCH_CACHE": str(root)}
    assert run_python(EXTRA, env_extra=env).returncode == 0          # an idle build: nobody holds it
    holder = spawn_python(HOLDER, env_extra=env)                      # holds harness, binding + cpu
    wait_for_line(holder, "ready")
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    builds = {d.name: d for d in cache.builds_root().iterdir()}
    idle = [d for n, d in builds.items() if "clean_probe" in n]
    assert len(idle) == 1 and len(builds) == 4

    for d in builds.values():
        _age(d, 3 * 86400)
    res = clean.clean(older_than_s=2 * 86400)
    assert [os.path.basename(p) for p in res["removed"]] == [idle[0].name]
    assert len(res["in_use"]) == 3 and not idle[0].exists()

    res = clean.clean(max_bytes=0)                                    # over any size: still spares in-use builds
    assert res["removed"] == [] and len(res["in_use"]) == 3
    assert all(d.exists() for n, d in builds.items() if n != idle[0].name)

    holder.stdin.write("done\n")
    holder.stdin.flush()
    holder.wait(timeout=60)
    res = clean.clean(max_bytes=0)                                    # idle now: removed, oldest first
    assert len(res["removed"]) == 3 and not any(cache.builds_root().iterdir())


def test_clean_by_age_keeps_recent_builds(cpu_kernel, tmp_path, monkeypatch):
    root = private_cache(tmp_path / "cache")
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    res = clean.clean(older_than_s=86400)
    assert res["removed"] == [] and len(list(cache.builds_root().iterdir())) == 3


# --- issue 24: clean removes only the workbench's own builds --------------------------------------

def _canaries(root, outside):
    """Things beside the builds that are not the workbench's: each must survive any clean."""
    (root / "builds" / "my_notes").mkdir()
    (root / "builds" / "my_notes" / "notes.txt").write_text("mine")
    (root / "builds" / "a_file.txt").write_text("mine too")
    (outside / "precious").mkdir(parents=True)
    (outside / "precious" / "data.txt").write_text("outside the cache")
    os.symlink(outside / "precious", root / "builds" / "link-to-precious")
    (root / "trash").mkdir(exist_ok=True)
    (root / "trash" / "user-stuff").mkdir()
    (root / "trash" / "user-stuff" / "keep.txt").write_text("not a build")
    return ["builds/my_notes/notes.txt", "builds/a_file.txt", "trash/user-stuff/keep.txt"]


def test_clean_all_removes_only_builds_and_never_follows_links(cpu_kernel, tmp_path, monkeypatch):
    root = private_cache(tmp_path / "cache")
    kept = _canaries(root, tmp_path / "outside")
    builds = sorted(d.name for d in (root / "builds").iterdir() if (d / "meta.json").exists())
    assert len(builds) == 3
    # a broken build moved aside by publish (it carries the workbench's marker): trash that may go
    trashed = root / "trash" / "bias_gelu-cpu-old"
    shutil.copytree(root / "builds" / builds[0], trashed)
    (trashed / "meta.json").write_text("[]")
    (trashed / records.MARKER).write_text("bias_gelu/cpu\n")

    proc = run_cli("clean", "--all", env_extra={"WORKBENCH_CACHE": root})
    assert proc.returncode == 0, proc.stderr
    for rel in kept:
        assert (root / rel).is_file(), rel
    assert (tmp_path / "outside" / "precious" / "data.txt").read_text() == "outside the cache"
    assert (root / "builds" / "link-to-precious").is_symlink()
    assert not any((root / "builds" / b).exists() for b in builds) and not trashed.exists()
    for b in builds:
        assert f"removed: {root / 'builds' / b}" in proc.stdout, proc.stdout
    assert f"removed: {trashed}" in proc.stdout
    assert "removed 4 builds and files" in proc.stdout
    assert f"left alone (a symbolic link (never followed)): {root / 'builds' / 'link-to-precious'}" in proc.stdout
    assert f"left alone (carries no workbench build record): {root / 'builds' / 'my_notes'}" in proc.stdout
    assert f"left alone (carries no workbench build record): {root / 'trash' / 'user-stuff'}" in proc.stdout


def test_clean_refuses_a_home_folder_or_the_root_as_cache(tmp_path):
    home = tmp_path / "home"
    (home / "builds" / "thesis").mkdir(parents=True)
    (home / "builds" / "thesis" / "chapter1.tex").write_text("years of work")
    (home / "trash").mkdir()
    (home / "trash" / "keep.txt").write_text("mine")
    os.chmod(home, 0o700)
    for cache_root in (home, "/"):
        proc = run_cli("clean", "--all", env_extra={"WORKBENCH_CACHE": cache_root, "HOME": home})
        assert proc.returncode == 1, proc.stdout + proc.stderr
        what = "a home folder" if cache_root == home else "the filesystem root"
        assert f"the build cache {cache_root} is {what}" in proc.stderr and "WORKBENCH_CACHE" in proc.stderr
    assert (home / "builds" / "thesis" / "chapter1.tex").read_text() == "years of work"
    assert (home / "trash" / "keep.txt").read_text() == "mine"


def test_clean_refuses_another_users_home_as_cache(tmp_path, monkeypatch):
    others = [p.pw_dir for p in pwd.getpwall() if p.pw_uid != os.geteuid() and os.path.isdir(p.pw_dir)
              and os.path.realpath(p.pw_dir) != "/"]
    if not others:
        pytest.skip("no other user with a home folder here")
    monkeypatch.setenv("WORKBENCH_CACHE", ([d for d in others if d.startswith("/home/")] or others)[0])
    with pytest.raises(cache.CacheError, match="is a home folder"):
        clean.clean(everything=True)


# --- issue 45: what is not its own stays, bad limits are named -----------------------------------

def test_clean_removes_only_nvrtc_units_of_its_own_and_names_each_file(tmp_path, monkeypatch):
    from dataclasses import asdict

    from workbench.build.nvrtc_kernels import Unit

    root = tmp_path / "cache"
    folder = root / "nvrtc-kernels"
    folder.mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    victim = tmp_path / "outside" / "victim.cubin"
    victim.parent.mkdir()
    victim.write_text("not the cache's")
    (folder / "my_notes.json").write_text('{"mine": true}')         # the user's, in the cache's folder
    # A unit of the workbench's, an hour old and named by no build, whose kernel's record names a
    # file outside the cache.
    u = Unit("0123456789abcdef" * 2, "vector_add/probe", "probe.cu", {"probe.cu": "..."}, ["-arch=sm_90"],
             {"_Z3outv": "&out"})
    ours = [folder / f"{u.kernel_key('_Z3outv')}.name", folder / f"{u.key}.json"]
    ours[0].write_text(f"{victim}\n_Z3outv")
    ours[1].write_text(json.dumps(asdict(u)))
    old = time.time() - 7200
    for p in [*folder.iterdir()]:
        os.utime(p, (old, old))
    res = clean.clean(everything=True)
    assert victim.read_text() == "not the cache's" and (folder / "my_notes.json").exists()
    assert sorted(res["removed"]) == sorted(map(str, ours)) and not any(p.exists() for p in ours)


@pytest.mark.parametrize("option, value", [("--older-than", "-1"), ("--max-size", "-5"), ("--max-size", "nan"),
                                           ("--older-than", "inf"), ("--max-size", "lots")])
def test_clean_refuses_a_negative_or_nan_limit_naming_the_option(cpu_kernel, tmp_path, option, value):
    root = private_cache(tmp_path / "cache")
    builds = sorted((root / "builds").iterdir())
    proc = run_cli("clean", option, value, env_extra={"WORKBENCH_CACHE": root})
    assert proc.returncode == 2 and f"argument {option}: must be a finite number >= 0; got '{value}'" in proc.stderr, \
        proc.stderr
    assert sorted((root / "builds").iterdir()) == builds
    with pytest.raises(ValueError, match=r"clean: older_than_s must be a finite number >= 0; got -1"):
        clean.clean(older_than_s=-1)
