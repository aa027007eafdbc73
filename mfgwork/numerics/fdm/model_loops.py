"""Template of the compiled CPU scheme (numba), written once for every model.

Not imported as it stands: :func:`mfgwork.numerics.fdm.numba_kernels.compiled_model` writes,
for each model structure, a module made of the model's generated scalar functions
(:func:`mfgwork.problems.symbolic.scalar_source`: ``NAUX``, ``DEPENDS_ON_M``, ``model_aux``,
``H_and_p``, ``H_zero``, ``H``, ``H_p``, ``H_pp``, ``H_m``) followed by this source, and
imports it from the model cache folder, where numba caches its machine code.

The scheme is that of :mod:`.operators`: implicit Euler, Engquist–Osher Ĥ_i = H(x_i,
(q_{i−1})_+, m_i) + H(x_i, (q_i)_−, m_i) − H(x_i, 0, m_i), Newton with the tridiagonal
Jacobian (Thomas algorithm), the FP step its adjoint. Where H depends on m, the step between
t_n and t_{n+1} sees the density row n of ``density`` (m^{n+1}, frozen).
"""
# ruff: noqa: F821 - the model's functions are defined by the generated part of the module

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def power(x, e):  # pragma: no cover - compiled
    """x^e for x ≥ 0, by square roots and products for the common exponents (``**`` costs
    as much as the rest of a Newton iteration's arithmetic)."""
    if e == 0.5:
        return math.sqrt(x)
    if e == 1.5:
        return x * math.sqrt(x)
    if e == -0.5:
        return 1.0 / math.sqrt(x)
    if e == 1.0:
        return x
    if e == 2.0:
        return x * x
    if e == 3.0:
        return x * x * x
    if e == -1.0:
        return 1.0 / x
    if e == 0.0:
        return 1.0
    return _general_pow(x, e)


@njit(cache=True, nogil=True)
def _general_pow(x, e):  # pragma: no cover - compiled
    """x^e (a call of its own, so that the common exponents above do not pay for it)."""
    return x ** e


@njit(cache=True, nogil=True, inline="always")
def sign(a):  # pragma: no cover - compiled
    """sign(a): 1, −1 or 0."""
    return 1.0 if a > 0.0 else (-1.0 if a < 0.0 else 0.0)


@njit(cache=True, nogil=True, inline="always")
def heaviside(a, h0):  # pragma: no cover - compiled
    """1 for a > 0, 0 for a < 0, h0 at a = 0."""
    return 1.0 if a > 0.0 else (0.0 if a < 0.0 else h0)


@njit(cache=True, nogil=True)
def _thomas(a, b, c, d, x, cp, dp):  # pragma: no cover - compiled
    """x = A⁻¹ d for the tridiagonal A (a_i = A[i, i−1], b_i, c_i = A[i, i+1]), eliminated
    from both ends towards the middle row k = n // 2 (rows above k downwards, rows below
    upwards, in one loop): two independent chains of one division a row whose latencies
    overlap (the elimination's latency is its chain), then substituted outwards from k."""
    n = b.shape[0]
    k = n // 2
    inv = 1.0 / b[0]
    cp[0] = c[0] * inv
    dp[0] = d[0] * inv
    inv = 1.0 / b[n - 1]
    cp[n - 1] = a[n - 1] * inv
    dp[n - 1] = d[n - 1] * inv
    for j in range(1, k):
        inv = 1.0 / (b[j] - a[j] * cp[j - 1])
        cp[j] = c[j] * inv
        dp[j] = (d[j] - a[j] * dp[j - 1]) * inv
        i = n - 1 - j
        if i > k:
            inv = 1.0 / (b[i] - c[i] * cp[i + 1])
            cp[i] = a[i] * inv
            dp[i] = (d[i] - c[i] * dp[i + 1]) * inv
    pivot, rhs = b[k], d[k]
    if k > 0:
        pivot -= a[k] * cp[k - 1]
        rhs -= a[k] * dp[k - 1]
    if k < n - 1:
        pivot -= c[k] * cp[k + 1]
        rhs -= c[k] * dp[k + 1]
    up = down = x[k] = rhs / pivot
    for j in range(1, k + 1):
        up = dp[k - j] - cp[k - j] * up
        x[k - j] = up
        if k + j < n:
            down = dp[k + j] - cp[k + j] * down
            x[k + j] = down


@njit(cache=True, nogil=True)
def _newton_update(u, du, tol, before):  # pragma: no cover - compiled
    """u ← u − du; (whether u is within tol (1 + max|u|) of the root, max|du|): the update
    was that small, or contracted from ``before`` (the last max|du|, 0: none yet) so much
    that the error it leaves, max|du|² / (before − max|du|) (the bound of a contraction of
    rate max|du| / before; Newton's is faster), is within 1/64 of it: ε (1 + max|u|) for
    tol = 64 ε, where one more iteration would only round. This saves the iteration that
    would only confirm a root already reached."""
    step = 0.0
    size = 0.0
    for i in range(u.size):
        u[i] -= du[i]
        step = max(step, abs(du[i]))
        size = max(size, abs(u[i]))
    bound = tol * (1.0 + size)
    return step <= bound or (before > step and 64.0 * step * step <= bound * (before - step)), step


@njit(cache=True, nogil=True)
def _node_values(x, m_row, prm, aux):  # pragma: no cover - compiled
    """The model's p-free values of each node (``model_aux``) for the density row."""
    if NAUX > 0:
        for i in range(x.shape[0]):
            model_aux(x[i], m_row[i] if DEPENDS_ON_M else 0.0, prm, aux, i)


@njit(cache=True, nogil=True)
def _bands(u, x, m_row, prm, aux, nu, h, inv_hw, inv_dt, lower, diag, upper, ham
           ):  # pragma: no cover - compiled
    """Bands of J(u) and the Engquist–Osher Ĥ(u) at the nodes (divisions by h as products
    with 1/h: a division costs several multiplications)."""
    nx = u.shape[0]
    inv_h = 1.0 / h
    for i in range(nx):
        ql = (u[i] - u[i - 1]) * inv_h if i > 0 else 0.0
        qr = (u[i + 1] - u[i]) * inv_h if i < nx - 1 else 0.0
        mi = m_row[i] if DEPENDS_ON_M else 0.0
        h_left, d_left = H_and_p(max(ql, 0.0), x[i], mi, prm, aux, i)
        h_right, d_right = H_and_p(min(qr, 0.0), x[i], mi, prm, aux, i)
        lo = -nu * inv_hw[i] - d_left * inv_h if i > 0 else 0.0
        up = -nu * inv_hw[i] + d_right * inv_h if i < nx - 1 else 0.0
        lower[i] = lo
        upper[i] = up
        diag[i] = inv_dt - lo - up
        ham[i] = h_left + h_right - H_zero(x[i], mi, prm, aux, i)


@njit(cache=True, nogil=True)
def hjb_sweep(U, F, guess, use_guess, density, x, prm, nu, h, dt, inv_hw, inv_w, tol,
              max_newton):  # pragma: no cover - compiled
    """Backward implicit Euler + Newton; fills U[:-1] given U[-1]. Returns (Newton its,
    bad n): ``bad n`` is -1 when every step converged, else the first time index that did
    not. ``density``: (nt, nx) rows m^1..m^nt where H depends on m, else one row (unused)."""
    nt, nx = F.shape
    lower, diag, upper, res, du, cp, dp, u = np.empty((8, nx), U.dtype)
    aux = np.empty((max(NAUX, 1), nx))
    iterations = 0
    inv_h = 1.0 / h
    inv_dt = 1.0 / dt
    frozen = DEPENDS_ON_M and density.shape[0] > 1
    _node_values(x, density[0], prm, aux)
    for n in range(nt - 1, -1, -1):
        if use_guess:   # the guess shifted by the change found at level n + 1
            for i in range(nx):
                u[i] = guess[n, i] + (U[n + 1, i] - guess[n + 1, i])
        else:
            u[:] = U[n + 1]
        row = n if frozen else 0
        if frozen:
            _node_values(x, density[n], prm, aux)
        converged = False
        before = 0.0
        for _ in range(max_newton):
            iterations += 1
            for i in range(nx):   # the bands of J(u) (:func:`_bands`) and the residual
                ql = (u[i] - u[i - 1]) * inv_h if i > 0 else 0.0
                qr = (u[i + 1] - u[i]) * inv_h if i < nx - 1 else 0.0
                mi = density[row, i] if DEPENDS_ON_M else 0.0
                h_left, d_left = H_and_p(max(ql, 0.0), x[i], mi, prm, aux, i)
                h_right, d_right = H_and_p(min(qr, 0.0), x[i], mi, prm, aux, i)
                lo = -nu * inv_hw[i] - d_left * inv_h if i > 0 else 0.0
                up = -nu * inv_hw[i] + d_right * inv_h if i < nx - 1 else 0.0
                lower[i] = lo
                upper[i] = up
                diag[i] = inv_dt - lo - up
                ham = h_left + h_right - H_zero(x[i], mi, prm, aux, i)
                res[i] = ((u[i] - U[n + 1, i]) * inv_dt - nu * inv_w[i] * (qr - ql) + ham
                          - F[n, i])
            _thomas(lower, diag, upper, res, du, cp, dp)
            small, before = _newton_update(u, du, tol, before)
            if small:
                converged = True
                break
        U[n, :] = u
        if not converged:
            return iterations, n
    return iterations, -1


@njit(cache=True, nogil=True)
def fp_sweep(U, mu, density, x, prm, nu, h, dt, inv_hw):  # pragma: no cover - compiled
    """Forward implicit Euler for cell masses: J(U[n])ᵀ mu[n+1] = mu[n] / dt."""
    nt = U.shape[0] - 1
    nx = U.shape[1]
    lower, diag, upper, ham, lt, ut, rhs, cp, dp = np.empty((9, nx), U.dtype)
    aux = np.empty((max(NAUX, 1), nx))
    frozen = DEPENDS_ON_M and density.shape[0] > 1
    _node_values(x, density[0], prm, aux)
    for n in range(nt):
        row = n if frozen else 0
        if frozen:
            _node_values(x, density[n], prm, aux)
        _bands(U[n], x, density[row], prm, aux, nu, h, inv_hw, 1.0 / dt, lower, diag, upper,
               ham)
        lt[0] = 0.0
        ut[nx - 1] = 0.0
        for i in range(nx):
            if i > 0:
                lt[i] = upper[i - 1]
            if i < nx - 1:
                ut[i] = lower[i + 1]
            rhs[i] = mu[n, i] / dt
        _thomas(lt, diag, ut, rhs, mu[n + 1], cp, dp)


@njit(cache=True, nogil=True)
def tangent_bands(U, mu, density, x, prm, nu, h, dt, inv_hw, delta, lower, diag, upper,
                  lower_t, upper_t, weights):  # pragma: no cover - compiled
    """The operands of the tangent sweeps of Newton's method on the coupling state at the
    best response U (levels 0..nt) with cell masses mu: for n < nt the bands of J(u^n) and
    of J(u^n)ᵀ, and the edge weights c_e / h² of K_n (:func:`mfgwork.numerics.fdm.operators.
    tangent_weights`: on edge e with gradient q, mu^{n+1} at its upwind node times ∂pp H at
    sign(q) max(|q|, delta), 0 where q = 0)."""
    nt = U.shape[0] - 1
    nx = U.shape[1]
    ham = np.empty(nx)
    aux = np.empty((max(NAUX, 1), nx))
    frozen = DEPENDS_ON_M and density.shape[0] > 1
    _node_values(x, density[0], prm, aux)
    h2 = h * h
    for n in range(nt):
        row = n if frozen else 0
        if frozen:
            _node_values(x, density[n], prm, aux)
        _bands(U[n], x, density[row], prm, aux, nu, h, inv_hw, 1.0 / dt, lower[n], diag[n],
               upper[n], ham)
        lower_t[n, 0] = 0.0
        upper_t[n, nx - 1] = 0.0
        for e in range(nx - 1):
            lower_t[n, e + 1] = upper[n, e]
            upper_t[n, e] = lower[n, e + 1]
            q = (U[n, e + 1] - U[n, e]) / h
            c = 0.0
            if q > 0.0:
                m = density[row, e + 1] if DEPENDS_ON_M else 0.0
                c = mu[n + 1, e + 1] * H_pp(max(q, delta), x[e + 1], m, prm)
            elif q < 0.0:
                m = density[row, e] if DEPENDS_ON_M else 0.0
                c = mu[n + 1, e] * H_pp(min(q, -delta), x[e], m, prm)
            weights[n, e] = c / h2
