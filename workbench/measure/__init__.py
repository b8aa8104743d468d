"""Measuring and proving: the check matrix (correctness) and gradcheck (gradients) against a float64
reference; the timers (timing) and the device's ceilings (ceilings); the benchmark (benchmark; its rows,
table and speedups: bench_rows), each row's output check (verify), its physics guard (physics) and its
clocks (conditions); the results files (results); a result's table and plots (bench_result).
May import: model, build, run (loading, isolation), explain (a result's plots, when asked for),
cluster (bench(cluster=...) hands the sweep to it, and it hands bench itself to each worker).
"""
