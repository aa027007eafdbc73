"""Numerics: the solvers of the MFG system.

``fdm/`` (finite-difference HJB and Fokker–Planck sweeps and their kernels), ``particles/``
(the particle Fokker–Planck solver and its kernels), ``iteration`` (the fixed-point
coupling of the two), ``finite_state`` (the sweeps of two-state games) and
``attendance_newton`` (Newton's method on their attendance path). Imports from ``core``
only; a solver never names a model.
"""
