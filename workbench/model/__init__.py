"""The op model, torch-free: what an op is (opspec: tensors, dims, attributes, outputs, sizes, the
ladder; shapes: the shape rule and the call check, twin of bindings/harness/call_check.cpp; error_cases:
the bad calls derived from a declaration; opmath: the named math modules a declaration points at) and
the catalog of the tree (registry: ops, their declarations in workbench/specs/, their variants'
sources). May import: the standard library, workbench.config and workbench.errors; never torch.
"""
