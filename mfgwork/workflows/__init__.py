"""Workflows: batch work on files.

``runs`` (a notebook executed by papermill into a run folder), ``specs`` (the parameter-grid
language), ``sweeps`` (a notebook over a grid, parallel and resumable), ``sweep_plots``,
``scan`` with ``scan_plan``, ``scan_solve``, ``scan_store``, ``scan_inspect`` and
``scan_check`` (a problem over a grid as an xarray Dataset, batched, in zarr; a store is
inspected before it is read, its metadata and coordinates checked against its creation
record and each block against its digest).
Imports from ``analysis`` and below.
"""
