"""clean by age and by size: idle builds go, a build that a running process has loaded stays."""
from __future__ import annotations

import os
import time

from conftest import private_cache, wait_for_line

from workbench import cache

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
    res = cache.clean(older_than_s=2 * 86400)
    assert [os.path.basename(p) for p in res["removed"]] == [idle[0].name]
    assert len(res["in_use"]) == 3 and not idle[0].exists()

    res = cache.clean(max_bytes=0)                                    # over any size: still spares in-use builds
    assert res["removed"] == [] and len(res["in_use"]) == 3
    assert all(d.exists() for n, d in builds.items() if n != idle[0].name)

    holder.stdin.write("done\n")
    holder.stdin.flush()
    holder.wait(timeout=60)
    res = cache.clean(max_bytes=0)                                    # idle now: removed, oldest first
    assert len(res["removed"]) == 3 and not any(cache.builds_root().iterdir())


def test_clean_by_age_keeps_recent_builds(cpu_kernel, tmp_path, monkeypatch):
    root = private_cache(tmp_path / "cache")
    monkeypatch.setenv("WORKBENCH_CACHE", str(root))
    res = cache.clean(older_than_s=86400)
    assert res["removed"] == [] and len(list(cache.builds_root().iterdir())) == 3
