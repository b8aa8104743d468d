"""Libraries built ahead of time into a wheel, and how an installed workbench serves them.

`pip wheel . --no-build-isolation` (setup.py) prebuilds the harness, every op's binding and every
C++ variant into workbench/_prebuilt/, with manifest.json: the toolchain (toolchain.abi()), the
arch list and each library's prebuilt key (the content key with those in place of the full
toolchain: known without nvcc). Where the key is listed and torch matches, the library loads with
no compiler and no cache; otherwise it is built from the shipped sources where a compiler exists
(a one-line note says why), else a WorkbenchError names what differs. A checkout never reads this.
"""
from __future__ import annotations

import functools
import json
import pathlib
import sys

from .. import config
from ..errors import WorkbenchError
from . import elf_problem, toolchain
from .piece import Piece, sha256_file

MANIFEST = "manifest.json"
FORMAT = 1
_noted: set[str] = set()


def key(piece: Piece, arch_list: str, abi: dict) -> str:
    """A piece's prebuilt key: its content key with the wheel's arch list and `abi` as the toolchain."""
    return piece.key({"prebuilt": abi}, arch_list)


@functools.lru_cache(maxsize=None)
def _read_manifest(path: pathlib.Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"the wheel's prebuilt manifest {path} is unreadable ({e}); reinstall the wheel") from None
    if data.get("format") != FORMAT:
        raise WorkbenchError(f"the wheel's prebuilt manifest {path} has format {data.get('format')!r}; this "
                             f"workbench reads format {FORMAT}: reinstall the wheel")
    return data


def manifest() -> dict | None:
    """The installed wheel's manifest; None from a checkout, without one, or with WORKBENCH_PREBUILT=off."""
    if not config.INSTALLED or config.prebuilt_mode() == "off":
        return None
    return _read_manifest(config.PREBUILT_DIR / MANIFEST)


def describe(tc: dict) -> str:
    return (f"torch {tc.get('torch')} (CUDA {tc.get('torch_cuda') or 'none'}, C++11 ABI "
            f"{int(bool(tc.get('cxx11_abi')))}, {tc.get('python')}, {tc.get('platform')})")


def mismatch(m: dict) -> list[str]:
    """The toolchain fields where this process differs from the wheel's (empty: they agree)."""
    built, here = m.get("toolchain", {}), toolchain.abi()
    return [k for k in here if built.get(k) != here[k]]


def harness_with_cuda() -> bool | None:
    """Whether the wheel's usable harness was built with CUDA; None: the loader decides."""
    m = manifest()
    if m is None or mismatch(m):
        return None
    if not m.get("harness_with_cuda") and toolchain.can_build_cuda() and config.prebuilt_mode() != "only":
        return None  # a CPU-only harness could not serve the CUDA variants this machine can build
    return bool(m.get("harness_with_cuda"))


def _compiler_missing(piece: Piece) -> str | None:
    """Why this piece cannot be built here (None: it can)."""
    if config.prebuilt_mode() == "only":
        return "WORKBENCH_PREBUILT=only"
    if not toolchain.can_build_cpp():
        return "no C++ compiler ($CXX, else c++) or no ninja on PATH"
    if piece.with_cuda and not toolchain.can_build_cuda():
        return "torch has no CUDA" if not toolchain.torch_has_cuda() else "no nvcc found (CUDA_HOME, PATH)"
    return None


def _note(what: str, message: str) -> None:
    if what not in _noted:  # once per process, even with WORKBENCH_QUIET: it explains the compile
        _noted.add(what)
        print(f"[workbench] note: {message}", file=sys.stderr, flush=True)


def _arch_gap(arch_list: str) -> list[str]:
    """The visible GPUs ('sm_XY') no entry runs on: SASS runs on its major at a minor >= its own
    (an arch-specific one, 9.0a, on its own alone), PTX on anything at least as new."""
    import torch

    if not toolchain.gpu_available():
        return []
    sass, ptx = [], []
    for major, minor, suffix, plus_ptx in toolchain.entries(arch_list):
        sass.append((major, minor, suffix))
        if plus_ptx:
            ptx.append((major, minor))
    gaps = []
    for i in range(torch.cuda.device_count()):
        cap = torch.cuda.get_device_capability(i)
        ok = any(s[0] == cap[0] and (s[1] == cap[1] if s[2] else s[1] <= cap[1]) for s in sass) \
            or any(p <= cap for p in ptx)
        if not ok:
            gaps.append(f"sm_{cap[0]}{cap[1]}")
    return gaps


def find(piece: Piece) -> tuple[pathlib.Path, dict] | None:
    """(library, record) of the wheel's prebuilt piece; None to build it as usual; WorkbenchError,
    saying why, where it can be neither served nor built."""
    m = manifest()
    if m is None:
        return None
    shipped = (config.KERNELS_DIR.resolve(), config.BINDINGS_DIR.resolve())
    if not all(any(d in pathlib.Path(s).resolve().parents for d in shipped) for s in piece.sources):
        return None  # load_inline, load_source, an exercise: the edit loop, JIT as from a checkout
    missing = _compiler_missing(piece)
    differs = mismatch(m)
    if differs:
        text = (f"this workbench wheel's prebuilt libraries were built for {describe(m['toolchain'])}; this "
                f"process runs {describe(toolchain.abi())} ({', '.join(differs)} differ), so they are not loaded: "
                f"their symbols would not resolve against this torch")
        if missing is None:
            _note("toolchain", f"{text}; building from the shipped sources instead")
            return None
        raise WorkbenchError(
            f"{piece.label}: {text}, and this machine cannot build it instead ({missing}). Install "
            f"torch=={m['toolchain'].get('torch')}, rebuild the wheel against this torch (pip wheel . "
            f"--no-build-isolation --no-deps), or install a compiler{' and nvcc' if piece.with_cuda else ''}.")
    arch_list = m.get("arch_list") or toolchain.SHIPPED
    entry = m.get("libraries", {}).get(key(piece, arch_list, toolchain.abi()))
    problem = None
    if entry is None:
        devices = m.get("devices", [])
        if piece.with_cuda and piece.kind == "variant" and "cuda" not in devices:
            problem = f"the wheel was built with WORKBENCH_WHEEL_DEVICES={','.join(devices) or 'none'}: no CUDA variants"
        else:
            problem = ("its source, a header it includes or its flags differ from what the wheel built "
                       "(edited, or WORKBENCH_NVCC_FLAGS set)")
    elif piece.with_cuda and (gaps := _arch_gap(arch_list)):
        problem = f"the wheel's CUDA code is for {arch_list}, which does not run on {', '.join(gaps)}"
    else:
        lib = config.PREBUILT_DIR / entry["file"]
        try:
            size = lib.stat().st_size
        except OSError as e:
            size, problem = None, f"{lib} is missing ({e.strerror})"
        if size is not None and (size != entry.get("size") or sha256_file(lib) != entry.get("sha256")):
            problem = f"{lib} does not match the manifest's size and sha256 (modified or truncated)"
        elif size is not None and (elf := elf_problem(lib, size)):
            problem = f"{lib} is damaged ({elf})"  # never dlopen'ed: a truncated file is a SIGBUS
        if problem is None:
            return lib, dict(entry, prebuilt=True, arch_list=arch_list if piece.with_cuda else None,
                             toolchain=m["toolchain"])
    if missing is None:
        if "edited" not in problem:  # an edit being rebuilt is the normal loop: no note for it
            _note(piece.label, f"{piece.label}: {problem}; building it from the shipped sources")
        return None
    served = sorted(e["label"] for e in m.get("libraries", {}).values()
                    if e.get("kind") == "variant" and e["label"].split("/")[0] == piece.label.split("/")[0])
    raise WorkbenchError(
        f"{piece.label}: this workbench wheel has no usable prebuilt library for it ({problem}), and this "
        f"machine cannot build it ({missing})" + (f"; prebuilt variants of this op: {', '.join(served)}" if served else ""))
