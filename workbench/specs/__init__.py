"""One module per op, each defining SPEC: the op's declaration (workbench.opspec.OpSpec), from which the
workbench derives its schemas, checks, fake and autograd registration, tests and benchmarks."""
