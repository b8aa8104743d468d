"""Exercise registration: each folder exercises/NN_name/ holds README.md, starter.cu, solution.cu
and exercise.toml, read and validated here.

    title, op, dtypes (required: declared and correct), reference (the in-tree variant the
    speed is measured against)
    [speed]    directions, dtypes, shape (a size of the op), target (student throughput /
               reference throughput, both timed in one benchmark run)
    [[sass]]   static rules on the SASS of the built library: `require` or `forbid` an opcode
               (a regex such as '^LDG(\\.[A-Z0-9_]+)*\\.128\\b'), `require_kernel` (a regex
               on the kernel names), or `fewer_than_starter` (an opcode regex such as
               '^BAR\\.SYNC': the student's kernels must hold fewer instructions matching it than
               the starter's, counted in the machine code, summed over the kernels, per GPU
               architecture; the starter is built, once and cached, to count them); each with a
               one-line `message` and a `hint`; an optional `kernels` regex (on the readable
               kernel names, e.g. 'reduce_kernel<float') limits an opcode rule to some kernels;
               an optional `scope` of an opcode rule: "kernel" (the default: anywhere in a kernel)
               or "inner_loop" (only the instructions of a kernel's innermost loops count: the
               code from a backward branch's target to the branch, holding no other such loop);
               an optional `bytes_share` of a require rule (0 to 1): on a GPU, the matching
               accesses must move at least that share of the bytes every executed access of their
               kind (global loads, say) moved. On a GPU every rule judges the kernels that ran
               during the checked calls, instructions counted as executed (sass.py)
    [sizes]    optional: the sizes a check draws (sizes.py): kind = "elementwise" (the default),
               "reduction", "tiled" or "tiled_aligned"; moduli (reduction: default [32, 1024];
               tiled: the tiles, default [32]): increasing, each dividing the next, the first at
               most 64
    [global_loads]  optional: a counter rule, measured on the GPU with Nsight Compute (workbench/explain/ncu.py):
               one `direction` call at `shape` and `dtype` may request at most `slack` times the bytes
               of `reads` from global memory, counted at L1 (every load instruction's sectors, cached
               or not): reads = {x = 1, weight = "rows"} is x once and the weight once per row;
               `message` and `hint` as for a SASS rule. Skipped (said so) where ncu cannot run
    [starter]  fails_at (the check the unchanged starter fails) and reason (text its failure
               must contain); the tests hold the starter to both

Adding an exercise is adding a folder; nothing in this package names one.
"""
from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

from .. import config
from ..model import registry
from ..dtypes import NAMES as _DTYPES
from ..model.opspec import DIRECTIONS as _DIRECTIONS
from . import sizes as sizes_
from .global_loads import GlobalLoads

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package (pip install tomli)
    import tomli as tomllib

EXERCISES_DIR = config.REPO_ROOT / "exercises"
CHECKS = ("build", "load", "declared dtypes", "SASS rules", "correctness", "gradcheck", "global loads", "speed")
OPTIONAL_CHECKS = ("global loads",)  # run only where the exercise declares the rule
_FOLDER = re.compile(r"^(\d{2})_([a-z0-9_]+)$")
_SASS_KINDS = ("require", "forbid", "require_kernel", "fewer_than_starter")
_SASS_SCOPES = ("kernel", "inner_loop")


class ExerciseConfigError(ValueError):
    """An exercise folder or its exercise.toml is malformed (the message names the file and field)."""


@dataclass(frozen=True)
class SassRule:
    kind: str            # "require", "forbid", "fewer_than_starter" (an opcode regex); "require_kernel" (kernel names)
    pattern: str
    message: str         # one line: what is wrong when the rule does not hold
    hint: str = ""
    kernels: str = ""    # opcode rules: only the kernels whose readable name matches ("" = all)
    scope: str = "kernel"  # opcode rules: "kernel" (anywhere) or "inner_loop" (in innermost loops only)
    bytes_share: float = 0.0  # require: the matching accesses move at least this share of their kind's bytes (as run)


@dataclass(frozen=True)
class Speed:
    directions: tuple[str, ...]
    dtypes: tuple[str, ...]
    shape: tuple[int, ...]
    target: float        # student throughput / reference throughput, in every (direction, dtype)


@dataclass(frozen=True)
class Sizes:
    kind: str = "elementwise"            # a name from sizes.KINDS
    moduli: tuple[int, ...] = ()         # "reduction", "tiled": see sizes.reduction_sizes, sizes.tiled_sizes

    def draw(self, seed: int, spec) -> list[tuple[int, ...]]:
        return sizes_.draw(seed, spec, self.kind, self.moduli)


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
    sizes: Sizes = Sizes()
    global_loads: "GlobalLoads | None" = None   # global_loads.py

    @property
    def checks(self) -> tuple[str, ...]:
        """The checks this exercise runs, in order (an optional check only where it is declared)."""
        return tuple(c for c in CHECKS if c not in OPTIONAL_CHECKS or (c == "global loads" and self.global_loads))

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


_REQUIRED = object()


def _field(data: dict, key: str, kind, where: str, default=_REQUIRED):
    if key not in data:
        if default is not _REQUIRED:
            return default
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
    rules = [_sass_rule(rule, f"{where} [[sass]] #{i + 1}") for i, rule in enumerate(data.get("sass", []))]
    starter = _field(data, "starter", dict, where)
    fails_at = _field(starter, "fails_at", str, where + " [starter]")
    loads = parse_global_loads(data["global_loads"], op, where + " [global_loads]") if "global_loads" in data else None
    ex = Exercise(number=int(m.group(1)), name=m.group(2), folder=folder, title=title, op=op, dtypes=dtypes,
                  reference=reference, speed=speed, sass=tuple(rules), starter_fails_at=fails_at,
                  starter_reason=_field(starter, "reason", str, where + " [starter]"),
                  sizes=_sizes(data.get("sizes", {}), where + " [sizes]"), global_loads=loads)
    if fails_at not in ex.checks:
        raise ExerciseConfigError(f"{where} [starter]: fails_at must be one of {list(ex.checks)}; got {fails_at!r}")
    return ex


def parse_global_loads(data, op: str, where: str) -> GlobalLoads:
    if not isinstance(data, dict):
        raise ExerciseConfigError(f"{where}: must be a table; got {data!r}")
    known = {"direction", "dtype", "shape", "reads", "slack", "message", "hint"}
    unknown = set(data) - known
    if unknown:
        raise ExerciseConfigError(f"{where}: unknown field {sorted(unknown)[0]!r} (known: {', '.join(sorted(known))})")
    direction = _field(data, "direction", str, where)
    if direction not in ("fwd", "bwd"):
        raise ExerciseConfigError(f"{where}: direction must be 'fwd' or 'bwd'; got {direction!r}")
    dtype = _field(data, "dtype", str, where)
    if dtype not in _DTYPES:
        raise ExerciseConfigError(f"{where}: dtype must be one of {list(_DTYPES)}; got {dtype!r}")
    shape = _field(data, "shape", list, where)
    spec = registry.spec(op)
    try:
        spec.dims(shape)
    except (ValueError, TypeError) as e:
        raise ExerciseConfigError(f"{where}: shape {shape!r} is not a size of {op}: {e}") from None
    reads = _field(data, "reads", dict, where)
    names = [t.name for t in spec.inputs]
    for name, count in reads.items():
        if name not in names or not (count == "rows" or (isinstance(count, (int, float)) and not isinstance(count, bool)
                                                           and count > 0)):
            raise ExerciseConfigError(f"{where}: reads maps inputs of {op} ({', '.join(names)}) to a positive "
                                      f"count or \"rows\"; got {name} = {count!r}")
    slack = _field(data, "slack", float, where)
    if not 1.0 <= slack < 2.0:
        raise ExerciseConfigError(f"{where}: slack must be in [1, 2); got {slack!r}")
    return GlobalLoads(direction, dtype, tuple(shape), tuple(reads.items()), slack, _field(data, "message", str, where),
                       _field(data, "hint", str, where, ""))


def _regex(rule: dict, key: str, where: str) -> str:
    value = _field(rule, key, str, where)
    try:
        re.compile(value)
    except re.error as e:
        raise ExerciseConfigError(f"{where}: {key} {value!r} is not a regular expression: {e}") from None
    return value


def _sass_rule(rule, where: str) -> SassRule:
    if not isinstance(rule, dict):
        raise ExerciseConfigError(f"{where}: a rule is a table ([[sass]]); got {rule!r}")
    kinds = [k for k in _SASS_KINDS if k in rule]
    if len(kinds) != 1:
        raise ExerciseConfigError(f"{where}: give exactly one of {list(_SASS_KINDS)}")
    unknown = set(rule) - {*_SASS_KINDS, "message", "hint", "kernels", "scope", "bytes_share"}
    if unknown:
        raise ExerciseConfigError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    scope = _field(rule, "scope", str, where, "kernel")
    if scope not in _SASS_SCOPES or (scope != "kernel" and kinds[0] == "require_kernel"):
        raise ExerciseConfigError(f"{where}: scope (of an opcode rule) must be one of {list(_SASS_SCOPES)}; "
                                  f"got {scope!r}")
    share = _field(rule, "bytes_share", float, where, 0.0)
    if "bytes_share" in rule and (kinds[0] != "require" or not 0 < share <= 1):
        raise ExerciseConfigError(f"{where}: bytes_share (a share in (0, 1]) belongs to a require rule; got {share!r}")
    return SassRule(kinds[0], _regex(rule, kinds[0], where), _field(rule, "message", str, where),
                    _field(rule, "hint", str, where, ""),
                    _regex(rule, "kernels", where) if "kernels" in rule else "", scope, share)


def _sizes(data, where: str) -> Sizes:
    if not isinstance(data, dict):
        raise ExerciseConfigError(f"{where}: must be a table; got {data!r}")
    unknown = set(data) - {"kind", "moduli"}
    if unknown:
        raise ExerciseConfigError(f"{where}: unknown field {sorted(unknown)[0]!r} (known: kind, moduli)")
    kind = _field(data, "kind", str, where, "elementwise")
    if kind not in sizes_.KINDS:
        raise ExerciseConfigError(f"{where}: kind must be one of {list(sizes_.KINDS)}; got {kind!r}")
    if "moduli" not in data:
        return Sizes(kind, sizes_.DEFAULT_MODULI.get(kind, ()))
    moduli = _field(data, "moduli", list, where)
    if kind not in sizes_.DEFAULT_MODULI:
        raise ExerciseConfigError(f"{where}: moduli is a field of kind = "
                                  f"{' or '.join(map(repr, sizes_.DEFAULT_MODULI))} only")
    if (not moduli or not all(isinstance(m, int) and not isinstance(m, bool) and m >= 2 for m in moduli)
            or any(b % a or b == a for a, b in zip(moduli, moduli[1:])) or moduli[0] > 64):
        raise ExerciseConfigError(f"{where}: moduli must be increasing integers >= 2, each dividing the next, "
                                  f"the first at most 64; got {moduli!r}")
    return Sizes(kind, tuple(moduli))


def exercises() -> list[Exercise]:
    """Every exercise under exercises/, in number order."""
    folders = sorted(EXERCISES_DIR.iterdir()) if EXERCISES_DIR.is_dir() else []
    return [load_exercise(d) for d in folders if d.is_dir() and _FOLDER.match(d.name) and (d / "exercise.toml").is_file()]


def get(exercise) -> Exercise:
    """An exercise by number (2, "2", "02") or name ("02_vec4_loads", "vec4_loads")."""
    known = exercises()
    text = str(exercise).strip() if isinstance(exercise, (int, str)) and not isinstance(exercise, bool) else None
    for ex in known:
        if text is not None and ((text.isdigit() and int(text) == ex.number) or text in (ex.slug, ex.name)):
            return ex
    listing = ", ".join(f"{ex.number} ({ex.slug})" for ex in known) or f"none (no exercises in {EXERCISES_DIR})"
    raise ValueError(f"exercise must be one of: {listing}; got {exercise!r}")
