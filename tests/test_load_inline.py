"""load_inline: a variant from a source string (the notebook edit loop)."""
from __future__ import annotations

import pytest
import torch

from workbench.model import registry
from workbench.specs.bias_gelu import SPEC as spec

CPU_DESCRIPTION = "C++ on torch's CPU thread pool, parallel over rows; any alignment and column count"


def _with_description(cpu_source: str, description: str) -> str:
    assert CPU_DESCRIPTION in cpu_source, "kernels/bias_gelu/cpu.cpp changed its description; update this test"
    return cpu_source.replace(CPU_DESCRIPTION, description)


def _inputs(shape=(6, 10), seed=0):
    return spec.new_inputs(shape, torch.float32, "cpu", torch.Generator().manual_seed(seed))


def test_inline_copy_builds_lists_and_checks(wb, cpu_kernel, cpu_source_text):
    src = _with_description(cpu_source_text, "inline copy of cpu for the tests")
    k = wb.load_inline("bias_gelu", src, name="inline_copy")
    assert k.name == "inline_copy" and k.device == "cpu"
    assert k.dtypes == ("float32", "float64", "float16", "bfloat16")
    assert k.description == "inline copy of cpu for the tests"
    assert not k.stale
    listed = {v.name: v for v in wb.variants("bias_gelu")}
    assert "inline_copy" in listed, list(listed)
    assert "(inline)" in listed["inline_copy"].description
    assert "(inline)" not in listed["cpu"].description
    report = wb.check("bias_gelu", k, seed=99)
    assert report.ok, report.summary()
    # The op resolves the new name too, and agrees with the file-based cpu variant bit for bit.
    x, b = _inputs()
    assert torch.equal(torch.ops.workbench.bias_gelu(x, b, "inline_copy"), cpu_kernel(x, b))


def test_inline_is_cached_by_content(wb, cpu_kernel, cpu_source_text):
    src = _with_description(cpu_source_text, "inline cached twice")
    k1 = wb.load_inline("bias_gelu", src, name="inline_twice")
    k2 = wb.load_inline("bias_gelu", src, name="inline_twice")
    assert k2.build_id == k1.build_id and not k2.built
    assert not k1.stale and not k2.stale


def test_edit_under_same_name_gives_new_build_and_old_handle_keeps_working(wb, cpu_kernel, cpu_source_text):
    good = _with_description(cpu_source_text, "edit loop: version 1")
    # Version 2 computes something else (GELU of x + 2 * bias) so the two builds are told apart.
    marker = "wb_to_acc(x[r * cols + c]) + wb_to_acc(bias[c])"
    assert marker in cpu_source_text, "kernels/bias_gelu/cpu.cpp changed its forward; update this test"
    edited = _with_description(cpu_source_text, "edit loop: version 2").replace(
        marker, "wb_to_acc(x[r * cols + c]) + 2.0f * wb_to_acc(bias[c])")

    x, b = _inputs(seed=3)
    old = wb.load_inline("bias_gelu", good, name="edit_loop")
    y_old = old(x, b)
    new = wb.load_inline("bias_gelu", edited, name="edit_loop")

    assert new.build_id != old.build_id
    assert new.description == "edit loop: version 2"
    assert old.stale and not new.stale
    assert "stale" in repr(old)
    # The old handle still runs its own build...
    assert torch.equal(old(x, b), y_old)
    torch.testing.assert_close(y_old.double(), spec.reference(x, b), rtol=1e-5, atol=1e-6)
    # ... the new one (and the bare name) run the edit.
    torch.testing.assert_close(new(x, b).double(), spec.reference(x, 2 * b), rtol=1e-5, atol=1e-6)
    assert torch.equal(torch.ops.workbench.bias_gelu(x, b, "edit_loop"), new(x, b))
    assert torch.equal(torch.ops.workbench.bias_gelu(x, b, old.qualified), y_old)
    # Backward through the old handle uses the old build as well.
    xg, bg = x.clone().requires_grad_(), b.clone().requires_grad_()
    old(xg, bg).sum().backward()
    _, rdb = spec.run_reference_backward((torch.ones_like(x),), (x, b), {})
    torch.testing.assert_close(bg.grad.double(), rdb, rtol=1e-5, atol=1e-5)
    # variants() shows the newest build's description for the name.
    listed = {v.name: v for v in wb.variants("bias_gelu")}
    assert listed["edit_loop"].description.startswith("edit loop: version 2")


def test_inline_source_is_kept_in_the_cache(wb, cpu_kernel, cpu_source_text):
    """The string is written under the cache (named by its hash), so the build log and errors can
    point at a real file, and the text is never written into the repository."""
    from workbench import config

    src = _with_description(cpu_source_text, "inline source location probe")
    k = wb.load_inline("bias_gelu", src, name="where_probe")
    assert k.source.suffix == ".cpp"
    assert config.cache_dir() in k.source.parents
    assert k.source.read_text() == src


@pytest.mark.parametrize("name", ["bad name", "a@b", "a/b", "", "1abc", "x-y", None, 5], ids=repr)
def test_invalid_name(wb, cpu_source_text, name):
    with pytest.raises(ValueError, match="variant name must be an identifier"):
        wb.load_inline("bias_gelu", cpu_source_text, name=name)


@pytest.mark.parametrize("source", ["", "   \n\t", None, b"int x;"], ids=["empty", "blank", "None", "bytes"])
def test_empty_or_non_string_source(wb, source):
    with pytest.raises(ValueError, match="source must be a non-empty string"):
        wb.load_inline("bias_gelu", source, name="empty_src")


@pytest.mark.parametrize("op_name", ["no_such_op", "", None], ids=repr)
def test_unknown_op(wb, cpu_source_text, op_name):
    with pytest.raises(ValueError, match="op must be one of"):
        wb.load_inline(op_name, cpu_source_text, name="unknown_op")


def test_source_for_another_op_is_refused(wb, cpu_kernel, cpu_source_text):
    with pytest.raises(ValueError, match=r"<inline bias_gelu/other_op>: .*exports a variant of op 'not_bias_gelu', "
                                         r"not 'bias_gelu'"):
        wb.load_inline("bias_gelu", cpu_source_text.replace("WB_EXPORT_VARIANT(bias_gelu,", "WB_EXPORT_VARIANT(not_bias_gelu,"),
                       name="other_op")


def test_source_without_export_is_refused(wb, cpu_kernel):
    with pytest.raises(ValueError, match=r"<inline bias_gelu/no_export>: .*exports no workbench_variant_info\(\).*"
                                         r"expected WB_EXPORT_VARIANT\(bias_gelu, device, dtypes"):
        wb.load_inline("bias_gelu", "int not_a_variant = 1;\n", name="no_export")


def test_what_a_loaded_variant_declares_is_what_its_library_exports(wb, cpu_kernel, cpu_source_text, tmp_path):
    """Issue 46: a load reads the built library's descriptor (through the harness), not the source
    text. A description with "//" in it (a URL) and a dtype mask written as a macro: the text would
    cut the first at the "//" and see no dtype in the second; the library says both as compiled."""
    start = cpu_source_text.index("WB_EXPORT_VARIANT(bias_gelu,")
    source = (cpu_source_text[:start] + "#define MASK_FROM_A_MACRO (WB_F32 | WB_F64)\n"
              + 'WB_EXPORT_VARIANT(bias_gelu, WB_DEVICE_CPU, MASK_FROM_A_MACRO, "see https://example.org/gelu",\n'
              + "                  launchers, wb_cpu_status_string)\n")
    k = wb.load_inline("bias_gelu", source, name="declared_by_library")
    assert (k.device, k.dtypes, k.description) == ("cpu", ("float32", "float64"), "see https://example.org/gelu")
    listed = {v.name: v for v in wb.variants("bias_gelu")}["declared_by_library"]
    assert (listed.dtypes, listed.description) == (k.dtypes, k.description + " (inline)")
    path = tmp_path / "declared_by_library.cpp"
    path.write_text(source)
    # The listing reader (for variants not built) keeps the string whole; the macro's value it cannot know.
    assert registry.static_variant("bias_gelu", path).description == "see https://example.org/gelu"
