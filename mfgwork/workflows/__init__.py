"""Workflows: batch work on files.

``runs`` (a notebook executed by papermill into a run folder), ``specs`` (the parameter-grid
language), ``sweeps`` (a notebook over a grid, parallel and resumable), ``sweep_plots``,
``scan`` with ``scan_plan``, ``scan_solve`` and ``scan_store`` (a problem over a grid as
an xarray Dataset, batched, in zarr).
Imports from ``analysis`` and below.
"""
