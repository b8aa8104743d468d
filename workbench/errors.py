"""Exceptions the workbench raises on purpose, each carrying what the user needs to act."""
from __future__ import annotations

import pathlib
import signal


class WorkbenchError(RuntimeError):
    """Base class for workbench errors."""


class BuildError(WorkbenchError):
    """A variant or the harness failed to compile or link: `file` and `line` of the first compiler
    error, `first_error` (its text and the lines after), `log_path` (the full log), `label`
    ("op/variant"), `last_good` (the build of that variant still loaded or cached, if any)."""

    def __init__(self, label: str, file: str | None, line: int | None, first_error: str,
                 log_path: pathlib.Path, last_good: str | None = None):
        self.label, self.file, self.line = label, file, line
        self.first_error, self.log_path, self.last_good = first_error, log_path, last_good
        where = f"{file}:{line}" if file and line else (file or "build")
        msg = f"{label} failed to build: {where}: {first_error}\nfull log: {log_path}"
        if last_good:
            msg += f"\nlast good build still available: {last_good}"
        super().__init__(msg)

    def _render_traceback_(self) -> list[str]:
        """What IPython prints: the compiler's message, without the loader's stack frames."""
        return [f"BuildError: {line}" if i == 0 else line for i, line in enumerate(str(self).splitlines())]


class LockTimeout(WorkbenchError):
    """Another process held a build lock for longer than WORKBENCH_LOCK_TIMEOUT seconds."""


class IsolatedRunError(WorkbenchError):
    """A variant run out of this process (isolate=True, wb.profile, sanitize) could not be: its
    process did not start, died, lost its CUDA context or ran out of time; the caller's is untouched.
    `returncode` (None where the process did not end by itself) and `output` (its last lines) say how."""

    def __init__(self, what: str, returncode: int | None, output: str, full_output: str = "", *, before: str = ""):
        self.returncode, self.output, self.full_output = returncode, output, full_output or output
        if returncode is None:
            how = ""
        elif returncode < 0:
            try:
                how = f" was killed by {signal.Signals(-returncode).name}"
            except ValueError:
                how = f" was killed by signal {-returncode}"
        else:
            how = f" exited with status {returncode}"
        when = f" {before}" if before else ""  # what it had not done yet, where that matters
        super().__init__(f"{what}: the process running it{how}{when}; the caller's process is unaffected.\n{output}")
