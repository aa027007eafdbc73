"""Compiled (numba) time loops for the NumPy backend: the same scheme as :mod:`.operators`.

The HJB and FP sweeps are sequential in time and work on short vectors, so on the CPU their
cost is the per-step overhead of array calls. These kernels run the whole sweep in one
compiled loop (Thomas algorithm for the tridiagonal M-matrices, no pivoting needed). The
array-API sweeps in :mod:`.sweeps` compute the same numbers and are checked against them.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _thomas(a, b, c, d, x, cp, dp):  # pragma: no cover - compiled
    n = b.shape[0]
    cp[0] = c[0] / b[0]
    dp[0] = d[0] / b[0]
    for i in range(1, n):
        denom = b[i] - a[i] * cp[i - 1]
        cp[i] = c[i] / denom if i < n - 1 else 0.0
        dp[i] = (d[i] - a[i] * dp[i - 1]) / denom
    x[n - 1] = dp[n - 1]
    for i in range(n - 2, -1, -1):
        x[i] = dp[i] - cp[i] * x[i + 1]


@njit(cache=True, nogil=True)
def _bands(u, nu, h, dt, inv_hw, lower, diag, upper):  # pragma: no cover - compiled
    nx = u.shape[0]
    for i in range(nx):
        lo = 0.0
        up = 0.0
        if i > 0:
            lo = -nu * inv_hw[i] - max((u[i] - u[i - 1]) / h, 0.0) / h
        if i < nx - 1:
            up = -nu * inv_hw[i] + min((u[i + 1] - u[i]) / h, 0.0) / h
        lower[i] = lo
        upper[i] = up
        diag[i] = 1.0 / dt - lo - up


@njit(cache=True, nogil=True)
def hjb_sweep(U, F, guess, use_guess, nu, h, dt, inv_hw, inv_w, tol, max_newton
              ):  # pragma: no cover - compiled
    """Backward implicit Euler + Newton; fills U[:-1] given U[-1]. Returns (Newton its, bad n).

    ``bad n`` is -1 when every step converged, else the first time index that did not.
    """
    nt, nx = F.shape
    lower, diag, upper, res, du, cp, dp, u = np.empty((8, nx), U.dtype)
    iterations = 0
    for n in range(nt - 1, -1, -1):
        u[:] = guess[n] if use_guess else U[n + 1]
        converged = False
        for _ in range(max_newton):
            iterations += 1
            _bands(u, nu, h, dt, inv_hw, lower, diag, upper)
            for i in range(nx):
                ql = (u[i] - u[i - 1]) / h if i > 0 else 0.0
                qr = (u[i + 1] - u[i]) / h if i < nx - 1 else 0.0
                ham = 0.5 * (max(ql, 0.0) ** 2 + min(qr, 0.0) ** 2)
                res[i] = ((u[i] - U[n + 1, i]) / dt - nu * inv_w[i] * (qr - ql) + ham
                          - F[n, i])
            _thomas(lower, diag, upper, res, du, cp, dp)
            step = 0.0
            size = 0.0
            for i in range(nx):
                u[i] -= du[i]
                step = max(step, abs(du[i]))
                size = max(size, abs(u[i]))
            if not step <= tol * (1.0 + size):
                continue
            converged = True
            break
        U[n, :] = u
        if not converged:
            return iterations, n
    return iterations, -1


@njit(cache=True, nogil=True)
def fp_sweep(U, mu, nu, h, dt, inv_hw):  # pragma: no cover - compiled
    """Forward implicit Euler for cell masses: J(U[n])ᵀ mu[n+1] = mu[n] / dt."""
    nt = U.shape[0] - 1
    nx = U.shape[1]
    lower, diag, upper, lt, ut, rhs, cp, dp = np.empty((8, nx), U.dtype)
    for n in range(nt):
        _bands(U[n], nu, h, dt, inv_hw, lower, diag, upper)
        lt[0] = 0.0
        ut[nx - 1] = 0.0
        for i in range(nx):
            if i > 0:
                lt[i] = upper[i - 1]
            if i < nx - 1:
                ut[i] = lower[i + 1]
            rhs[i] = mu[n, i] / dt
        _thomas(lt, diag, ut, rhs, mu[n + 1], cp, dp)
