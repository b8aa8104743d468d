"""The notebooks run top to bottom on this machine (the CPU path in CI) through nbclient, via
scripts/run_notebooks.py, on copies; and the committed files carry outputs from a GPU run."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import HAS_GPU, REPO_ROOT, describe

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat (pip install nbformat)")
pytest.importorskip("nbclient", reason="the notebook tests need nbclient (pip install nbclient)")
pytest.importorskip("ipykernel", reason="the notebook tests need a python3 kernel (pip install ipykernel)")

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
NAMES = ["01_quickstart.ipynb", "02_edit_loop.ipynb", "03_your_own_op.ipynb", "04_reduction_ladder.ipynb",
         "05_rmsnorm_three_ways.ipynb", "06_matmul_ladder.ipynb", "07_why_is_it_slow.ipynb",
         "08_bring_your_own.ipynb"]
CPU_LABEL = "No GPU visible: CPU path"
# Notebooks committed with their CPU path's outputs (written where no GPU was to be had) until the GPU
# script's executed copy replaces them (STEPS=notebooks bash scripts/gpu_run.sh).
CPU_OUTPUTS_UNTIL_GPU_RUN: set[str] = set()  # none now: every notebook was saved from its GPU run
GPU_LABEL = "GPU path: "
# What the deliberate typo in 02_edit_loop's compile-error cells makes each compiler say.
TYPO = "wb_gelu_tanh_grd"
COMPILER_SAYS = ("was not declared in this scope", "is undefined")
# What the ladder notebooks' CPU paths (04_reduction_ladder, 06_matmul_ladder) say in place of the CUDA rungs' checks.
CPU_RUNG_NOTE = "The CUDA rungs need a GPU"


def _text(output) -> str:
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return "\n".join(output.traceback)
    return str(output.get("data", {}).get("text/plain", ""))


def _cell_text(cell) -> str:
    return "".join(_text(o) for o in cell.get("outputs", []))


def _tags(cell) -> list[str]:
    return cell.metadata.get("tags", [])


def _results_snapshot() -> dict:
    d = REPO_ROOT / "results"
    return {str(p): p.stat().st_mtime_ns for p in d.rglob("*") if p.is_file()} if d.exists() else {}


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> dict:
    """Every notebook runs once, by scripts/run_notebooks.py, into a temporary folder."""
    out = tmp_path_factory.mktemp("notebooks")
    before = _results_snapshot()
    proc = subprocess.run([sys.executable, "scripts/run_notebooks.py", "--out", str(out), "--timeout", "300",
                           *[str(NOTEBOOKS_DIR / n) for n in NAMES]],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200, check=False)
    assert proc.returncode == 0, describe(proc)
    assert _results_snapshot() == before, "running the notebooks wrote into results/"
    return {n: nbformat.read(out / n, as_version=4) for n in NAMES}


def test_the_notebooks_are_there_and_valid():
    found = sorted(p.name for p in NOTEBOOKS_DIR.glob("*.ipynb"))
    assert found == NAMES, found
    for name in NAMES:
        nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.name == "python3"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_runs_top_to_bottom_here_and_says_which_path(executed, name):
    nb = executed[name]
    rec = nb.metadata.workbench.execution
    assert rec.ok and rec.path == ("gpu" if HAS_GPU else "cpu"), rec
    setup = _cell_text(next(c for c in nb.cells if c.cell_type == "code"))
    assert setup.startswith(GPU_LABEL if HAS_GPU else CPU_LABEL), setup
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert cell.execution_count is not None, f"cell {i} did not run"
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors or "raises-exception" in _tags(cell), f"cell {i}: {_cell_text(cell)}"
    # Tables and an inline plot.
    assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    bench = next(c for c in nb.cells if c.cell_type == "code" and "wb.bench(" in c.source)
    assert "eager" in _cell_text(bench) and "compile" in _cell_text(bench), _cell_text(bench)


@pytest.mark.slow
def test_edit_loop_shows_the_compile_error_and_keeps_the_last_good_build(executed):
    cells = executed["02_edit_loop.ipynb"].cells
    failing = [i for i, c in enumerate(cells) if "raises-exception" in _tags(c)]
    assert len(failing) == 2, failing
    raised = [i for i in failing if any(o.output_type == "error" for o in cells[i].outputs)]
    assert len(raised) == 1, [_cell_text(cells[i]) for i in failing]  # the other twin is skipped here
    error = next(o for o in cells[raised[0]].outputs if o.output_type == "error")
    shown = _cell_text(cells[raised[0]])
    assert error.ename == "BuildError", error
    assert TYPO in shown and any(s in shown for s in COMPILER_SAYS), shown
    assert re.search(r"<inline bias_gelu/mine>:\d+:", shown) and "full log: " in shown, shown
    assert "last good build still available: bias_gelu/mine@" in shown, shown
    skipped = next(i for i in failing if i not in raised)
    skip_line = _cell_text(cells[skipped])
    assert skip_line.startswith("skipped %%workbench bias_gelu mine: --only "), skip_line
    # After the failure, `mine` is the last good build and matches the reference.
    after = next(c for c in cells[max(failing) + 1:] if c.cell_type == "code")
    m = re.search(r"max \|error\| = (\S+)", _cell_text(after))
    assert m and float(m.group(1)) < 1e-5, _cell_text(after)


@pytest.mark.slow
def test_edit_loop_tells_the_story(executed):
    text = "\n".join(_cell_text(c) for c in executed["02_edit_loop.ipynb"].cells if c.cell_type == "code")
    assert "is now stale: handles to it still run it" in text
    assert "first.stale = True, mine.stale = False" in text
    assert re.search(r"bias_gelu/mine on cpu\S*: (\d+)/\1 cases passed", text) or HAS_GPU, text
    assert "torch.autograd.gradcheck in float64" in text


@pytest.mark.slow
def test_rmsnorm_notebook_answers_the_lab(executed):
    """Each way compiles fullgraph with no graph break, passes the edge sizes with zero rows and a
    repeatable dweight, and the lab's ratios are printed."""
    text = "\n".join(_cell_text(c) for c in executed["05_rmsnorm_three_ways.ipynb"].cells if c.cell_type == "code")
    ways = 4 if HAS_GPU else 2  # pytorch, triton, scalar, vectorized; or pytorch and cpu
    assert len(re.findall(r"graph breaks 0, fullgraph compile matches eager", text)) == ways, text
    assert len(re.findall(r"row of zeros -> zeros; dweight twice: same bits", text)) == ways, text
    assert re.search(r"fwd\+bwd +best C\+\+ \(\w+\) .* of it; torch.compile", text), text


@pytest.mark.slow
def test_bring_your_own_notebook_shows_what_the_matrix_finds(executed):
    """The course's extension, served as a variant and as the course's autograd.Function: the probe
    names its one dtype, the matrix fails it on strided and transposed views only, gradcheck and the
    benchmark take it, and the int index's wrap past 2^31 elements is shown."""
    text = "\n".join(_cell_text(c) for c in executed["08_bring_your_own.ipynb"].cells if c.cell_type == "code")
    assert "compiling it includes torch/extension.h" in text, text
    assert "ran float32; float64: RuntimeError: expected scalar type Float but found Double" in text, text
    assert "autograd cannot see through it" in text and "gradients flow through it by autograd" in text, text
    counts = dict((m.group(1), (int(m.group(2)), int(m.group(3))))
                  for m in re.finditer(r"^  (\w+) +(\d+)/(\d+) +passed", text, re.M))
    assert set(counts) == {"contiguous", "strided", "offset", "transposed"}, text
    assert counts["offset"][0] == counts["offset"][1], counts
    assert counts["strided"][0] < counts["strided"][1] and counts["transposed"][0] < counts["transposed"][1], counts
    assert re.search(r"bias_gelu/course on \S+: (\d+)/\1 cases passed \(gradients vs the float64 reference", text), text
    assert "as a 32-bit int: -2,147,450,880" in text, text
    assert re.search(r"^fwd +float32 +\S+ +course +[\d.]+ ", text, re.M), text


def test_runner_fails_loudly_and_never_writes_in_place_by_default(tmp_path):
    """An error in an untagged cell: exit 1, the cell and its error on stderr, a partial copy with
    its record; a cell tagged raises-exception may raise. Without --out or --in-place: refused."""
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb.cells = [new_code_cell("raise KeyError('allowed here')", metadata={"tags": ["raises-exception"]}),
                new_code_cell("print('No GPU visible: planted')"),
                new_code_cell("raise ValueError('planted failure')"),
                new_code_cell("print('never runs')")]
    src = tmp_path / "planted.ipynb"
    nbformat.write(nb, src)
    runner = [sys.executable, "scripts/run_notebooks.py"]
    refused = subprocess.run([*runner, str(src)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                             check=False)
    assert refused.returncode == 2 and "--out" in refused.stderr, describe(refused)

    proc = subprocess.run([*runner, "--out", str(tmp_path / "out"), str(src)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 1, describe(proc)
    assert "FAILED planted.ipynb" in proc.stderr and "planted failure" in proc.stderr, describe(proc)
    assert "raise ValueError('planted failure')" in proc.stderr, describe(proc)
    done = nbformat.read(tmp_path / "out" / "planted.ipynb", as_version=4)
    rec = done.metadata.workbench.execution
    assert not rec.ok and rec.path == "cpu" and rec.label == "No GPU visible: planted", rec
    assert done.cells[3].execution_count is None and not done.cells[3].outputs
    assert not nbformat.read(src, as_version=4).cells[1].outputs  # the source notebook is untouched


def test_gpu_cells_compile(cuda_buildable):
    """The GPU path's kernels never run in CI; build them here with nvcc (no GPU needed), so a CUDA
    typo is found before the GPU run: the load_inline edit of vec4.cu, and the `--only gpu` cells,
    of which the one tagged raises-exception must fail to build."""
    import workbench
    from workbench import BuildError, load_inline
    from workbench.run import magic

    nb = nbformat.read(NOTEBOOKS_DIR / "02_edit_loop.ipynb", as_version=4)
    (edit,) = [c for c in nb.cells if c.cell_type == "code" and "wb.load_inline(" in c.source]
    ns = {"GPU": True, "wb": workbench, "KERNELS": REPO_ROOT / "kernels" / "bias_gelu"}
    exec(edit.source, ns)  # noqa: S102 - the notebook's own cell, as the GPU path runs it
    assert ns["edited"].device == "cuda" and ns["edited"].description.startswith("float2 (8-byte)"), ns["edited"]
    cells = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%%workbench")
             and "--only gpu" in c.source.splitlines()[0]]
    assert len(cells) == 3, [c.source.splitlines()[0] for c in cells]
    for i, cell in enumerate(cells):
        line, body = cell.source.split("\n", 1)
        args = magic.parse(line.removeprefix("%%workbench"))
        name = f"nb_gpu_cell_{i}"  # its own name: these builds must not replace the session's
        if "raises-exception" in _tags(cell):
            with pytest.raises(BuildError) as info:
                load_inline(args.op, body, name=name)
            assert TYPO in info.value.first_error and "is undefined" in info.value.first_error
        else:
            k = load_inline(args.op, body, name=name)
            assert k.device == "cuda" and k.dtypes == ("float32", "float64"), k


@pytest.mark.parametrize("name", NAMES)
def test_committed_outputs_come_from_the_runner(name):
    """Outputs in a committed notebook are those scripts/run_notebooks.py saved, with its record."""
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    has_outputs = any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    if has_outputs:
        assert nb.metadata.get("workbench", {}).get("execution"), (
            f"{name} has outputs but no execution record: save it with scripts/run_notebooks.py")


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_has_its_gpu_outputs(name):
    """The committed notebook is the GPU run's executed copy: every code cell ran, on the GPU
    path, and the cells that draw tables and plots kept them. Refresh them by committing the copies
    scripts/run_notebooks.py executed on the GPU (bash scripts/gpu_run.sh with STEPS=notebooks)."""
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    rec = nb.metadata.get("workbench", {}).get("execution")
    assert rec, f"{name} carries no execution record: commit the copy the GPU run executed"
    if name in CPU_OUTPUTS_UNTIL_GPU_RUN and rec.get("path") == "cpu":
        # Written in a session without a GPU: the runner's CPU copy, which says where its GPU figures come from.
        assert rec["ok"] and rec["label"].startswith(CPU_LABEL), rec
        assert any("GPU figures come from the GPU script" in " ".join(c.source.split())
                   for c in nb.cells if c.cell_type == "markdown"), f"{name}: no cell says where its GPU figures come from"
        pytest.skip(f"{name} carries its CPU path's outputs until a GPU run commits its executed copy")
    assert rec["ok"] and rec["path"] == "gpu" and rec["label"].startswith(GPU_LABEL), rec
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert cell.execution_count is not None, f"{name}: cell {i} was not run"
        if "figure()" in cell.source:
            assert any("image/png" in o.get("data", {}) for o in cell.outputs), f"{name}: cell {i} has no plot"
        if any(s in cell.source for s in ("table()", "frame()", "wb.check(", "wb.gradcheck(", "wb.bench(")):
            assert _cell_text(cell).strip(), f"{name}: cell {i} has no output"
        if "raises-exception" in _tags(cell) and "--only gpu" in cell.source.splitlines()[0]:
            assert TYPO in _cell_text(cell) and "is undefined" in _cell_text(cell), _cell_text(cell)


@pytest.mark.slow
def test_your_own_op_defines_checks_and_benches_an_op_from_cells(executed):
    """03: the op from strings joins the process, its variant passes check and float64 gradcheck,
    bad input is refused in the harness's words, and the bench table and figure come out."""
    nb = executed["03_your_own_op.ipynb"]
    text = "\n".join(_cell_text(c) for c in nb.cells if c.cell_type == "code")
    assert "'row_sumsq'" in text and "workbench::row_sumsq(Tensor x, str variant) -> Tensor" in text
    assert re.search(r"row_sumsq/warp on (cpu|cuda:0): (\d+)/\2 cases passed", text), text
    assert "3/3 cases passed (torch.autograd.gradcheck in float64" in text  # then its eps and tolerances
    assert "x must have at least 1 dimension ([..., n]); got a 0-dim tensor" in text
    assert "x.grad == 2x: True" in text and "compiled, fullgraph: True" in text
    assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


@pytest.mark.slow
def test_reduction_ladder_shows_every_rung_and_checks_what_runs_here(executed):
    """04: one cell output per rung of reduce_sum's ladder, in ladder order, names the rung and
    shows its file's opening comment; on the GPU every rung passes its check, on the CPU the cpu
    variant does and the note says the CUDA rungs need a GPU; the variant the determinism cell runs
    gives the same bits on every comparison."""
    from workbench.model import registry

    ladder = registry.spec("reduce_sum").ladder
    outputs = [_cell_text(c) for c in executed["04_reduction_ladder.ipynb"].cells if c.cell_type == "code"]
    text = "\n".join(outputs)
    for i, name in enumerate(ladder, 1):
        shown = [t for t in outputs if re.search(rf"^rung {i} of {len(ladder)}: {name}$", t, re.MULTILINE)]
        assert len(shown) == 1, (name, outputs)
        first = (REPO_ROOT / "kernels" / "reduce_sum" / f"{name}.cu").read_text().splitlines()[0]
        assert first.removeprefix("// ") in shown[0], (first, shown[0])
    if HAS_GPU:
        for name in ladder:
            assert re.search(rf"reduce_sum/{name} on cuda:\d+: (\d+)/\1 cases passed", text), name
    else:
        assert re.search(r"reduce_sum/cpu on cpu: (\d+)/\1 cases passed", text), text
        assert CPU_RUNG_NOTE in text and "the cpu variant" in text, text
    last = ladder[-1] if HAS_GPU else "cpu"
    compared = [line for line in text.splitlines() if line.startswith(f"reduce_sum/{last}, ")]
    assert len(compared) == (2 if HAS_GPU else 3), compared
    assert all(line.endswith(": same bits") for line in compared), compared


@pytest.mark.slow
def test_matmul_ladder_shows_every_rung_with_its_compiler_report_and_checks_what_runs_here(executed):
    """06: one cell output per rung of matmul's ladder, in ladder order, with its file's opening
    comment and, where nvcc and cuobjdump are here (they need no GPU), a row of the compiler's table
    and its report in words; on the GPU every rung passes its check and the edge sizes, naive its
    float64 gradcheck, and the ladder's summary names naive's and the best rung's share of cuBLAS;
    on the CPU the cpu variant does and the note says the CUDA rungs need a GPU. The Hopper rungs
    (sm_90a) are read from their machine code on any machine with nvcc (HGMMA and TMA loads, no
    HMMA); on an sm_90a GPU they are checked, timed at 8192^3 against cuBLAS and profiled, and
    elsewhere the section says so and shows the committed H100 run's figures. Plots: the ladder,
    the Hopper ladder per 16-bit dtype, and the roofline."""
    import torch

    from workbench.explain import ptxas

    from workbench.model import registry

    from workbench.build import toolchain

    ladder = registry.spec("matmul").ladder
    hopper = ladder[ladder.index("tensor_core") + 1:]
    sm90a = HAS_GPU and torch.cuda.get_device_capability() == (9, 0)
    nb = executed["06_matmul_ladder.ipynb"]
    outputs = [_cell_text(c) for c in nb.cells if c.cell_type == "code"]
    text = "\n".join(outputs)
    compiled = bool(toolchain.nvcc_path() and ptxas.cuobjdump())
    for i, name in enumerate(ladder, 1):
        shown = [t for t in outputs if re.search(rf"^rung {i} of {len(ladder)}: {name}$", t, re.MULTILINE)]
        assert len(shown) == 1, (name, outputs)
        first = (REPO_ROOT / "kernels" / "matmul" / f"{name}.cu").read_text().splitlines()[0]
        assert first.removeprefix("// ") in shown[0], (first, shown[0])
        if compiled:
            assert re.search(rf"^{name} +\d+ +\d+- *\d+ +\d+(\+dyn)? +\d+ ", text, re.MULTILINE), (name, text)
            assert re.search(r"\d+ registers per thread .* B spilled", " ".join(shown[0].split())), shown[0]
        if compiled and name in hopper:  # wgmma and TMA in its machine code, no mma.sync
            words = " ".join(shown[0].split())
            code = re.search(r"(\d+) HGMMA \(64x\d+x16\.F32\.BF16\) and (\d+) HMMA; (\d+) TMA loads", words)
            assert code and int(code.group(1)) > 0 and code.group(2) == "0" and int(code.group(3)) > 0, words
            assert re.search(r"[1-9]\d* mbarrier operations", words), words
            assert ("of them multicast" in words) == (name == "persistent"), words
            assert bool(re.search(r"[1-9]\d* setmaxnreg", words)) == (name != "wgmma_tma"), words  # producer/consumer
        if HAS_GPU and name in hopper and not sm90a:
            assert f"{name} needs an sm_90a GPU" in shown[0], shown[0]
    if not compiled:
        assert "The compiler's view needs nvcc and cuobjdump" in text, text
    if HAS_GPU:
        for name in [v for v in ladder if v not in hopper or sm90a]:
            passed = re.findall(rf"matmul/{name} on cuda:\d+: (\d+)/(\d+) cases passed", text)
            assert len(passed) >= 2 and all(a == b for a, b in passed), (name, passed)
        assert re.search(r"matmul/naive on cuda:\d+: (\d+)/\1 cases passed \(torch.autograd.gradcheck in float64",
                         text), text
        assert re.search(r"naive: [\d.]+% of cuBLAS; the best rung, \w+: [\d.]+% of cuBLAS", text), text
        assert re.search(r"tensor_core bfloat16 \S+: [\d.]+ TFLOP/s, [\d.]+% of cuBLAS", text), text
    else:
        passed = re.findall(r"matmul/cpu on cpu: (\d+)/(\d+) cases passed", text)
        assert len(passed) >= 3 and all(a == b for a, b in passed), passed  # the matrix, the edges, gradcheck
        assert "(torch.autograd.gradcheck in float64" in text, text
        assert CPU_RUNG_NOTE in text and "the cpu variant" in text, text
    for dtype in ("bfloat16", "float16"):  # measured on an sm_90a GPU, else the committed H100 run's rows
        assert re.search(rf"^{dtype}: the last rung, persistent: \d+ TFLOP/s, [\d.]+x cuBLAS, [\d.]+x tensor_core$",
                         text, re.MULTILINE), text
    if sm90a:
        assert re.search(r"tensor pipe \d+% -> \d+% of peak \([\d.]+x\), duration", text) or "no profile here:" in text
    else:
        assert "not measured here" in text and "The rows below are the committed H100 run's" in text, text
        assert re.search(r"^  wgmma_tma_kernel +[\d.]+ ms; Tensor pipe [\d.]+% busy", text, re.MULTILINE), text
    pngs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(pngs) >= 4, len(pngs)  # the ladder, the Hopper ladder in bf16 and fp16, the roofline
