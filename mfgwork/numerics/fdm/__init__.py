"""Finite-difference HJB and FP solvers (implicit Euler, monotone upwind, Achdou's adjoint)."""

from .sweeps import FiniteDifferences
from .tridiag import tridiagonal_solver

__all__ = ["FiniteDifferences", "tridiagonal_solver"]
