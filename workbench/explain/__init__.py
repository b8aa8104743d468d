"""Explaining a result: Nsight Compute's counters and verdicts (profiling, ncu), the compiler's report
and SASS (ptxas), the roofline, a benchmark's result and its plots (plot, plot_axes) and the environment's (doctor). May import:
model, build, run, measure.
"""
