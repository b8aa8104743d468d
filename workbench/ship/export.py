"""Graduation: one op and some of its C++ variants as a self-contained PyTorch extension package.

    wb.export("bias_gelu", "cpu,vec4", "out/wb_bias_gelu")       # or: python -m workbench export ...
    pip install --no-build-isolation out/wb_bias_gelu            # then torch.ops.wb_bias_gelu.bias_gelu

This module checks the arguments and writes the folder (never half a package, never over the
user's files); what the package holds, file by file, is package_contents.py's. Nothing in the
package imports the workbench.
"""
from __future__ import annotations

import hashlib
import keyword
import os
import pathlib
import re
import shutil
import sys
import tempfile

from . import package_contents
from ..model import registry

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch: "abc\n" is not an identifier
# torch.ops namespaces that are taken (torch's own, the workbench's harness and Python variants)
_TAKEN_NAMESPACES = {"aten", "prim", "prims", "torch", "quantized", "_c", "workbench", "workbench_py"}


def export(op: str, variants, out, *, name: str | None = None, namespace: str | None = None,
           force: bool = False) -> pathlib.Path:
    """Write op `op` with `variants` ("cpu,vec4" or a list, in order of preference) as a package in
    folder `out`: the Python package `name` (default wb_<op>) registering torch.ops.<namespace>.<op>
    (namespace default: the name). `out` must be new or empty unless force=True, which replaces only
    the files an earlier export wrote, unchanged (its manifest: out/.wb_export_files), never through
    a symbolic link. Returns `out`."""
    _check_op(op)
    names = _check_variants(op, variants)
    name = _check_name("name", name or f"wb_{op}", package=True)
    namespace = _check_name("namespace", namespace or name, package=False)
    out = _check_out(out, force)
    files = package_contents.package_files(op, registry.spec(op), names, name, namespace)
    _write(out, files)
    return out


# ---------------------------------------------------------------- arguments


def _check_op(op: str) -> None:
    registry.check_op(op)  # ValueError listing the ops
    if registry.sources(op).inline:
        tree = ", ".join(o for o in registry.ops() if not registry.sources(o).inline)
        raise ValueError(f"op: {op!r} was defined in this process (define_op); export takes an op in the tree "
                         f"(kernels/{op}/, bindings/{op}.cpp, workbench/specs/{op}.py): {tree}")


def _check_variants(op: str, variants) -> list[str]:
    cpp = package_contents.cpp_variants(op)
    listed = ", ".join(cpp) or "none"
    if isinstance(variants, str):
        variants = variants.split(",")
    if not isinstance(variants, (list, tuple)) or not all(isinstance(v, str) for v in variants):
        raise ValueError(f"variants must be a comma-separated string or a list of names of {op}'s C++ variants "
                         f"({listed}); got {variants!r}")
    names = [v.strip() for v in variants if v.strip()]
    if not names:
        raise ValueError(f"variants must name at least one of {op}'s C++ variants ({listed}), e.g. \"{next(iter(cpp), 'cpu')}\"")
    for v in names:
        if names.count(v) > 1:
            raise ValueError(f"variants: {v!r} is listed twice; got {','.join(names)}")
        if v in cpp:
            continue
        py = registry.variant_sources(op).get(v)
        if py is not None:
            kind = registry.python_variant(op, py, v).kind
            raise ValueError(f"variants: {op}/{v} is a Python variant (kind {kind}); an exported package compiles "
                             f"C++ variants (.cu, .cpp): {listed}")
        raise ValueError(f"variants: {op} has no variant {v!r}; its C++ variants: {listed}")
    return names


def _check_name(what: str, value, *, package: bool) -> str:
    if not isinstance(value, str) or not _IDENT.fullmatch(value) or keyword.iskeyword(value):
        raise ValueError(f"{what} must be an identifier (letters, digits, '_'; not a Python keyword); got {value!r}")
    if package and (value in sys.stdlib_module_names or value in ("torch", "workbench")):
        raise ValueError(f"{what} must not shadow a module of Python's or torch's or the workbench's; got {value!r}")
    if not package and value.lower() in _TAKEN_NAMESPACES:
        raise ValueError(f"{what} must be a torch.ops namespace of the package's own, not one of "
                         f"{sorted(_TAKEN_NAMESPACES)}; got {value!r}")
    return value


_MANIFEST = ".wb_export_files"  # what an export wrote, so a forced export replaces exactly that


def _check_out(out, force: bool) -> pathlib.Path:
    if out is None or str(out) == "":
        raise ValueError("out must be a folder path for the package; got nothing")
    out = pathlib.Path(out).expanduser().absolute()
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"out: {out} is a file; expected a new or empty folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        entries = sorted(p.name for p in out.iterdir())
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise FileExistsError(f"out: {out} exists and is not empty ({len(entries)} entries: {shown}); expected a new "
                              f"or empty folder, or --force (force=True) to write the package into it (files of an "
                              f"earlier export, listed in {_MANIFEST}, are replaced; others are left as they are, "
                              f"and one where the package puts a file is refused)")
    return out


# ---------------------------------------------------------------- writing


def _digest(content: str | bytes) -> str:
    return hashlib.sha256(content if isinstance(content, bytes) else content.encode()).hexdigest()


def _read_manifest(out: pathlib.Path) -> dict[str, str | None]:
    """{relative path: sha256 as written (None: an older manifest without digests)} of the files an
    earlier export wrote into `out`; empty where there is none (or it is not a plain file)."""
    path = out / _MANIFEST
    if path.is_symlink() or not path.is_file():
        return {}
    found: dict[str, str | None] = {}
    for line in path.read_text(errors="replace").splitlines():
        digest, sep, rel = line.partition("  ")
        if sep and re.fullmatch(r"[0-9a-f]{64}", digest):
            found[rel] = digest
        elif line.strip():
            found[line.strip()] = None
    return found


def _link_on_the_way(out: pathlib.Path, rel: str) -> pathlib.Path | None:
    """The first symbolic link among out/rel's folders and the file itself: a link could point anywhere."""
    path = out
    for part in pathlib.PurePosixPath(rel).parts:
        path = path / part
        if path.is_symlink():
            return path
    return None


def _put(root: pathlib.Path, files: dict[str, str | bytes]) -> None:
    """Each file written beside its place and renamed over it (O_NOFOLLOW: never through a link),
    the manifest last."""
    manifest = "".join(f"{_digest(files[rel])}  {rel}\n" for rel in sorted(files))
    for rel, content in [*files.items(), (_MANIFEST, manifest)]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(content if isinstance(content, bytes) else content.encode())
        os.replace(tmp, path)


def _refuse_unsafe(out: pathlib.Path, files: dict, old: dict) -> None:
    """A forced export replaces only what its earlier export wrote (the manifest) and nobody changed
    since, never through a link; anything else is refused before anything is written."""
    links, foreign, edited = [], [], []
    for rel in sorted(set(files) | set(old) | {_MANIFEST}):
        link = _link_on_the_way(out, rel)
        if link is not None:
            links.append(f"{link} -> {os.readlink(link)}")
            continue
        path = out / rel
        if not path.exists():
            continue
        if rel != _MANIFEST and rel not in old:
            foreign.append(rel)
        elif old.get(rel) is not None and path.is_file() and _digest(path.read_bytes()) != old[rel]:
            edited.append(rel)
    if links:
        raise FileExistsError(f"out: the export never writes through a symbolic link, and {out} has "
                              f"{'these' if len(links) > 1 else 'this one'} where the package's files go: "
                              f"{', '.join(sorted(set(links)))}; remove the link(s) or pick another --out")
    parts = []
    if foreign:
        parts.append(f"{', '.join(foreign)} {'were' if len(foreign) > 1 else 'was'} not written by an "
                     f"earlier export (not in {_MANIFEST})")
    if edited:
        parts.append(f"{', '.join(edited)} changed since the export wrote {'them' if len(edited) > 1 else 'it'}")
    if parts:
        raise FileExistsError(f"out: --force replaces only the files an earlier export wrote into {out}, "
                              f"unchanged; {'; '.join(parts)}. Nothing was written: move those files away "
                              f"(or pick another --out) and run the export again")


def _write(out: pathlib.Path, files: dict[str, str | bytes]) -> None:
    """A new folder is staged beside `out` and renamed into place; an existing one (force) has its
    earlier export's files replaced, and those this export does not write removed."""
    if out.is_dir():
        out = pathlib.Path(os.path.realpath(out))
        old = _read_manifest(out)
        _refuse_unsafe(out, files, old)
        for rel in set(old) - set(files):
            path = out / rel
            if path.is_file() and not path.is_symlink() and os.path.realpath(path).startswith(str(out) + os.sep):
                path.unlink()
        _put(out, files)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        _put(staging, files)
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
