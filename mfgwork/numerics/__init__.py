"""Numerics: the solvers of the MFG system.

``fdm/`` (finite-difference HJB and Fokker–Planck sweeps and their kernels), ``particles/``
(the particle Fokker–Planck solver and its kernels), ``iteration`` (the fixed-point
coupling of the two). Imports from ``core`` only; a solver never names a model.
"""
