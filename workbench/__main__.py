"""`python -m workbench ...`: the command line (cli.py). Runners start elsewhere (workbench/judge),
never through here."""
import sys

from . import bytecode

bytecode.use_private_cache()  # before cli imports the rest (torch among it): see bytecode.py

from .cli import main  # noqa: E402

sys.exit(main())
