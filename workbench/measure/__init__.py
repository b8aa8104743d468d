"""Measuring and proving: the check matrix (correctness) and gradcheck (gradients) against a float64
reference; the timers (timing) and the device's ceilings (ceilings); the benchmark (benchmark), each
row's output check (verify) and clocks (conditions); the rows, their physics guard, speedups, verdicts
and results files (bench_rows).
May import: model, build, run (loading, isolation), explain (BenchResult, what bench returns, and its plots),
cluster (bench(cluster=...) hands the sweep to it, and it hands bench itself to each worker).
"""
