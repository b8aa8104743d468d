"""Course exercises: find them, and check a student's kernel against one.

An exercise is a folder exercises/NN_name/ holding README.md (goal, background, hints),
starter.cu (compiles, has TODOs, fails its check), solution.cu (passes it) and exercise.toml, its
registration:

    title, op, dtypes (required: declared and correct), reference (the in-tree variant the
    speed is measured against)
    [speed]    directions, dtypes, shape, target (student throughput / reference throughput,
               both timed in one benchmark run)
    [[sass]]   static rules on the SASS of the built library: `require` or `forbid` an opcode
               (a regex such as '^LDG(\\.[A-Z0-9_]+)*\\.128\\b'), or `require_kernel` (a regex
               on the kernel names); each with a one-line `message` and a `hint`; an optional
               `kernels` regex limits an opcode rule to some kernels
    [starter]  fails_at (the check the unchanged starter fails) and reason (text its failure
               must contain); the tests hold the starter to both

Adding an exercise is adding a folder; nothing in this module names one.

check_exercise(n, path) builds the file as a variant of the op and runs, in order:
    build, declared dtypes, SASS rules        on any machine that can build CUDA
    correctness, gradcheck, speed             on a GPU (skipped, with the reason, elsewhere)
"""
from __future__ import annotations

import os
import pathlib
import random
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from . import config, ptxas, toolchain

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as a package (pip install tomli)
    import tomli as tomllib

EXERCISES_DIR = config.REPO_ROOT / "exercises"
CHECKS = ("build", "declared dtypes", "SASS rules", "correctness", "gradcheck", "speed")
NEEDS_GPU = "needs a GPU; this machine has none"
_FOLDER = re.compile(r"^(\d{2})_([a-z0-9_]+)$")
_DTYPES = ("float32", "float64", "float16", "bfloat16")
_MASK = {"float32": "WB_F32", "float64": "WB_F64", "float16": "WB_F16", "bfloat16": "WB_BF16"}
_DIRECTIONS = ("fwd", "bwd", "fwd+bwd")
_SASS_KINDS = ("require", "forbid", "require_kernel")
CHILD_TIMEOUT_S = 600  # correctness and gradcheck each; a kernel that hangs fails instead of waiting forever
LAYOUTS = {
    "contiguous": "a contiguous tensor",
    "strided": "a non-contiguous view (every other element of a wider tensor); the harness hands "
               "your kernel a contiguous copy of it",
    "offset": "a view that starts one element into its buffer, so x and bias are not 16-byte aligned "
              "(float4 / 16-byte loads are illegal there)",
}


# ----------------------------------------------------------------------------- registration

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
    from . import registry

    title = _field(data, "title", str, where)
    op = _field(data, "op", str, where)
    registry.check_op(op)
    dtypes = _choices(_field(data, "dtypes", list, where), _DTYPES, "dtypes", where)
    reference = _field(data, "reference", str, where)
    speed = _field(data, "speed", dict, where)
    shape = _field(speed, "shape", list, where + " [speed]")
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        raise ExerciseConfigError(f"{where} [speed]: shape must be a list of positive sizes; got {shape!r}")
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


def random_shapes(seed: int) -> list[tuple[int, ...]]:
    """The shapes one check run uses, drawn from `seed`: eight non-empty ones, whose column counts
    cover every remainder mod 8 (so some rows are not whole float4s or 16-byte vectors), one
    narrower than 8 columns, one a few thousand wide, a single row, a 3-D and a 1-D tensor; then
    an empty one. Rows go up to 300."""
    rng = random.Random(seed)
    narrow = rng.randrange(1, 8)
    residues = [r for r in range(8) if r != narrow]
    rng.shuffle(residues)

    def cols(residue: int, lo: int, hi: int) -> int:
        return 8 * rng.randint(lo, hi) + residue

    shapes = [
        (rng.randint(2, 300), cols(residues[0], 1, 130)),
        (rng.randint(2, 300), narrow),                            # fewer columns than one vector
        (rng.randint(2, 5), rng.randint(1, 60), cols(residues[1], 1, 40)),   # 3-D
        (rng.randint(2, 40), cols(residues[2], 250, 600)),        # 2000-4800 columns
        (1, cols(residues[3], 1, 130)),                           # a single row
        (cols(residues[4], 1, 200),),                             # 1-D
        (rng.randint(2, 300), cols(residues[5], 1, 130)),
        (rng.randint(2, 300), cols(residues[6], 1, 130)),
    ]
    shapes.append(rng.choice([(0, rng.randint(1, 64)), (rng.randint(1, 16), 0)]))
    return shapes


def new_seed() -> int:
    return int.from_bytes(os.urandom(4), "little") % 1_000_000


# ----------------------------------------------------------------------------- the report

@dataclass
class Check:
    name: str
    status: str                  # "ok", "FAIL" or "skipped"
    detail: str = ""             # one line, after the status; for a FAIL, the short reason
    lines: list[str] = field(default_factory=list)   # what a failure prints below the table
    show: bool = False           # print `lines` below the table even when the check passed

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
    def ok(self) -> bool:
        """No check failed and the file was built (some checks may have been skipped)."""
        return self.built and self.first_failure is None

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
        skipped = self.skipped
        if not skipped:
            return "PASS"
        names = ", ".join(c.name for c in skipped)
        if all(c.detail == NEEDS_GPU for c in skipped):
            return f"PASS (what this machine can run; skipped: {names} — {'it needs' if len(skipped) == 1 else 'they need'} a GPU)"
        return "PASS (skipped: " + "; ".join(f"{c.name}: {c.detail}" for c in skipped) + ")"

    def header(self) -> str:
        shapes = ", ".join("x".join(map(str, s)) for s in self.shapes)
        return "\n".join([f"Exercise {self.exercise}: {self.title}",
                          f"file:    {self.path} (built as {self.variant})",
                          f"shapes:  {shapes} (seed {self.seed})"])

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

    def summary(self) -> str:
        return "\n".join([self.header(), ""] + [f"  {c.line()}" for c in self.checks]) + "\n" + self.tail()

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shapes"] = [list(s) for s in self.shapes]
        d.update(ok=self.ok, complete=self.complete, verdict=self.verdict(),
                 first_failure=None if self.first_failure is None else self.first_failure.name)
        return d


# ----------------------------------------------------------------------------- the checks

def _shown(path) -> str:
    """A path as the student would type it: relative to the working directory when inside it."""
    p = pathlib.Path(path)
    try:
        return str(p.resolve().relative_to(pathlib.Path.cwd()))
    except (ValueError, OSError):
        return str(p)


def _student_path(ex: Exercise, path) -> pathlib.Path:
    if path is None:
        return ex.starter
    p = pathlib.Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"path: no such file: {str(path)!r}")
    if not p.is_file() or p.suffix != ".cu":
        raise ValueError(f"path must be a CUDA source file ending in .cu; got {str(path)!r}")
    return p.resolve()


def variant_name(ex: Exercise, source: pathlib.Path) -> str:
    return f"ex{ex.number:02d}_{re.sub(r'[^A-Za-z0-9_]', '_', source.stem)}"


def _resources(kernel) -> str:
    """Registers and spills of the build, from ptxas's report in its build log."""
    log = kernel.library.parent / "build.log"
    found = ptxas.parse_resources(log.read_text(errors="replace")) if log.is_file() else []
    if not found:
        return "no ptxas report in the build log"
    names = {k.name for k in found}
    text = f"{len(names)} kernel{'s' if len(names) != 1 else ''}, at most {max(k.registers for k in found)} registers"
    spilled = [k for k in found if k.spill_store_bytes + k.spill_load_bytes]
    if not spilled:
        return text + ", no spills"
    worst = max(spilled, key=lambda k: k.spill_store_bytes + k.spill_load_bytes)
    return (text + f"; SPILLS: {worst.spill_store_bytes + worst.spill_load_bytes} bytes in "
            f"{ptxas.kernel_label(worst.name)} ({worst.arch}) - registers went to local memory, which costs bandwidth")


def _build(ex: Exercise, source: pathlib.Path):
    from . import loader
    from .errors import BuildError, WorkbenchError

    if source.suffix == ".cu" and not toolchain.can_build_cuda():
        why = "torch has no CUDA" if not toolchain.torch_has_cuda() else "no nvcc found (set CUDA_HOME)"
        return None, Check("build", "skipped", f"this machine cannot build CUDA code: {why}")
    try:
        loader.ensure_harness()  # once per toolchain; not part of the time the student's build took
        kernel = loader.load_source(ex.op, source, name=variant_name(ex, source))
    except BuildError as e:
        where = f"{_shown(e.file)}:{e.line}" if e.file and e.line else _shown(e.file) if e.file else "build"
        first, *rest = (e.first_error or "failed").splitlines() or ["failed"]
        return None, Check("build", "FAIL", f"{where}: {first}",
                           [f"{where}: error: {first}", *[f"    {ln}" for ln in rest], f"full compiler log: {e.log_path}"])
    except (ValueError, WorkbenchError) as e:
        first, *rest = (str(e) or type(e).__name__).splitlines()
        return None, Check("build", "FAIL", first, [first, *rest])
    how = f"built in {kernel.seconds:.1f} s" if kernel.built else "unchanged, cached build"
    return kernel, Check("build", "ok", f"{how}; {_resources(kernel)}")


def _declared_dtypes(ex: Exercise, kernel) -> Check:
    missing = [d for d in ex.dtypes if d not in kernel.dtypes]
    if not missing:
        extra = [d for d in kernel.dtypes if d not in ex.dtypes]
        return Check("declared dtypes", "ok", ", ".join(ex.dtypes) + (f" (also {', '.join(extra)})" if extra else ""))
    mask = " | ".join(_MASK[d] for d in _DTYPES if d in ex.dtypes or d in kernel.dtypes)
    return Check("declared dtypes", "FAIL", f"missing {', '.join(missing)}", [
        f"this exercise needs: {', '.join(ex.dtypes)}",
        f"your variant declares: {', '.join(kernel.dtypes) or 'nothing'}",
        f"declare them in the dtype mask, the third argument of WB_EXPORT_VARIANT(...): {mask}",
        "and make the launchers accept them: wb_dispatch_dtype<that mask>(dtype, ...) (kernels/common/wb_cuda.h)"])


def _sass_rules(ex: Exercise, kernel) -> Check:
    if not ex.sass:
        return Check("SASS rules", "ok", "none for this exercise")
    if ptxas.cuobjdump() is None:
        return Check("SASS rules", "skipped", "cuobjdump not found (the CUDA toolkit and the triton package carry one)")
    try:
        ops = ptxas.sass_opcodes(ptxas.sass(kernel.library))
    except (subprocess.SubprocessError, OSError) as e:
        return Check("SASS rules", "skipped", f"cuobjdump could not read the built library: {e}")
    if not ops:
        return Check("SASS rules", "skipped", "no device code in the built library")
    archs = sorted({a for a, _ in ops})
    failed, lines = [], []
    for rule in ex.sass:
        evidence, bad_archs = [], []
        for arch in archs:
            kernels = {k: o for (a, k), o in ops.items() if a == arch
                       and (rule.kind == "require_kernel" or not rule.kernels
                            or re.search(rule.kernels, ptxas.kernel_label(k)))}
            if rule.kind == "require_kernel":
                if not any(re.search(rule.pattern, k) for k in kernels):
                    bad_archs.append(arch)
                    evidence = [f"kernels: {', '.join(sorted(ptxas.kernel_label(k) for k in kernels))}"]
            elif rule.kind == "require":
                if not any(re.search(rule.pattern, op) for o in kernels.values() for op in o):
                    bad_archs.append(arch)
                    evidence = [f"{ptxas.kernel_label(k)}: {', '.join(sorted(_memory_ops(o))) or 'no global accesses'}"
                                for k, o in sorted(kernels.items())]
            else:
                hits = {k: sorted(op for op in o if re.search(rule.pattern, op)) for k, o in kernels.items()}
                hits = {k: v for k, v in hits.items() if v}
                if hits:
                    bad_archs.append(arch)
                    evidence = [f"{ptxas.kernel_label(k)}: {', '.join(v)}" for k, v in sorted(hits.items())]
        if bad_archs:
            failed.append(rule.message)
            lines += [f"{rule.message} (SASS for {', '.join(bad_archs)}; {_describe(rule)})",
                      *[f"    {e}" for e in evidence]]
            if rule.hint:
                lines.append(f"    hint: {rule.hint}")
    if failed:
        return Check("SASS rules", "FAIL", "; ".join(failed), lines)
    return Check("SASS rules", "ok", f"{len(ex.sass)} rule{'s hold' if len(ex.sass) != 1 else ' holds'} on {', '.join(archs)}")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _memory_ops(opcodes: set[str]) -> set[str]:
    return {op for op in opcodes if op.startswith(("LDG", "STG", "RED", "ATOM"))}


def _describe(rule: SassRule) -> str:
    return {"require": f"wanted an instruction matching {rule.pattern}",
            "forbid": f"no instruction may match {rule.pattern}",
            "require_kernel": f"wanted a kernel named like {rule.pattern}"}[rule.kind]


def _in_child(kind: str, ex: Exercise, kernel, **kwargs):
    """correctness.check or .gradcheck of the kernel in a child process (isolate.run): a kernel
    that faults, or never finishes, cannot take the checker down with it."""
    from . import isolate
    from .correctness import Report

    return Report.from_dict(isolate.run(kind, isolate.variant_spec(ex.op, kernel), kwargs, timeout_s=CHILD_TIMEOUT_S))


def _stopped(name: str, err, sanitize: str) -> Check:
    """A check whose child process raised, died (IsolatedRunError) or ran out of time."""
    if isinstance(err, subprocess.TimeoutExpired):
        return Check(name, "FAIL", f"timed out: not finished after {CHILD_TIMEOUT_S:.0f} s",
                     ["a kernel never returned: look for a loop whose index never reaches its end"])
    text = err.full_output or err.output
    cuda = re.findall(r"CUDA error: ([^\n]+)", text)
    killed = re.search(r"was killed by (\w+)", str(err))
    if cuda:
        detail = f"crashed: {cuda[-1].strip()}"
    elif killed:
        detail = f"crashed: the process running the check was killed by {killed.group(1)}"
    else:
        raised = re.findall(r"^\w*(?:Error|Exception)\w*: (.+)$", text, flags=re.MULTILINE)
        detail = f"stopped with an error: {raised[-1].strip() if raised else 'see below'}"
    lines = [detail, "the last lines the check printed:", *[f"    {ln}" for ln in err.output.splitlines()[-12:]]]
    if detail.startswith("crashed"):
        lines.append(f"to find the faulting access (compute-sanitizer): {sanitize}")
    return Check(name, "FAIL", detail, lines)


def _case_lines(c, op_inputs: str) -> list[str]:
    from .correctness import DTYPES, TOLERANCES

    rel_limit = TOLERANCES[DTYPES[c.dtype]][0]
    shape = "x".join(map(str, c.shape)) or "scalar"
    lines = [f"first failing case: {c.what}",
             f"  shape   {shape} ({op_inputs})",
             f"  dtype   {c.dtype}",
             f"  layout  {c.layout}: {LAYOUTS.get(c.layout, c.layout)}"]
    if c.what == "determinism":
        lines.append("  error   two runs on the same inputs gave different bits")
    else:
        where = f" at index {list(c.where)}" if c.where is not None else ""
        lines.append(f"  error   relative {c.rel_err:.2e} (allowed {rel_limit:g}), largest |difference| "
                     f"{c.max_abs_err:.2e}{where}")
    if c.note:
        lines.append(f"  note    {c.note}")
    return lines


def _correctness(ex: Exercise, kernel, shapes, seed: int, sanitize: str) -> Check:
    from .errors import IsolatedRunError

    dtypes = [d for d in ex.dtypes if d in kernel.dtypes]
    if not dtypes:
        return Check("correctness", "skipped", "the variant declares none of the required dtypes")
    try:
        rep = _in_child("check", ex, kernel, dtypes=dtypes, shapes=[list(s) for s in shapes],
                        layouts=list(LAYOUTS), seed=seed, backward=True)
    except (IsolatedRunError, subprocess.TimeoutExpired) as e:
        return _stopped("correctness", e, sanitize)
    n, bad = len(rep.cases), rep.failures
    scope = f"{len(shapes)} shapes x {_count(len(dtypes), 'dtype')} x {len(LAYOUTS)} layouts"
    if not bad:
        return Check("correctness", "ok", f"{_count(n, 'case')}: {scope}; forward, backward, determinism")
    first = bad[0]
    by_what: dict[str, int] = {}
    for c in bad:
        by_what[c.what] = by_what.get(c.what, 0) + 1
    lines = _case_lines(first, "x; bias is 1-D, one value per column")
    lines.append(f"failing: {len(bad)} of {n} cases (" + ", ".join(f"{w} {k}" for w, k in by_what.items()) + ")")
    lines += ["more failing cases:", *[f"  {c.line()}" for c in bad[1:6]]] if len(bad) > 1 else []
    shape = "x".join(map(str, first.shape))
    return Check("correctness", "FAIL", f"{first.what}, {shape} {first.dtype} {first.layout}; "
                 f"{len(bad)} of {n} cases failed", lines)


def _gradcheck(ex: Exercise, kernel, seed: int, sanitize: str) -> Check:
    from .errors import IsolatedRunError

    try:
        rep = _in_child("gradcheck", ex, kernel, seed=seed)
    except (IsolatedRunError, subprocess.TimeoutExpired) as e:
        return _stopped("gradcheck", e, sanitize)
    if rep.ok:
        return Check("gradcheck", "ok", f"{rep.method}; {_count(len(rep.cases), 'case')}")
    first = rep.failures[0]
    lines = [f"method: {rep.method}"] + _case_lines(first, "x; bias is 1-D") + [c.line() for c in rep.failures[1:6]]
    return Check("gradcheck", "FAIL", f"{first.what}, {'x'.join(map(str, first.shape))} {first.dtype}"
                 + (f": {first.note}" if first.note else ""), lines)


def _speed(ex: Exercise, kernel) -> Check:
    from .benchmark import bench

    s = ex.speed
    try:
        result = bench(ex.op, variants=[kernel.name, ex.reference], dtypes=list(s.dtypes), shapes=[s.shape],
                       baselines=("eager",), directions=list(s.directions))
    except Exception as e:  # noqa: BLE001 - a kernel that fails under timing is a failed check, not a crash
        return Check("speed", "FAIL", f"stopped with an error: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                     str(e).splitlines())
    median = {(r["direction"], r["dtype"], r["variant"]): r["median_ms"] for r in result.rows}
    lines, worst = [], None
    for d in s.directions:
        for t in s.dtypes:
            mine, ref = median.get((d, t, kernel.name)), median.get((d, t, ex.reference))
            if mine is None or ref is None:
                return Check("speed", "FAIL", f"no timing for {d} {t}", [f"benchmark notes: {n}" for n in result.notes])
            ratio = ref / mine
            eager = median.get((d, t, "eager"))
            lines.append(f"{d:7s} {t:9s} {ratio:5.2f}x {ex.reference}  (yours {mine:.4f} ms, {ex.reference} {ref:.4f} ms"
                         + (f", eager {eager:.4f} ms" if eager else "") + f")  {'ok' if ratio >= s.target else 'BELOW TARGET'}")
            if worst is None or ratio < worst[0]:
                worst = (ratio, d, t)
    ratio, d, t = worst
    lines.append(f"target: >= {s.target:.2f}x the throughput of {ex.reference} in every row, both timed in this run "
                 f"at {'x'.join(map(str, s.shape))} (medians of CUDA-event timings)")
    if ratio < s.target:
        return Check("speed", "FAIL", f"{ratio:.2f}x {ex.reference} on {d} {t}, target {s.target:.2f}x", lines)
    return Check("speed", "ok", f"at least {ratio:.2f}x {ex.reference} (target {s.target:.2f}x)", lines, show=True)


def gpu_present() -> bool:
    """Whether the GPU checks can run here (one place, so tests can stand in for a GPU)."""
    return toolchain.gpu_available()


def _prepare(exercise, path, seed) -> tuple[Exercise, pathlib.Path, ExerciseReport]:
    ex = get(exercise)
    source = _student_path(ex, path)
    seed = new_seed() if seed is None else int(seed)
    shown = _shown(source)
    command = (f"python -m workbench exercise check {ex.number}"
               + (f" {shlex.quote(shown)}" if path is not None else "") + f" --seed {seed}")
    report = ExerciseReport(ex.slug, ex.title, shown, f"{ex.op}/{variant_name(ex, source)}", seed,
                            random_shapes(seed), command)
    return ex, source, report


def _run(ex: Exercise, source: pathlib.Path, report: ExerciseReport, speed: bool) -> Iterator[Check]:
    """Run the checks in order, appending each to the report and yielding it as it finishes."""
    def add(c: Check) -> Check:
        report.checks.append(c)
        return c

    kernel, built = _build(ex, source)
    yield add(built)
    if kernel is None:
        why = "the build failed" if built.status == "FAIL" else built.detail
        for name in CHECKS[1:]:
            yield add(Check(name, "skipped", why))
        return
    dtypes = add(_declared_dtypes(ex, kernel))
    yield dtypes
    yield add(_sass_rules(ex, kernel))
    if kernel.device == "cuda" and not gpu_present():
        for name in CHECKS[3:]:
            yield add(Check(name, "skipped", NEEDS_GPU))
        return
    sanitize = f"python -m workbench sanitize {ex.op} {kernel.name} --source {shlex.quote(report.path)}"
    correct = add(_correctness(ex, kernel, report.shapes, report.seed, sanitize))
    yield correct
    grads = add(_gradcheck(ex, kernel, report.seed, sanitize))
    yield grads
    if not speed:
        yield add(Check("speed", "skipped", "not asked for (--no-speed)"))
    elif dtypes.status != "ok":
        yield add(Check("speed", "skipped", "declare the required dtypes first"))
    elif correct.status != "ok" or grads.status != "ok":
        yield add(Check("speed", "skipped", "fix correctness first"))
    else:
        yield add(_speed(ex, kernel))


def check_exercise(exercise, path=None, *, seed: int | None = None, speed: bool = True) -> ExerciseReport:
    """Build `path` (default: the exercise's starter.cu) as a variant of the exercise's op and run
    its checks: build, declared dtypes, SASS rules; then, on a GPU, correctness (the check matrix
    on shapes drawn from `seed`, in a child process), gradcheck, and speed against the reference
    variant (speed=False skips it). Returns an ExerciseReport: .ok, .checks, .first_failure,
    .summary(). Raises ValueError for an unknown exercise or a path that is not a .cu file."""
    ex, source, report = _prepare(exercise, path, seed)
    for _ in _run(ex, source, report, speed):
        pass
    return report


# ----------------------------------------------------------------------------- command line

def cli_list(args) -> int:
    known = exercises()
    if not known:
        print(f"no exercises in {EXERCISES_DIR}")
        return 1
    width = max(len(ex.name) for ex in known)
    for ex in known:
        print(f"{ex.number:2d}  {ex.name:{width}s}  {ex.title}")
        print(f"    {'':{width}s}  speed target: {ex.target_text()}")
    print("\ncheck one: python -m workbench exercise check <number> [your_file.cu]   (README: exercises/README.md)")
    return 0


def cli_check(args) -> int:
    try:
        ex, source, report = _prepare(args.exercise, args.path, args.seed)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    print(report.header() + "\n", flush=True)
    for c in _run(ex, source, report, speed=not args.no_speed):
        print(f"  {c.line()}", flush=True)
    print(report.tail())
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0 if report.ok else 1
