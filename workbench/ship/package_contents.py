"""What an exported package holds, file by file, generated from the op's declaration (export.py
writes them): the C++ entry points and TORCH_LIBRARY registration, the harness's sources copied (the
call contract, the C++ autograd), the variants' sources and the headers they include, the op's math
module and the call check as Python files, __init__.py, setup.py, a README and a test
(templates: export_templates/)."""
from __future__ import annotations

import ast
import hashlib
import pathlib
import pprint
import re
import string
import subprocess

from .. import config
from ..model import registry
from ..build import toolchain
from ..dtypes import NAMES as DTYPE_NAMES, TOLERANCES
from ..model.opmath import MathRef, declared

TEMPLATES = pathlib.Path(__file__).resolve().parent / "export_templates"
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
_CPP_TYPES = {float: ("float", "double", "f"), int: ("int", "int64_t", "i"), bool: ("bool", "bool", "i")}
ARCH_LIST = toolchain.SHIPPED  # where the build machine has no GPU to ask (issue 14: 8.0 and 9.0, plus PTX)
TEST_SIZE_ELEMENTS = 20000  # the package test's sizes: the spec's check sizes up to this many elements per input


def cpp_variants(op: str) -> dict[str, pathlib.Path]:
    return {n: p for n, p in registry.variant_sources(op).items() if p.suffix in (".cu", ".cpp")}


def _closure(source: pathlib.Path, include_dirs: list[pathlib.Path]) -> list[pathlib.Path]:
    """The source and every quoted header it reaches (the including file's folder first, as the compiler)."""
    seen: list[pathlib.Path] = []

    def visit(path: pathlib.Path) -> None:
        path = path.resolve()
        if path in seen:
            return
        seen.append(path)
        for inc in _INCLUDE.findall(path.read_text(errors="replace")):
            found = next((d / inc for d in [path.parent, *include_dirs] if (d / inc).is_file()), None)
            if found is None:
                raise ValueError(f"{path}: #include \"{inc}\" is in none of {[str(d) for d in [path.parent, *include_dirs]]}")
            visit(found)

    visit(source)
    return seen


def _packaged_path(path: pathlib.Path) -> str:
    """Where a tree file goes in the package: kernels/... and bindings/... under csrc/."""
    for root, to in ((config.KERNELS_DIR, "csrc/kernels"), (config.BINDINGS_DIR, "csrc/bindings")):
        try:
            return f"{to}/{path.resolve().relative_to(root.resolve()).as_posix()}"
        except ValueError:
            continue
    raise ValueError(f"{path}: an exported source must live under {config.KERNELS_DIR} or {config.BINDINGS_DIR}")


# The math fields an exported package uses (its __init__'s autograd, its test's inputs and reference).
_PACKAGE_MATH = ("reference", "eager", "double_backward", "reference_backward", "make_inputs")


def _math_source(spec) -> tuple[str, str]:
    """(the op's math module's text, the package's spec.py naming its functions), after checking
    that the module imports nothing the package lacks and holds each math field the package uses."""
    refs = {f: declared(spec, f) for f in _PACKAGE_MATH}  # the declaration's MathRefs, not imported
    modules = {r.module for r in refs.values() if isinstance(r, MathRef)}
    plain = [f for f, r in refs.items() if r is not None and not isinstance(r, MathRef)]
    if plain or len(modules) != 1:
        raise ValueError(f"{spec.name}: an exported package carries the op's math module, so the declaration must "
                         f"name reference, eager (and any of {', '.join(_PACKAGE_MATH[2:])}) in one module "
                         f"(MathModule(...)); got {', '.join(plain) or 'none'} as plain functions, modules "
                         f"{sorted(modules)}")
    module = modules.pop()
    path = config.PACKAGE_DIR.parent.joinpath(*module.split(".")).with_suffix(".py")
    text = path.read_text()
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            raise ValueError(f"{path}:{node.lineno}: an exported package carries the op's math module alone; it may "
                             f"import modules outside the workbench, not relative ones")
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(m.split(".")[0] == "workbench" for m in names):
            raise ValueError(f"{path}:{node.lineno}: the op's math imports the workbench, which an exported package "
                             f"must not depend on")
    lines = [f'"""The op\'s math as workbench/specs/{spec.name}.py names it (the functions: _math.py, a copy of',
             f'{path.relative_to(config.PACKAGE_DIR.parent).as_posix()})."""']
    for f, r in refs.items():
        lines.append(f"from ._math import {r.attr} as {f}" if isinstance(r, MathRef) else f"{f} = None")
    return text, "\n".join(lines) + "\n"


# ---------------------------------------------------------------- generated text


def _fill(template: str, **values) -> str:
    return string.Template((TEMPLATES / template).read_text()).substitute(values)


def _literal(value) -> str:
    return pprint.pformat(value, width=110, sort_dicts=False)


def _attr_default_suffix(spec) -> list[str]:
    """'=value' for each attribute with a default followed only by such (defaults go last); else ''."""
    out, trailing = [], True
    for a in reversed(spec.attrs):
        trailing = trailing and not a.required
        out.append(f"={a.default!r}" if trailing else "")
    return out[::-1]


def _schemas(spec) -> tuple[str, str | None]:
    defaults = _attr_default_suffix(spec)
    attrs = [f"{_CPP_TYPES[a.kind][0]} {a.name}{d}" for a, d in zip(spec.attrs, defaults)]
    plain = [f"{_CPP_TYPES[a.kind][0]} {a.name}" for a in spec.attrs]
    rets = "Tensor" if len(spec.outputs) == 1 else "(" + ", ".join("Tensor" for _ in spec.outputs) + ")"
    fwd = f"{spec.name}({', '.join([f'Tensor {t.name}' for t in spec.inputs] + attrs + ['str variant=' + chr(34) * 2])}) -> {rets}"
    diff = spec.differentiable
    if not diff:
        return fwd, None
    args = [f"Tensor grad_{o.name}" for o in spec.outputs] + [f"Tensor {t.name}" for t in spec.inputs] + plain
    brets = "Tensor" if len(diff) == 1 else "(" + ", ".join("Tensor" for _ in diff) + ")"
    return fwd, f"{spec.name}_backward({', '.join(args + ['str variant=' + chr(34) * 2])}) -> {brets}"


def _cpp_entry(spec, step: str) -> str:
    """A typed C++ entry point that hands its arguments to the harness."""
    n_out = len(spec.outputs) if step == "forward" else len(spec.differentiable)
    ret = "at::Tensor" if n_out == 1 else f"std::tuple<{', '.join(['at::Tensor'] * n_out)}>"
    tensors = ([f"grad_{o.name}" for o in spec.outputs] if step == "backward" else []) + [t.name for t in spec.inputs]
    params = [f"const at::Tensor& {t}" for t in tensors] + [f"{_CPP_TYPES[a.kind][1]} {a.name}" for a in spec.attrs]
    fname = spec.name if step == "forward" else f"{spec.name}_backward"
    body = [f"  std::vector<WbAttr> attrs({len(spec.attrs)});"]
    for i, a in enumerate(spec.attrs):
        field_, cast = _CPP_TYPES[a.kind][2], ("" if a.kind is float else "static_cast<int64_t>")
        body.append(f"  attrs[{i}].{field_} = {cast}({a.name});")
    step_c = "WB_STEP_FORWARD" if step == "forward" else "WB_STEP_BACKWARD"
    body.append(f"  auto out = op().run({step_c}, {{{', '.join(tensors)}}}, attrs, std::string(variant.data(), variant.size()));")
    body.append("  return out[0];" if n_out == 1 else
                f"  return std::make_tuple({', '.join(f'out[{i}]' for i in range(n_out))});")
    return "\n".join([f"{ret} {fname}({', '.join(params + ['c10::string_view variant'])}) {{", *body, "}"])


def _op_cpp(spec, variants: list[dict], namespace: str, with_cuda: bool) -> str:
    fwd, bwd = _schemas(spec)
    entries = [_cpp_entry(spec, "forward")] + ([_cpp_entry(spec, "backward")] if bwd else [])
    impls = [f'  m.impl("{spec.name}", &{spec.name});'] + ([f'  m.impl("{spec.name}_backward", &{spec.name}_backward);']
                                                          if bwd else [])
    defs = [f'  m.def(R"wb({fwd})wb");'] + ([f'  m.def(R"wb({bwd})wb");'] if bwd else [])
    registrations = [f"\nTORCH_LIBRARY_IMPL({namespace}, {key}, m) {{\n" + "\n".join(impls) + "\n}\n"
                     for key in ["CPU"] + (["CUDA"] if with_cuda else [])]
    if bwd:
        # <op>_backward_backward (the backward's derivative, __init__.py's) and the Autograd key's C++
        # kernels (op_autograd.cpp), registered after the schemas they look up.
        defs.append("  m.def(workbench::double_backward_schema(declaration()).c_str());")
        registrations.append(f"\nTORCH_LIBRARY_IMPL({namespace}, Autograd, m) {{\n"
                             "  workbench::register_autograd_kernels(declaration(), m);\n}\n")
    return _fill("op.cpp.in", op=spec.name, namespace=namespace, declaration=spec.declaration(),
                 externs="\n".join(f'extern "C" const WbVariantInfo* {v["symbol"]}(void);' for v in variants),
                 table=",\n".join(f'      {{"{v["name"]}", {v["symbol"]}}}' for v in variants),
                 entries="\n".join(entries), defs="\n".join(defs), registrations="".join(registrations))


def autograd_source() -> str:
    """bindings/harness/op_autograd.cpp, as it is (op.cpp defines WB_OPS_NAMESPACE before including it)."""
    return ("// Copied from bindings/harness/op_autograd.cpp by export.\n"
            + (config.BINDINGS_DIR / "harness" / "op_autograd.cpp").read_text())


def _wrapper(symbol_from: str, symbol_to: str, include: str, what: str) -> str:
    return (f"// {what}, compiled with its exported C symbol renamed (see csrc/harness/op.cpp).\n"
            f"#define {symbol_from} {symbol_to}\n#include \"{include}\"\n")


def _python_function(spec) -> str:
    defaults = _attr_default_suffix(spec)
    params = [t.name for t in spec.inputs] + [f"{a.name}{d}" for a, d in zip(spec.attrs, defaults)]
    args = [t.name for t in spec.inputs] + [a.name for a in spec.attrs]
    doc = spec.doc.replace('"""', "'''")
    return (f"def {spec.name}({', '.join(params + ['*', 'variant=' + chr(34) * 2])}):\n"
            f'    """{doc}. variant: one of VARIANTS, or "" for the first that takes the tensors\' device and dtype."""\n'
            f"    return forward_op({', '.join(args + ['variant'])})")


def _test_sizes(spec) -> tuple[list, tuple]:
    """The spec's check sizes up to TEST_SIZE_ELEMENTS elements per input (an empty one included),
    and one with every input non-empty for opcheck and compile."""
    import math

    small = [s for s in spec.check_sizes if max(math.prod(x) for x in spec.input_shapes(s)) <= TEST_SIZE_ELEMENTS]
    full = [s for s in small if all(math.prod(x) > 0 for x in spec.input_shapes(s))]
    sizes = full[:4] + [s for s in small if s not in full][:1]
    sample = next((s for s in full if any(math.prod(x) > 1 for x in spec.input_shapes(s))), None)
    if not sizes or sample is None:
        sample = spec.sample_size()
        sizes = sizes or [sample]
    return [tuple(s) for s in sizes], tuple(sample)


def _provenance(sources: list[pathlib.Path]) -> dict:
    from .. import __version__

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=config.REPO_ROOT, capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"workbench": __version__, "commit": commit,
            "sources": {_packaged_path(p): hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in sources}}


def _decl_py(spec, variants: list[dict], namespace: str, fwd: str, bwd: str | None, sizes, sample, sources) -> str:
    values = {
        "OP": spec.name, "NAMESPACE": namespace, "DOC": spec.doc, "SCHEMA": fwd, "BACKWARD_SCHEMA": bwd,
        "INPUTS": [{"name": t.name, "dims": t.dims, "differentiable": t.differentiable,
                    "read_by_backward": t.read_by_backward, "grad_terms": t.grad_terms, "scale": t.scale}
                   for t in spec.inputs],
        "OUTPUTS": [{"name": o.name, "dims": o.dims, "terms": o.terms} for o in spec.outputs],
        "ATTRS": [{"name": a.name, "kind": _CPP_TYPES[a.kind][0], "required": a.required, "default": None if a.required else a.default,
                   "min": a.min, "max": a.max, "finite": a.finite} for a in spec.attrs],
        "DTYPES": DTYPE_NAMES,
        "VARIANTS": [{k: v[k] for k in ("name", "device", "dtypes", "description", "source")} for v in variants],
        "SIZE": spec.size_pattern.text,
        "TEST_SIZES": sizes, "OPCHECK_SIZE": sample,
        "SAMPLE_ATTRS": list(spec.sample_attrs()[0].items()),
        "TOLERANCES": dict(TOLERANCES),
        "PROVENANCE": _provenance(sources),
    }
    body = "\n".join(f"{k} = {_literal(v)}" for k, v in values.items())
    return (f'"""The op\'s declaration, generated from workbench/specs/{spec.name}.py by `python -m workbench '
            f'export`:\nwhat the fake implementation checks, the variants compiled in (in order of preference), '
            f'and what\nthe test runs (sizes, attributes, tolerances per dtype against float64)."""\n{body}\n')


def package_files(op: str, spec, names: list[str], package: str, namespace: str) -> dict[str, str | bytes]:
    """Every file of the package: relative path -> content."""
    src = registry.sources(op)
    cpp = cpp_variants(op)
    infos = {n: registry.static_variant(op, cpp[n], n) for n in names}
    with_cuda = any(i.device == "cuda" for i in infos.values())
    files: dict[str, str | bytes] = {}
    copied: list[pathlib.Path] = []

    def copy_closure(source: pathlib.Path, include_dirs) -> None:
        for path in _closure(source, include_dirs):
            if path not in copied:
                copied.append(path)
                files[_packaged_path(path)] = path.read_bytes()

    variants = []
    for n in names:
        copy_closure(cpp[n], [config.COMMON_DIR, src.kernel_dir])
        ext = cpp[n].suffix
        symbol = f"{namespace}_variant_{n}"
        files[f"csrc/generated/{n}{ext}"] = _wrapper("workbench_variant_info", symbol,
                                                     "../" + _packaged_path(cpp[n])[len("csrc/"):],
                                                     f"Variant {n} of {op} ({cpp[n].name})")
        variants.append({"name": n, "device": infos[n].device, "dtypes": infos[n].dtypes,
                         "description": infos[n].description, "source": _packaged_path(cpp[n]), "symbol": symbol,
                         "generated": f"csrc/generated/{n}{ext}"})
    copy_closure(src.binding, [config.BINDINGS_DIR, config.COMMON_DIR, src.kernel_dir])
    binding_wrapper = "csrc/generated/_binding.cpp"
    files[binding_wrapper] = _wrapper("workbench_op_binding", f"{namespace}_op_binding",
                                      "../" + _packaged_path(src.binding)[len("csrc/"):], f"{op}'s binding")
    if any(v["generated"] == binding_wrapper for v in variants):
        raise ValueError("variants: a variant named '_binding' clashes with the binding's wrapper; rename it")
    harness_dir = config.BINDINGS_DIR / "harness"
    for f in ("op_decl.h", "op_decl.cpp", "call_contract.h", "call_check.h", "call_check.cpp"):  # the call contract
        files[f"csrc/harness/{f}"] = (harness_dir / f).read_bytes()
    for f in ("harness.h", "harness.cpp", "module.cpp"):
        files[f"csrc/harness/{f}"] = (TEMPLATES / f).read_bytes()
    files["csrc/harness/op_autograd.cpp"] = autograd_source()  # op.cpp includes it
    files["csrc/harness/op.cpp"] = _op_cpp(spec, variants, namespace, with_cuda)

    fwd, bwd = _schemas(spec)
    sizes, sample = _test_sizes(spec)
    math_text, spec_py = _math_source(spec)
    doc = spec.doc.replace('"""', "'''")
    listed = ", ".join(names)
    files[f"{package}/__init__.py"] = _fill("__init__.py.in", doc=doc + ".", namespace=namespace,
                                            op=op, variant_list=listed, function=_python_function(spec))
    files[f"{package}/_decl.py"] = _decl_py(spec, variants, namespace, fwd, bwd, sizes, sample, copied)
    files[f"{package}/_shapes.py"] = ("# Copied from workbench/model/shapes.py by export: the Python twin of "
                                      "csrc/harness's shape rule and call check.\n"
                                      + (config.PACKAGE_DIR / "model" / "shapes.py").read_text())
    files[f"{package}/_math.py"] = f"# Copied from workbench/specs/{op}_math.py by export.\n" + math_text
    files[f"{package}/spec.py"] = spec_py

    sources = sorted(v["generated"] for v in variants) + [binding_wrapper] + [
        f"csrc/harness/{f}" for f in ("module.cpp", "op.cpp", "op_decl.cpp", "call_check.cpp")]  # op.cpp includes harness.cpp
    include_dirs = ["csrc/harness", "csrc/kernels/common", f"csrc/kernels/{op}", "csrc/bindings"]
    kind = "CUDAExtension" if with_cuda else "CppExtension"
    why = ("a CUDA variant is exported, so nvcc builds the .cu files" if with_cuda
           else "only CPU variants are exported, so the host compiler alone builds it")
    files["setup.py"] = _fill("setup.py.in", package=package, ext_kind=kind, why_kind=why, with_cuda=with_cuda,
                              sources=_literal(sources), include_dirs=_literal(include_dirs), arch_list=ARCH_LIST)
    files["pyproject.toml"] = _fill("pyproject.toml.in", dist_name=package.replace("_", "-"), version="0.1.0",
                                    description=f"torch.ops.{namespace}.{op}: {doc}".replace('"', "'"),
                                    package=package)
    files["MANIFEST.in"] = (TEMPLATES / "MANIFEST.in").read_bytes()
    files[".gitignore"] = "build/\n*.egg-info/\n*.so\n__pycache__/\n"
    files[f"tests/test_{op}.py"] = _fill("test_op.py.in", package=package)
    files["tests/conftest.py"] = _fill("conftest.py.in", package=package)
    rows = "\n".join(f"| {v['name']} | {v['device']} | {', '.join(v['dtypes'])} | {v['description']} |" for v in variants)
    call = ", ".join([t.name for t in spec.inputs] + [f"{k}={v!r}" for k, v in spec.sample_attrs()[0].items()])
    files["README.md"] = _fill(
        "README.md.in", package=package, doc=doc + ".", namespace=namespace, op=op,
        variant_csv=",".join(names), variant_rows=rows, schema=f"`{fwd}`",
        nvcc_note=" (nvcc for the CUDA variants)" if with_cuda else "",
        arch_note=(f"CUDA code is built for the GPU the build machine has, or where it has none for "
                   f"TORCH_CUDA_ARCH_LIST (default `{ARCH_LIST}`)." if with_cuda else ""),
        example=f"y = {package}.{op}({call})              # tensors {', '.join(t.name for t in spec.inputs)}: "
                f"{', '.join(f'{t.name} [{t.dims}]' for t in spec.inputs)}")
    return files
