"""`python -m workbench ...` (and the workbench's child processes, which start the same way)."""
import sys

from . import config

# Where the environment turns Python's bytecode cache off (PYTHONDONTWRITEBYTECODE, as on the lent
# H100 image, whose torch ships without .pyc files), every process recompiles torch's sources at
# import: 5 s for `import torch` there, 12 s with the modules a check needs. The workbench's own
# processes keep their bytecode under its cache instead (site-packages is not touched);
# WORKBENCH_PYCACHE=0 leaves the setting alone.
if sys.dont_write_bytecode and config.pycache_enabled():
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(config.cache_dir() / "pycache")

from .cli import main  # noqa: E402  (after the bytecode setting: it imports the rest)

sys.exit(main())
