#!/usr/bin/env python3
"""Run notebooks top to bottom with nbclient and write the executed copies.

    python scripts/run_notebooks.py --out DIR [NOTEBOOK ...]     # default: every notebooks/*.ipynb
    python scripts/run_notebooks.py --in-place notebooks/01_quickstart.ipynb

Each notebook runs in a fresh kernel (python3 by default) whose working directory is the
notebook's folder, with this checkout on PYTHONPATH and the rest of the environment
(WORKBENCH_CACHE, CUDA_VISIBLE_DEVICES ...) inherited. A cell tagged "raises-exception" may raise;
an error in any other cell stops that notebook: the script prints the cell and its error, still
writes what ran, and exits 1 once every notebook has been tried. Streams are coalesced, so a
progress bar keeps only its last state. Each copy records in its metadata (workbench.execution)
when, on which path (the setup cell's "GPU path: ..." or "No GPU visible: ..." line), at which
commit and how long it ran.
"""
from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
PATH_LABELS = {"GPU path:": "gpu", "No GPU visible:": "cpu"}


def _path_label(nb) -> tuple[str, str]:
    """("gpu" | "cpu" | "unknown", the line that says so) from the first cell that prints one."""
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            for line in str(out.get("text", "")).splitlines():
                for prefix, path in PATH_LABELS.items():
                    if line.startswith(prefix):
                        return path, line
    return "unknown", ""


def execute(path: pathlib.Path, *, timeout: int, kernel: str):
    """Run one notebook. Returns (the executed notebook, the CellExecutionError or None)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from workbench.measure import bench_rows

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel, allow_errors=False,
                            record_timing=False, coalesce_streams=True,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.monotonic()
    error = None
    try:
        client.execute()
    except CellExecutionError as e:
        error = e
    which, label = _path_label(nb)
    nb.metadata["workbench"] = {"execution": {
        "ok": error is None, "path": which, "label": label, "commit": bench_rows.commit(REPO_ROOT),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - start, 1)}}
    return nb, error


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=pathlib.Path, metavar="NOTEBOOK",
                    help="notebooks to run (default: every notebooks/*.ipynb)")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=pathlib.Path, metavar="DIR", help="write the executed copies here")
    where.add_argument("--in-place", action="store_true", help="overwrite each notebook with its executed copy")
    ap.add_argument("--timeout", type=int, default=600, help="seconds a cell may run (default 600)")
    ap.add_argument("--kernel", default="python3", help="the Jupyter kernel to run them in (default python3)")
    args = ap.parse_args(argv)

    try:
        import nbclient  # noqa: F401
        import nbformat
    except ImportError as e:
        print(f"run_notebooks: {e.name} is not installed (pip install nbclient nbformat ipykernel)", file=sys.stderr)
        return 2
    paths = [p.resolve() for p in args.notebooks] or sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing or not paths:
        print(f"run_notebooks: no such notebook: {', '.join(missing) or NOTEBOOKS_DIR / '*.ipynb'}", file=sys.stderr)
        return 2
    # Make the checkout importable here (a script's sys.path lacks it) and in the kernels, which
    # inherit this environment.
    sys.path.insert(0, str(REPO_ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    failed = []
    for path in paths:
        print(f"[notebooks] running {path.name} ...", flush=True)
        nb, error = execute(path, timeout=args.timeout, kernel=args.kernel)
        rec = nb.metadata["workbench"]["execution"]
        target = path if args.in_place else args.out / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        if error is not None:
            failed.append(path.name)
            print(f"[notebooks] FAILED {path.name} after {rec['seconds']} s (partial copy: {target})\n{error}",
                  file=sys.stderr, flush=True)
        else:
            print(f"[notebooks] {path.name}: ok in {rec['seconds']} s, {rec['path']} path -> {target}", flush=True)
    if failed:
        print(f"[notebooks] {len(failed)} of {len(paths)} failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
