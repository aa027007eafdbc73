"""Compiled (numba) sweeps of the two-state scheme (see :mod:`.finite_state`)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def hjb_sweep(U, gap, F, dt, c):  # pragma: no cover - compiled
    """The closed-form implicit HJB steps of :class:`.finite_state.TwoStateScheme`, in place.

    The gap d^n = u_1^n − u_0^n is carried from step to step (``gap``), not recomputed from
    U: the values grow like T·max|F| and their difference would lose the gap to rounding.
    Each step solves d + Δt d|d|/(2c) = q, q = d^{n+1} + Δt (f_1^n − f_0^n), as
    d = 2q / (1 + √(1 + 2Δt|q|/c)) (no 1/Δt that could overflow)."""
    gap[-1] = U[-1, 1] - U[-1, 0]
    for n in range(U.shape[0] - 2, -1, -1):
        q = gap[n + 1] + dt * (F[n, 1] - F[n, 0])
        d = 2.0 * q / (1.0 + np.sqrt(1.0 + 2.0 * dt * abs(q) / c))
        gap[n] = d
        leave_home, leave_bar = max(-d, 0.0), max(d, 0.0)  # c β*
        U[n, 0] = U[n + 1, 0] + dt * (F[n, 0] - leave_home**2 / (2.0 * c))
        U[n, 1] = U[n + 1, 1] + dt * (F[n, 1] - leave_bar**2 / (2.0 * c))


@njit(cache=True, nogil=True)
def fp_sweep(beta, M, dt):  # pragma: no cover - compiled
    """The implicit Kolmogorov steps of :class:`.finite_state.TwoStateScheme`, in place."""
    for n in range(M.shape[0] - 1):
        b0, b1 = beta[n, 0], beta[n, 1]
        total = M[n, 0] + M[n, 1]
        det = 1.0 + dt * (b0 + b1)
        M[n + 1, 0] = (M[n, 0] + dt * b1 * total) / det
        M[n + 1, 1] = (M[n, 1] + dt * b0 * total) / det
