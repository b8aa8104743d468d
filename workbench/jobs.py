"""The child side of isolate: `python -m workbench _child JOB` runs one load, check, gradcheck,
bench or measure and writes its result as JSON; `python -m workbench _worker WARM` is an
isolate.Worker, which warms up and then runs jobs read from stdin. Kept apart from isolate.py,
which only starts children, so that correctness and benchmark can call isolate without an import
cycle. A "load" job is where a library built elsewhere (the exercise checker builds without
loading) first runs: its static initializers, then its exported descriptor, reported back."""
from __future__ import annotations

import json
import os
import pathlib
import sys
import time

from . import correctness, gradients, isolate


def _announce(what: str) -> None:
    # The case about to run, on its own line: if the kernel then crashes the process, the parent
    # finds the case in the child's last lines (exercise checker: "crashed in backward 7x9 ...").
    print(f"[case] {what}", file=sys.stderr, flush=True)


def _run_job(job: dict) -> None:
    kind, kwargs, op = job["kind"], dict(job["kwargs"]), job["spec"]["op"]
    if kind == "load":  # the first time this library's code runs anywhere: its static initializers, now
        print(f"[load] {op}/{job['spec']['name']} from {job['spec'].get('source', 'kernels/' + op)} "
              f"(pid {os.getpid()})", file=sys.stderr, flush=True)
    built_here = None
    if kind == "load" and "source" in job["spec"]:
        # Built without loading first (a cache hit where the parent built it): the load below then
        # finds the build and takes no build lock while the library's code runs.
        from . import loader
        if job["spec"].get("style") == "extension":
            from . import byo
            built_here = byo.build_extension(op, job["spec"]["source"], job["spec"]["name"]).built
        else:
            built_here = loader.build_source(op, job["spec"]["source"], job["spec"]["name"]).built
    kernel = isolate.resolve(job["spec"])
    announce = kwargs.pop("announce", False)
    if kind == "load":
        # What the library says of itself (its exported workbench_variant_info, read by the harness,
        # which has checked its ABI version and op): the parent compares it with the source's text.
        out = {"info": {k: kernel.info.get(k) for k in ("op", "name", "build_id", "device", "dtypes", "steps",
                                                        "description", "probe")},
               "build_id": kernel.build_id, "built": bool(built_here or kernel.built), "library": str(kernel.library), "pid": os.getpid()}
        print(f"[load] loaded, descriptor: {json.dumps(out['info'])}", file=sys.stderr, flush=True)
    elif kind == "check":
        out = correctness.check(op, kernel, on_case=_announce if announce else None, **kwargs).to_dict()
    elif kind == "gradcheck":
        out = gradients.gradcheck(op, kernel, **kwargs).to_dict()
    elif kind == "measure":  # one call inside an NVTX range, for a profiler in front of this child (ncu.py)
        out = _measure(op, kernel, **kwargs)
    elif kind == "bench":
        from .benchmark import bench
        variants = kwargs.pop("variants", [kernel.name])
        from . import byo
        if isinstance(kernel, byo.CallableKernel):  # not in the registry: handed over as itself
            variants = [kernel if v == kernel.name else v for v in variants]
        r = bench(op, variants=variants, **kwargs)
        out = {"rows": r.rows, "notes": r.notes}
    else:
        raise ValueError(f"unknown job kind {kind!r}")
    import torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # surface an asynchronous fault here, as a failure of the child
    tmp = pathlib.Path(job["result"] + ".tmp")
    tmp.write_text(json.dumps(out))
    tmp.replace(job["result"])


def _measure(op: str, kernel, size, dtype: str, direction: str) -> dict:
    """Warm the call up (builds, CUDA's lazy module loading, the allocator), then make it once
    inside the NVTX range ncu.RANGE; inputs and gradients are made before the range opens.
    The profiled call is checked at its shape (issue 23): first on fresh inputs with its outputs
    poisoned (verify.check_kernel_at), then the profiled call's own output, on inputs drawn after
    the warm-up (an answer replayed from the warm-up is wrong for them), against the trusted result
    (float64 reference, or eager where that does not fit). The result carries the verdict."""
    import torch

    from . import ncu, verify

    if direction not in ("fwd", "bwd"):
        raise ValueError(f"direction must be 'fwd' or 'bwd'; got {direction!r}")
    spec = kernel.spec
    size = tuple(size)
    before = verify.check_kernel_at(kernel, size, dtype, direction, seed=1)
    device = torch.device(kernel.device if kernel.device != "cuda" else f"cuda:{torch.cuda.current_device()}")
    gen = torch.Generator(device).manual_seed(0)
    attrs = spec.sample_attrs()[0]

    def step(p):
        if direction == "fwd":
            return kernel(*p.inputs, **attrs)
        return kernel.backward(*p.grads, *p.inputs, **attrs)

    warm = verify.Probe(spec, size, dtype, direction, attrs, gen, device)
    for _ in range(2):
        step(warm)
    del warm
    probe = verify.Probe(spec, size, dtype, direction, attrs, gen, device)  # fresh inputs for the profiled call
    cuda = device.type == "cuda"  # a CPU variant runs here too (tests of the check, without a GPU)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(ncu.RANGE)
    out = step(probe)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    last = probe.judge(out, "the profiled call")
    del out, probe
    if not before.ok:  # check_kernel_at's own run, before the warm-up: say which of the two it was
        before.detail = before.detail.replace("the profiled call:", "before profiling (fresh inputs, outputs "
                                              "poisoned):", 1)
    verdict = next((v for v in (before, last) if not v.ok), last)
    if verdict.ok and before.ok:
        verdict.max_abs_err = max((e for e in (before.max_abs_err, last.max_abs_err) if e == e), default=verdict.max_abs_err)
    return {"size": list(size), "dtype": dtype, "direction": direction, "verified": verdict.status,
            "verify_detail": verdict.detail, "verify_max_abs_err": verdict.max_abs_err,
            "verify_where": list(verdict.where) if verdict.where is not None else None,
            "verify_against": verdict.against}


def child_main(job_path: str) -> int:
    _run_job(json.loads(pathlib.Path(job_path).read_text()))
    return 0


def worker_main(warm_json: str) -> int:
    """Warm up, print "ready", then for each job line on stdin run it and print "done". A job that
    raises ends the process with status 1 (its traceback on stderr), as child_main's would."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever a job prints goes to stderr, never into the protocol
    started = time.perf_counter()
    import torch

    from . import loader

    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")  # create the CUDA context now, not in the first job
    warm = json.loads(warm_json)
    if warm.get("op"):
        loader.ensure_op(warm["op"])
        if warm.get("variant"):
            # A check of an in-tree variant in the jobs' dtypes, layouts and kinds of size loads the
            # kernels (torch's, the harness's) those jobs will use: CUDA loads each on first use.
            k = loader.load(warm["op"], warm["variant"])
            dtypes = [d for d in warm.get("dtypes", k.dtypes[:1]) if d in k.dtypes] or list(k.dtypes[:1])
            if "sizes_from_seed" in warm:  # the exercise checker's: the smallest of the sizes its seed draws
                from .exercise.sizes import random_sizes

                drawn = random_sizes(warm["sizes_from_seed"], k.spec)
                shapes = sorted((s for s in drawn if 0 not in s), key=sum)[:3] + [s for s in drawn if 0 in s]
            else:
                shapes = [min((s for s in k.spec.check_sizes if 0 not in s), key=sum)]
            correctness.check(warm["op"], k, dtypes=dtypes, shapes=shapes,
                              layouts=warm.get("layouts", ("contiguous",)), seed=warm.get("seed", 0))
    print(f"[worker] ready in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    print("ready", file=protocol)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        started = time.perf_counter()
        _run_job(job)
        print(f"[worker] {job['kind']} in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        print("done", file=protocol)
    return 0
