"""Compiled (numba) kernel of :mod:`.counting`: move every agent one step, count those above
a cut (the move is that of :func:`.numba_kernels.step_deposit`)."""

from __future__ import annotations

from numba import njit

from .numba_kernels import fold, locate


@njit(cache=True, nogil=True)
def step_count(y, xi, b, inv_h, dt, noise, length, cut):  # pragma: no cover - compiled
    """One Euler–Maruyama step of every agent (the move of ``step_deposit``); returns the
    number of new offsets above ``cut``."""
    top = b.shape[0] - 1
    count = 0
    for p in range(y.shape[0]):
        i, f = locate(y[p], inv_h, top)
        v = fold(y[p] + (b[i] + f * (b[i + 1] - b[i])) * dt + noise * xi[p], length)
        y[p] = v
        if v > cut:
            count += 1
    return count
