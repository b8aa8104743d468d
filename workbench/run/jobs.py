"""What the exercise checker's child does (isolate_child.py runs them; isolate.py starts the
children; all three go with exercise/child.py): one function per job, each taking the variant's
address (isolate.variant_address: how a child finds the variant the parent meant) and plain JSON
arguments, and returning a JSON-able dict; and the warm-up a Worker child does before its first
job. BY_NAME maps the names the parent uses (isolate.run("check", ...)) to them.

A "load" job is where a library built elsewhere (the exercise checker builds without loading)
first runs: its static initializers, then its exported descriptor, reported back.
"""
from __future__ import annotations

import json
import os
import sys

from ..judge.pyrunner import resolve
from ..measure import correctness, gradients


def _announce(case: str) -> None:
    # The case about to run, on its own line: if the kernel then crashes the process, the parent
    # finds the case in the child's last lines (exercise checker: "crashed in backward 7x9 ...").
    print(f"[case] {case}", file=sys.stderr, flush=True)


def load_variant(address: dict) -> dict:
    """Load the variant (building it first where the parent built it without loading: a cache
    hit then, which takes no build lock while the library's code runs) and report what the
    library says of itself (its exported workbench_variant_info, read by the harness, which has
    checked its ABI version and op): the parent compares it with the source's text."""
    op = address["op"]
    print(f"[load] {op}/{address['name']} from {address.get('source', 'kernels/' + op)} (pid {os.getpid()})",
          file=sys.stderr, flush=True)  # the first time this library's code runs anywhere: its static initializers, now
    built_here = None
    if "source" in address:
        from . import loader
        if address.get("style") == "extension":
            from . import extension
            built_here = extension.build_extension(op, address["source"], address["name"]).built
        else:
            built_here = loader.build_source(op, address["source"], address["name"]).built
    kernel = resolve(address)
    out = {"info": {k: kernel.info.get(k) for k in ("op", "name", "build_id", "device", "dtypes", "steps",
                                                    "description", "probe")},
           "build_id": kernel.build_id, "built": bool(built_here or kernel.built), "library": str(kernel.library),
           "pid": os.getpid()}
    print(f"[load] loaded, descriptor: {json.dumps(out['info'])}", file=sys.stderr, flush=True)
    return out


def check_variant(address: dict, *, announce: bool = False, **check_args) -> dict:
    """correctness.check of the variant (check_args: its keyword arguments); announce: print each
    case before it runs, so a crash can be placed."""
    return correctness.check(address["op"], resolve(address), on_case=_announce if announce else None,
                             **check_args).to_dict()


def gradcheck_variant(address: dict, **gradcheck_args) -> dict:
    return gradients.gradcheck(address["op"], resolve(address), **gradcheck_args).to_dict()


def bench_variant(address: dict, *, variants: list | None = None, **bench_args) -> dict:
    """benchmark.bench of the variant, or of `variants` (names) where given: the exercise checker
    times the student's beside the reference in one run. The addressed variant among them is
    handed over as itself where it is a callable (not in the registry)."""
    from . import byo
    from ..measure.benchmark import bench

    kernel = resolve(address)
    variants = [kernel.name] if variants is None else variants
    if isinstance(kernel, byo.CallableKernel):
        variants = [kernel if v == kernel.name else v for v in variants]
    result = bench(address["op"], variants=variants, **bench_args)
    return {"rows": result.rows, "notes": result.notes}


BY_NAME = {"load": load_variant, "check": check_variant, "gradcheck": gradcheck_variant, "bench": bench_variant}


def warm_up(op: str | None = None, variant: str | None = None, dtypes: list[str] | None = None,
            layouts: list[str] = ("contiguous",), seed: int = 0, exercise_seed: int | None = None) -> None:
    """A Worker's start-up before its first job: the CUDA context, then `op` declared and, where
    `variant` (in-tree) is named, a small check of it in the jobs' dtypes and layouts on a kind of
    size they will use, which loads the kernels (torch's, the harness's) those jobs need: CUDA loads
    each on first use. exercise_seed: the sizes are the smallest an exercise check with that seed
    draws (exercise/sizes.py); otherwise the smallest non-empty of the op's check sizes."""
    import torch

    from . import loader

    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")  # create the CUDA context now, not in the first job
    if not op:
        return
    loader.ensure_op(op)
    if not variant:
        return
    k = loader.load(op, variant)
    dtypes = [d for d in (dtypes or k.dtypes[:1]) if d in k.dtypes] or list(k.dtypes[:1])
    if exercise_seed is not None:
        from ..exercise.sizes import warmup_shapes

        shapes = warmup_shapes(exercise_seed, k.spec)
    else:
        shapes = [min((s for s in k.spec.check_sizes if 0 not in s), key=sum)]
    correctness.check(op, k, dtypes=dtypes, shapes=shapes, layouts=layouts, seed=seed)
