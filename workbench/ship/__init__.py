"""Shipping an op out of the workbench: a self-contained PyTorch package of some variants (export:
the arguments and the folder; package_contents, with export_templates: what the package holds) and
the NumPy front end, torch-free (ndarray, ndarray_build). May import: model, build.
"""
