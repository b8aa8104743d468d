"""The one dtype vocabulary: names, torch dtypes, the C masks variants declare, check tolerances
(torch imported only where needed: the CLI's parsing and the static variant listing stay cheap)."""
from __future__ import annotations

NAMES = ("float32", "float64", "float16", "bfloat16")
# The dtype-mask macros of kernels/common/wb_variant.h, as a variant's WB_EXPORT_VARIANT writes them.
MASKS = {"float32": "WB_F32", "float64": "WB_F64", "float16": "WB_F16", "bfloat16": "WB_BF16"}
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}
# Relative norm error ||out - ref|| / ||ref|| and element-wise (atol, rtol), per dtype, against a
# float64 reference; a sum of n terms gets sqrt(n) times the atol (verify.compare).
TOLERANCES = {
    "float64": (1e-12, 1e-13, 1e-10),
    "float32": (1e-5, 1e-5, 1e-4),
    "float16": (2e-3, 2e-3, 4e-3),
    "bfloat16": (1e-2, 1.6e-2, 1.6e-2),
}


def itemsize(name: str) -> int:
    """Bytes per element of a dtype name, without importing torch."""
    if name not in ITEMSIZE:
        raise ValueError(f"dtype must be one of {list(NAMES)}; got {name!r}")
    return ITEMSIZE[name]


def to_torch(name: str):
    """torch.float32 for "float32" (or a torch dtype, returned as it is); ValueError otherwise."""
    import torch

    if name_of(name) not in NAMES:
        raise ValueError(f"dtype must be one of {list(NAMES)}; got {name!r}")
    return getattr(torch, name_of(name))


def name_of(dtype) -> str:
    """"float32" for torch.float32 (any torch dtype: "int32", "bool" ...); a name is returned as it is."""
    return dtype if isinstance(dtype, str) else str(dtype).replace("torch.", "")


def names(dtypes) -> list[str]:
    """Validated names for a list of names or torch dtypes."""
    out = [name_of(d) for d in dtypes]
    for d in out:
        if d not in NAMES:
            raise ValueError(f"dtypes must be among {list(NAMES)}; got {d!r}")
    return out


def tolerance(dtype) -> tuple[float, float, float]:
    return TOLERANCES[name_of(dtype)]
