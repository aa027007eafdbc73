"""Finite-difference HJB and FP solvers (implicit Euler, monotone upwind, Achdou's adjoint):
the sweeps, their kernels per (backend, device) in one table (``kernels``), the numba, Triton
and tangent kernels. Imports from ``core`` only."""

from .kernels import FDKernels, fdm_kernels, tridiagonal_solver
from .sweeps import FiniteDifferences

__all__ = ["FDKernels", "FiniteDifferences", "fdm_kernels", "tridiagonal_solver"]
