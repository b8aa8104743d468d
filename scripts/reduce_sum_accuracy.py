"""Float32 and bfloat16 sums of 2^28 values on the GPU: each fast reduce_sum variant's error
against a float64 reference, beside torch.sum's own error on the same input. Two fills: standard
normal (errors partly cancel) and uniform [0, 1) (all positive: they add up). Prints a table and
writes the rows as JSON to the path given (scripts/gpu_run.sh: $OUT/reduce_sum_accuracy.json)."""
from __future__ import annotations

import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import workbench as wb  # noqa: E402

N = 2**28
VARIANTS = ("vec_grid_stride", "fast")


def main(out_path: str | None) -> int:
    if not torch.cuda.is_available():
        print("reduce_sum accuracy: no GPU visible; nothing measured")
        return 0
    kernels = {v: wb.load("reduce_sum", v) for v in VARIANTS}
    gen = torch.Generator("cuda").manual_seed(0)
    rows = []
    print(f"{'dtype':9s} {'fill':6s} {'sum (float64)':>16s} {'provider':16s} {'abs error':>11s} {'rel error':>11s}")
    for dtype in (torch.float32, torch.bfloat16):
        for fill in ("randn", "rand"):
            x = getattr(torch, fill)(N, device="cuda", generator=gen).to(dtype)
            exact = x.double().sum().item()
            got = {"torch.sum": x.sum().double().item(), **{v: k(x).double().item() for v, k in kernels.items()}}
            for provider, value in got.items():
                err = abs(value - exact)
                rows.append({"dtype": str(dtype).replace("torch.", ""), "fill": fill, "n": N, "exact": exact,
                             "provider": provider, "value": value, "abs_error": err,
                             "rel_error": err / max(abs(exact), 1e-300), "gpu": torch.cuda.get_device_name()})
                print(f"{rows[-1]['dtype']:9s} {fill:6s} {exact:16.6f} {provider:16s} {err:11.4g} {rows[-1]['rel_error']:11.3g}")
            del x
    if out_path:
        with open(out_path, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
