"""Finite-difference HJB and FP solvers (implicit Euler, monotone upwind, Achdou's adjoint)."""

from .kernels import FDKernels, fdm_kernels
from .sweeps import FiniteDifferences
from .tridiag import tridiagonal_solver

__all__ = ["FDKernels", "FiniteDifferences", "fdm_kernels", "tridiagonal_solver"]
