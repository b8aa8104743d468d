"""Exercises (exercises/NN_name/): each folder is complete and its registration valid; every starter
compiles and fails its checker at the check, and for the reason, its exercise.toml states; every
solution passes (without a GPU: the checks that can run pass and the rest say why they were
skipped; on a GPU, everything including speed). Also the command line, the randomized shapes (the
elementwise, reduction and tiled draws), the SASS rule that counts against the starter, the rules
scoped to a kernel's innermost loops (found from the branches back in its machine code), a compile
error, and the GPU half of the report (first failing case, crash, speed ratio) driven on the CPU
through stand-ins for the check matrix, gradcheck and the judge's clock."""
from __future__ import annotations

import json
import math
import re
from collections import Counter

import pytest
from conftest import HAS_GPU, describe

from workbench.measure import correctness

from workbench.explain import ptxas

from workbench.model import registry

from workbench.build import toolchain
from workbench import exercise as wbex
from workbench.exercise import sass as wbsass
from workbench.specs.bias_gelu import SPEC as BIAS_GELU
from workbench.specs.matmul import SPEC as MATMUL
from workbench.specs.reduce_sum import SPEC as REDUCE_SUM

EXERCISES = wbex.exercises()
IDS = [ex.slug for ex in EXERCISES]
GPU_CHECKS = ("correctness", "gradcheck", "global loads", "speed")


def cpu_pass(ex) -> str:
    gpu_only = ", ".join(c for c in ex.checks if c in GPU_CHECKS)
    return f"PASS (what this machine can run; skipped: {gpu_only} — they need a GPU)"


def _needs_cuobjdump(ex):
    if ex.sass and ptxas.cuobjdump() is None:
        pytest.skip("cuobjdump not found: the SASS rules cannot be read here")


# ----------------------------------------------------------------------------- registration

def test_the_course_exercises_are_there():
    assert [ex.slug for ex in EXERCISES][:7] == ["01_fp16_support", "02_vec4_loads", "03_fused_backward",
                                                 "04_warp_shuffle", "05_rmsnorm_one_read", "06_smem_tiling",
                                                 "07_tma_pipeline"]


def test_the_tiling_exercise_is_registered():
    ex = wbex.get("smem_tiling")
    assert (ex.number, ex.op, ex.reference, ex.dtypes) == (6, "matmul", "smem_tiling", ("float32",))
    assert ex.reference in MATMUL.ladder and ex.speed.shape == (4096, 4096, 4096) and ex.speed.directions == ("fwd",)
    assert ex.sizes == wbex.Sizes("tiled", (32,))
    rule, = ex.sass
    assert (rule.kind, rule.pattern, rule.scope) == ("require", "^LDS", "inner_loop")
    assert (ex.starter_fails_at, ex.starter_reason) == ("SASS rules", "no shared-memory loads (LDS) in the inner loop")


def test_the_tma_exercise_is_registered():
    ex = wbex.get("tma_pipeline")
    assert (ex.number, ex.op, ex.reference, ex.dtypes) == (7, "matmul", "wgmma_tma", ("float16", "bfloat16"))
    assert ex.reference in MATMUL.ladder and ex.speed.shape == (4096, 4096, 4096) and ex.speed.directions == ("fwd",)
    assert set(ex.speed.dtypes) == {"float16", "bfloat16"} and 0 < ex.speed.target < 1
    assert [(r.kind, r.pattern, r.scope) for r in ex.sass] == [("require", "^UTMALDG", "kernel"),
                                                                ("require", r"^SYNCS\.PHASECHK", "kernel")]
    # tensor_core's route kernels (hopper.cuh, not the student's) are left out of the rules
    assert all(not re.search(r.kernels, "tensor_core_kernel<..., ...>") and re.search(r.kernels, "mine<wb_bf16_t>")
               for r in ex.sass)
    assert (ex.starter_fails_at, ex.starter_reason) == ("SASS rules", "no TMA tile loads (UTMALDG)")
    # Both files are built for sm_90a (the marker) and name their refusal off Hopper.
    for path in (ex.starter, ex.solution):
        assert toolchain.needs_sm90a(path), path
        assert 'WB_HOPPER_STATUS_STRING(exercise07_status, "exercise 07")' in path.read_text()


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_folder_is_complete(ex):
    for name in ("README.md", "starter.cu", "solution.cu", "exercise.toml"):
        assert (ex.folder / name).is_file(), f"{ex.slug}: {name} is missing"
    raw = wbex.tomllib.loads((ex.folder / "exercise.toml").read_text())
    for key in ("title", "op", "dtypes", "reference", "speed", "starter"):
        assert key in raw, f"{ex.slug}/exercise.toml: no {key!r}"
    assert {"directions", "dtypes", "shape", "target"} <= set(raw["speed"])
    assert {"fails_at", "reason"} <= set(raw["starter"])
    # The reference exists and can be timed in every dtype the speed section names.
    ref = {v.name: v for v in registry.variants(ex.op)}[ex.reference]
    assert set(ex.speed.dtypes) <= set(ref.dtypes) and set(ex.speed.dtypes) <= set(ex.dtypes)
    # Both kernels declare the op; the solution declares every required dtype (read without a build).
    solution = registry.static_variant(ex.op, ex.solution)
    assert set(ex.dtypes) <= set(solution.dtypes), f"{ex.slug}: the solution declares {solution.dtypes}"
    registry.static_variant(ex.op, ex.starter)
    assert "TODO" in ex.starter.read_text() and "TODO" not in ex.solution.read_text()
    readme = ex.readme.read_text()
    assert f"python -m workbench exercise check {ex.number}" in readme
    assert f"{ex.speed.target:.2f}x" in readme and f"`{ex.reference}`" in readme


def test_the_index_lists_every_exercise():
    index = (wbex.EXERCISES_DIR / "README.md").read_text()
    for ex in EXERCISES:
        assert f"({ex.slug}/README.md)" in index


@pytest.mark.parametrize("key", [2, "2", "02", "02_vec4_loads", "vec4_loads", " 2 "])
def test_an_exercise_is_named_by_number_or_name(key):
    assert wbex.get(key).slug == "02_vec4_loads"


@pytest.mark.parametrize("key", [9, "9", "vec4", "", None, True, 2.0])
def test_an_unknown_exercise_is_refused_with_the_list(key):
    with pytest.raises(ValueError, match=r"exercise must be one of: 1 \(01_fp16_support\), 2 \(02_vec4_loads\)"):
        wbex.get(key)


def test_a_malformed_registration_names_the_file_and_field(tmp_path):
    folder = tmp_path / "07_broken"
    folder.mkdir()
    (folder / "exercise.toml").write_text('title = "t"\nop = "bias_gelu"\ndtypes = ["float32"]\n')
    with pytest.raises(wbex.ExerciseConfigError, match=r"07_broken/exercise.toml: missing field 'reference'"):
        wbex.load_exercise(folder)


_VALID_TOML = """title = "t"
op = "reduce_sum"
dtypes = ["float32"]
reference = "warp_shuffle"
[speed]
directions = ["fwd"]
dtypes = ["float32"]
shape = [64, 1000]
target = 0.9
[starter]
fails_at = "SASS rules"
reason = "r"
"""


def _registration(tmp_path, extra: str):
    """An exercise registration of _VALID_TOML and `extra` (top-level keys first, then tables)."""
    folder = tmp_path / "08_made_up"
    folder.mkdir(exist_ok=True)
    top, tables = ("", extra) if extra.startswith("[") else (extra, "")
    (folder / "exercise.toml").write_text(top + _VALID_TOML + tables)
    return wbex.load_exercise(folder)


def test_the_global_loads_rule_is_read_and_sized_from_the_op(tmp_path):
    plain = _registration(tmp_path, "")
    assert plain.global_loads is None and "global loads" not in plain.checks
    ex = _registration(tmp_path, "[global_loads]\ndirection = \"fwd\"\ndtype = \"bfloat16\"\nshape = [64, 1000]\n"
                                 "reads = { x = 1 }\nslack = 1.1\nmessage = \"m\"\n")
    assert ex.checks == wbex.CHECKS and ex.global_loads.reads == (("x", 1),)
    assert ex.global_loads.allowed_bytes(REDUCE_SUM) == int(64 * 1000 * 2 * 1.1)
    five = wbex.get(5).global_loads      # x once and the weight once per row, bf16 2048 x 4096
    assert five.allowed_bytes(registry.spec("rmsnorm")) == int((2048 * 4096 * 2 + 2048 * 4096 * 2) * 1.10)
    assert five.reads_text() == "x + weight once per row"


@pytest.mark.parametrize("extra, message", [
    ("[global_loads]\ndirection = \"fwd+bwd\"\n", "direction must be 'fwd' or 'bwd'"),
    ("[global_loads]\ndirection = \"fwd\"\ndtype = \"bfloat16\"\nshape = [64, 1000]\nreads = { y = 1 }\n"
     "slack = 1.1\nmessage = \"m\"\n", "reads maps inputs of reduce_sum"),
    ("[global_loads]\ndirection = \"fwd\"\ndtype = \"bfloat16\"\nshape = [64, 1000]\nreads = { x = 1 }\n"
     "slack = 3.0\nmessage = \"m\"\n", r"slack must be in \[1, 2\)"),
    ("[global_loads]\ndirection = \"fwd\"\nbytes = 3\n", "unknown field 'bytes'"),
])
def test_a_malformed_global_loads_rule_is_refused(tmp_path, extra, message):
    with pytest.raises(wbex.ExerciseConfigError, match=message):
        _registration(tmp_path, extra)


def test_the_count_rule_and_the_sizes_table_are_read(tmp_path):
    plain = _registration(tmp_path, "")
    assert plain.sizes == wbex.Sizes("elementwise", ()) and plain.sass == ()
    ex = _registration(tmp_path, "[sizes]\nkind = \"reduction\"\n[[sass]]\nfewer_than_starter = '^BAR\\.SYNC'\n"
                                 "message = \"m\"\nkernels = 'reduce'\n")
    assert ex.sizes == wbex.Sizes("reduction", (32, 1024))            # the default moduli
    assert ex.sass == (wbex.SassRule("fewer_than_starter", r"^BAR\.SYNC", "m", "", "reduce"),)
    three = _registration(tmp_path, "[sizes]\nkind = \"reduction\"\nmoduli = [8, 64, 4096]\n")
    assert three.sizes.moduli == (8, 64, 4096)
    tiled = _registration(tmp_path, "[sizes]\nkind = \"tiled\"\n[[sass]]\nrequire = '^LDS'\nmessage = \"m\"\n"
                                    "scope = \"inner_loop\"\n")
    assert tiled.sizes == wbex.Sizes("tiled", (32,)) and tiled.sass[0].scope == "inner_loop"
    assert _registration(tmp_path, "[sizes]\nkind = \"tiled\"\nmoduli = [16, 64]\n").sizes.moduli == (16, 64)
    forbid = _registration(tmp_path, "[[sass]]\nforbid = 'RED'\nmessage = \"m\"\n")
    assert forbid.sass[0].scope == "kernel"                           # the default: anywhere in a kernel


@pytest.mark.parametrize("extra, message", [
    ("[[sass]]\nfewer_than_starter = '^BAR\\.SYNC('\nmessage = \"m\"\n", r"\[\[sass\]\] #1: fewer_than_starter "
     r"'\^BAR\\\\.SYNC\(' is not a regular expression"),
    ("[[sass]]\nfewer_than_starter = 3\nmessage = \"m\"\n",
     r"\[\[sass\]\] #1: field 'fewer_than_starter' must be a str"),
    ("[[sass]]\nfewer_than_starter = 'BAR'\n", r"\[\[sass\]\] #1: missing field 'message'"),
    ("[[sass]]\nfewer_than_starter = 'BAR'\nrequire = 'SHFL'\nmessage = \"m\"\n", "give exactly one of"),
    ("[[sass]]\nfewer_than_starter = 'BAR'\nmessage = \"m\"\nkernels = '('\n", "kernels '\\(' is not a regular"),
    ("[[sass]]\nfewer_than_starter = 'BAR'\nmessage = \"m\"\nfewer = 1\n", "unknown field 'fewer'"),
    ("[sizes]\nkind = \"reductions\"\n",
     r"\[sizes\]: kind must be one of \['elementwise', 'reduction', 'tiled', 'tiled_aligned'\]"),
    ("[sizes]\nkind = \"reduction\"\nmoduli = [32, 1000]\n", "each dividing the next"),
    ("[sizes]\nkind = \"reduction\"\nmoduli = [32, 32]\n", "increasing"),
    ("[sizes]\nkind = \"reduction\"\nmoduli = [128, 1024]\n", "the first at most 64"),
    ("[sizes]\nkind = \"reduction\"\nmoduli = []\n", "moduli must be"),
    ("[sizes]\nkind = \"reduction\"\nmoduli = [32, true]\n", "moduli must be"),
    ("[sizes]\nmoduli = [32, 1024]\n", "moduli is a field of kind = 'reduction' or 'tiled' or 'tiled_aligned' only"),
    ("[sizes]\nkind = \"tiled\"\nmoduli = [32, 48]\n", "each dividing the next"),
    ("[[sass]]\nrequire = '^LDS'\nmessage = \"m\"\nscope = \"loop\"\n",
     r"scope \(of an opcode rule\) must be one of \['kernel', 'inner_loop'\]; got 'loop'"),
    ("[[sass]]\nrequire_kernel = 'gemm'\nmessage = \"m\"\nscope = \"inner_loop\"\n", r"scope \(of an opcode rule\)"),
    ("[sizes]\nkind = \"reduction\"\nmodulus = [32]\n", "unknown field 'modulus'"),
    ("sizes = \"reduction\"\n", r"\[sizes\]: must be a table"),
])
def test_a_malformed_count_rule_or_sizes_table_is_refused(tmp_path, extra, message):
    with pytest.raises(wbex.ExerciseConfigError, match=message):
        _registration(tmp_path, extra)


# ----------------------------------------------------------------------------- shapes

def test_shapes_are_reproducible_per_seed_and_differ_across_seeds():
    assert wbex.random_sizes(11, BIAS_GELU) == wbex.random_sizes(11, BIAS_GELU)
    assert len({tuple(wbex.random_sizes(s, BIAS_GELU)) for s in range(20)}) == 20


@pytest.mark.parametrize("seed", range(0, 400, 7))
def test_every_run_covers_the_edges(seed):
    shapes = wbex.random_sizes(seed, BIAS_GELU)
    full = [s for s in shapes if 0 not in s]
    assert len(full) == 8 and any(0 in s for s in shapes)
    assert {s[-1] % 8 for s in full} == set(range(8))          # every residue: some rows are not whole float4s
    assert any(s[-1] % 4 != 0 for s in full)
    assert any(s[-1] < 8 for s in full) and any(s[-1] >= 2000 for s in full)
    assert any(len(s) == 3 for s in full) and any(len(s) == 1 for s in full)
    assert any(len(s) == 2 and s[0] == 1 for s in full)
    assert all(1 <= s[0] <= 300 for s in full if len(s) == 2)


@pytest.mark.parametrize("seed", range(0, 400, 7))
def test_a_reduction_draw_covers_its_edges(seed):
    shapes = wbex.reduction_sizes(seed, REDUCE_SUM)
    full = [s for s in shapes if 0 not in s]
    assert len(full) == len(shapes) - 1 and len(full) >= 34
    assert {s[-1] % 32 for s in full} == set(range(32))                    # every partial last warp
    assert {0, 1, 512, 513, 1023} <= {s[-1] % 1024 for s in full}           # block edges
    huge = [s for s in full if s[-1] > 1 << 20]
    assert len(huge) == 1 and len(huge[0]) == 1 and huge[0][0] > 1 << 22 and huge[0][0] % 2 == 1
    assert any(len(s) == 2 and s[0] >= 10_000 for s in full)               # many rows
    assert any(len(s) == 3 for s in full) and any(len(s) == 2 and s[0] == 1 for s in full)
    assert sum(math.prod(s) for s in shapes) < 8_000_000                    # a check stays fast
    for s in shapes:
        REDUCE_SUM.dims(s)                                                  # each is a size of the op


def test_a_reduction_draw_is_reproducible_per_seed_and_takes_its_moduli():
    assert wbex.reduction_sizes(11, REDUCE_SUM) == wbex.reduction_sizes(11, REDUCE_SUM)
    assert len({tuple(wbex.reduction_sizes(s, REDUCE_SUM)) for s in range(20)}) == 20
    full = [s for s in wbex.reduction_sizes(3, REDUCE_SUM, (8, 64, 4096)) if 0 not in s]
    assert {s[-1] % 8 for s in full} == set(range(8))
    assert {0, 1, 32, 33, 63} <= {s[-1] % 64 for s in full} and {0, 1, 2048, 2049, 4095} <= {s[-1] % 4096 for s in full}
    assert wbex.Sizes("reduction", (32, 1024)).draw(5, REDUCE_SUM) == wbex.reduction_sizes(5, REDUCE_SUM)
    assert wbex.Sizes().draw(5, BIAS_GELU) == wbex.random_sizes(5, BIAS_GELU)


@pytest.mark.parametrize("seed", range(0, 400, 7))
def test_a_tiled_draw_takes_every_dim_round_the_tile_edges(seed):
    shapes = wbex.tiled_sizes(seed, MATMUL)
    full = [s for s in shapes if 0 not in s]
    assert [s for s in shapes if 0 in s] == [(0, s[1], s[2]) for s in shapes[-3:-2]] + \
        [(s[0], 0, s[2]) for s in shapes[-2:-1]] + [(s[0], s[1], 0) for s in shapes[-1:]]   # an empty m, k, n
    for dim in range(3):
        values = {s[dim] for s in full}
        assert {1, 31, 32, 33} <= values                                      # a tile's edges, in m, k and n
        assert any(2 <= v <= 30 for v in values) and any(v > 64 and v % 32 for v in values)
        assert any(v >= 896 and v % 32 for v in values)                      # many tiles and a remainder
    assert any(all(s[d] > 128 for d in range(3)) for s in full)              # many blocks in m and n at once
    assert max(math.prod(s) for s in shapes) <= 1087 * 200 * 200             # a float64 check stays quick
    for s in shapes:
        MATMUL.dims(s)                                                       # each is a size of the op


def test_a_tiled_draw_is_reproducible_per_seed_and_takes_its_tiles():
    assert wbex.tiled_sizes(11, MATMUL) == wbex.tiled_sizes(11, MATMUL)
    assert len({tuple(wbex.tiled_sizes(s, MATMUL)) for s in range(20)}) == 20
    full = [s for s in wbex.tiled_sizes(3, MATMUL, (16, 128)) if 0 not in s]
    for dim in range(3):
        values = {s[dim] for s in full}
        assert {1, 15, 16, 17} <= values and {127, 129} & values or {255, 257} & values
    assert wbex.Sizes("tiled", (32,)).draw(5, MATMUL) == wbex.tiled_sizes(5, MATMUL)


@pytest.mark.parametrize("seed", range(0, 400, 7))
def test_an_aligned_tiled_draw_keeps_every_input_row_whole(seed):
    """Exercise 07's draw: k and n (the dims that end a's and b's patterns) in steps of 8, so the
    operands reach the student's TMA kernel and not the route for unaligned rows; m as tiled."""
    ex = wbex.get(7)
    assert ex.sizes == wbex.Sizes("tiled_aligned", (64, 128))
    shapes = ex.sizes.draw(seed, MATMUL)
    assert shapes == wbex.tiled_sizes(seed, MATMUL, (64, 128), aligned=True)
    full = [s for s in shapes if 0 not in s]
    assert len(full) == 28 and [s for s in shapes if 0 in s] == [(0, *shapes[-3][1:]), (shapes[-2][0], 0,
                                                                 shapes[-2][2]), (*shapes[-1][:2], 0)]
    assert all(k % 8 == 0 and n % 8 == 0 for _, k, n in shapes)
    ms = {s[0] for s in full}
    assert {1, 63, 64, 65} <= ms and ({127, 255} & ms) and ({129, 257} & ms) and any(v % 8 for v in ms)
    for dim in (1, 2):
        values = {s[dim] for s in full}
        assert {8, 56, 64, 72} <= values and ({120, 248} & values) and ({136, 264} & values)
        assert any(v >= 768 and v % 64 for v in values) and any(v > 128 and v % 64 for v in values)  # ~1000, a few
    for s in shapes:
        MATMUL.dims(s)


def test_an_aligned_tiled_draw_needs_a_tile_of_whole_steps():
    with pytest.raises(ValueError, match=r"the first tile \(12\) must be a multiple of 8 above it"):
        wbex.tiled_sizes(1, MATMUL, (12,), aligned=True)
    assert wbex.tiled_sizes(3, MATMUL, (64, 128)) != wbex.tiled_sizes(3, MATMUL, (64, 128), aligned=True)


# ----------------------------------------------------------------------------- SASS rules

_LISTING = """
\tcode for sm_90
\t\tFunction : _Z6reduceIfEvv
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0020*/               @P0 BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0030*/                   SHFL.DOWN PT, R3, R2, 0x10, 0x1f ;
                                                                        /* 0x000fe200078e00ff */
        /*0040*/                   SHFL.DOWN PT, R5, R3, 0x8, 0x1f ;
\t\tFunction : _Z4copyv
        /*0000*/                   STG.E [R2.64], R5 ;
"""


def test_sass_counts_count_each_instruction_and_opcodes_stay_sets():
    counts = ptxas.sass_counts(_LISTING.replace("code for sm_90", "arch = sm_90"))
    assert counts == {("sm_90", "_Z6reduceIfEvv"): Counter({"BAR.SYNC.DEFER_BLOCKING": 2, "SHFL.DOWN": 2, "LDC": 1}),
                      ("sm_90", "_Z4copyv"): Counter({"STG.E": 1})}
    assert ptxas.sass_opcodes(_LISTING.replace("code for sm_90", "arch = sm_90")) == \
        {key: set(c) for key, c in counts.items()}


@pytest.mark.parametrize("mine, theirs, holds", [(3, 9, True), (9, 9, False), (12, 9, False), (0, 1, True)])
def test_the_count_rule_wants_fewer_matches_than_the_starter(mine, theirs, holds):
    rule = wbex.SassRule("fewer_than_starter", r"^BAR\.SYNC", "as many barriers")
    kernels = {"_Z1aIfEvv": Counter({"BAR.SYNC.DEFER_BLOCKING": mine, "SHFL.DOWN": 5}), "_Z1bv": Counter({"STG.E": 1})}
    starter = {"_Z1aIfEvv": Counter({"BAR.SYNC.DEFER_BLOCKING": theirs - 1}), "_Z1cv": Counter({"BAR.SYNC": 1})}
    found = wbsass._failure(rule, kernels, starter)
    assert (found is None) == holds
    if not holds:
        assert found[0] == f"{mine} in your kernels, {theirs} in the starter's" and found[1] == f"a<float>: {mine}"


def _static_rules(ex, path, name: str):
    """The SASS rules of `path` built as the checker builds it, judged on its machine code (no GPU
    run: nothing observed), and the build check."""
    built, check = wbex.submission.build(ex, path, name)
    assert check.status == "ok", check
    sub = wbex.submission.Submission(ex, built, sandboxed=False)
    try:
        return wbsass.check_sass(ex, sub, static_why="no GPU here"), sub, check
    finally:
        sub.close()


@pytest.mark.skipif(ptxas.cuobjdump() is None, reason="cuobjdump not found: the SASS rules cannot be read here")
def test_a_kernel_with_as_many_barriers_as_the_starter_fails_the_count_rule(tmp_path, cuda_buildable):
    ex = next(e for e in EXERCISES if any(r.kind == "fewer_than_starter" for r in e.sass))
    rule = next(r for r in ex.sass if r.kind == "fewer_than_starter")
    text = ex.solution.read_text()
    short = "stride > 32; stride >>= 1"           # the solution's tree stops at 64 values...
    assert text.count(short) == 1
    path = tmp_path / "full_tree.cu"                # ...this one goes down to 1, shuffles and all
    path.write_text(text.replace(short, "stride > 0; stride >>= 1"))
    bad, _, _ = _static_rules(ex, path, "full_tree")      # the SASS rules alone: no GPU checks
    assert bad.status == "FAIL" and bad.detail == rule.message, bad
    assert any(re.fullmatch(r"\s+(\d+) in your kernels, \1 in the starter's", ln) for ln in bad.lines), bad.lines
    passing, _, _ = _static_rules(ex, ex.solution, wbex.variant_name(ex, ex.solution))
    assert passing.status == "ok", passing


# A kernel with a loop in a loop: the outer one (0x10-0x70) copies to shared memory and reads it
# back after the inner one (0x30-0x50), which reads global memory; an LDS before both; a second
# branch back to the inner loop's header (a `continue`) at 0x58; the trap after EXIT, a branch to
# itself, is no loop.
_LOOPS = """
\tarch = sm_90
\t\tFunction : _Z4gemmIfEvv
        /*0000*/                   LDS R1, [R0] ;
        /*0010*/                   LDG.E R2, desc[UR4][R4.64] ;
        /*0020*/                   STS [R0], R2 ;
        /*0030*/                   LDG.E R3, desc[UR4][R6.64] ;
        /*0040*/                   FFMA R8, R3, R3, R8 ;
        /*0050*/               @P0 BRA 0x30 ;
        /*0058*/          @!UP1 BRA.U !UP0, 0x30 ;
        /*0060*/                   LDS R9, [R0+0x4] ;
        /*0070*/               @P1 BRA 0x10 ;
        /*0080*/                   EXIT ;
        /*0090*/                   BRA 0x90;
"""


def test_loops_are_found_from_the_branches_back():
    (key, code), = ptxas.sass_instructions(_LOOPS).items()
    assert key == ("sm_90", "_Z4gemmIfEvv") and [i.address for i in code][:3] == [0, 0x10, 0x20]
    assert [(i.opcode, i.target) for i in code if i.target is not None] == \
        [("BRA", 0x30), ("BRA.U", 0x30), ("BRA", 0x10), ("BRA", 0x90)]
    assert ptxas.loops(code) == [(0x10, 0x70), (0x30, 0x58)]     # one loop per header; no self-loop
    assert ptxas.inner_loops(code) == [(0x30, 0x58)]
    assert ptxas.sass_counts(_LOOPS)[key] == Counter(i.opcode for i in code)
    inner = wbsass.scoped({key: code}, "inner_loop")[key]
    assert inner == Counter({"LDG.E": 1, "FFMA": 1, "BRA": 1, "BRA.U": 1})
    assert wbsass.scoped({key: code})[key]["LDS"] == 2


def _one_arch(code, scope: str = "kernel") -> dict:
    """wbsass.scoped's counts, keyed by kernel alone (one architecture's), as _failure takes them."""
    return {k: c for (_, k), c in wbsass.scoped(code, scope).items()}


def test_an_lds_outside_the_inner_loop_does_not_hold_the_loop_rule():
    (key, code), = ptxas.sass_instructions(_LOOPS).items()
    rule = wbex.SassRule("require", "^LDS", "no LDS in the inner loop", scope="inner_loop")
    found = wbsass._failure(rule, _one_arch({key: code}, "inner_loop"), {}, {key[1]: ptxas.inner_loops(code)})
    assert found == ["gemm<float>: LDG.E in its inner loop (0x0030-0x0058)"]
    anywhere = wbex.SassRule("require", "^LDS", "no LDS")
    assert wbsass._failure(anywhere, _one_arch({key: code}), {}) is None      # in the kernel, yes
    # The same kernel with its inner loop reading shared memory holds the rule; one without
    # loops fails it, and says so.
    (key, moved), = ptxas.sass_instructions(_LOOPS.replace("LDG.E R3, desc[UR4][R6.64]", "LDS R3, [R0+0x8]")).items()
    assert wbsass._failure(rule, _one_arch({key: moved}, "inner_loop"), {}, {key[1]: ptxas.inner_loops(moved)}) is None
    flat = [i for i in code if i.target is None]
    assert wbsass._failure(rule, _one_arch({key: flat}, "inner_loop"), {}, {key[1]: []}) == ["gemm<float>: no loop"]
    assert "in an innermost loop" in wbsass._describe(rule) and "loop" not in wbsass._describe(anywhere)


@pytest.mark.skipif(ptxas.cuobjdump() is None, reason="cuobjdump not found: the SASS rules cannot be read here")
def test_the_inner_loop_rule_fails_the_starter_and_holds_on_the_solution(cuda_buildable):
    ex = next(e for e in EXERCISES if any(r.scope == "inner_loop" for r in e.sass))
    rule = next(r for r in ex.sass if r.scope == "inner_loop")
    bad, _, _ = _static_rules(ex, ex.starter, wbex.variant_name(ex, ex.starter))   # cached builds
    assert bad.status == "FAIL" and rule.message in bad.detail, bad
    evidence = [ln.strip() for ln in bad.lines if "inner loop" in ln and ln.startswith("    ")]
    assert evidence and all(re.fullmatch(r"[^:]+: LDG[.A-Z]* in its inner loops? \(0x[0-9a-f]+-0x[0-9a-f]+.*\)", ln)
                            for ln in evidence), bad.lines   # the starter's inner loops read global memory
    assert any(ln.strip() == f"hint: {rule.hint}" for ln in bad.lines)
    held, sub, _ = _static_rules(ex, ex.solution, wbex.variant_name(ex, ex.solution))
    assert held.status == "ok", held
    code = wbsass._code(str(sub.built.library))
    for key, c in code.items():        # every kernel, every architecture: an LDS in an innermost loop
        assert wbsass.scoped({key: c}, "inner_loop")[key]["LDS"] > 0, key


_HOPPER_LISTING = """
\tarch = sm_80
\t\tFunction : _Z4mineIfEvv
        /*0000*/                   BPT.TRAP 0x1 ;
\tarch = sm_90a
\t\tFunction : _Z4mineIfEvv
        /*0000*/                   UTMALDG.2D [UR8], [UR4] ;
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR6], R3 ;
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
"""


def _hopper_sass(monkeypatch, listing: str, source):
    """check_sass of exercise 07 on a made-up listing (no build): the library's code is `listing`."""
    from types import SimpleNamespace

    code = ptxas.sass_instructions(listing)
    monkeypatch.setattr(wbsass, "_code", lambda library: code)
    monkeypatch.setattr(ptxas, "cuobjdump", lambda: "cuobjdump")
    sub = SimpleNamespace(library="lib.so", built=SimpleNamespace(source=source, device="cuda"), unchanged=lambda: True)
    return wbsass.check_sass(wbex.get(7), sub)


def test_the_sass_rules_of_an_sm90a_source_judge_its_sm90a_code_alone(monkeypatch, tmp_path):
    ex = wbex.get(7)
    # Its sm_80 code is a trap that never runs (the launcher declines off sm_90): not judged.
    held = _hopper_sass(monkeypatch, _HOPPER_LISTING, ex.solution)
    assert (held.status, held.detail) == ("ok", "2 rules hold on sm_90a: the machine code as built"), held
    # The same code from a source without the marker is judged on every architecture it has.
    plain = tmp_path / "plain.cu"
    plain.write_text(ex.solution.read_text().replace(toolchain.SM90A_MARKER, "no marker"))
    bad = _hopper_sass(monkeypatch, _HOPPER_LISTING, plain)
    assert bad.status == "FAIL" and "(SASS for sm_80; wanted an instruction matching ^UTMALDG)" in bad.lines[0], bad
    # A build with no sm_90a code (an arch list without 9.0) has nothing to judge: skipped, saying why.
    only_80 = _HOPPER_LISTING[:_HOPPER_LISTING.index("\tarch = sm_90a")]
    skipped = _hopper_sass(monkeypatch, only_80, ex.solution)
    assert skipped.status == "skipped" and skipped.detail.startswith("no sm_90a code in this build (built for sm_80)")


@pytest.mark.skipif(ptxas.cuobjdump() is None, reason="cuobjdump not found: the SASS rules cannot be read here")
def test_the_tma_rules_fail_the_starter_and_hold_on_the_solution(cuda_buildable):
    """Exercise 07's starter copies its tiles with the threads (LDG, STS) and waits at barriers
    alone; its solution loads by TMA on mbarriers. Judged on the sm_90a code the marker builds."""
    ex = wbex.get(7)
    bad, _, _ = _static_rules(ex, ex.starter, wbex.variant_name(ex, ex.starter))   # cached builds
    assert bad.status == "FAIL" and bad.detail == "; ".join(r.message for r in ex.sass), bad
    assert all("(SASS for sm_90a;" in ln for ln in bad.lines if not ln.startswith((" ", "judged on"))), bad.lines
    evidence = [ln.strip() for ln in bad.lines if ln.startswith("    ") and not ln.strip().startswith("hint:")]
    assert evidence and all(ln.startswith("sync_load_kernel<") and "LDG.E.128" in ln for ln in evidence), bad.lines
    held, sub, built = _static_rules(ex, ex.solution, wbex.variant_name(ex, ex.solution))
    assert "no spills" in built.detail, built
    assert held.detail == "2 rules hold on sm_90a: the machine code as built, not what ran (no GPU here)"
    own = {k: c for (arch, k), c in wbsass.scoped(wbsass._code(str(sub.built.library))).items()
           if arch == "sm_90a" and "tma_pipeline_kernel" in k}
    assert len(own) == 6, list(own)     # 2 dtypes x 3 transpose cases, each loading by TMA, on mbarriers
    for k, c in own.items():
        assert any(op.startswith("UTMALDG.2D") for op in c) and any(op.startswith("HGMMA.64") for op in c), k
        assert not any(op.startswith(("LDG", "STS")) for op in c), k   # no thread touches a tile


# ----------------------------------------------------------------------------- starters and solutions (CPU)

@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_starter_compiles_and_fails_for_its_stated_reason(ex, cuda_buildable):
    _needs_cuobjdump(ex)
    if ex.starter_fails_at in GPU_CHECKS and not HAS_GPU:
        pytest.skip(f"{ex.slug}'s starter fails at {ex.starter_fails_at}, a GPU check")
    report = wbex.check_exercise(ex.number, seed=1, speed=False)
    assert report.path.endswith(f"{ex.slug}/starter.cu")
    assert report.check("build").status == "ok", report.summary()
    bad = report.first_failure
    assert bad is not None and bad.name == ex.starter_fails_at, report.summary()
    assert ex.starter_reason in bad.detail, report.summary()
    assert not report.ok
    assert report.verdict() == f"FAIL: {bad.name} — {bad.detail}"
    assert report.summary().endswith(report.verdict())


@pytest.mark.skipif(HAS_GPU, reason="with a GPU, test_solution_passes_everything_on_the_gpu checks the solutions")
@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_solution_passes_what_this_machine_can_run(ex, cuda_buildable):
    _needs_cuobjdump(ex)
    report = wbex.check_exercise(ex.number, ex.solution, seed=1)
    assert report.ok and not report.complete, report.summary()
    status = {c.name: c for c in report.checks}
    assert [c.name for c in report.checks] == list(ex.checks)
    assert status["build"].status == "ok" and "no spills" in status["build"].detail, status["build"]
    assert status["declared dtypes"].status == "ok" and status["SASS rules"].status == "ok"
    for name in set(GPU_CHECKS) & set(ex.checks):
        assert (status[name].status, status[name].detail) == ("skipped", wbex.NEEDS_GPU)
    assert report.verdict() == cpu_pass(ex)
    d = json.loads(json.dumps(report.to_dict()))
    assert d["ok"] is True and d["first_failure"] is None and d["seed"] == 1


def test_a_compile_error_fails_at_build_with_file_line_and_message(tmp_path, cuda_buildable):
    text = wbex.get(2).starter.read_text()
    good = "const int64_t n = a->rows * a->cols;\n  // TODO 2"
    assert text.count(good) == 1
    path = tmp_path / "broken.cu"
    path.write_text(text.replace(good, "const int64_t n = a->rows * a->colz;\n  // TODO 2"))
    line = text[:text.index(good)].count("\n") + 1
    report = wbex.check_exercise(2, path, seed=1)
    build = report.first_failure
    assert build is not None and build.name == "build", report.summary()
    assert f"broken.cu:{line}" in build.detail and "colz" in build.detail, build.detail
    assert any(ln.startswith("full compiler log: ") for ln in build.lines)
    assert all(c.status == "skipped" and c.detail == "the build failed" for c in report.checks[1:])
    assert report.verdict().startswith("FAIL: build — ") and "colz" in report.summary()


def test_a_missing_or_non_cuda_path_is_refused(tmp_path):
    with pytest.raises(ValueError, match="path: no such file"):
        wbex.check_exercise(2, tmp_path / "nope.cu")
    other = tmp_path / "kernel.py"
    other.write_text("")
    with pytest.raises(ValueError, match=r"must be a CUDA source file ending in \.cu"):
        wbex.check_exercise(2, other)


# ----------------------------------------------------------------------------- the GPU half, with stand-ins

@pytest.fixture
def pretend_gpu(monkeypatch, cuda_buildable):
    """Run check_exercise's GPU steps on this machine: the GPU is 'there' (the library really loads
    in its runner), nothing is observed (the SASS rules read the machine code), and the check
    matrix, gradcheck and the judge's clock are stand-ins the test sets (attributes of the returned
    namespace: check and gradcheck take (op, kernel, **kwargs), race (op, sides, direction, dtype,
    shape) returns a judge.clock.Race)."""
    from workbench.judge import clock, ncu_watch
    from workbench.measure import gradients

    class Fakes:
        check = None
        gradcheck = None
        race = None

    fakes = Fakes()
    monkeypatch.setattr(toolchain, "gpu_available", lambda: True)
    monkeypatch.setattr(ncu_watch, "unavailable", lambda gpu: "pretending")
    monkeypatch.setattr(wbex.submission.Submission, "kernel", lambda self, dtypes: _Named(self.built.name))
    monkeypatch.setattr(correctness, "check", lambda op, kernel, **k: fakes.check(op, kernel, **k))
    monkeypatch.setattr(gradients, "gradcheck", lambda op, kernel, **k: fakes.gradcheck(op, kernel, **k))
    monkeypatch.setattr(clock, "race", lambda *a, **k: fakes.race(*a, **k))
    monkeypatch.setattr(wbex.submission, "reference", lambda ex, python=False: _Named(ex.reference))
    monkeypatch.setattr(wbex.speedcheck, "bench_rows", _NoLimits)
    monkeypatch.setattr(wbex.speedcheck.conditions, "unavailable", lambda: "pretending")
    import torch
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "a pretend GPU")
    fakes.gradcheck = lambda op, kernel, **k: correctness.Report(
        op, kernel.name, "cuda", [correctness.Case("grad x", (3, 5), "float32", "contiguous", True)],
        method="gradients vs the float64 reference")
    return fakes


class _Named:
    def __init__(self, name):
        self.name = name
        self.module = self

    def close(self):
        pass


class _NoLimits:
    """bench_rows with a device that can do anything, except where a test says otherwise."""
    reason = ""

    class Limits:
        def __init__(self, *a, **k):
            pass

        def judge(self, row):
            return _NoLimits.reason


def _passing_check(op, kernel, **kwargs):
    return correctness.Report(op, kernel.name, "cuda", [correctness.Case("forward", (3, 5), "float32", "contiguous", True)])


def _race(mine_ms: float, ref_ms: float, *, wrong: str = "", reference_wrong: str = ""):
    from workbench.judge import clock

    def race(op, sides, direction, dtype, shape, **k):
        out = clock.Race(op, direction, dtype, tuple(shape), calls=24, rounds=3, protocol_ms=0.1, batch_ms=10.0)
        names = list(sides)
        for name, ms, bad in ((names[0], ref_ms, reference_wrong), (names[1], mine_ms, wrong)):
            out.sides[name] = clock.Side(name, [ms] * 3, bad)
        return out
    return race


def test_a_correctness_failure_names_the_case(pretend_gpu):
    seen = {}

    def check(op, kernel, **kwargs):
        seen.update(kwargs)
        return correctness.Report(op, kernel.name, "cuda", [
            correctness.Case("forward", (37, 131), "float32", "offset", True),
            correctness.Case("backward dbias", (37, 131), "float32", "offset", False, 0.31, 2.5, (130,),
                             "3 elements beyond atol"),
            correctness.Case("forward", (5, 7), "float32", "contiguous", False, 0.2, 1.0, (4, 6))])

    pretend_gpu.check = check
    report = wbex.check_exercise(2, wbex.get(2).solution, seed=42)
    assert seen["shapes"] == wbex.random_sizes(42, BIAS_GELU) and seen["seed"] == 42
    assert seen["dtypes"] == ["float32"] and seen["backward"] is True
    assert seen["layouts"] == ("contiguous", "strided", "offset")  # a transposed view reaches the kernel as a copy
    bad = report.first_failure
    assert bad.name == "correctness", report.summary()
    assert bad.detail == "backward dbias, 37x131 float32 offset; 2 of 3 cases failed"
    text = report.summary()
    for expected in ("shape   37x131", "dtype   float32", "layout  offset: views that start one element",
                     "relative 3.10e-01 (allowed 1e-05)", "at index [130]",
                     "same shapes and inputs again: python -m workbench exercise check 2 ", "--seed 42"):
        assert expected in text, text
    assert report.check("speed").detail == "fix correctness first"


def test_a_crash_is_its_case_failing_with_the_cuda_error(pretend_gpu):
    """A kernel that faults takes its runner down, never the judge: that case fails with the CUDA
    error (the runner's report of it), the next cases run in a fresh runner, the report says how to
    find the faulting access."""
    pretend_gpu.check = lambda op, kernel, **k: correctness.Report(op, kernel.name, "cuda", [
        correctness.Case("forward", (203, 634), "float32", "contiguous", True),
        correctness.Case("forward", (192, 7), "float32", "offset", False,
                         note="raised DeviceLost: ex02_solution: call: the child process was killed by signal 9 "
                              "(CUDA error: misaligned address)")])
    report = wbex.check_exercise(2, wbex.get(2).solution, seed=1)
    bad = report.first_failure
    assert (bad.name, bad.detail) == ("correctness", "forward, 192x7 float32 offset; crashed"), report.summary()
    assert any("misaligned address" in ln for ln in bad.lines), bad.lines
    assert any("python -m workbench sanitize bias_gelu ex02_solution --source" in ln for ln in bad.lines)
    assert report.check("gradcheck").status == "ok"     # the next checks still ran; the report printed


def test_a_reduction_exercise_checks_the_reduction_draw(pretend_gpu):
    ex = next(e for e in EXERCISES if e.sizes.kind == "reduction")
    seen = {}

    def check(op, kernel, **kwargs):
        seen.update(kwargs)
        return _passing_check(op, kernel)

    pretend_gpu.check = check
    report = wbex.check_exercise(ex.number, ex.solution, seed=42, speed=False)
    assert seen["shapes"] == wbex.reduction_sizes(42, registry.spec(ex.op), ex.sizes.moduli)
    assert seen["dtypes"] == list(ex.dtypes) and report.shapes == wbex.reduction_sizes(42, registry.spec(ex.op))
    assert report.check("correctness").status == "ok", report.summary()


def test_a_tiled_exercise_checks_the_tiled_draw(pretend_gpu):
    ex = next(e for e in EXERCISES if e.sizes.kind == "tiled")
    seen = {}

    def check(op, kernel, **kwargs):
        seen.update(kwargs)
        return _passing_check(op, kernel)

    pretend_gpu.check = check
    report = wbex.check_exercise(ex.number, ex.solution, seed=42, speed=False)
    assert seen["shapes"] == wbex.tiled_sizes(42, registry.spec(ex.op), ex.sizes.moduli)
    assert report.shapes == wbex.tiled_sizes(42, registry.spec(ex.op)) and report.check("correctness").status == "ok"


def test_an_sm90a_exercise_on_another_gpu_says_why_its_gpu_checks_are_skipped(pretend_gpu, monkeypatch):
    """Exercise 07's file needs compute capability 9.0 (its launchers decline elsewhere): on another
    GPU its correctness, gradcheck and speed are skipped with the reason, not failed case by case
    (pretend_gpu's stand-ins would fail the test if they were called)."""
    ex = wbex.get(7)
    sm80 = "needs an sm_90a GPU (Hopper); this one is sm_80"
    monkeypatch.setattr(toolchain, "unmet_arch", lambda source, device: sm80 if toolchain.needs_sm90a(source) else None)
    report = wbex.check_exercise(7, ex.solution, seed=1)
    assert [(c.name, c.status, c.detail) for c in report.checks[-3:]] == [
        (name, "skipped", f"this file {sm80}") for name in ("correctness", "gradcheck", "speed")], report.summary()
    assert report.check("SASS rules").status == "ok" and report.ok and not report.complete
    assert report.verdict().startswith(f"PASS (skipped: correctness: this file {sm80}")


def test_speed_is_the_reference_median_over_yours(pretend_gpu):
    pretend_gpu.check = _passing_check
    pretend_gpu.race = _race(1.0, 0.8)
    slow = wbex.check_exercise(2, wbex.get(2).solution, seed=1)
    assert (slow.first_failure.name, slow.first_failure.detail) == ("speed", "0.80x vec4 on fwd float32 8192x8192, target 0.85x")
    assert "yours 1.0000 ms, vec4 0.8000 ms a call" in slow.summary() and slow.failure_class == "speed-target"
    hint = next(ln for ln in slow.first_failure.lines if "python -m workbench profile" in ln)  # why it is slower
    assert hint.endswith(f"python -m workbench profile bias_gelu ex02_solution vec4 --source "
                         f"{wbex.submission.shown(wbex.get(2).solution)} --shape 8192x8192 --dtype float32 --direction fwd")
    pretend_gpu.race = _race(0.9, 0.8)
    fast = wbex.check_exercise(2, wbex.get(2).solution, seed=1)
    assert fast.complete and fast.verdict() == "PASS", fast.summary()
    assert "0.89x vec4" in fast.summary() and "on the judge's clock: 3 rounds of 24 calls" in fast.summary()
    assert fast.check("speed").measured["ratio"] == pytest.approx(0.8889, abs=1e-4)
    assert wbex.check_exercise(2, wbex.get(2).solution, seed=1, speed=False).check("speed").status == "skipped"


def test_speed_fails_on_a_wrong_or_impossible_side_whatever_the_ratio(pretend_gpu):
    pretend_gpu.check = _passing_check
    wrong = "timed call 7 of 24: y wrong at 8192x8192 float32: largest |difference| 1.5 at [6144, 0]"
    pretend_gpu.race = _race(0.1, 0.4, wrong=wrong)
    check = wbex.check_exercise(2, wbex.get(2).solution, seed=1).check("speed")
    assert check.status == "FAIL" and check.detail == f"yours, fwd float32 8192x8192: the timed output is wrong: {wrong}"
    assert any("4.00x vec4" in ln for ln in check.lines)  # the timings are shown, and do not count
    pretend_gpu.race = _race(0.4, 0.4, reference_wrong="timed call 1 of 24: y wrong")
    check = wbex.check_exercise(2, wbex.get(2).solution, seed=1).check("speed")
    assert check.status == "FAIL" and check.detail.startswith("vec4, fwd float32 8192x8192: the timed output is wrong")
    _NoLimits.reason = "2512 GB/s is 1.31x the device's copy ceiling"
    try:
        pretend_gpu.race = _race(0.1, 0.4)
        report = wbex.check_exercise(2, wbex.get(2).solution, seed=1)
    finally:
        _NoLimits.reason = ""
    check = report.check("speed")
    assert check.status == "FAIL" and check.detail == "yours, fwd float32 8192x8192: impossible: 2512 GB/s is 1.31x the device's copy ceiling"
    assert report.failure_class == "speed-impossible"


# ----------------------------------------------------------------------------- command line

def test_cli_list(run_cli):
    proc = run_cli("exercise", "list")
    assert proc.returncode == 0, describe(proc)
    for ex in EXERCISES:
        assert ex.name in proc.stdout and ex.title in proc.stdout and ex.target_text() in proc.stdout


def test_cli_check_a_solution(run_cli, cuda_buildable):
    ex = wbex.get(2)
    _needs_cuobjdump(ex)
    proc = run_cli("exercise", "check", "2", str(ex.solution), "--seed", "5", "--no-speed")
    assert proc.returncode == 0, describe(proc)
    assert re.search(r"^  build \.+ ok \(", proc.stdout, re.MULTILINE) and "(seed 5)" in proc.stdout
    assert "\nPASS" in proc.stdout, proc.stdout


def test_cli_check_a_starter_fails_with_status_1(run_cli, cuda_buildable):
    ex = wbex.get(3)
    _needs_cuobjdump(ex)
    proc = run_cli("exercise", "check", "03_fused_backward", "--no-speed")
    assert proc.returncode == 1, describe(proc)
    assert "FAIL: SASS rules — dbias uses global atomics" in proc.stdout


@pytest.mark.parametrize("argv, message", [
    (["exercise", "check", "9"], "exercise must be one of: 1 (01_fp16_support), 2 (02_vec4_loads), "
                                 "3 (03_fused_backward), 4 (04_warp_shuffle)"),
    (["exercise", "check", "2", "no/such/file.cu"], "path: no such file: 'no/such/file.cu'"),
    (["exercise", "check", "2", "README.md"], "path must be a CUDA source file ending in .cu"),
])
def test_cli_bad_usage_exits_2(run_cli, argv, message):
    proc = run_cli(*argv)
    assert proc.returncode == 2 and message in proc.stderr, describe(proc)


# ----------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_solution_passes_everything_on_the_gpu(ex):
    report = wbex.check_exercise(ex.number, ex.solution)
    assert report.complete and report.verdict() == "PASS", report.summary()
    print(report.summary())


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_starter_fails_for_its_stated_reason_on_the_gpu(ex):
    _needs_cuobjdump(ex)
    report = wbex.check_exercise(ex.number, speed=False)
    bad = report.first_failure
    assert bad is not None and bad.name == ex.starter_fails_at and ex.starter_reason in bad.detail, report.summary()
    print(report.summary())


@pytest.mark.gpu
@pytest.mark.slow
def test_a_planted_bug_in_the_tail_path_fails_correctness_with_the_case(tmp_path):
    text = wbex.get(2).solution.read_text()
    tail = "y[i] = wb_gelu_tanh(x[i] + bias[i % cols]);"
    assert text.count(tail) == 1
    path = tmp_path / "tail_bug.cu"
    path.write_text(text.replace(tail, "y[i] = wb_gelu_tanh(x[i] + bias[(i + 1) % cols]);"))
    report = wbex.check_exercise(2, path, seed=7, speed=False)
    bad = report.first_failure
    assert bad is not None and bad.name == "correctness", report.summary()
    case = re.match(r"forward, (\d+(?:x\d+)*) float32 (\w+);", bad.detail)
    assert case, bad.detail
    shape = tuple(int(d) for d in case.group(1).split("x"))
    assert shape[-1] % 4 != 0 or case.group(2) == "offset"      # only the tail path is broken
    assert any("at index [" in ln for ln in bad.lines) and any("dtype   float32" in ln for ln in bad.lines)
    assert "--seed 7" in report.summary()
