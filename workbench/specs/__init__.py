"""One declaration per op, <op>.py defining SPEC (workbench.model.opspec.OpSpec): the op's tensors, dims,
attributes, outputs, sizes and ladder, torch-free data from which the workbench derives its schemas,
checks, fake and autograd registration, tests and benchmarks. Its math (float64 reference, eager
PyTorch, double backward, layer init) lives beside it in <op>_math.py, which may import torch and
is named in the declaration by MathModule: a process without torch reads every declaration.
May import: model (a declaration); its math module anything."""

# The course's ladder names, preferred in this order where present (16-byte vectors first): the
# elementwise and bias-over-rows ops' `preferred` (nn layers' default variant).
COURSE_PREFERENCE = {
    ("cuda", "float32"): ["vec4", "scalar"],
    ("cuda", "float16"): ["half", "scalar"],
    ("cuda", "bfloat16"): ["half", "scalar"],
    ("cuda", "float64"): ["scalar"],
    ("cpu", None): ["cpu"],
}
