"""What to compile: a Piece (sources, flags, how it is compiled) and its content key.

A piece is described once and carried whole: the loader's harness, bindings and variants, an
extension-style source, the NumPy front end's libraries and module, and setup.py's prebuilt wheel
all make Pieces, and get_or_build (pipeline.py) takes them as they are.

`compiler` says how it is compiled (compilers.py): "cpp_extension" (torch.utils.cpp_extension.load:
PyTorch's own flags, include paths and link lines; `cflags` for the host compiler, `cuda_cflags` for
nvcc) or "raw" (one compiler command: `command` + `cflags` + includes + the source + `link`, for
builds that must not link torch) or "nvrtc" (a CUDA variant's device code by NVRTC, its host side by
the host compiler, each when it changed: nvrtc_tier.py; `command` is NVRTC's version and options,
part of the key, which reads the sources by tokens).
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from dataclasses import dataclass, field

from . import keys

CPP_EXTENSION, RAW, NVRTC = "cpp_extension", "raw", "nvrtc"
COMPILER_CHOICES = ("nvcc", "nvrtc")  # BuildOptions.compiler: what a user names


@dataclass(frozen=True)
class BuildOptions:
    """How a torch-facing CUDA variant is built beyond its defaults, passed to the loader as an
    argument. line_info: nvcc -lineinfo (the machine code as it is, plus the line table a profiler's
    source page needs; a build of its own, cached). compiler: "nvcc" (the whole file) or "nvrtc" (the
    NVRTC tier: device code by NVRTC for this device's exact arch, the host side by the host compiler,
    each rebuilt only when it changed; arch: that arch, e.g. "sm_90a", default the current GPU's, else
    the arch list's newest)."""
    line_info: bool = False
    compiler: str = "nvcc"
    arch: str | None = None

    def __post_init__(self):
        if self.compiler not in COMPILER_CHOICES:
            raise ValueError(f"compiler must be one of {COMPILER_CHOICES}; got {self.compiler!r}")
        if self.arch is not None and not re.fullmatch(r"sm_\d+[a-z]?", self.arch):
            raise ValueError(f"arch must look like sm_90a or sm_80; got {self.arch!r}")

    def nvcc_flags(self) -> list[str]:
        """The CUDA flags these options add, after the user's WORKBENCH_NVCC_FLAGS."""
        user = user_nvcc_flags()
        return user + (["-lineinfo"] if self.line_info and "-lineinfo" not in user else [])

    def as_dict(self) -> dict:
        """Only what differs from the defaults (a child process is handed this, and rebuilds it)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v != getattr(DEFAULT_OPTIONS, k)}


DEFAULT_OPTIONS = BuildOptions()
# The edit loop's tier (wb.load_inline, the %%workbench magic): device edits rebuilt by NVRTC alone.
EDIT_LOOP_OPTIONS = BuildOptions(compiler="nvrtc")


def user_nvcc_flags() -> list[str]:
    """WORKBENCH_NVCC_FLAGS: the user's own nvcc flags, documented, added to every CUDA build (and
    part of its key)."""
    return os.environ.get("WORKBENCH_NVCC_FLAGS", "").split()


@dataclass(frozen=True)
class Piece:
    """One library to build or load. `kind` names what it is in the cache and its keys (harness,
    binding, variant, extension, ndarray-*); `label` names it in messages and build folders."""
    label: str
    kind: str
    sources: tuple[pathlib.Path, ...]
    include_dirs: tuple[pathlib.Path, ...]
    with_cuda: bool = False
    cflags: tuple[str, ...] = ()
    cuda_cflags: tuple[str, ...] = ()           # cpp_extension: nvcc's flags
    compiler: str = CPP_EXTENSION
    command: tuple[str, ...] = ()               # raw: the compiler (a command: "ccache g++" is two words)
    link: tuple[str, ...] = ()                  # raw: after the source; cpp_extension: link flags
    suffix: str = ".so"                         # raw: the library's file name ending
    arch_list: str | None = None                # CUDA code's arch list (None for a build without CUDA)
    toolchain: dict | None = field(default=None, compare=False, hash=False)  # the key's; None: torch's (pipeline)

    def __post_init__(self):
        for name in ("sources", "include_dirs", "cflags", "cuda_cflags", "command", "link"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.compiler not in (CPP_EXTENSION, RAW, NVRTC):
            raise ValueError(f"compiler must be {CPP_EXTENSION!r}, {RAW!r} or {NVRTC!r}; got {self.compiler!r}")
        if self.compiler == RAW and (not self.command or len(self.sources) != 1):
            raise ValueError(f"{self.label}: a raw build takes a compiler command and exactly one source")

    @property
    def flags(self) -> list[str]:
        """The flags as the content key sees them (paths left out: the same text elsewhere is the same build)."""
        if self.compiler == RAW:
            return [*self.command[1:], *self.cflags, *self.link]
        if self.compiler == NVRTC:
            return [*self.command, *self.cflags, *self.cuda_cflags]
        return [*self.cflags, *(self.cuda_cflags if self.with_cuda else ()), *(["cuda"] if self.with_cuda else []),
                *self.link]

    def key(self, toolchain: dict, arch_list: str | None = None) -> str:
        """The content key under `toolchain` (and `arch_list`, default the piece's own; only a piece
        with CUDA code has one)."""
        arch = (arch_list or self.arch_list) if self.with_cuda else None
        # The NVRTC tier keys on tokens (a comment edit is the same build), but where line numbers
        # are compiled in (-lineinfo).
        by_tokens = self.compiler == NVRTC and "-lineinfo" not in self.flags
        return keys.content_key(kind=self.kind, sources=list(self.sources), include_dirs=list(self.include_dirs),
                                flags=self.flags, arch_list=arch, toolchain=toolchain, by_tokens=by_tokens)

    @property
    def file_names(self) -> str:
        return ", ".join(s.name for s in self.sources)
