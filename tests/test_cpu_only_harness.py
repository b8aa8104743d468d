"""The harness also builds where torch has no CUDA: without WORKBENCH_WITH_CUDA it compiles no
CUDA header, serves CPU variants, and refuses CUDA variants with a clear message."""
from __future__ import annotations

import json

CHILD = r"""
import json, torch
import workbench as wb
from workbench.run import loader
from workbench.run.process_state import STATE
from workbench.build import toolchain
toolchain.can_build_cuda = lambda: False          # what a CPU-only torch reports
k = wb.load("bias_gelu", "cpu")
x, b = torch.randn(5, 7), torch.randn(7)
ok = torch.allclose(k(x, b), torch.nn.functional.gelu(x + b, approximate="tanh"), atol=1e-6)
try:
    wb.load("bias_gelu", "vec4")
    refused = ""
except wb.WorkbenchError as e:
    refused = str(e)
flags = json.loads((loader.cache.build_dir_for("harness", STATE.harness["key"]) / "meta.json").read_text())["flags"]
print("RESULT " + json.dumps({"cuda": STATE.harness["cuda"], "ok": ok, "refused": refused, "flags": flags}))
"""


def test_cpu_only_harness_serves_cpu_variants_and_refuses_cuda(run_python):
    proc = run_python(CHILD)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))[7:])
    assert out["cuda"] is False and "-DWORKBENCH_WITH_CUDA" not in out["flags"]
    assert out["ok"]
    assert "CUDA variant" in out["refused"] and "cannot build CUDA code" in out["refused"]
