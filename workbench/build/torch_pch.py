"""torch/extension.h precompiled, for the C++ files of extension-style builds (run/byo.py).

Parsing torch/extension.h is most of a torch extension's C++ compile (scripts/extension_build_time.py).
GCC reads `<folder>/torch/extension.h.gch` in place of the header when that folder is searched first
and the flags agree (`-Winvalid-pch` logs where they do not). So the folder is made once per
compiler, torch and flags in the cache's `pch/`, under a lock, published by a rename, and never part
of a build's key: the object code is the same either way. nvcc has no precompiled headers.
WORKBENCH_PCH=0 turns this off; a compiler other than GCC, or a header that fails to compile,
leaves builds as they were, with one line saying why.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sysconfig
import uuid

from . import cache, records, toolchain
from .guard import run_guarded

# What cpp_extension puts on every C++ compile of an extension besides the include folders (its
# TORCH_EXTENSION_NAME differs per build and appears in no header, so GCC accepts the file anyway).
EXTENSION_FLAGS = ("-DTORCH_API_INCLUDE_EXTENSION_H", "-fPIC", "-std=c++20")
FLAGS = ("-Winvalid-pch",)   # on the extension's own C++ compiles: an unusable .gch is said in the log
UNUSED = "not used because"  # GCC's words in that case

_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        cache.progress(message)


def _compiler() -> tuple[str, str] | None:
    """(the C++ compiler cpp_extension uses, its version line) where it is GCC, else None."""
    toolchain.cuda_home()  # before cpp_extension's import, which reads CUDA_HOME once
    from torch.utils import cpp_extension

    cxx = shutil.which(cpp_extension.get_cxx_compiler())
    if cxx is None:
        return None
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    first = next((ln for ln in out.splitlines() if ln.strip()), "")
    clang = "clang" in out.lower()
    return None if clang or not first else (cxx, first)


def folder(cflags) -> pathlib.Path | None:
    """The folder to put first on the include path of an extension's C++ files compiled with `cflags`,
    made now where missing (once); None where precompiled headers are off or unusable here."""
    if os.environ.get("WORKBENCH_PCH", "1") == "0":
        return None
    cxx = _compiler()
    if cxx is None:
        _say_once("torch extensions: no precompiled torch headers (the C++ compiler is not GCC)")
        return None
    from torch.utils import cpp_extension

    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    command = [cxx[0], "-x", "c++-header", *[f"-I{d}" for d in includes], *EXTENSION_FLAGS, *cflags]
    key = hashlib.sha256(json.dumps({"command": command, "version": cxx[1], "toolchain": toolchain.current().fields()},
                                    sort_keys=True).encode()).hexdigest()[:20]
    root = cache.subdir("pch")
    final = root / key
    if (final / "torch" / "extension.h.gch").is_file():
        return final
    header = pathlib.Path(includes[0]) / "torch" / "extension.h"
    with cache.writing("precompiling torch/extension.h"), records.file_lock(root / f"{key}.lock", what="torch/extension.h (precompiled)"):
        if (final / "torch" / "extension.h.gch").is_file():  # made while we waited
            return final
        staging = root / f".staging-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.mkdir(staging, 0o700)
        os.mkdir(staging / "torch", 0o700)
        cache.progress("torch extensions: precompiling torch/extension.h once for this compiler and torch "
                       "(a minute or two; later builds of extension C++ files skip parsing it)")
        proc = run_guarded([*command, str(header), "-o", str(staging / "torch" / "extension.h.gch")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            records.discard(staging)
            tail = "\n".join(proc.stdout.strip().splitlines()[-5:])
            _say_once(f"torch extensions: precompiling torch/extension.h failed, so builds parse it as before:\n{tail}")
            return None
        os.rename(staging, final)
    size = (final / "torch" / "extension.h.gch").stat().st_size
    cache.progress(f"torch extensions: torch/extension.h precompiled ({size / 2**20:.0f} MiB) in {final}")
    return final


def unused(log: str) -> str:
    """GCC's line saying the precompiled header was not used, from a build's log ("" where it was)."""
    return next((ln.strip() for ln in log.splitlines() if UNUSED in ln and "extension.h.gch" in ln), "")
