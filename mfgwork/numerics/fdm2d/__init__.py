"""The implicit finite-difference scheme on 2-D grids (:mod:`mfgwork.core.grid2d`): the
5-point upwind stencil, the HJB/FP sweeps with a sparse direct or a matrix-free Krylov solver."""
