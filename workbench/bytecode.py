"""Where the workbench's own processes (the CLI, the Python runner, the exercise checker's child)
keep Python bytecode when PYTHONDONTWRITEBYTECODE turned it off: otherwise each recompiles torch's
sources at import (5 s for `import torch` on the H100 image). The folder is private
(config.pycache_dir(); Python runs any .pyc it finds, so never a shared one); WORKBENCH_PYCACHE=0
leaves the setting alone. Imports nothing but config: an entry point calls it before torch.
"""
from __future__ import annotations

import os
import sys

from . import config


def use_private_cache() -> None:
    """Turn bytecode caching back on, into config.pycache_dir(), where the environment turned it
    off and that folder is private; otherwise say why not (unless WORKBENCH_QUIET)."""
    if not sys.dont_write_bytecode or os.environ.get("WORKBENCH_PYCACHE", "1") in ("", "0"):
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
