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


@njit(cache=True, nogil=True, inline="always")
def _newton_update(u, du, tol):  # pragma: no cover - compiled
    """u ← u − du; whether the update was small: max|du| ≤ tol (1 + max|u|)."""
    step = 0.0
    size = 0.0
    for i in range(u.size):
        u[i] -= du[i]
        step = max(step, abs(du[i]))
        size = max(size, abs(u[i]))
    return step <= tol * (1.0 + size)


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
        if use_guess:   # the guess shifted by the change found at level n + 1
            u[:] = guess[n] + (U[n + 1] - guess[n + 1])
        else:
            u[:] = U[n + 1]
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
            if _newton_update(u, du, tol):
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


# -- the shipped Hamiltonians other than ½|p|² ---------------------------------------------
#: ``kind`` codes of :func:`model_hjb_sweep` and :func:`model_fp_sweep`, with their two
#: parameters (a, b): H = |p|^a / a (power), H = |p|² / (2 (a + m₊)^b) (congestion). Both
#: vanish at p = 0, so the Engquist–Osher Ĥ is H((q_{i−1})_+) + H((q_i)_−).
POWER, CONGESTION = 1, 2


@njit(cache=True, nogil=True, inline="always")
def _h_dp(kind, a, p, factor):  # pragma: no cover - compiled
    """(H(p), ∂p H(p)) of the model ``kind`` with exponent a (power) or the congestion
    factor (a + m₊)^(−b) of the node (congestion)."""
    if kind == CONGESTION:
        return 0.5 * p * p * factor, p * factor
    if p == 0.0:
        return 0.0, 0.0
    r = _power(abs(p), a - 1.0)
    return r * abs(p) / a, r if p > 0.0 else -r


@njit(cache=True, nogil=True, inline="always")
def _power(x, e):  # pragma: no cover - compiled
    """x^e for x > 0, by a square root, a product or nothing for the common exponents
    (``**`` costs as much as the rest of a Newton iteration's arithmetic)."""
    if e == 0.5:
        return np.sqrt(x)
    if e == -0.5:
        return 1.0 / np.sqrt(x)
    if e == 1.0:
        return x
    if e == -1.0:
        return 1.0 / x
    if e == 2.0:
        return x * x
    return x ** e


@njit(cache=True, nogil=True)
def _factors(m, kind, a, b, out):  # pragma: no cover - compiled
    """The congestion factors (a + m₊)^(−b) of one density row (unused by other kinds)."""
    if kind == CONGESTION:
        for i in range(m.shape[0]):
            out[i] = _power(a + max(m[i], 0.0), -b)


@njit(cache=True, nogil=True)
def _model_bands(u, factor, kind, a, nu, h, inv_hw, inv_dt, lower, diag, upper, ham
                 ):  # pragma: no cover - compiled
    """Bands of J(u) and the Engquist–Osher Ĥ(u) at the nodes."""
    nx = u.shape[0]
    for i in range(nx):
        ql = (u[i] - u[i - 1]) / h if i > 0 else 0.0
        qr = (u[i + 1] - u[i]) / h if i < nx - 1 else 0.0
        h_left, d_left = _h_dp(kind, a, max(ql, 0.0), factor[i])
        h_right, d_right = _h_dp(kind, a, min(qr, 0.0), factor[i])
        lo = -nu * inv_hw[i] - d_left / h if i > 0 else 0.0
        up = -nu * inv_hw[i] + d_right / h if i < nx - 1 else 0.0
        lower[i] = lo
        upper[i] = up
        diag[i] = inv_dt - lo - up
        ham[i] = h_left + h_right


@njit(cache=True, nogil=True)
def model_hjb_sweep(U, F, guess, use_guess, density, kind, a, b, nu, h, dt, inv_hw, inv_w,
                    tol, max_newton):  # pragma: no cover - compiled
    """:func:`hjb_sweep` for the model ``kind`` (the step from t_{n+1} to t_n sees the
    density row n of ``density``, m^{n+1}; a (1, nx) row of zeros where H ignores m)."""
    nt, nx = F.shape
    lower, diag, upper, ham, res, du, cp, dp, u, factor = np.empty((10, nx), U.dtype)
    iterations = 0
    frozen = density.shape[0] > 1
    _factors(density[0], kind, a, b, factor)
    for n in range(nt - 1, -1, -1):
        if use_guess:   # the guess shifted by the change found at level n + 1
            u[:] = guess[n] + (U[n + 1] - guess[n + 1])
        else:
            u[:] = U[n + 1]
        if frozen:
            _factors(density[n], kind, a, b, factor)
        converged = False
        for _ in range(max_newton):
            iterations += 1
            _model_bands(u, factor, kind, a, nu, h, inv_hw, 1.0 / dt, lower, diag, upper, ham)
            for i in range(nx):
                ql = (u[i] - u[i - 1]) / h if i > 0 else 0.0
                qr = (u[i + 1] - u[i]) / h if i < nx - 1 else 0.0
                res[i] = ((u[i] - U[n + 1, i]) / dt - nu * inv_w[i] * (qr - ql) + ham[i]
                          - F[n, i])
            _thomas(lower, diag, upper, res, du, cp, dp)
            if _newton_update(u, du, tol):
                converged = True
                break
        U[n, :] = u
        if not converged:
            return iterations, n
    return iterations, -1


@njit(cache=True, nogil=True)
def model_fp_sweep(U, mu, density, kind, a, b, nu, h, dt, inv_hw):  # pragma: no cover
    """:func:`fp_sweep` for the model ``kind`` (the step from t_n to t_{n+1} sees the
    density row n of ``density``, as in :func:`model_hjb_sweep`)."""
    nt = U.shape[0] - 1
    nx = U.shape[1]
    lower, diag, upper, ham, lt, ut, rhs, cp, dp, factor = np.empty((10, nx), U.dtype)
    frozen = density.shape[0] > 1
    _factors(density[0], kind, a, b, factor)
    for n in range(nt):
        if frozen:
            _factors(density[n], kind, a, b, factor)
        _model_bands(U[n], factor, kind, a, nu, h, inv_hw, 1.0 / dt, lower, diag, upper, ham)
        lt[0] = 0.0
        ut[nx - 1] = 0.0
        for i in range(nx):
            if i > 0:
                lt[i] = upper[i - 1]
            if i < nx - 1:
                ut[i] = lower[i + 1]
            rhs[i] = mu[n, i] / dt
        _thomas(lt, diag, ut, rhs, mu[n + 1], cp, dp)
