"""What ran: the checked calls the SASS rules and the counter rule judge (one per speed row at the
speed shape), made by a runner on fresh inputs in memory this process owns and observed by Nsight
Compute (judge/ncu_watch.py); the student's run, and the starter's, kept in the cache per build."""
from __future__ import annotations

import hashlib

from .registration import Exercise

def rule_calls(ex: Exercise) -> list[tuple[str, str, tuple]]:
    """The checked calls the rules judge: one per speed row at the speed shape, and the counter
    rule's call where the exercise has one (global_loads.py)."""
    calls = [(d, t, tuple(ex.speed.shape)) for d in ex.speed.directions for t in ex.speed.dtypes]
    if ex.global_loads is not None:
        g = ex.global_loads
        calls.append((g.direction, g.dtype, tuple(g.shape)))
    return calls


def observe_rules(ex: Exercise, start, seed: int = 0):
    """What ran in a runner (start(prefix) -> (runner, reported)) during the rule_calls, each on
    fresh inputs in memory this process owns, observed by Nsight Compute (judge/ncu_watch.py)."""
    import torch

    from ..judge import clock, ncu_watch
    from ..judge.memory import Arena

    def calls(runner):
        gen = torch.Generator(device="cuda")
        gen.manual_seed(seed)
        for d, t, shape in rule_calls(ex):
            arena = Arena("cuda", clock._Batch.bytes_per_call(ex.op, d, t, shape))
            batch = clock._Batch(ex.op, d, t, shape, 1, arena)
            batch.fresh(gen, expect=False)
            runner.request("marker")
            runner.request(batch.lines(runner.lend(arena))[0])
            runner.forget(arena)
            arena.close()

    return ncu_watch.observe(start, calls)


def observe_starter(ex: Exercise, seed: int = 0):
    """The starter's run, observed as the student's is; kept in the cache per starter build, GPU and
    exercise (the starter is the course's own code: run without a sandbox)."""
    import json

    import torch

    from .. import config
    from ..judge import ncu_watch
    from ..judge.start import start_cxx
    from . import variant_name
    from .submission import _build_variant, binding_library

    built = _build_variant(ex.op, ex.starter, variant_name(ex, ex.starter))
    key = hashlib.sha256("|".join([built.key, torch.cuda.get_device_name(), repr(rule_calls(ex)),
                                   repr(ex.sass)]).encode()).hexdigest()[:20]
    path = config.cache_dir() / "judge" / f"starter-{ex.slug}-{key}.json"
    if path.is_file():
        data = json.loads(path.read_text())
        return ncu_watch.Observation([[ncu_watch.RanKernel(k["name"], [ncu_watch.Executed(*i) for i in k["code"]])
                                     for k in data["kernels"]]])
    binding = binding_library(ex.op)
    seen = observe_rules(ex, lambda prefix: start_cxx(ex.op, built.library, binding, built.name, prefix=prefix), seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"kernels": [{"name": k.name, "code": [list(vars(i).values()) for i in k.code]}
                                            for k in seen.kernels]}))
    return seen
