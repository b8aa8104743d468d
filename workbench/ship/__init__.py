"""Shipping an op out of the workbench: a self-contained PyTorch package of some variants (export,
with export_templates; export_files: what the package holds) and the NumPy front end, torch-free
(ndarray, ndarray_build). May import: model, build.
"""
