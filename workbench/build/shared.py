"""A shared, read-only cache, used only by explicit opt-in and only as far as a manifest vouches.

WORKBENCH_SHARED_CACHE names the folder, WORKBENCH_SHARED_CACHE_MANIFEST the user's own manifest
(build folder -> the library's sha256). A listed build's library is read once, checked, and those
bytes are copied into the user's cache: the shared file itself is never loaded.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import re
import stat

from .records import publish
from .store import CacheError, discard, new_staging_dir, progress


_HEX64 = re.compile(r"[0-9a-f]{64}")


def manifest_of(cache_root: pathlib.Path) -> dict:
    """A manifest for WORKBENCH_SHARED_CACHE_MANIFEST: every published build under `cache_root`, by
    folder name, with its library's sha256 as its record says. Whoever writes it vouches for those
    libraries: make it from a cache you built or checked yourself."""
    builds = {}
    for d in sorted((pathlib.Path(cache_root) / "builds").iterdir()):
        with contextlib.suppress(OSError, ValueError, TypeError):
            meta = json.loads((d / "meta.json").read_text())
            if isinstance(meta, dict) and _HEX64.fullmatch(str(meta.get("sha256"))):
                builds[d.name] = meta["sha256"]
    return {"format": 1, "builds": builds}


def shared_cache() -> tuple[pathlib.Path, dict] | None:
    """(folder, {build folder name: library sha256}) of the shared read-only cache the user opted into
    (WORKBENCH_SHARED_CACHE, with the manifest they trust in WORKBENCH_SHARED_CACHE_MANIFEST); None
    without one. The manifest must be the user's (or root's) and writable by nobody else."""
    folder = os.environ.get("WORKBENCH_SHARED_CACHE")
    if not folder:
        return None
    manifest = os.environ.get("WORKBENCH_SHARED_CACHE_MANIFEST")
    if not manifest:
        raise CacheError(
            f"WORKBENCH_SHARED_CACHE={folder} is set without WORKBENCH_SHARED_CACHE_MANIFEST: a shared cache is "
            f"used only for the builds listed in a manifest you trust (build folder -> the library's sha256; "
            f"workbench.build.cache.manifest_of(folder) writes one from a cache you checked). Set it, or unset "
            f"WORKBENCH_SHARED_CACHE")
    try:
        st = os.stat(manifest)
        data = json.loads(pathlib.Path(manifest).read_text())
    except (OSError, ValueError) as e:
        raise CacheError(f"WORKBENCH_SHARED_CACHE_MANIFEST={manifest} cannot be read ({e}); point it at the "
                         f"manifest of the shared cache you trust") from None
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
        raise CacheError(f"WORKBENCH_SHARED_CACHE_MANIFEST={manifest} is not yours alone (owner uid {st.st_uid}, mode "
                         f"{stat.S_IMODE(st.st_mode):04o}): a manifest someone else can change vouches for nothing. "
                         f"Keep your own copy (chmod 600)")
    builds = data.get("builds") if isinstance(data, dict) else None
    if not isinstance(builds, dict) or not all(isinstance(k, str) and isinstance(v, str) and _HEX64.fullmatch(v)
                                               for k, v in builds.items()):
        raise CacheError(f"WORKBENCH_SHARED_CACHE_MANIFEST={manifest} must be a JSON object {{\"builds\": {{build "
                         f"folder name: library sha256}}}}, as workbench.build.cache.manifest_of writes")
    return pathlib.Path(folder).expanduser(), builds


def import_shared(final: pathlib.Path, what: str) -> bool:
    """Copy the build of `final`'s name from the shared cache into this user's cache, where the
    trusted manifest lists it and the library's bytes match its sha256 (they are read once, checked,
    and those bytes are what is written: the shared file is never loaded itself). The caller holds
    the key's lock and looks the build up again (its dependencies are checked there). Returns
    whether a build was imported."""
    shared = shared_cache()
    if shared is None:
        return False
    folder, trusted = shared
    want = trusted.get(final.name)
    if want is None:
        return False
    src = folder / "builds" / final.name
    try:
        meta = json.loads((src / "meta.json").read_text())
        name = meta.get("library") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name or name in (".", "..") or "/" in name:
            raise ValueError(f"its record names no library file inside its folder ({name!r})")
        data = (src / name).read_bytes()
    except (OSError, ValueError) as e:
        progress(f"{what}: the shared cache's build {src} is unusable ({e}); building it here")
        return False
    if hashlib.sha256(data).hexdigest() != want:
        progress(f"{what}: the shared cache's {src / name} does not match the sha256 your manifest trusts; "
                 f"not used, building it here")
        return False
    staging = new_staging_dir(final.name, want)
    lib = staging / name
    fd = os.open(lib, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o755)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    record = {k: v for k, v in meta.items() if k not in ("format", "library", "size", "sha256", "deps")}
    deps = meta.get("deps") if isinstance(meta.get("deps"), list) else []
    try:
        publish(staging, final, lib, dict(record, imported_from=str(src)), deps)
    except CacheError:
        discard(staging)
        return False
    progress(f"{what}: imported from the shared cache {folder} (sha256 as your manifest says)")
    return True
