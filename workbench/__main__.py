"""`python -m workbench ...` (and the workbench's child processes, which start the same way)."""
import sys

from . import config

# Where the environment turns Python's bytecode cache off (PYTHONDONTWRITEBYTECODE, as on the lent
# H100 image, whose torch ships without .pyc files), every process recompiles torch's sources at
# import: 5 s for `import torch` there, 12 s with the modules a check needs. The workbench's own
# processes keep their bytecode in a private folder of their own (config.pycache_dir(): created
# 0700, used only while it is this user's and nobody else can write it; never the build cache,
# which a typo in WORKBENCH_CACHE can point at a shared folder: Python runs any .pyc it finds
# there). site-packages is not touched; WORKBENCH_PYCACHE=0 leaves the setting alone.
if sys.dont_write_bytecode and config.pycache_enabled():
    _pycache = config.pycache_dir()
    try:
        _pycache.mkdir(mode=0o700, parents=True, exist_ok=True)
        _problem = config.private_dir_problem(_pycache)
    except OSError as e:
        _problem = f"it cannot be created ({e.strerror})"
    if _problem is None:
        sys.dont_write_bytecode = False
        sys.pycache_prefix = str(_pycache)
    elif not config.quiet():
        print(f"[workbench] note: no bytecode cache: {_pycache} is not private ({_problem}); "
              f"`chmod 700 {_pycache}` if it is yours, or WORKBENCH_PYCACHE=0 to silence this", file=sys.stderr)

from .cli import main  # noqa: E402  (after the bytecode setting: it imports the rest)

sys.exit(main())
