"""Compiled (numba) particle kernels for the NumPy backend: one pass over the particles per step.

Positions are stored as offsets y = x − x_min ∈ [0, L] (L = x_max − x_min). One step fuses the
drift interpolation, the Euler–Maruyama update, the reflection at the walls and the
cloud-in-cell deposit of the new positions; the Gaussian increments come from NumPy's
``Generator`` (PCG64) and are passed in. Positions and increments are stored in the working
dtype; the scalar arithmetic runs in float64 (the constants are passed as Python floats: on
the CPU this is free, while numba's float32 scalar code is several times slower). Node
masses accumulate in float64, serially, so the result does not depend on threading.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def fold(v, length):  # pragma: no cover - compiled
    """Reflect v into [0, L]: exact for any excursion (period 2L), clamped against rounding."""
    if not (0 <= v <= length):
        v = v % (2 * length)
        if v > length:
            v = 2 * length - v
        if not v >= 0:  # rounding, or NaN from a non-finite drift
            v = length * 0
        v = min(v, length)
    return v


@njit(cache=True, nogil=True)
def locate(v, inv_h, top):  # pragma: no cover - compiled
    """Cell index i ∈ [0, nx − 2] and fraction f ∈ [0, 1] of offset v (NaN goes to cell 0)."""
    s = v * inv_h
    if not s >= 0:
        s = inv_h * 0
    s = min(s, top)
    i = min(int(s), top - 1)
    return i, s - i


@njit(cache=True, nogil=True)
def cic_deposit(y, inv_h, out):  # pragma: no cover - compiled
    """Add the cloud-in-cell masses of particles at offsets y to the node masses ``out``."""
    top = out.shape[0] - 1
    for p in range(y.shape[0]):
        i, f = locate(y[p], inv_h, top)
        out[i] += 1 - f
        out[i + 1] += f


@njit(cache=True, nogil=True)
def step_deposit(y, xi, b, inv_h, dt, noise, length, out):  # pragma: no cover - compiled
    """One Euler–Maruyama step of every particle, then the deposit of the new positions.

    y ← fold(y + b(y) dt + noise ξ) with b linearly interpolated from the node values ``b``;
    ``noise`` = σ √dt. The CIC masses of the new positions are added to ``out``.
    """
    top = b.shape[0] - 1
    for p in range(y.shape[0]):
        i, f = locate(y[p], inv_h, top)
        v = fold(y[p] + (b[i] + f * (b[i + 1] - b[i])) * dt + noise * xi[p], length)
        y[p] = v
        i, f = locate(v, inv_h, top)
        out[i] += 1 - f
        out[i + 1] += f


def sample_offsets(m0: np.ndarray, u: np.ndarray, h: float) -> np.ndarray:
    """Offsets y = x − x_min distributed as the piecewise-linear density m0, from uniforms u.

    Inverse CDF: the cell j is found from the cumulative trapezoid masses; inside it the
    density is a + (b − a) t on t ∈ [0, 1], whose CDF is inverted in closed form
    t = (a + b) v / (a + √(a² + (b² − a²) v)).
    """
    dtype = u.dtype
    m0 = np.asarray(m0, dtype=np.float64)
    cells = 0.5 * h * (m0[:-1] + m0[1:])
    cdf = np.cumsum(cells)
    target = u.astype(np.float64) * cdf[-1]
    j = np.minimum(np.searchsorted(cdf, target, side="right"), cells.size - 1)
    below = np.where(j > 0, cdf[j - 1], 0.0)
    v = np.clip((target - below) / np.maximum(cells[j], np.finfo(np.float64).tiny), 0.0, 1.0)
    a, b = m0[j], m0[j + 1]
    den = a + np.sqrt(a * a + (b * b - a * a) * v)
    t = np.where(den > 0, (a + b) * v / np.where(den > 0, den, 1.0), v)
    return np.clip((j + t) * h, 0.0, h * (m0.size - 1)).astype(dtype)
