"""Compiling the finite-difference kernels of the NumPy backend before a solve is timed.

The NumPy backend runs its HJB and FP sweeps as Numba kernels, compiled at their first call
in a process (or loaded from Numba's on-disk cache, after the first run). :func:`compile_kernels`
makes that first call on a tiny grid, so that a solve can report the compile time apart from
its phases: ``res.timings["compile"]`` (0 for every later solve in the process).
"""

from __future__ import annotations

import time

import numpy as np

from ...core.backend import Backend
from ...core.grid import Grid
from .sweeps import FiniteDifferences

_compiled: set[str] = set()  # dtypes whose kernels this process has compiled or loaded


def compile_kernels(backend: Backend) -> float:
    """Seconds spent compiling (or loading) the NumPy sweeps in ``backend``'s dtype; 0.0
    when they already were in this process, or when ``backend`` is not NumPy."""
    if backend.name != "numpy" or backend.dtype in _compiled:
        return 0.0
    started = time.perf_counter()
    grid = Grid(-1.0, 1.0, 5, 1.0, 2)
    fd = FiniteDifferences(grid, 0.1, backend)
    zeros = np.zeros((grid.nt, grid.nx), dtype=backend.dtype)
    U = fd.solve_hjb(zeros[0], zeros, None)
    fd.solve_fp(fd.solve_hjb(zeros[0], zeros, U), np.full(grid.nx, 0.5, dtype=backend.dtype))
    _compiled.add(backend.dtype)
    return time.perf_counter() - started
