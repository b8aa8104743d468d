"""Graduation (workbench/ship/export.py): an op exported as a package of its own builds with pip (no
network, no build isolation), and its own test passes in a process that never imports the
workbench; every op's package is generated; bad arguments fail with what exists; the CLI.

The bias_gelu package is built once per module (cpu, plus the CUDA `scalar` where nvcc is found:
it must compile and link here; TORCH_CUDA_ARCH_LIST=8.0, one arch, to keep CI short). On a loaded
2-core machine the build took 77 s (cpu alone: 47-69 s; the CUDA variant compiles beside the
harness), the package's test 23 s, this whole file 130 s.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import describe, run_cli
from workbench import config
from workbench.model import registry

pytestmark = pytest.mark.slow


def _clean_env(**extra) -> dict:
    """The environment of a process that must not see the workbench: no repository on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKBENCH_", "PYTEST_"))}
    env.pop("PYTHONPATH", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture(scope="module")
def exported(tmp_path_factory, wb):
    """bias_gelu exported (cpu, and scalar where CUDA code builds here), pip-installed into a target
    folder: (package folder, target folder, variants, build seconds)."""
    pytest.importorskip("setuptools")
    from workbench.build import toolchain

    variants = ["cpu"] + (["scalar"] if toolchain.can_build_cuda() else [])
    root = tmp_path_factory.mktemp("export")
    pkg, target = root / "wb_bias_gelu", root / "site"
    wb.export("bias_gelu", variants, pkg)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                           "--quiet", "--target", str(target), str(pkg)], cwd=root, capture_output=True, text=True,
                          timeout=900, env=_clean_env(TORCH_CUDA_ARCH_LIST="8.0", MAX_JOBS=os.cpu_count() or 2))
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, describe(proc)
    print(f"\nexported bias_gelu ({', '.join(variants)}): pip install took {seconds:.1f} s", file=sys.stderr)
    return pkg, target, variants, seconds


def test_installed_package_passes_its_own_test_without_the_workbench(exported):
    pkg, target, variants, _ = exported
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests/"], cwd=pkg,
                          capture_output=True, text=True, timeout=600, env=_clean_env(PYTHONPATH=target))
    assert proc.returncode == 0, describe(proc)
    assert "PASSED tests/test_bias_gelu.py::test_the_package_stands_alone" in proc.stdout, proc.stdout
    assert "PASSED tests/test_bias_gelu.py::test_compile_fullgraph[cpu]" in proc.stdout
    assert "PASSED tests/test_bias_gelu.py::test_opcheck[cpu]" in proc.stdout
    assert "PASSED tests/test_bias_gelu.py::test_autograd_is_the_cpp_kernel" in proc.stdout
    assert "PASSED tests/test_bias_gelu.py::test_create_graph_gives_second_derivatives" in proc.stdout


def test_installed_library_holds_every_variant(exported):
    """The CUDA variant linked into the library: the op knows it, and refuses CPU tensors by device."""
    pkg, target, variants, _ = exported
    code = f"""
import sys, torch, wb_bias_gelu as p
assert p.VARIANTS == {tuple(variants)!r}, p.VARIANTS
x, b = torch.randn(4, 8, requires_grad=True), torch.randn(8, requires_grad=True)
y = torch.ops.wb_bias_gelu.bias_gelu(x, b)       # variant "": the cpu one here
y.sum().backward()
assert x.grad.shape == x.shape and b.grad.shape == b.shape
for name in {variants[1:]!r}:
    try:
        torch.ops.wb_bias_gelu.bias_gelu(x, b, name)
        raise SystemExit("a CUDA variant took CPU tensors")
    except RuntimeError as e:
        assert "variant '" + name + "' runs on CUDA tensors" in str(e), e
try:
    torch.ops.wb_bias_gelu.bias_gelu(x, b[:5])
    raise SystemExit("a wrong bias length passed")
except ValueError as e:
    assert "bias must have shape [8]" in str(e), e
assert "workbench" not in sys.modules
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=target.parent, capture_output=True, text=True,
                          timeout=300, env=_clean_env(PYTHONPATH=target))
    assert proc.returncode == 0 and "ok" in proc.stdout, describe(proc)


@pytest.mark.parametrize("op", registry.ops())
def test_every_op_exports_a_package(wb, tmp_path, op):
    """Generated from the spec alone (no build): the files are there, the Python parses, the
    schemas are the spec's with a default variant, and nothing imports the workbench."""
    if "cpu" not in registry.variant_sources(op):
        pytest.skip(f"{op} has no cpu variant")
    out = wb.export(op, "cpu", tmp_path / "pkg")
    package = out / f"wb_{op}"
    for rel in ("setup.py", "pyproject.toml", "README.md", f"tests/test_{op}.py", "csrc/harness/op.cpp",
                "csrc/harness/harness.cpp", f"csrc/bindings/{op}.cpp", f"csrc/kernels/{op}/{op}.h",
                f"csrc/kernels/{op}/cpu.cpp", "csrc/generated/cpu.cpp", "csrc/generated/_binding.cpp"):
        assert (out / rel).is_file(), rel
    for path in [*out.rglob("*.py")]:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            assert not any(n.split(".")[0] == "workbench" for n in names), f"{path} imports the workbench"
    decl = {}
    exec(compile((package / "_decl.py").read_text(), "_decl.py", "exec"), decl)
    spec = wb.registry.spec(op)
    assert re.sub(r'=("[^"]*"|[^,)]+)', "", decl["SCHEMA"]) == spec.schema()  # the spec's, with defaults
    assert [v["name"] for v in decl["VARIANTS"]] == ["cpu"]
    assert "CppExtension" in (out / "setup.py").read_text()  # CPU variants only: no nvcc needed
    op_cpp = (out / "csrc/harness/op.cpp").read_text()
    assert f"TORCH_LIBRARY(wb_{op}, m)" in op_cpp and "TORCH_LIBRARY_IMPL(wb_{}, CUDA".format(op) not in op_cpp
    assert op_cpp.count("OpDecl::parse(") == 1  # the declaration's text is parsed once, then shared


def test_the_package_carries_the_one_call_check_and_the_math(wb, tmp_path):
    """The package's checks are copies of the workbench's one source per language (no rewritten
    twin): shapes.py's check_call for the fake, call_check.cpp for the harness; its math is the op's
    math module as it is, named in spec.py."""
    assert callable(registry.spec("rmsnorm").eager)  # read first: export still sees the declaration's names
    out = wb.export("rmsnorm", "cpu", tmp_path / "pkg")
    package = out / "wb_rmsnorm"
    assert (package / "_shapes.py").read_text().endswith((config.PACKAGE_DIR / "model" / "shapes.py").read_text())
    for f in ("call_contract.h", "call_check.h", "call_check.cpp", "op_decl.h", "op_decl.cpp"):
        assert (out / "csrc/harness" / f).read_bytes() == (config.BINDINGS_DIR / "harness" / f).read_bytes(), f
    assert "call_check.cpp" in (out / "setup.py").read_text()
    assert (package / "_math.py").read_text().endswith((config.PACKAGE_DIR / "specs/rmsnorm_math.py").read_text())
    spec_py = (package / "spec.py").read_text()
    assert "from ._math import reference as reference" in spec_py and "make_inputs = None" in spec_py
    assert not (package / "opspec.py").exists() and not (package / "spec").exists()  # no stand-in model
    init = (package / "__init__.py").read_text()
    assert "check_call(" in init and "must be a finite number" not in init  # the words live in _shapes.py


def test_the_package_runs_the_harness_autograd_in_cpp(wb, tmp_path):
    """Issue 26, item 2: the package's Autograd key is the workbench's C++ kernel (op_autograd.cpp,
    copied as call_check is; op.cpp names the package's namespace for it) registered by op.cpp; its
    __init__ registers no Python autograd formula, only <op>_backward_backward (create_graph=True)."""
    from workbench.ship import package_contents

    out = wb.export("bias_gelu", "cpu", tmp_path / "pkg", namespace="my_ops")
    harness = (config.BINDINGS_DIR / "harness" / "op_autograd.cpp").read_text()
    copied = (out / "csrc/harness/op_autograd.cpp").read_text()
    assert copied == package_contents.autograd_source() and copied.split("\n", 1)[1] == harness  # the file as it is
    op_cpp = (out / "csrc/harness/op.cpp").read_text()
    assert '#define WB_OPS_NAMESPACE "my_ops"' in op_cpp                 # its nodes call the package's ops
    assert op_cpp.index('#define WB_OPS_NAMESPACE') < op_cpp.index('#include "op_autograd.cpp"')
    assert "TORCH_LIBRARY_IMPL(my_ops, Autograd, m)" in op_cpp and "register_autograd_kernels(" in op_cpp
    assert "double_backward_schema(" in op_cpp
    init = (out / "wb_bias_gelu" / "__init__.py").read_text()
    assert "register_autograd" not in init and "setup_context" not in init
    assert '_library.impl(f"{OP}_backward_backward", _double_backward, "CompositeImplicitAutograd")' in init
    test = (out / "tests" / "test_bias_gelu.py").read_text()
    assert "def test_autograd_is_the_cpp_kernel" in test and "def test_create_graph_gives_second_derivatives" in test


def test_cuda_variants_make_a_cuda_extension(wb, tmp_path):
    out = wb.export("bias_gelu", "vec4,scalar,cpu", tmp_path / "pkg", name="gelu_pkg", namespace="my_ops")
    setup = (out / "setup.py").read_text()
    assert "CUDAExtension" in setup and "csrc/generated/vec4.cu" in setup
    op_cpp = (out / "csrc/harness/op.cpp").read_text()
    assert "TORCH_LIBRARY(my_ops, m)" in op_cpp and "TORCH_LIBRARY_IMPL(my_ops, CUDA, m)" in op_cpp
    # each variant's descriptor under a name of its own, so that one library holds them all
    assert "#define workbench_variant_info my_ops_variant_vec4" in (out / "csrc/generated/vec4.cu").read_text()
    assert "#include \"../kernels/bias_gelu/vec4.cu\"" in (out / "csrc/generated/vec4.cu").read_text()
    assert (out / "csrc/kernels/common/wb_row_tiles.cuh").is_file()  # a header vec4 includes, transitively
    assert (out / "gelu_pkg/__init__.py").is_file()
    assert "VARIANTS = [{'name': 'vec4'" in (out / "gelu_pkg/_decl.py").read_text()


# ------------------------------------------------------------------ bad arguments


@pytest.mark.parametrize("kwargs, error, match", [
    ({"op": "no_such_op", "variants": "cpu"}, ValueError, r"op must be one of \[.*'bias_gelu'"),
    ({"op": "bias_gelu", "variants": "nope"}, ValueError, "bias_gelu has no variant 'nope'; its C.. variants: cpu, half, scalar, vec4"),
    ({"op": "bias_gelu", "variants": "cpu,cpu"}, ValueError, "'cpu' is listed twice"),
    ({"op": "bias_gelu", "variants": ""}, ValueError, "variants must name at least one of bias_gelu's C.. variants"),
    ({"op": "bias_gelu", "variants": 3}, ValueError, "variants must be a comma-separated string or a list"),
    ({"op": "rmsnorm", "variants": "cpu,triton"}, ValueError, "rmsnorm/triton is a Python variant"),
    ({"op": "bias_gelu", "variants": "cpu", "name": "my-ops"}, ValueError, "name must be an identifier"),
    ({"op": "bias_gelu", "variants": "cpu", "name": "json"}, ValueError, "name must not shadow"),
    ({"op": "bias_gelu", "variants": "cpu", "namespace": "aten"}, ValueError, "namespace must be a torch.ops namespace"),
    ({"op": "bias_gelu", "variants": "cpu", "namespace": "workbench"}, ValueError, "namespace must be"),
])
def test_bad_arguments_say_what_exists(wb, tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        wb.export(**kwargs, out=tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


def test_out_that_is_not_empty_is_refused_unless_forced(wb, tmp_path):
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="exists and is not empty .*notes.txt.*--force"):
        wb.export("bias_gelu", "cpu", out)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    wb.export("bias_gelu", "cpu,scalar", out, force=True)
    assert (out / "notes.txt").read_text() == "mine" and (out / "csrc/generated/scalar.cu").is_file()
    wb.export("bias_gelu", "cpu", out, force=True)  # the earlier export's scalar files go; the user's stay
    assert not (out / "csrc/generated/scalar.cu").exists() and not (out / "csrc/kernels/bias_gelu/scalar.cu").exists()
    assert (out / "notes.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        wb.export("bias_gelu", "cpu", tmp_path / "file", force=True)


def test_export_writes_a_manifest_of_what_it_wrote(wb, tmp_path):
    import hashlib

    out = wb.export("bias_gelu", "cpu", tmp_path / "pkg")
    lines = (out / ".wb_export_files").read_text().splitlines()
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != ".wb_export_files")
    assert sorted(line.split("  ", 1)[1] for line in lines) == written
    for line in lines:
        digest, rel = line.split("  ", 1)
        assert hashlib.sha256((out / rel).read_bytes()).hexdigest() == digest, rel


def test_force_never_replaces_a_users_own_files(wb, tmp_path):
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "README.md").write_text("my own README")
    (out / "setup.py").write_text("# my own setup.py")
    with pytest.raises(FileExistsError, match=r"--force replaces only the files an earlier export wrote .*README.md, "
                                              r"setup.py were not written by an earlier export.*Nothing was written"):
        wb.export("bias_gelu", "cpu", out, force=True)
    assert (out / "README.md").read_text() == "my own README" and (out / "setup.py").read_text() == "# my own setup.py"
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "setup.py"]
    # An exported file the user edited since is theirs now: refused too.
    other = wb.export("bias_gelu", "cpu", tmp_path / "pkg2")
    (other / "README.md").write_text("exported, then edited by hand")
    with pytest.raises(FileExistsError, match="README.md changed since the export wrote it"):
        wb.export("bias_gelu", "cpu", other, force=True)
    assert (other / "README.md").read_text() == "exported, then edited by hand"


def test_force_never_writes_through_a_link(wb, tmp_path):
    out = wb.export("bias_gelu", "cpu", tmp_path / "pkg")
    victim = tmp_path / "victim.txt"
    victim.write_text("outside --out")
    (out / "README.md").unlink()
    os.symlink(victim, out / "README.md")
    with pytest.raises(FileExistsError, match=r"never writes through a symbolic link.*README.md -> .*victim.txt"):
        wb.export("bias_gelu", "cpu", out, force=True)
    assert victim.read_text() == "outside --out"
    # a linked folder on the way counts too
    os.unlink(out / "README.md")
    elsewhere = tmp_path / "elsewhere"
    (out / "csrc").rename(elsewhere)
    os.symlink(elsewhere, out / "csrc")
    before = {p: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError, match=r"never writes through a symbolic link.*csrc -> "):
        wb.export("bias_gelu", "cpu", out, force=True)
    assert {p: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()} == before


def test_an_empty_out_folder_is_fine(wb, tmp_path):
    assert (wb.export("elementwise_mul", ["cpu"], tmp_path) / "wb_elementwise_mul" / "__init__.py").is_file()


# ------------------------------------------------------------------ CLI


def test_cli_export_and_its_errors(tmp_path):
    out = tmp_path / "pkg"
    proc = run_cli("export", "scale_bias_relu", "--variants", "cpu", "--out", str(out), "--name", "sbr")
    assert proc.returncode == 0, describe(proc)
    assert f"wrote {out}" in proc.stdout and "pip install --no-build-isolation" in proc.stdout
    assert (out / "sbr" / "__init__.py").is_file()
    assert "def scale_bias_relu(x, bias, scale, *, variant=" in (out / "sbr" / "__init__.py").read_text()
    again = run_cli("export", "scale_bias_relu", "--variants", "cpu", "--out", str(out))
    assert again.returncode == 1 and "exists and is not empty" in again.stderr and "--force" in again.stderr, describe(again)
    bad = run_cli("export", "scale_bias_relu", "--variants", "cpu,wide", "--out", str(tmp_path / "other"))
    assert bad.returncode == 1, describe(bad)
    assert "error: variants: scale_bias_relu has no variant 'wide'; its C++ variants: cpu, half, scalar, vec4" in bad.stderr
    assert not (tmp_path / "other").exists()
    usage = run_cli("export", "scale_bias_relu", "--out", str(tmp_path / "other"))
    assert usage.returncode == 2 and "--variants" in usage.stderr
