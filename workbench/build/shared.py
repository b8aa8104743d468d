"""A shared, read-only cache, used only by explicit opt-in and only as far as a manifest vouches.

WORKBENCH_SHARED_CACHE names the folder, WORKBENCH_SHARED_CACHE_MANIFEST the user's own manifest
(build folder -> the library's sha256 and size). A listed build's library is read once, checked,
and those bytes are copied into the user's cache: the shared file itself is never loaded.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import stat

from .cache import MANIFEST, RECORD, CacheError, RecordError, load_checked, progress, read_regular
from .records import discard, new_staging_dir, publish


def shared_cache() -> tuple[pathlib.Path, dict] | None:
    """(folder, {build folder name: its library's sha256 and size}) of the shared cache the user opted
    into, else None; the manifest must be the user's (or root's) and writable by nobody else."""
    folder = os.environ.get("WORKBENCH_SHARED_CACHE")
    if not folder:
        return None
    manifest = os.environ.get("WORKBENCH_SHARED_CACHE_MANIFEST")
    if not manifest:
        raise CacheError(
            f"WORKBENCH_SHARED_CACHE={folder} is set without WORKBENCH_SHARED_CACHE_MANIFEST: a shared cache is "
            f"used only for the builds listed in a manifest you trust (build folder -> the library's sha256 and "
            f"size; workbench.build.cache.manifest_of(folder) writes one from a cache you checked). Set it, or "
            f"unset WORKBENCH_SHARED_CACHE")
    try:
        st = os.stat(manifest := os.path.realpath(manifest))
    except OSError as e:
        raise CacheError(f"WORKBENCH_SHARED_CACHE_MANIFEST={manifest} cannot be read ({e.strerror}); point it at the "
                         f"manifest of the shared cache you trust") from None
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
        raise CacheError(f"WORKBENCH_SHARED_CACHE_MANIFEST={manifest} is not yours alone (owner uid {st.st_uid}, mode "
                         f"{stat.S_IMODE(st.st_mode):04o}): a manifest someone else can change vouches for nothing. "
                         f"Keep your own copy (chmod 600)")
    try:
        data = load_checked(manifest, MANIFEST)
    except RecordError as e:
        raise CacheError(f"WORKBENCH_SHARED_CACHE_MANIFEST is not a manifest the workbench can use: {e}. It must be "
                         f"{{\"format\": 2, \"builds\": {{build folder name: {{\"sha256\": ..., \"size\": ...}}}}}}, "
                         f"as workbench.build.cache.manifest_of writes") from None
    return pathlib.Path(folder).expanduser(), data["builds"]


def import_shared(final: pathlib.Path, what: str) -> bool:
    """Whether the build of `final`'s name was copied from the shared cache: where the manifest lists
    it, its library is read once and the bytes that match its size and sha256 are written here. The
    caller holds the key's lock and looks the build up again (its dependencies are checked there)."""
    shared = shared_cache()
    if shared is None:
        return False
    folder, trusted = shared
    want = trusted.get(final.name)
    if want is None:
        return False
    src = folder / "builds" / final.name
    try:
        meta = load_checked(src / "meta.json", RECORD)
        data = read_regular(src / meta["library"], want["size"])
    except RecordError as e:
        progress(f"{what}: the shared cache's build {src} is unusable ({e}); building it here")
        return False
    if hashlib.sha256(data).hexdigest() != want["sha256"]:
        progress(f"{what}: the shared cache's {src / meta['library']} does not match the sha256 your manifest "
                 f"trusts; not used, building it here")
        return False
    staging = new_staging_dir(final.name, want["sha256"])
    lib = staging / meta["library"]
    record = {k: v for k, v in meta.items() if k not in ("format", "library", "size", "sha256", "deps")}
    try:
        with os.fdopen(os.open(lib, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o755),
                       "wb") as f:
            f.write(data)
        publish(staging, final, lib, dict(record, imported_from=str(src)), meta["deps"])
    except BaseException as e:  # a damaged library (CacheError): built here instead; a full disk: raised
        discard(staging)
        if not isinstance(e, CacheError):
            raise
        return False
    progress(f"{what}: imported from the shared cache {folder} (sha256 as your manifest says)")
    return True
