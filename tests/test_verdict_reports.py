"""Issue 23, item 7: a wrong gradient, a declared dtype the launcher refuses, or a kernel call that
raises is a failed case with its numbers (or its message), never a crash; a row prints only what
was measured. On the CPU, with edited copies of elementwise_mul's cpu.cpp."""
from __future__ import annotations

import json
import math

import pytest

from conftest import REPO_ROOT, describe

CPU_SOURCE = (REPO_ROOT / "kernels" / "elementwise_mul" / "cpu.cpp").read_text()
RIGHT_DB = "db[i] = wb_from_acc<T>(g * wb_to_acc(a[i]));"
ALL_DTYPES = "WB_F32 | WB_F64 | WB_F16 | WB_BF16"
SHAPES = [(7,), (3, 5)]


def _edit(old: str, new: str, text: str = CPU_SOURCE) -> str:
    assert text.count(old) >= 1, old
    return text.replace(old, new)


# d(a*b)/db is a; this one returns b.
WRONG_GRAD = _edit(RIGHT_DB, "db[i] = wb_from_acc<T>(g * wb_to_acc(b[i]));")
# Declares float32 and float64; its dispatch has float32 only.
DECLARES_F64 = _edit(f"constexpr unsigned kDtypes = {ALL_DTYPES};", "constexpr unsigned kDtypes = WB_F32;",
                     _edit(f"WB_EXPORT_VARIANT(elementwise_mul, WB_DEVICE_CPU, {ALL_DTYPES},",
                           "WB_EXPORT_VARIANT(elementwise_mul, WB_DEVICE_CPU, WB_F32 | WB_F64,"))
# Its backward refuses more than 4 elements with another status.
PICKY_BACKWARD = _edit("int backward(const WbElementwiseMulBackward* p, const WbLaunch* l) {\n",
                       "int backward(const WbElementwiseMulBackward* p, const WbLaunch* l) {\n"
                       "  if (p->n > 4) return WB_ERR_ARGUMENT;\n")


@pytest.fixture(scope="module")
def wrong_grad(wb):
    return wb.load_inline("elementwise_mul", WRONG_GRAD, "wrong_db")


@pytest.fixture(scope="module")
def declares_f64(wb):
    return wb.load_inline("elementwise_mul", DECLARES_F64, "declares_f64")


def test_wrong_gradient_is_a_failed_gradcheck_with_its_numbers(wb, wrong_grad):
    report = wb.gradcheck("elementwise_mul", wrong_grad, seed=0, shapes=SHAPES)  # no exception
    assert "torch.autograd.gradcheck in float64" in report.method and "atol 1e-06" in report.method
    assert not report.ok and len(report.failures) == len(SHAPES), report.table()
    for case, shape in zip(report.cases, SHAPES):
        assert case.what == "gradcheck" and case.shape == shape and case.dtype == "float64"
        # The numbers: the largest |analytical - numerical| Jacobian entry, where, and the tolerance.
        assert case.max_abs_err > 1e-3 and math.isfinite(case.rel_err), case
        assert case.where is not None and len(case.where) == len(shape), case
        assert "analytical" in case.note and "numerical" in case.note, case.note
        assert f"/ d b{list(case.where)}" in case.note, case.note  # the gradient wrt b is the wrong one
        assert "tolerance" in case.note and "atol 1e-06 + rtol 0.0001" in case.note, case.note
        assert "Jacobian mismatch" in case.note, case.note  # and what gradcheck itself said
        line = case.line()
        assert line.startswith("FAIL gradcheck") and "max|d|" in line and "worst at" in line, line


def test_wrong_gradient_cli_exits_1_with_the_numbers(run_cli, tmp_path, wrong_grad):
    path = tmp_path / "wrong_db.cpp"
    path.write_text(WRONG_GRAD)
    proc = run_cli("gradcheck", "elementwise_mul", str(path), "--seed", "0", "--json")
    assert proc.returncode == 1, describe(proc)
    assert "Traceback" not in proc.stderr, describe(proc)
    assert "elementwise_mul/wrong_db on cpu: 0/3 cases passed" in proc.stdout, describe(proc)
    fails = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAIL gradcheck")]
    assert len(fails) == 3 and all("max|d|" in ln and "analytical" in ln and "tolerance" in ln for ln in fails), \
        describe(proc)
    summary = json.loads(proc.stdout[proc.stdout.index("\n[") + 1:])
    assert summary[0]["variant"] == str(path) and summary[0]["ok"] is False and len(summary[0]["failures"]) == 3


def test_declared_dtype_the_launcher_refuses_is_a_failed_case(wb, declares_f64):
    assert declares_f64.dtypes == ("float32", "float64")
    report = wb.check("elementwise_mul", declares_f64, seed=0, shapes=SHAPES)  # no exception
    assert not report.ok
    [bad] = report.failures  # one case says it; the rest of float64 is skipped, not failed again
    assert bad.dtype == "float64" and bad.what == "forward", bad
    assert bad.note.startswith("declared float64 but the launcher refused it: "), bad.note
    assert "dtype not supported by this variant (status -1)" in bad.note, bad.note
    assert not bad.measured and "rel " not in bad.line() and "max|d|" not in bad.line(), bad.line()
    assert any(s.startswith("float64: the rest of its cases") for s in report.skipped), report.skipped
    f32 = [c for c in report.cases if c.dtype == "float32"]
    assert f32 and all(c.passed for c in f32), report.table()  # the dtype it has is still checked
    assert "declared float64 but the launcher refused it" in report.summary()

    grad = wb.gradcheck("elementwise_mul", declares_f64, seed=0, shapes=SHAPES[:1])
    [case] = grad.cases
    assert not case.passed and case.note.startswith("declared float64 but the launcher refused it"), case


def test_declared_dtype_refused_cli(run_cli, tmp_path, declares_f64):
    path = tmp_path / "declares_f64.cpp"
    path.write_text(DECLARES_F64)
    proc = run_cli("check", "elementwise_mul", str(path), "--seed", "0")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, describe(proc)
    assert "FAIL forward" in proc.stdout and "declared float64 but the launcher refused it" in proc.stdout, \
        describe(proc)


def test_a_kernel_call_that_raises_is_a_failed_case_naming_it(wb):
    k = wb.load_inline("elementwise_mul", PICKY_BACKWARD, "picky_backward")
    report = wb.check("elementwise_mul", k, dtypes=["float32"], seed=0, shapes=[(3,), (9,)],
                      layouts=("contiguous",))
    by = {(c.what, c.shape): c for c in report.cases}
    assert by[("forward", (3,))].passed and by[("backward da", (3,))].passed and by[("determinism", (3,))].passed
    assert by[("forward", (9,))].passed, report.table()
    bad = by[("backward", (9,))]
    assert not bad.passed and "raised RuntimeError" in bad.note and "invalid argument (status -2)" in bad.note, bad
    assert ("determinism", (9,)) not in by  # the case stopped where it raised
    assert report.failures == [bad]


def test_rows_print_only_what_was_measured(wb):
    from workbench.measure.correctness import Case, Report

    k = wb.load("elementwise_mul", "cpu")
    grad = wb.gradcheck("elementwise_mul", k, seed=0, shapes=SHAPES)
    assert grad.ok, grad.table()
    for c in grad.cases:  # a passing gradcheck measured no difference: it prints none
        assert not c.measured and "rel " not in c.line() and "max|d|" not in c.line(), c.line()
        assert "0.00e+00" not in c.line()
    report = wb.check("elementwise_mul", k, dtypes=["float64"], seed=0, shapes=[(5,)], layouts=("contiguous",))
    assert report.ok, report.table()
    for c in report.cases:
        if c.what == "determinism":  # bits compared, no difference measured
            assert "rel " not in c.line() and "max|d|" not in c.line(), c.line()
        else:
            assert c.measured and "rel " in c.line() and "max|d|" in c.line(), c.line()
    # What was not measured survives a trip through JSON (the exercise checker's child) as not measured.
    back = Report.from_dict(json.loads(json.dumps(report.to_dict())))
    assert [c.line() for c in back.cases] == [c.line() for c in report.cases]
    assert Case("determinism", (4,), "float32", "contiguous", True).line().split() == \
        ["ok", "determinism", "4", "float32", "contiguous"]
