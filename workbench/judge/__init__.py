"""Running a variant's code out of the caller's process, on the caller's memory, and judging it.

    memory.py         arenas: device memory (CUDA IPC) or host memory (memfd) the caller owns and lends
    remote.py         the caller's end of a runner process (bindings/runner/wb_runner.cu, or
                      python_runner.py) and the Kernel that calls through one (Remote, kernel())
    start.py          starting one: start_cxx, start_python, isolated(op, variant)
    python_runner.py  the runner for variants that need Python (its entry point)
    sandbox.py        the sandbox a judged runner starts in (bubblewrap)
    clock.py          the judge's clock: timed batches on fresh inputs, every output verified
    ncu_watch.py      what ran, by Nsight Compute started by the judge (the SASS rules' evidence)

The rule everything here keeps: a runner makes calls and says only whether they went; what is
concluded (outputs, their correctness, times) the caller reads from its own memory and its own
clock. May import: model, build, run, measure, ship (the torch-free builds).
"""
