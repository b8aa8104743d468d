"""The build pipeline: what to compile, where a library comes from, and how it is compiled.

Owns every compiled library's way onto disk, for the torch path (harness, bindings, variants,
extension-style sources) and the NumPy front end's torch-free builds alike:

- piece.py      Piece (sources, flags, compiler kind, arch list) and its content key; BuildOptions
                (line info ...), passed as arguments; WORKBENCH_NVCC_FLAGS, the user's own flags
- arch.py       the CUDA arch list, written once (JIT and shipped), and its -gencode flags
- pipeline.py   get_or_build: the tiers in front of the cache (prebuilt.py: a wheel's libraries),
                then the cache: look-up, lock, shared import, staging, compile, publish, log
- compilers.py  the compiler kinds: cpp_extension (torch-facing), raw (one command, no torch) and nvrtc
- nvrtc_tier.py the NVRTC tier: a .cu variant's device code by NVRTC (nvrtc.py, ctypes on torch's
                libnvrtc), its host side by the host compiler, each rebuilt when its tokens changed
                (nvrtc_split.py: the file's host and device views); nvrtc_kernels.py compiles each
                kernel as its own program, on its first launch or in the background; the runtime
                launches them (kernels/common/wb_nvrtc_route.h; the loader's provider: run/nvrtc_routes.py)
- guard.py      a build's processes in a session a watchdog kills with it; its output into build.log
- the cache, by concern: keys.py (content keys), store.py (folders and trust), locks.py (flocks,
                in-use marks), records.py (a build's record, the checks a hit passes, publication),
                shared.py (a shared cache by opt-in), clean.py (`python -m workbench clean`)
- tree.py       the torch-facing pieces of the kernel tree (the loader's and setup.py's)
- toolchain.py  what a build depends on (torch, its CUDA, nvcc, the C++ ABI, libstdc++) and the sm_90a
                marker; cache.py, the cache's names in one place for users (cache.manifest_of)

May import: config, errors (and model.registry, in tree.py alone). Nothing here loads or
calls a library: the loader, byo and the NumPy front end do, with what get_or_build returns.
The NVRTC tier is Piece.compiler "nvrtc" (BuildOptions(compiler="nvrtc"); EDIT_LOOP_OPTIONS, the
edit loop's default) in compilers.COMPILERS.
"""
from __future__ import annotations

import contextlib

from .arch import arch_list
from .compilers import first_error
from .guard import kill_session, run_guarded
from .piece import DEFAULT_OPTIONS, EDIT_LOOP_OPTIONS, BuildOptions, Piece, user_nvcc_flags
from .pipeline import Built, get_or_build


@contextlib.contextmanager
def built_not_loaded():
    """No build loads what it built into the building process; kept for its callers."""
    yield

__all__ = ["BuildOptions", "Built", "DEFAULT_OPTIONS", "EDIT_LOOP_OPTIONS", "Piece", "arch_list", "built_not_loaded", "first_error",
           "get_or_build", "kill_session", "run_guarded", "user_nvcc_flags"]
