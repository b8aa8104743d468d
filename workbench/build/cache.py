"""The content-keyed build cache, and what it trusts: the names other modules (and users) use.

The cache lives in the build pipeline, split by concern (workbench/build/: keys, store, locks,
records, shared, clean); its rules are told there. `workbench.build.cache.manifest_of(folder)` writes the
manifest a shared cache is trusted by (README: "What the cache trusts, and why").
"""
from __future__ import annotations

from .clean import clean, dir_size, workbench_build
from .keys import closure_digest, content_key, sha256_file, source_closure
from .locks import file_lock, in_use, lock_path, mark_in_use
from .records import dependency_record, elf_problem, lookup, ninja_deps, parse_depfile, publish
from .shared import import_shared, manifest_of, shared_cache
from .store import (MARKER, CacheError, build_dir_for, builds_root, check_root_location, discard, full_disk_error, new_staging_dir, progress, root, storage_error, subdir, write_source, write_text, writing)

__all__ = ["MARKER", "CacheError", "build_dir_for", "builds_root", "check_root_location", "clean",
           "closure_digest", "content_key", "dependency_record", "dir_size", "discard", "elf_problem", "file_lock",
           "full_disk_error", "import_shared", "in_use", "lock_path", "lookup", "manifest_of", "mark_in_use",
           "new_staging_dir", "ninja_deps", "parse_depfile", "progress", "publish", "root", "shared_cache",
           "sha256_file", "source_closure", "storage_error", "subdir", "workbench_build", "write_source", "write_text",
           "writing"]
