"""The host cost of one call (issue 26): native PyTorch ops and the workbench's, side by side in one
run, with tiny tensors, so the time is the call path's and not the kernel's.

For each pairing (torch's expression / the workbench op):
  a * b / elementwise_mul    x + y / vector_add    x.sum(-1) / reduce_sum
  F.rms_norm / rmsnorm       F.gelu(x + b, approximate="tanh") / bias_gelu (a fused op against the eager ops it fuses)
it times, as the median over --repeats loops of --calls calls each (a CUDA loop is synchronised at
its end only, so a call costs what the host needs to issue it while the GPU keeps up). A wb row and
the row it is judged against are timed interleaved, a loop of one then a loop of the other, round
after round, so both medians come from the same window: a host whose speed drifts over a run (the
H100 machine's native rows moved by several us between rows measured minutes apart) moves both:
  forward   native (the expression), aten (torch.ops.aten.* of the same op), wb (the Kernel handle
            k(...)), wb_ops (torch.ops.workbench.<op>.default(..., variant));
  fwd+bwd   native and wb, inputs requiring grad, y.backward(g);
  part      the harness's kernel alone (torch.ops below autograd) and the spec's Python
            normalisation of a call (spec.call_args), which the handle's fast path skips;
  triton    (CUDA) rmsnorm's Triton variant through its handle and through its custom op, against
            a bare cached launch of the same Triton kernel (output allocated outside the loop).
Targets: forward within 3 us of native (wb) and of aten (wb_ops); fwd+bwd at most 1.2x native;
the Triton handle at most 2x the bare launch. One JSON row per call kind goes to --out; a table
with each wb row's difference or ratio to its native twin and its verdict is printed.

  python3 scripts/call_overhead.py                     # CPU variants ('cpu')
  python3 scripts/call_overhead.py --device cuda --out $OUT/call_path.jsonl
  python3 scripts/call_overhead.py --device cuda --kinds triton   # the Triton rows alone
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import workbench as wb  # noqa: E402
from workbench.measure import bench_rows  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
CUDA_VARIANTS = {"elementwise_mul": "vec4", "vector_add": "vec4", "reduce_sum": "warp_shuffle",
                 "rmsnorm": "vectorized", "bias_gelu": "vec4"}
FORWARD_US, BACKWARD_RATIO, TRITON_RATIO = 3.0, 1.2, 2.0


def per_call_us(fns: list, calls: int, repeats: int, sync) -> list[float]:
    """For each of fns, the median over `repeats` loops of `calls` calls, in microseconds per call;
    the loops interleaved (round r times fns[0], fns[1], ..., then round r + 1), so the medians of
    a row and of its twin come from the same stretch of the host's time."""
    for fn in fns:
        for _ in range(max(calls // 10, 20)):
            fn()
    sync()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, loops in zip(fns, times):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            loops.append((time.perf_counter() - start) / calls * 1e6)
    return [statistics.median(loops) for loops in times]


def pairings(device: str, dtype):
    """(op, its inputs, native forward, aten forward, the workbench op's attribute values)."""
    def t(*shape):
        return torch.randn(*shape, device=device, dtype=dtype)

    x, y, w, v, u = t(4, 64), t(4, 64), t(64), t(256), t(256)
    eps = 1e-6
    aten = torch.ops.aten
    return [
        ("elementwise_mul", (x, y), lambda a, b: a * b, lambda a, b: aten.mul.Tensor(a, b), ()),
        ("vector_add", (v, u), lambda a, b: a + b, lambda a, b: aten.add.Tensor(a, b), ()),
        ("reduce_sum", (x,), lambda a: a.sum(-1), lambda a: aten.sum.dim_IntList(a, [-1]), ()),
        ("rmsnorm", (x, w), lambda a, b: F.rms_norm(a, (64,), b, eps),
         lambda a, b: aten.rms_norm.default(a, [64], b, eps), (eps,)),
        ("bias_gelu", (x, w), lambda a, b: F.gelu(a + b, approximate="tanh"),
         lambda a, b: aten.gelu.default(aten.add.Tensor(a, b), approximate="tanh"), ()),
    ]


def forward_and_backward(fn, inputs, grad):
    def run():
        fn(*inputs).backward(grad)
    return run


KINDS = ("ops", "triton")  # --kinds: the C++ ops' pairings; rmsnorm's Triton variant against a bare launch


def measure(device: str, calls_per_loop: int, repeats: int, kinds: tuple[str, ...] = KINDS) -> list[dict]:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    dtype = torch.float32
    rows = []

    def side_by_side(kind, op, *calls):
        """Rows of one kind and op, timed interleaved: each call is (name, fn, variant)."""
        medians = per_call_us([fn for _, fn, _ in calls], calls_per_loop, repeats, sync)
        for (call, _, variant), us in zip(calls, medians):
            rows.append({"kind": kind, "op": op, "call": call, "variant": variant, "us": round(us, 3)})
            print(f"  {kind:8} {op:16} {call:8} {us:9.2f} us", file=sys.stderr)

    for op, inputs, native, aten_op, attrs in pairings(device, dtype) if "ops" in kinds else ():
        name = CUDA_VARIANTS[op] if device == "cuda" else "cpu"
        k = wb.load(op, name)
        overload = getattr(torch.ops.workbench, op).default
        torch.testing.assert_close(k(*inputs), native(*inputs), rtol=1e-4, atol=1e-4)
        side_by_side("forward", op, ("native", lambda: native(*inputs), ""), ("wb", lambda: k(*inputs), k.qualified))
        side_by_side("forward", op, ("aten", lambda: aten_op(*inputs), ""),
                     ("wb_ops", lambda: overload(*inputs, *attrs, k.qualified), k.qualified))
        # Where the time goes: the harness's kernel alone (below autograd), the Autograd key's part
        # (wb_ops minus that) and the spec's Python normalisation of a call (what k(...) skips).
        with torch._C._AutoDispatchBelowAutograd():
            side_by_side("part", op, ("kernel", lambda: overload(*inputs, *attrs, k.qualified), k.qualified))
        side_by_side("part", op, ("call_args", lambda: k.spec.call_args(inputs, {}), ""))
        leaves = [t.detach().clone().requires_grad_() for t in inputs]
        grad = torch.ones_like(native(*inputs))
        side_by_side("fwd+bwd", op, ("native", forward_and_backward(native, leaves, grad), ""),
                     ("wb", forward_and_backward(k, leaves, grad), k.qualified))

    if device == "cuda" and "triton" in kinds:
        k = wb.load("rmsnorm", "triton")
        x, w = torch.randn(4, 64, device=device), torch.randn(64, device=device)
        mod, eps = k.build.module, 1e-6
        block, loop, warps = mod._plan(64, mod.ROW_CAP)
        y = torch.empty_like(x)
        kernel = mod._forward_kernel

        def bare():
            kernel[(4,)](x, w, y, 64, eps, BLOCK=block, LOOP=loop, num_warps=warps)

        bare()
        torch.testing.assert_close(y, k(x, w))
        side_by_side("triton", "rmsnorm", ("bare", bare, ""), ("wb", lambda: k(x, w), k.qualified),
                     ("wb_ops", lambda: k.build.forward(x, w, eps), k.qualified))
    return rows


def verdicts(rows: list[dict]) -> list[dict]:
    """Each wb row against its native twin: (kind, op, call, wb us, twin us, measure, target, ok)."""
    us = {(r["kind"], r["op"], r["call"]): r["us"] for r in rows}
    out = []
    for r in rows:
        kind, op, call = r["kind"], r["op"], r["call"]
        if not call.startswith("wb"):
            continue  # the natives, and the parts (printed by measure, kept in the rows)
        if kind == "forward":
            twin = "native" if call == "wb" else "aten"
            diff = r["us"] - us[(kind, op, twin)]
            out.append({**r, "against": twin, "twin_us": us[(kind, op, twin)], "measure": f"{diff:+.2f} us",
                        "target": f"<= +{FORWARD_US:g} us", "ok": diff <= FORWARD_US})
        else:
            twin = "bare" if kind == "triton" else "native"
            limit = TRITON_RATIO if kind == "triton" else BACKWARD_RATIO
            ratio = r["us"] / us[(kind, op, twin)]
            target = call == "wb"  # the triton custom op row is shown for where the time goes; no target
            out.append({**r, "against": twin, "twin_us": us[(kind, op, twin)], "measure": f"{ratio:.2f}x",
                        "target": f"<= {limit:g}x" if target else "-", "ok": ratio <= limit if target else None})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop (default 2000)")
    parser.add_argument("--repeats", type=int, default=7,
                        help="timed loops of each call, interleaved with its twin's; the median is kept (default 7)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                        help="what to time: the op pairings (forward, fwd+bwd, part rows) and/or the Triton rows "
                             "(default both)")
    parser.add_argument("--commit", help="the commit the rows name (default: WORKBENCH_COMMIT, else this tree's HEAD, "
                                         "-dirty where tracked files differ from it)")
    parser.add_argument("--out", type=pathlib.Path, help="JSONL of rows (default results/<cpu|gpu>/<commit>/call_overhead.jsonl)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    if args.kinds == ["triton"] and args.device != "cuda":
        parser.error("--kinds triton times a Triton variant: it needs --device cuda")
    torch.set_num_threads(args.threads)
    commit = args.commit or bench_rows.commit(ROOT)  # a copy with edits since its HEAD says so
    machine = torch.cuda.get_device_name() if args.device == "cuda" else f"{platform.processor() or platform.machine()}"
    rows = measure(args.device, args.calls, args.repeats, tuple(args.kinds))
    checked = verdicts(rows)
    out = args.out or ROOT / "results" / ("gpu" if args.device == "cuda" else "cpu") / commit / "call_overhead.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for r in rows:
            f.write(json.dumps({**r, "device": args.device, "machine": machine, "commit": commit,
                                "calls": args.calls, "repeats": args.repeats, "torch": torch.__version__}) + "\n")
    print(f"call overhead on {machine} ({args.device}), commit {commit}: median us per call, "
          f"{args.repeats} loops of {args.calls}, each wb row's interleaved with its twin's")
    print(f"{'kind':8} {'op':16} {'call':7} {'us':>8}  {'against':7} {'us':>8}  {'measure':>9}  {'target':>10}  verdict")
    for c in checked:
        verdict = "-" if c["ok"] is None else ("ok" if c["ok"] else "MISSED")
        print(f"{c['kind']:8} {c['op']:16} {c['call']:7} {c['us']:8.2f}  {c['against']:7} {c['twin_us']:8.2f}  "
              f"{c['measure']:>9}  {c['target']:>10}  {verdict}")
    missed = [c for c in checked if c["ok"] is False]
    print(f"{len(checked) - len(missed)} of {len(checked)} rows within target; rows: {out}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
