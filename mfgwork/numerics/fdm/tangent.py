"""Compiled tangent linear model of the HJB–FP sweeps (numba), for Newton's method.

For running costs F^n = −y_n χ and the observed path z_n = χ·μ^{n+1} (μ the cell masses),
D[n, j] = ∂z_n/∂y_j: the backward sweep J_n δu^n = δu^{n+1}/Δt + δF^n, then the forward sweep
J_nᵀ δμ^{n+1} = δμ^n/Δt − K_n δu^n with K_n = Dᵀ diag(c) D / h² the Hessian of μ^{n+1}·Ĥ(u^n)
(the edge weights c_e / h² of :func:`.operators.tangent_weights`: for ½|p|²,
c_e = μ_{e+1} 1{q_e > 0} + μ_e 1{q_e < 0} on edge e; D the edge difference); all nt directions
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
def _add_transport(rhs, du, weights, start):  # pragma: no cover - compiled
    """rhs (nx, m) −= K δu in columns start..m−1: K = Dᵀ diag(c) D / h² for the edge
    weights c / h² (nx−1,) (edges of weight 0 skipped), δu = du (nx, m)."""
    for e in range(weights.shape[0]):
        c = weights[e]
        if c == 0.0:
            continue
        for j in range(start, rhs.shape[1]):
            flux = c * (du[e + 1, j] - du[e, j])
            rhs[e, j] += flux
            rhs[e + 1, j] -= flux


@njit(cache=True, nogil=True)
def tangent_jacobian(lower, diag, upper, lower_t, upper_t, weights, chi, dt
                     ):  # pragma: no cover - compiled
    """D (nt, nt) from the bands of J(u^n) and of J(u^n)ᵀ (levels 0..nt−1) and the edge
    weights (nt, nx−1) of K_n."""
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
        _add_transport(rhs, du[n], weights[n], n)
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
def thomas_factors(a, b, c):  # pragma: no cover - compiled
    """(cp, inv) of the Thomas elimination of each tridiagonal matrix (rows of a, b, c with
    shape (L, n)): cp_i = c_i inv_i, inv_i = 1/(b_i − a_i cp_{i−1}); a solve with them is
    multiply-adds only (:func:`_solve_factored`)."""
    L, n = b.shape
    cp = np.zeros((L, n))
    inv = np.empty((L, n))
    for m in range(L):
        inv[m, 0] = 1.0 / b[m, 0]
        cp[m, 0] = c[m, 0] * inv[m, 0]
        for i in range(1, n):
            inv[m, i] = 1.0 / (b[m, i] - a[m, i] * cp[m, i - 1])
            cp[m, i] = c[m, i] * inv[m, i] if i < n - 1 else 0.0
    return cp, inv


@njit(cache=True, nogil=True)
def _solve_factored(a, cp, inv, d, x):  # pragma: no cover - compiled
    """x = A⁻¹ d from the factors of :func:`thomas_factors` (one matrix, d (n,))."""
    n = d.shape[0]
    x[0] = d[0] * inv[0]
    for i in range(1, n):
        x[i] = (d[i] - a[i] * x[i - 1]) * inv[i]
    for i in range(n - 2, -1, -1):
        x[i] -= cp[i] * x[i + 1]


@njit(cache=True, nogil=True)
def tangent_product(lower, factors, lower_t, factors_t, weights, chi, dt, v
                    ):  # pragma: no cover - compiled
    """D v (nt,) for one direction v (nt,): the sweeps of :func:`tangent_jacobian` for one
    column, O(nt nx) (the products of matrix-free Newton–Krylov), from the lower bands of
    J(u^n) and J(u^n)ᵀ and their :func:`thomas_factors`."""
    nt, nx = lower.shape
    cp, inv = factors
    cp_t, inv_t = factors_t
    du = np.zeros((nt + 1, nx))
    rhs = np.empty(nx)
    for n in range(nt - 1, -1, -1):
        for i in range(nx):
            rhs[i] = du[n + 1, i] / dt - v[n] * chi[i]
        _solve_factored(lower[n], cp[n], inv[n], rhs, du[n])
    out = np.empty(nt)
    dmu = np.zeros(nx)
    for n in range(nt):
        for i in range(nx):
            rhs[i] = dmu[i] / dt
        _add_transport(rhs.reshape((nx, 1)), du[n].reshape((nx, 1)), weights[n], 0)
        _solve_factored(lower_t[n], cp_t[n], inv_t[n], rhs, dmu)
        s = 0.0
        for i in range(nx):
            s += chi[i] * dmu[i]
        out[n] = s
    return out
