"""Compiled (numba) sweeps of the two-state scheme (see :mod:`.finite_state`)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def hjb_sweep(U, F, dt, c):  # pragma: no cover - compiled
    """The closed-form implicit HJB steps of :class:`.finite_state.TwoStateScheme`, in place."""
    for n in range(U.shape[0] - 2, -1, -1):
        r = (U[n + 1, 1] - U[n + 1, 0]) / dt + F[n, 1] - F[n, 0]
        d = 2.0 * r / (1.0 / dt + np.sqrt(1.0 / dt**2 + 2.0 * abs(r) / c))
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
