"""Where the workbench's own processes (`python -m workbench ...`, the Python runner
judge/python_runner.py, the exercise checker's child) keep Python bytecode when the environment turned
its cache off.

Where PYTHONDONTWRITEBYTECODE is set (as on the lent H100 image, whose torch ships without .pyc
files), every process recompiles torch's sources at import: 5 s for `import torch` there, 12 s with
the modules a check needs. These processes keep their bytecode in a private folder of their own
(config.pycache_dir(): created 0700, used only while it is this user's and nobody else can write
it; never the build cache, which a typo in WORKBENCH_CACHE can point at a shared folder: Python
runs any .pyc it finds there). site-packages is not touched; WORKBENCH_PYCACHE=0 leaves the
setting alone. Imports nothing but config, so that an entry point calls it before torch.
"""
from __future__ import annotations

import sys

from . import config


def use_private_cache() -> None:
    """Turn bytecode caching back on, into config.pycache_dir(), where the environment turned it
    off and that folder is private; otherwise say why not (unless WORKBENCH_QUIET)."""
    if not (sys.dont_write_bytecode and config.pycache_enabled()):
        return
    pycache = config.pycache_dir()
    try:
        pycache.mkdir(mode=0o700, parents=True, exist_ok=True)
        problem = config.private_dir_problem(pycache)
    except OSError as e:
        problem = f"it cannot be created ({e.strerror})"
    if problem is None:
        sys.dont_write_bytecode = False
        sys.pycache_prefix = str(pycache)
    elif not config.quiet():
        print(f"[workbench] note: no bytecode cache: {pycache} is not private ({problem}); "
              f"`chmod 700 {pycache}` if it is yours, or WORKBENCH_PYCACHE=0 to silence this", file=sys.stderr)
