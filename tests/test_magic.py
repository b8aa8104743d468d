"""The %%workbench cell magic, driven through IPython's InteractiveShell (no kernel needed)."""
from __future__ import annotations

import os

import pytest
import torch

from conftest import HAS_GPU, REPO_ROOT

pytest.importorskip("IPython", reason="the %%workbench magic needs IPython (pip install ipython)")
from IPython.core.error import UsageError  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from traitlets.config import Config  # noqa: E402

from workbench import BuildError, Kernel, registry  # noqa: E402

CPU_DESCRIPTION = "C++ on torch's CPU thread pool, parallel over rows; any alignment and column count"
# The line of cpu.cpp's forward that the compile-error tests break.
FORWARD_CALL = "wb_gelu_tanh(wb_to_acc(x[r * cols + c])"


def _source(cpu_source: str, description: str) -> str:
    assert CPU_DESCRIPTION in cpu_source, "kernels/bias_gelu/cpu.cpp changed its description; update this test"
    return cpu_source.replace(CPU_DESCRIPTION, description)


def _inputs():
    g = torch.Generator().manual_seed(5)
    return torch.randn(6, 10, generator=g), torch.randn(10, generator=g)


@pytest.fixture(scope="module")
def shell(tmp_path_factory, cpu_kernel):
    """An IPython shell with the extension loaded; no history file, no profile under $HOME."""
    old = os.environ.get("IPYTHONDIR")
    os.environ["IPYTHONDIR"] = str(tmp_path_factory.mktemp("ipython"))
    config = Config()
    config.HistoryManager.enabled = False
    sh = InteractiveShell.instance(config=config)
    sh.run_line_magic("load_ext", "workbench")
    yield sh
    InteractiveShell.clear_instance()
    if old is None:
        os.environ.pop("IPYTHONDIR", None)
    else:
        os.environ["IPYTHONDIR"] = old


def test_extension_registers_the_cell_magic(shell):
    assert "workbench" in shell.magics_manager.magics["cell"]


def test_import_workbench_does_not_import_ipython(run_python):
    proc = run_python("import sys, workbench; print('IPython' in sys.modules)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_cell_builds_binds_name_and_prints_one_line(shell, capsys, cpu_kernel, cpu_source_text):
    src = _source(cpu_source_text, "magic: first cell")
    result = shell.run_cell("%%workbench bias_gelu magic_first\n" + src)
    assert result.success, result.error_in_exec
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out
    assert out[0].startswith("magic_first = bias_gelu/magic_first@"), out
    assert "(cpu: float32, float64, float16, bfloat16)" in out[0] and " s " in out[0], out
    k = shell.user_ns["magic_first"]
    assert isinstance(k, Kernel) and k.description == "magic: first cell" and k.device == "cpu"
    x, b = _inputs()
    assert torch.equal(k(x, b), cpu_kernel(x, b))
    assert torch.equal(torch.ops.workbench.bias_gelu(x, b, "magic_first"), cpu_kernel(x, b))


def test_edited_cell_rebuilds_and_says_the_old_build_is_stale(shell, capsys, cpu_source_text):
    v1 = _source(cpu_source_text, "magic: version 1")
    v2 = _source(cpu_source_text, "magic: version 2").replace(
        FORWARD_CALL, "wb_gelu_tanh(2.0f * wb_to_acc(x[r * cols + c])")
    shell.run_cell_magic("workbench", "bias_gelu magic_edit", v1)
    old = shell.user_ns["magic_edit"]
    x, b = _inputs()
    y_old = old(x, b)
    capsys.readouterr()
    shell.run_cell_magic("workbench", "bias_gelu magic_edit", v2)
    line = capsys.readouterr().out
    new = shell.user_ns["magic_edit"]
    assert new.build_id != old.build_id and old.stale and not new.stale
    assert (f"the previous build of magic_edit (@{old.build_id}) is now stale: handles to it still run it"
            in line), line
    assert torch.equal(old(x, b), y_old)              # the stale handle runs its own build
    assert not torch.allclose(new(x, b), y_old)       # the name runs the edit
    # The same text again: a cache hit, the same build, nothing stale.
    shell.run_cell_magic("workbench", "bias_gelu magic_edit", v2)
    line = capsys.readouterr().out
    assert "loaded from the cache" in line and "stale" not in line, line
    assert shell.user_ns["magic_edit"].build_id == new.build_id


def test_only_skips_with_a_reason_on_the_other_kind_of_machine(shell, capsys, cpu_source_text):
    src = _source(cpu_source_text, "magic: --only")
    skipped, runs = ("cpu", "gpu") if HAS_GPU else ("gpu", "cpu")
    shell.run_cell_magic("workbench", f"bias_gelu magic_only --only {skipped}", src)
    out = capsys.readouterr().out
    assert out.startswith(f"skipped %%workbench bias_gelu magic_only: --only {skipped}, and "), out
    assert ("no GPU is visible here" if skipped == "gpu" else "a GPU is visible here") in out
    assert "magic_only is not bound by this cell" in out and "magic_only" not in shell.user_ns
    if runs == "cpu":  # a GPU machine would build a C++ cell under --only gpu too; the CPU run covers it
        shell.run_cell_magic("workbench", "bias_gelu magic_only --only cpu", src)
        assert isinstance(shell.user_ns["magic_only"], Kernel)
        capsys.readouterr()
    else:
        shell.user_ns["magic_only"] = shell.user_ns["magic_first"]
    k = shell.user_ns["magic_only"]
    shell.run_cell_magic("workbench", f"bias_gelu magic_only --only {skipped}", src)
    out = capsys.readouterr().out
    assert f"magic_only is still bias_gelu/{k.qualified} (cpu)" in out, out


def test_quiet_prints_nothing(shell, capsys, cpu_source_text):
    shell.run_cell_magic("workbench", "bias_gelu magic_quiet --quiet", _source(cpu_source_text, "magic: quiet"))
    assert capsys.readouterr().out == ""
    assert isinstance(shell.user_ns["magic_quiet"], Kernel)


@pytest.mark.parametrize("line, expected", [
    ("no_such_op magic_bad", f"OP must be one of {registry.ops()}; got 'no_such_op'"),
    ("bias_gelu 1bad", "NAME must be an identifier"),
    ("bias_gelu bad-name", "NAME must be an identifier"),
    ("bias_gelu max", "NAME 'max' is a Python keyword or builtin"),
    ("bias_gelu lambda", "NAME 'lambda' is a Python keyword or builtin"),
    ("bias_gelu magic_bad --only tpu", "argument --only: invalid choice: 'tpu'"),
    ("bias_gelu magic_bad --only", "argument --only: expected one argument"),
    ("bias_gelu", "the following arguments are required: NAME"),
    ("", "the following arguments are required: OP, NAME"),
    ("bias_gelu magic_bad extra", "unrecognized arguments: extra"),
    ('bias_gelu "magic_bad', "cannot split the arguments"),
], ids=repr)
def test_bad_arguments_name_the_argument_and_show_usage(shell, cpu_source_text, line, expected):
    with pytest.raises(UsageError) as info:
        shell.run_cell_magic("workbench", line, cpu_source_text)
    assert expected in str(info.value)
    assert "usage: %%workbench [--only {gpu,cpu}] [--quiet] OP NAME" in str(info.value)
    assert "magic_bad" not in shell.user_ns


def test_empty_cell(shell):
    with pytest.raises(UsageError, match="the cell is empty; expected the source of variant 'magic_empty'"):
        shell.run_cell_magic("workbench", "bias_gelu magic_empty", "  \n\t\n")


def test_name_bound_to_a_module_is_refused(shell, cpu_source_text):
    shell.run_cell("import json as magic_module")
    with pytest.raises(UsageError, match="NAME 'magic_module' is a module in this notebook"):
        shell.run_cell_magic("workbench", "bias_gelu magic_module", cpu_source_text)
    assert shell.user_ns["magic_module"].__name__ == "json"


def test_cell_that_is_not_a_variant_is_a_usage_error(shell):
    with pytest.raises(UsageError, match=r"%%workbench bias_gelu magic_nonvariant: .*WB_EXPORT_VARIANT"):
        shell.run_cell_magic("workbench", "bias_gelu magic_nonvariant", "int x = 1;\n")


def test_compile_error_shows_the_compiler_message_and_keeps_the_last_good_build(shell, capsys, cpu_source_text):
    good = _source(cpu_source_text, "magic: good before the typo")
    shell.run_cell_magic("workbench", "bias_gelu magic_err", good)
    last_good = shell.user_ns["magic_err"]
    broken = good.replace(FORWARD_CALL, FORWARD_CALL.replace("wb_gelu_tanh(", "wb_gelu_tanhh("))
    cell_line = 2 + broken.splitlines().index(next(ln for ln in broken.splitlines() if "wb_gelu_tanhh(" in ln))

    with pytest.raises(BuildError) as info:
        shell.run_cell_magic("workbench", "bias_gelu magic_err", broken)
    e = info.value
    assert e.line == cell_line, (e.line, cell_line)  # the cell's own numbering: the magic line is line 1
    assert "wb_gelu_tanhh" in e.first_error and "not declared" in e.first_error, e.first_error

    # Through run_cell, the way a notebook runs it: IPython renders _render_traceback_, which is the
    # compiler's message, the log and the last good build, without the loader's stack frames.
    capsys.readouterr()
    result = shell.run_cell("%%workbench bias_gelu magic_err\n" + broken)
    assert isinstance(result.error_in_exec, BuildError)
    shown = capsys.readouterr()
    text = shown.out + shown.err
    assert f"BuildError: bias_gelu/magic_err failed to build: <inline bias_gelu/magic_err>:{cell_line}:" in text, text
    assert "'wb_gelu_tanhh' was not declared" in text.replace("\u2018", "'").replace("\u2019", "'"), text
    assert "full log: " in text and f"last good build still available: bias_gelu/{last_good.qualified}" in text
    assert "Traceback" not in text and "loader.py" not in text, text

    # The name still holds the last good build, which still runs, by handle and by name.
    assert shell.user_ns["magic_err"] is last_good and not last_good.stale
    x, b = _inputs()
    ref = torch.nn.functional.gelu(x.double() + b.double(), approximate="tanh")
    torch.testing.assert_close(last_good(x, b).double(), ref, rtol=1e-5, atol=1e-6)
    assert torch.equal(torch.ops.workbench.bias_gelu(x, b, "magic_err"), last_good(x, b))


def test_cuda_cell_builds_where_cuda_can_be_built(shell, capsys, cuda_buildable):
    """A CUDA cell (detected by __global__) builds with nvcc here even without a GPU, and the line
    says when it cannot run on this machine."""
    src = (REPO_ROOT / "kernels" / "bias_gelu" / "scalar.cu").read_text()
    shell.run_cell_magic("workbench", "bias_gelu magic_cuda", src)
    out = capsys.readouterr().out
    k = shell.user_ns["magic_cuda"]
    assert k.device == "cuda" and k.library.exists()
    assert ("no GPU is visible, so it cannot run here" in out) == (not HAS_GPU), out
