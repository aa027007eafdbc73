"""The HJB step's residual and Jacobian (:meth:`.stencil.Stencil.system`) for H = ½|p|² in
one compiled pass over the nodes (numba; NumPy float64, one problem).

With the edge gradients of :mod:`.stencil` and a = (q_b)_+, b = (q_f)_− per axis,
Ĥ = ½ Σ_axes (a² + b²), ∂Ĥ/∂q_b = a, ∂Ĥ/∂q_f = b; R and the coefficients as in
:mod:`.stencil` (the array code there is the reference: a test compares the two).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def quadratic_system(u, u_next, F, ox, oy, inv_hx, inv_hy, inv_wx, inv_wy, nu, dW, dE, dS,
                     dN, to_W, to_E, to_S, to_N, active, inv_dt):  # pragma: no cover
    """(diag, W, E, S, N, R) of the HJB step at u, arrays (ny, nx)."""
    ny, nx = u.shape
    diag, W, E = np.empty_like(u), np.empty_like(u), np.empty_like(u)
    S, N, R = np.empty_like(u), np.empty_like(u), np.empty_like(u)
    for j in range(ny):
        for i in range(nx):
            c = u[j, i]
            gxb = (c - u[j, i - 1]) * ox[j, i - 1] * inv_hx if i > 0 else 0.0
            gxf = (u[j, i + 1] - c) * ox[j, i] * inv_hx if i < nx - 1 else 0.0
            gyb = (c - u[j - 1, i]) * oy[j - 1, i] * inv_hy if j > 0 else 0.0
            gyf = (u[j + 1, i] - c) * oy[j, i] * inv_hy if j < ny - 1 else 0.0
            ax, ay = max(gxb, 0.0), max(gyb, 0.0)
            bx, by = min(gxf, 0.0), min(gyf, 0.0)
            value = 0.5 * ((ax * ax + ay * ay) + (bx * bx + by * by))
            lap = (gxf - gxb) * inv_wx[i] + (gyf - gyb) * inv_wy[j]
            act = active[j, i]
            R[j, i] = ((c - u_next[j, i]) * inv_dt - nu * lap + value - F[j, i]) * act
            w = dW[j, i] - ax * inv_hx
            e = dE[j, i] + bx * inv_hx
            s = dS[j, i] - ay * inv_hy
            n = dN[j, i] + by * inv_hy
            diag[j, i] = act * (inv_dt - (w + e + s + n)) + (1.0 - act)
            W[j, i] = w * to_W[j, i]
            E[j, i] = e * to_E[j, i]
            S[j, i] = s * to_S[j, i]
            N[j, i] = n * to_N[j, i]
    return diag, W, E, S, N, R


@njit(cache=True, nogil=True, fastmath={"reassoc"})
def residual_norms(u, R):  # pragma: no cover - compiled
    """(max|R|, max|u|, Σ R²) over arrays (ny, nx): Newton's stopping test in one pass."""
    r_max = u_max = sq = 0.0
    for j in range(u.shape[0]):
        for i in range(u.shape[1]):
            r = abs(R[j, i])
            r_max = max(r_max, r)
            u_max = max(u_max, abs(u[j, i]))
            sq += r * r
    return r_max, u_max, sq
