"""Exercise registration: each folder exercises/NN_name/ holds README.md, starter.cu, solution.cu
and exercise.toml, read and validated here.

    title, op, dtypes (required: declared and correct), reference (the in-tree variant the
    speed is measured against)
    [speed]    directions, dtypes, shape (a size of the op), target (student throughput /
               reference throughput, both timed in one benchmark run)
    [[sass]]   static rules on the SASS of the built library: `require` or `forbid` an opcode
               (a regex such as '^LDG(\\.[A-Z0-9_]+)*\\.128\\b'), or `require_kernel` (a regex
               on the kernel names); each with a one-line `message` and a `hint`; an optional
               `kernels` regex limits an opcode rule to some kernels
    [starter]  fails_at (the check the unchanged starter fails) and reason (text its failure
               must contain); the tests hold the starter to both

Adding an exercise is adding a folder; nothing in this package names one.
"""
from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

from .. import config, registry
from ..dtypes import NAMES as _DTYPES
from ..opspec import DIRECTIONS as _DIRECTIONS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package (pip install tomli)
    import tomli as tomllib

EXERCISES_DIR = config.REPO_ROOT / "exercises"
CHECKS = ("build", "declared dtypes", "SASS rules", "correctness", "gradcheck", "speed")
_FOLDER = re.compile(r"^(\d{2})_([a-z0-9_]+)$")
_SASS_KINDS = ("require", "forbid", "require_kernel")


class ExerciseConfigError(ValueError):
    """An exercise folder or its exercise.toml is malformed (the message names the file and field)."""


@dataclass(frozen=True)
class SassRule:
    kind: str            # "require", "forbid" (an opcode regex) or "require_kernel" (a kernel-name regex)
    pattern: str
    message: str         # one line: what is wrong when the rule does not hold
    hint: str = ""
    kernels: str = ""    # opcode rules: only the kernels whose readable name matches ("" = all)


@dataclass(frozen=True)
class Speed:
    directions: tuple[str, ...]
    dtypes: tuple[str, ...]
    shape: tuple[int, ...]
    target: float        # student throughput / reference throughput, in every (direction, dtype)


@dataclass(frozen=True)
class Exercise:
    number: int
    name: str                    # "vec4_loads"
    folder: pathlib.Path
    title: str
    op: str
    dtypes: tuple[str, ...]      # required
    reference: str
    speed: Speed
    sass: tuple[SassRule, ...]
    starter_fails_at: str        # a name from CHECKS
    starter_reason: str

    @property
    def slug(self) -> str:
        return self.folder.name

    @property
    def starter(self) -> pathlib.Path:
        return self.folder / "starter.cu"

    @property
    def solution(self) -> pathlib.Path:
        return self.folder / "solution.cu"

    @property
    def readme(self) -> pathlib.Path:
        return self.folder / "README.md"

    def target_text(self) -> str:
        s = self.speed
        return (f">= {s.target:.2f}x {self.reference} ({', '.join(s.directions)}; {', '.join(s.dtypes)}; "
                f"{'x'.join(map(str, s.shape))})")


def _field(data: dict, key: str, kind, where: str):
    if key not in data:
        raise ExerciseConfigError(f"{where}: missing field {key!r}")
    value = data[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ExerciseConfigError(f"{where}: field {key!r} must be a {kind.__name__}; got {value!r}")
    return value


def _choices(values: list, allowed, key: str, where: str) -> tuple:
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise ExerciseConfigError(f"{where}: {key} must be a non-empty list from {list(allowed)}; got {values!r}")
    return tuple(values)


def load_exercise(folder: pathlib.Path) -> Exercise:
    """Read and validate one exercise folder's exercise.toml."""
    folder = pathlib.Path(folder)
    m = _FOLDER.match(folder.name)
    where = str(folder / "exercise.toml")
    if not m:
        raise ExerciseConfigError(f"{folder}: an exercise folder is named NN_name (two digits, then lowercase words)")
    with open(folder / "exercise.toml", "rb") as f:
        data = tomllib.load(f)
    title = _field(data, "title", str, where)
    op = _field(data, "op", str, where)
    registry.check_op(op)
    dtypes = _choices(_field(data, "dtypes", list, where), _DTYPES, "dtypes", where)
    reference = _field(data, "reference", str, where)
    speed = _field(data, "speed", dict, where)
    shape = _field(speed, "shape", list, where + " [speed]")
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        raise ExerciseConfigError(f"{where} [speed]: shape must be a list of positive sizes; got {shape!r}")
    try:
        registry.spec(op).dims(shape)
    except ValueError as e:
        raise ExerciseConfigError(f"{where} [speed]: shape {shape} is not a size of {op}: {e}") from None
    speed = Speed(_choices(_field(speed, "directions", list, where), _DIRECTIONS, "[speed] directions", where),
                  _choices(_field(speed, "dtypes", list, where), _DTYPES, "[speed] dtypes", where),
                  tuple(shape), _field(speed, "target", float, where + " [speed]"))
    rules = []
    for i, rule in enumerate(data.get("sass", [])):
        kinds = [k for k in _SASS_KINDS if k in rule]
        if len(kinds) != 1:
            raise ExerciseConfigError(f"{where} [[sass]] #{i + 1}: give exactly one of {list(_SASS_KINDS)}")
        re.compile(rule[kinds[0]])
        rules.append(SassRule(kinds[0], rule[kinds[0]], _field(rule, "message", str, f"{where} [[sass]] #{i + 1}"),
                              rule.get("hint", ""), rule.get("kernels", "")))
    starter = _field(data, "starter", dict, where)
    fails_at = _field(starter, "fails_at", str, where + " [starter]")
    if fails_at not in CHECKS:
        raise ExerciseConfigError(f"{where} [starter]: fails_at must be one of {list(CHECKS)}; got {fails_at!r}")
    return Exercise(number=int(m.group(1)), name=m.group(2), folder=folder, title=title, op=op, dtypes=dtypes,
                    reference=reference, speed=speed, sass=tuple(rules), starter_fails_at=fails_at,
                    starter_reason=_field(starter, "reason", str, where + " [starter]"))


def exercises() -> list[Exercise]:
    """Every exercise under exercises/, in number order."""
    if not EXERCISES_DIR.is_dir():
        return []
    return [load_exercise(d) for d in sorted(EXERCISES_DIR.iterdir())
            if d.is_dir() and _FOLDER.match(d.name) and (d / "exercise.toml").is_file()]


def get(exercise) -> Exercise:
    """An exercise by number (2, "2", "02") or name ("02_vec4_loads", "vec4_loads")."""
    known = exercises()
    text = str(exercise).strip() if isinstance(exercise, (int, str)) and not isinstance(exercise, bool) else None
    for ex in known:
        if text is not None and ((text.isdigit() and int(text) == ex.number) or text in (ex.slug, ex.name)):
            return ex
    listing = ", ".join(f"{ex.number} ({ex.slug})" for ex in known) or f"none (no exercises in {EXERCISES_DIR})"
    raise ValueError(f"exercise must be one of: {listing}; got {exercise!r}")
