"""Tests for workbench.measure.bench_rows (the results file): schema round trip, validation, truncated files, provenance."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

from workbench.measure.bench_rows import (
    PROVENANCE_KEYS,
    SCHEMA,
    append_rows,
    provenance,
    read_rows,
    to_dataframe,
)


def make_row(variant: str = "vec4", numel: int = 4096 * 4096, **overrides: object) -> dict:
    row = {
        "op": "bias_gelu", "variant": variant,
        "kind": "baseline" if variant in ("eager", "compile") else "variant",
        "dtype": "float32", "shape": "4096x4096", "numel": numel, "direction": "fwd",
        "median_ms": 0.25, "p20_ms": 0.24, "p80_ms": 0.27, "n_samples": 120, "rel_std_err": 0.004,
        "method": "cuda-events", "bytes": 3 * 4 * numel, "flops": 8 * numel,
        "GBps": 3 * 4 * numel / 0.25e-3 / 1e9, "TFLOPs": 8 * numel / 0.25e-3 / 1e12, "pct_of_ceiling": 75.0,
        "ceiling_GBps": 2700.0, "attrs": {},
        "speedup_vs_eager": 1.8, "speedup_vs_compile": None, "peak_mem_bytes": 4 * numel,
        "run_id": "0123456789ab", "timestamp": "2025-01-01T00:00:00+00:00", "gpu": "NVIDIA H100",
        "driver": "550.54.15", "torch": "2.14.1", "cuda": "13.0", "commit": "abc1234",
        "workbench_version": "0.1.0", "python": "3.11.7", "host": "node1",
    }
    row.update(overrides)
    return row


def test_schema_covers_the_documented_columns() -> None:
    for key in ("op", "variant", "kind", "dtype", "shape", "numel", "direction", "median_ms",
                "p20_ms", "p80_ms", "n_samples", "rel_std_err", "method", "bytes", "flops", "GBps",
                "pct_of_ceiling", "ceiling_GBps", "speedup_vs_eager", "speedup_vs_compile",
                "peak_mem_bytes", *PROVENANCE_KEYS):
        assert key in SCHEMA, key
    assert all(isinstance(t, type) for t in SCHEMA.values())


def test_round_trip_two_batches(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "deep" / "dir" / "results.jsonl"  # parents are created
    first = [make_row("eager"), make_row("vec4")]
    second = [make_row("scalar", run_id="ba9876543210", extra_note="kept")]
    assert append_rows(path, first) == 2
    assert append_rows(path, iter(second)) == 1  # any iterable
    back = read_rows(path)
    assert back == first + second
    for row in back:
        assert set(SCHEMA) <= set(row)
    assert len(path.read_text().splitlines()) == 3  # one object per line


def test_numpy_scalars_and_non_finite_values(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "r.jsonl"
    append_rows(path, [make_row(median_ms=np.float64(0.5), numel=np.int64(7), rel_std_err=float("inf"))])
    (row,) = read_rows(path)
    assert row["median_ms"] == 0.5 and row["numel"] == 7
    assert row["rel_std_err"] is None  # strict JSON: no Infinity literal in the file
    json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-standard JSON {c}"))


def test_missing_key_raises_and_writes_nothing(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "r.jsonl"
    bad = make_row()
    del bad["ceiling_GBps"]
    with pytest.raises(ValueError, match="ceiling_GBps"):
        append_rows(path, [make_row(), bad])
    assert not path.exists()  # the good row before the bad one was not written either


def test_truncated_last_line_is_skipped_and_later_appends_survive(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "r.jsonl"
    append_rows(path, [make_row("eager"), make_row("vec4")])
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # a writer died mid-line
    with pytest.warns(UserWarning, match=r"r\.jsonl:2"):
        rows = read_rows(path)
    assert [r["variant"] for r in rows] == ["eager"]

    append_rows(path, [make_row("scalar")])  # starts on a fresh line, not glued to the torn one
    with pytest.warns(UserWarning, match="truncated"):
        rows = read_rows(path)
    assert [r["variant"] for r in rows] == ["eager", "scalar"]


def test_to_dataframe_columns() -> None:
    pd = pytest.importorskip("pandas")
    rows = [make_row("eager"), make_row("vec4", extra_note="x")]
    df = to_dataframe(rows)
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == [*SCHEMA, "extra_note"]
    assert len(df) == 2
    assert df["variant"].tolist() == ["eager", "vec4"]
    assert list(to_dataframe([]).columns) == list(SCHEMA)


def test_provenance_fields_outside_a_repo(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # never find an outer repo
    p = provenance(tmp_path, version="9.9")
    assert set(p) == set(PROVENANCE_KEYS)
    assert p["commit"] == "unknown"
    assert p["workbench_version"] == "9.9"
    assert len(p["run_id"]) == 12 and int(p["run_id"], 16) >= 0
    assert p["timestamp"].endswith("+00:00")
    assert p["gpu"] and p["torch"] and p["python"] and p["host"]
    assert isinstance(p["driver"], str) and isinstance(p["cuda"], str)
    assert provenance(tmp_path)["run_id"] != p["run_id"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_provenance_commit_in_a_git_repo(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false",
             *args], cwd=tmp_path, check=True, capture_output=True, text=True,
        ).stdout.strip()

    git("init", "-q")
    (tmp_path / "a.txt").write_text("1\n")
    git("add", "a.txt")
    git("commit", "-q", "-m", "first")
    head = git("rev-parse", "--short", "HEAD")

    assert provenance(tmp_path)["commit"] == head
    (tmp_path / "untracked.txt").write_text("x")  # untracked files do not make it dirty
    assert provenance(tmp_path)["commit"] == head
    (tmp_path / "a.txt").write_text("2\n")
    assert provenance(tmp_path)["commit"] == f"{head}-dirty"
