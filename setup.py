"""The workbench as a wheel: the Python package, the kernel tree as package data (workbench/_tree:
kernels/, bindings/, exercises/), and every C++ piece built ahead of time into workbench/_prebuilt
with its manifest (workbench/build/prebuilt.py says how an installed workbench uses them).

    pip wheel . --no-build-isolation --no-deps -w dist    # against the torch installed here

The libraries are only as good as the torch they were built against, so build in the environment
the wheel will run in (--no-build-isolation); an installed wheel refuses another torch by name.

Environment knobs:
    WORKBENCH_WHEEL_DEVICES  which variants to prebuild: "cpu,cuda" (default where nvcc is found),
                             "cpu" (the harness, bindings and CPU variants: what CI builds), or
                             "none" (sources only: everything is JIT-built where installed)
    TORCH_CUDA_ARCH_LIST     CUDA archs (default: workbench.build.toolchain.SHIPPED, sm_80 and sm_90 plus PTX)
    MAX_JOBS                 libraries compiled at once (default: the CPU count)
An editable install (pip install -e .) prebuilds nothing: a checkout JIT-builds, edits included.
"""
from __future__ import annotations

import datetime
import json
import os
import pathlib
import shutil
import sys
import threading
import time

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent
TREE = ("kernels", "bindings", "exercises")
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o", ".ipynb_checkpoints")
# Commands that put the prebuilt libraries into a wheel; metadata and sdist need no torch.
_BUILD_COMMANDS = {"bdist_wheel", "build", "build_ext", "install", "bdist"}


class BuildPyWithTree(build_py):
    """Copies the kernel tree into the package, where config.py finds it when not in a checkout."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = pathlib.Path(self.build_lib) / "workbench" / "_tree"
        shutil.rmtree(dest, ignore_errors=True)  # a file deleted from the tree must not linger
        for name in TREE:
            shutil.copytree(ROOT / name, dest / name, ignore=_SKIP)


def _devices(can_cuda: bool) -> tuple[str, ...]:
    raw = os.environ.get("WORKBENCH_WHEEL_DEVICES")
    if raw is None:
        if not can_cuda:
            print("[workbench] no nvcc (or torch without CUDA): prebuilding the CPU variants only", file=sys.stderr)
        return ("cpu", "cuda") if can_cuda else ("cpu",)
    values = tuple(v.strip().lower() for v in raw.replace(";", ",").split(",") if v.strip())
    if values in ((), ("none",)):
        return ()
    unknown = sorted(set(values) - {"cpu", "cuda"})
    if unknown:
        raise SystemExit(f"WORKBENCH_WHEEL_DEVICES must be a comma-separated subset of cpu, cuda (or none); "
                         f"got {raw!r}")
    if "cuda" in values and not can_cuda:
        raise SystemExit(f"WORKBENCH_WHEEL_DEVICES={raw} asks for CUDA variants, but this machine cannot build them "
                         f"(torch without CUDA, or no nvcc: set CUDA_HOME); use WORKBENCH_WHEEL_DEVICES=cpu")
    return tuple(d for d in ("cpu", "cuda") if d in values)


def _prebuilt():
    """(ext_modules, build_ext command) for the prebuilt libraries; ([], None) where none are wanted."""
    if os.environ.get("WORKBENCH_WHEEL_DEVICES", "").strip().lower() == "none" \
            or not _BUILD_COMMANDS & set(sys.argv[1:]):
        return [], None
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit("building the workbench wheel compiles against torch, which is not importable here: build "
                         "in the environment the wheel will run in, without build isolation (pip wheel . "
                         "--no-build-isolation --no-deps), or set WORKBENCH_WHEEL_DEVICES=none for a "
                         "sources-only wheel") from None
    sys.path.insert(0, str(ROOT))
    from workbench import __version__, config
    from workbench import build
    from workbench.build import prebuilt, toolchain

    if config.INSTALLED or config.REPO_ROOT != ROOT:
        raise SystemExit(f"setup.py imported workbench from {config.PACKAGE_DIR}, not from {ROOT}")
    toolchain.cuda_home()  # sets CUDA_HOME before cpp_extension reads it at import
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

    can_cuda = toolchain.can_build_cuda()
    devices = _devices(can_cuda)
    if not devices:
        return [], None
    arch_list = os.environ["TORCH_CUDA_ARCH_LIST"] = toolchain.arch_list(shipped=True)  # cpp_extension reads it
    abi = toolchain.abi()
    libstdcxx = toolchain.loaded_libstdcxx()
    pieces = build.tree_pieces(devices, harness_with_cuda=can_cuda)
    # Longest first, so that the parallel build ends together: the harness, then CUDA, then C++.
    pieces.sort(key=lambda p: (p.kind != "harness", not p.with_cuda))
    exts = []
    for piece in pieces:
        cls = CUDAExtension if piece.with_cuda else CppExtension
        ext = cls(name="workbench._prebuilt." + piece.label.replace("/", "__"),
                  sources=[str(pathlib.Path(s).relative_to(ROOT)) for s in piece.sources],
                  include_dirs=[str(d) for d in piece.include_dirs],
                  # -g0: Python's own CFLAGS carry -g, which would triple the wheel for nothing.
                  extra_compile_args={"cxx": [*piece.cflags, "-g0"], "nvcc": list(piece.cuda_cflags)},
                  # The libstdc++ torch loaded, as the JIT builds link it (toolchain.loaded_libstdcxx).
                  extra_link_args=[*piece.link, *([libstdcxx] if libstdcxx else [])])
        if piece.kind != "harness":  # bindings and variants are torch-free: keep torch's libraries out
            ext.libraries = [lib for lib in ext.libraries if lib == "cudart"]
        ext.workbench_piece = piece
        exts.append(ext)

    class BuildPrebuilt(BuildExtension):
        """BuildExtension building libraries in parallel (each in a build_temp of its own: ninja's
        build file lives there), then writing the manifest beside them."""
        _local = threading.local()

        def __init__(self, *args, **kwargs):
            kwargs.setdefault("no_python_abi_suffix", True)
            super().__init__(*args, **kwargs)

        @property
        def build_temp(self):
            return getattr(self._local, "dir", None) or self.__dict__.get("_build_temp")

        @build_temp.setter
        def build_temp(self, value):
            self.__dict__["_build_temp"] = value

        def finalize_options(self):
            super().finalize_options()
            if not self.parallel:
                self.parallel = int(os.environ.get("MAX_JOBS") or os.cpu_count() or 1)
            self._seconds = {}

        def build_extension(self, ext):
            self._local.dir = os.path.join(self.__dict__["_build_temp"], ext.name.rsplit(".", 1)[-1])
            start = time.perf_counter()
            try:
                super().build_extension(ext)
            finally:
                self._local.dir = None
            self._seconds[ext.name] = round(time.perf_counter() - start, 2)

        def run(self):
            if self.inplace or getattr(self, "editable_mode", False):
                print("[workbench] editable install: nothing prebuilt (a checkout JIT-builds)", file=sys.stderr)
                return
            out = pathlib.Path(self.build_lib) / "workbench" / "_prebuilt"
            shutil.rmtree(out, ignore_errors=True)  # libraries of an earlier build with other knobs
            start = time.perf_counter()
            super().run()
            from workbench.build.piece import sha256_file

            libraries = {}
            for ext in self.extensions:
                piece = ext.workbench_piece
                lib = pathlib.Path(self.get_ext_fullpath(ext.name))
                libraries[prebuilt.key(piece, arch_list, abi)] = {
                    "label": piece.label, "kind": piece.kind, "with_cuda": piece.with_cuda, "file": lib.name,
                    "size": lib.stat().st_size, "sha256": sha256_file(lib),
                    "build_seconds": self._seconds.get(ext.name)}
            for k, entry in libraries.items():
                entry["key"] = k
            manifest = {
                "format": prebuilt.FORMAT, "workbench": __version__, "toolchain": abi,
                "nvcc": toolchain.nvcc_version() if "cuda" in devices or can_cuda else None,
                "arch_list": arch_list, "devices": list(devices), "harness_with_cuda": can_cuda,
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "build_seconds": round(time.perf_counter() - start, 1), "jobs": self.parallel,
                "libraries": libraries}
            (out / prebuilt.MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
            print(f"[workbench] prebuilt {len(libraries)} libraries ({', '.join(devices)}; arch {arch_list}) in "
                  f"{manifest['build_seconds']} s with {self.parallel} jobs", file=sys.stderr)

    return exts, BuildPrebuilt


ext_modules, build_ext_cmd = _prebuilt()
cmdclass = {"build_py": BuildPyWithTree}
if build_ext_cmd is not None:
    cmdclass["build_ext"] = build_ext_cmd
setup(ext_modules=ext_modules, cmdclass=cmdclass)
