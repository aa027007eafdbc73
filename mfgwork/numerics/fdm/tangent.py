"""Compiled tangent linear model of the HJB–FP sweeps (numba), for Newton's method.

For running costs F^n = −y_n χ and the observed path z_n = χ·μ^{n+1} (μ the cell masses),
D[n, j] = ∂z_n/∂y_j: the backward sweep J_n δu^n = δu^{n+1}/Δt + δF^n, then the forward sweep
J_nᵀ δμ^{n+1} = δμ^n/Δt − K_n δu^n with K_n = Dᵀ diag(c) D the Hessian of μ^{n+1}·H(u^n)
(c_e = μ_{e+1} 1{q_e > 0} + μ_e 1{q_e < 0} on edge e, D the edge difference); all nt directions
at once (direction j is zero in δu^n for n > j), one Thomas elimination per level.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _solve_columns(a, b, c, d, cp, x):  # pragma: no cover - compiled
    """x = A⁻¹ d for the tridiagonal A (a_i = A[i, i−1], b_i, c_i = A[i, i+1]), d (n, m)."""
    n, m = d.shape
    cp[0] = c[0] / b[0]
    for j in range(m):
        x[0, j] = d[0, j] / b[0]
    for i in range(1, n):
        denom = b[i] - a[i] * cp[i - 1]
        cp[i] = c[i] / denom if i < n - 1 else 0.0
        for j in range(m):
            x[i, j] = (d[i, j] - a[i] * x[i - 1, j]) / denom
    for i in range(n - 2, -1, -1):
        for j in range(m):
            x[i, j] -= cp[i] * x[i + 1, j]


@njit(cache=True, nogil=True)
def tangent_jacobian(lower, diag, upper, lower_t, upper_t, q, mu, chi, h, dt
                     ):  # pragma: no cover - compiled
    """D (nt, nt) from the bands of J(u^n) and of J(u^n)ᵀ (levels 0..nt−1), the edge
    gradients q (nt, nx−1) and the cell masses mu (nt+1, nx)."""
    nt, nx = diag.shape
    du = np.zeros((nt + 1, nx, nt))
    rhs = np.zeros((nx, nt))
    cp = np.empty(nx)
    for n in range(nt - 1, -1, -1):
        for i in range(nx):
            rhs[i, n] = -chi[i]
            for j in range(n + 1, nt):
                rhs[i, j] = du[n + 1, i, j] / dt
        _solve_columns(lower[n], diag[n], upper[n], rhs[:, n:], cp, du[n, :, n:])
    out = np.empty((nt, nt))
    dmu = np.zeros((nx, nt))
    for n in range(nt):
        for i in range(nx):
            for j in range(nt):
                rhs[i, j] = dmu[i, j] / dt
        for e in range(nx - 1):
            if q[n, e] > 0:
                c = mu[n + 1, e + 1]
            elif q[n, e] < 0:
                c = mu[n + 1, e]
            else:
                continue
            c /= h * h
            for j in range(n, nt):
                flux = c * (du[n, e + 1, j] - du[n, e, j])
                rhs[e, j] += flux
                rhs[e + 1, j] -= flux
        _solve_columns(lower_t[n], diag[n], upper_t[n], rhs, cp, dmu)
        for j in range(nt):
            s = 0.0
            for i in range(nx):
                s += chi[i] * dmu[i, j]
            out[n, j] = s
    return out


@njit(cache=True, nogil=True)
def spd_solve(A, b):  # pragma: no cover - compiled
    """A⁻¹ b for a symmetric positive definite A by Cholesky, in plain loops: the Newton
    systems are small (nt × nt), and threaded BLAS only oversubscribes the cores there."""
    n = b.shape[0]
    L = np.zeros((n, n))
    for j in range(n):
        s = A[j, j]
        for k in range(j):
            s -= L[j, k] * L[j, k]
        if not s > 0.0:
            raise ValueError("matrix is not positive definite")
        L[j, j] = np.sqrt(s)
        for i in range(j + 1, n):
            s = A[i, j]
            for k in range(j):
                s -= L[i, k] * L[j, k]
            L[i, j] = s / L[j, j]
    x = b.copy()
    for i in range(n):
        for k in range(i):
            x[i] -= L[i, k] * x[k]
        x[i] /= L[i, i]
    for i in range(n - 1, -1, -1):
        for k in range(i + 1, n):
            x[i] -= L[k, i] * x[k]
        x[i] /= L[i, i]
    return x


@njit(cache=True, nogil=True)
def tangent_product(lower, diag, upper, lower_t, upper_t, q, mu, chi, h, dt, v
                    ):  # pragma: no cover - compiled
    """D v (nt,) for one direction v (nt,): the sweeps of :func:`tangent_jacobian` with one
    column, O(nt nx) (for matrix-free Newton–Krylov)."""
    nt, nx = diag.shape
    du = np.zeros((nt + 1, nx, 1))
    rhs = np.zeros((nx, 1))
    cp = np.empty(nx)
    for n in range(nt - 1, -1, -1):
        for i in range(nx):
            rhs[i, 0] = du[n + 1, i, 0] / dt - v[n] * chi[i]
        _solve_columns(lower[n], diag[n], upper[n], rhs, cp, du[n])
    out = np.empty(nt)
    dmu = np.zeros((nx, 1))
    for n in range(nt):
        for i in range(nx):
            rhs[i, 0] = dmu[i, 0] / dt
        for e in range(nx - 1):
            if q[n, e] > 0:
                c = mu[n + 1, e + 1]
            elif q[n, e] < 0:
                c = mu[n + 1, e]
            else:
                continue
            flux = c / (h * h) * (du[n, e + 1, 0] - du[n, e, 0])
            rhs[e, 0] += flux
            rhs[e + 1, 0] -= flux
        _solve_columns(lower_t[n], diag[n], upper_t[n], rhs, cp, dmu)
        s = 0.0
        for i in range(nx):
            s += chi[i] * dmu[i, 0]
        out[n] = s
    return out
