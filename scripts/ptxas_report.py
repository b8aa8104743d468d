"""Write the compiler evidence for every CUDA variant to results/ptxas/: ptxas's resource report
(registers, spills) for sm_80 and sm_90, and the global load/store opcodes in each kernel's SASS."""
from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from workbench import config

from workbench.explain import ptxas


def main() -> None:
    out = config.RESULTS_DIR / "ptxas"
    out.mkdir(parents=True, exist_ok=True)
    summary = []
    for source in sorted(config.KERNELS_DIR.glob("*/*.cu")):
        for arch in ("sm_80", "sm_90"):
            report = ptxas.compile_report(source, arch)
            (out / f"{source.parent.name}-{source.stem}-{arch}.txt").write_text(report.text)
            for name, k in sorted(report.kernels.items()):
                summary.append(f"{source.parent.name}/{source.name} {arch} {name}: {k.registers} registers, "
                               f"{k.stack_bytes} B stack, {k.spill_store_bytes + k.spill_load_bytes} B spills")
        if ptxas.cuobjdump():
            for kernel, ops in sorted(ptxas.global_memory_ops(source, "sm_90").items()):
                summary.append(f"{source.parent.name}/{source.name} sm_90 SASS {kernel}: {' '.join(sorted(ops))}")
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))


if __name__ == "__main__":
    sys.exit(main())
