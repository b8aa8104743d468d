"""An exercise check's report: one line per check, then what the first failure needs to be fixed."""
from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass, field

NEEDS_GPU = "needs a GPU; this machine has none"
LAYOUTS = {
    "contiguous": "contiguous tensors",
    "strided": "non-contiguous views (every other element of a wider tensor); the harness hands "
               "your kernel contiguous copies of them",
    "offset": "views that start one element into their buffers, so no input is 16-byte aligned "
              "(float4 / 16-byte loads are illegal there)",
    "transposed": "column-major views (the transpose of a contiguous tensor); the harness hands "
                  "your kernel contiguous copies of them",
}


@dataclass
class Check:
    name: str
    status: str                  # "ok", "FAIL" or "skipped"
    detail: str = ""             # one line, after the status; for a FAIL, the short reason
    lines: list[str] = field(default_factory=list)   # what a failure prints below the table
    show: bool = False           # print `lines` below the table even when the check passed
    seconds: float = 0.0         # how long the check took
    measured: dict = field(default_factory=dict)   # the speed check's: ratio, gpu, clocks, measured_at

    def line(self, width: int = 18) -> str:
        text = f"{self.name} {'.' * max(3, width - len(self.name))} {self.status}"
        return text + (f" ({self.detail})" if self.detail else "")


@dataclass
class ExerciseReport:
    exercise: str                # "02_vec4_loads"
    title: str
    path: str                    # the student's file
    variant: str                 # "bias_gelu/ex02_starter"
    seed: int
    shapes: list[tuple[int, ...]]
    command: str                 # the command that checks the same file with the same shapes
    checks: list[Check] = field(default_factory=list)

    @property
    def built(self) -> bool:
        return bool(self.checks) and self.checks[0].status == "ok"

    @property
    def loaded(self) -> bool:
        """The child that loaded the library reported back, and what it read was as declared."""
        return any(c.name == "load" and c.status == "ok" for c in self.checks)

    @property
    def ok(self) -> bool:
        """No check failed, the file was built, and the child that loaded it reported back (some
        checks may have been skipped). Decided here, from what this process received: how a
        child ended never reads as a pass."""
        return self.built and self.loaded and self.first_failure is None

    @property
    def complete(self) -> bool:
        return self.ok and not self.skipped

    @property
    def first_failure(self) -> Check | None:
        return next((c for c in self.checks if c.status == "FAIL"), None)

    @property
    def skipped(self) -> list[Check]:
        return [c for c in self.checks if c.status == "skipped"]

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def verdict(self) -> str:
        bad = self.first_failure
        if bad is not None:
            return f"FAIL: {bad.name} — {bad.detail}"
        if not self.built:
            return f"NOT CHECKED: {self.checks[0].detail if self.checks else 'nothing ran'}"
        if not self.loaded:
            return "NOT CHECKED: no child process loaded the library and reported back"
        skipped = self.skipped
        if not skipped:
            return "PASS"
        names = ", ".join(c.name for c in skipped)
        if all(c.detail == NEEDS_GPU for c in skipped):
            return f"PASS (what this machine can run; skipped: {names} — {'it needs' if len(skipped) == 1 else 'they need'} a GPU)"
        return "PASS (skipped: " + "; ".join(f"{c.name}: {c.detail}" for c in skipped) + ")"

    def header(self) -> str:
        shapes = ", ".join("x".join(map(str, s)) for s in self.shapes)
        shapes = textwrap.fill(f"shapes:  {shapes} (seed {self.seed})", width=100, subsequent_indent=" " * 9,
                               break_long_words=False, break_on_hyphens=False)
        return "\n".join([f"Exercise {self.exercise}: {self.title}",
                          f"file:    {self.path} (built as {self.variant})", shapes])

    def tail(self) -> str:
        out = []
        bad = self.first_failure
        for c in self.checks:
            if c.show and c is not bad:
                out += ["", f"{c.name}:"] + [f"  {ln}" for ln in c.lines]
        if bad is not None and bad.lines:
            out += ["", f"{bad.name} failed:"] + [f"  {ln}" for ln in bad.lines]
        if bad is not None and bad.name in ("correctness", "gradcheck"):
            out += ["", f"same shapes and inputs again: {self.command}"]
        out += ["", self.verdict()]
        return "\n".join(out)

    def timings(self) -> str:
        """Where the time went: "build 1.3 s, correctness 2.1 s, ..." (checks that ran; the SASS
        rules' run is observed beside correctness and gradcheck)."""
        return ", ".join(f"{c.name} {c.seconds:.1f} s" for c in self.checks if c.status != "skipped")

    @property
    def failure_class(self) -> str:
        """What kind of failure the first FAIL is ("" where none): build, load, dtypes, rules,
        correctness, gradcheck, global-loads, speed-target, speed-wrong (a timed output was wrong)
        or speed-impossible (faster than the device can be)."""
        bad = self.first_failure
        if bad is None:
            return ""
        if bad.name == "speed":
            return ("speed-wrong" if "output is wrong" in bad.detail else
                    "speed-impossible" if "impossible" in bad.detail else "speed-target")
        return {"declared dtypes": "dtypes", "SASS rules": "rules", "global loads": "global-loads"}.get(bad.name, bad.name)

    def summary(self) -> str:
        return "\n".join([self.header(), ""] + [f"  {c.line()}" for c in self.checks]) + "\n" + self.tail()

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shapes"] = [list(s) for s in self.shapes]
        d.update(ok=self.ok, complete=self.complete, verdict=self.verdict(), failure_class=self.failure_class,
                 first_failure=None if self.first_failure is None else self.first_failure.name)
        return d
