"""Compiled tangent linear model of the HJB–FP sweeps (numba), for Newton's method.

For running costs F^n = −y_n χ and the observed path z_n = χ·μ^{n+1} (μ the cell masses),
D[n, j] = ∂z_n/∂y_j: the backward sweep J_n δu^n = δu^{n+1}/Δt + δF^n, then the forward sweep
J_nᵀ δμ^{n+1} = δμ^n/Δt − K_n δu^n with K_n = Dᵀ diag(c) D / h² the Hessian of μ^{n+1}·Ĥ(u^n)
(the edge weights c_e / h² of :func:`.operators.tangent_weights`: for ½|p|²,
c_e = μ_{e+1} 1{q_e > 0} + μ_e 1{q_e < 0} on edge e; D the edge difference); all nt directions
at once (direction j is zero in δu^n for n > j), one Thomas elimination per level.
"""

from __future__ import annotations

import math

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
def pipelined_factors(a, b, c, backward):  # pragma: no cover - compiled
    """(e, g, inv) of the eliminations of the tridiagonal matrices (rows of a, b, c with shape
    (L, n)) in the order of :func:`tangent_product`: level m eliminates upwards (``LU``:
    the Thomas algorithm) where :func:`_upwards` says, else downwards (``UL``), so that each
    level's substitution runs in the direction of the next level's elimination.

    Upwards: inv_i = 1/(b_i − a_i e_{i−1}), e_i = c_i inv_i, g_i = a_i inv_i; the solve is
    y_i = r_i inv_i − g_i y_{i−1} (i ascending), x_i = y_i − e_i x_{i+1} (descending).
    Downwards the same with a and c, and the directions, exchanged."""
    L, n = b.shape
    e = np.empty((L, n))
    g = np.empty((L, n))
    inv = np.empty((L, n))
    for m in range(0, L - 1, 2):   # two levels a loop: independent chains that overlap
        _factor_two(a, b, c, e, g, inv, m, _upwards(m, L, backward),
                    _upwards(m + 1, L, backward))
    if L % 2:
        m = L - 1
        if _upwards(m, L, backward):
            _factor(a[m], b[m], c[m], e[m], g[m], inv[m], 0, 1)
        else:
            _factor(c[m], b[m], a[m], e[m], g[m], inv[m], n - 1, -1)
    return e, g, inv


@njit(cache=True, nogil=True, inline="always")
def _factor(before, b, after, e, g, inv, first, step):  # pragma: no cover - compiled
    """The elimination of one matrix from row ``first`` in the direction ``step``: ``before``
    the band towards the rows eliminated already, ``after`` the other one."""
    n = b.shape[0]
    r = 1.0 / b[first]
    inv[first] = r
    g[first] = 0.0
    ek = after[first] * r
    e[first] = ek
    i = first
    for _ in range(n - 1):
        i += step
        r = 1.0 / (b[i] - before[i] * ek)
        inv[i] = r
        g[i] = before[i] * r
        ek = after[i] * r
        e[i] = ek
    e[i] = 0.0


@njit(cache=True, nogil=True, inline="always")
def _factor_two(a, b, c, e, g, inv, m, up, up_next):  # pragma: no cover - compiled
    """:func:`_factor` of the levels m (upwards where ``up``) and m + 1 (where ``up_next``)
    in one loop, row by row: the same operations in the same order per level."""
    n = b.shape[1]
    p, q = m, m + 1
    before_p, after_p = (a[p], c[p]) if up else (c[p], a[p])
    before_q, after_q = (a[q], c[q]) if up_next else (c[q], a[q])
    i, step = (0, 1) if up else (n - 1, -1)
    j, step_q = (0, 1) if up_next else (n - 1, -1)
    r = 1.0 / b[p, i]
    inv[p, i] = r
    g[p, i] = 0.0
    ek = after_p[i] * r
    e[p, i] = ek
    r = 1.0 / b[q, j]
    inv[q, j] = r
    g[q, j] = 0.0
    fk = after_q[j] * r
    e[q, j] = fk
    for _ in range(n - 1):
        i += step
        r = 1.0 / (b[p, i] - before_p[i] * ek)
        inv[p, i] = r
        g[p, i] = before_p[i] * r
        ek = after_p[i] * r
        e[p, i] = ek
        j += step_q
        r = 1.0 / (b[q, j] - before_q[j] * fk)
        inv[q, j] = r
        g[q, j] = before_q[j] * r
        fk = after_q[j] * r
        e[q, j] = fk
    e[p, i] = 0.0
    e[q, j] = 0.0


@njit(cache=True, nogil=True, inline="always")
def _upwards(m, levels, backward):  # pragma: no cover - compiled
    """Whether level m eliminates upwards: the first level a sweep solves does, then every
    other one (the backward sweep solves levels L−1 … 0, the forward sweep 0 … L−1)."""
    return (levels - 1 - m) % 2 == 0 if backward else m % 2 == 0


@njit(cache=True, nogil=True)
def _eliminate(g, inv, src, inv_dt, prev, y, up):  # pragma: no cover - compiled
    """The elimination of one level alone, right-hand side prev/Δt + src."""
    n = y.shape[0]
    if up:
        y[0] = (prev[0] * inv_dt + src[0]) * inv[0]
        for i in range(1, n):
            y[i] = (prev[i] * inv_dt + src[i]) * inv[i] - g[i] * y[i - 1]
    else:
        y[n - 1] = (prev[n - 1] * inv_dt + src[n - 1]) * inv[n - 1]
        for i in range(n - 2, -1, -1):
            y[i] = (prev[i] * inv_dt + src[i]) * inv[i] - g[i] * y[i + 1]


@njit(cache=True, nogil=True)
def _substitute(e, x, up, chi):  # pragma: no cover - compiled
    """The substitution of one level alone (``up``: it was eliminated upwards); returns χ·x."""
    n = x.shape[0]
    if up:
        s = chi[n - 1] * x[n - 1]
        for i in range(n - 2, -1, -1):
            x[i] -= e[i] * x[i + 1]
            s += chi[i] * x[i]
    else:
        s = chi[0] * x[0]
        for i in range(1, n):
            x[i] -= e[i] * x[i - 1]
            s += chi[i] * x[i]
    return s


@njit(cache=True, nogil=True)
def _substitute_and_eliminate(e, x, g, inv, src, inv_dt, y, up, chi
                              ):  # pragma: no cover - compiled
    """The substitution of x (factors e; ``up``: x was eliminated upwards, so it runs
    downwards) and, in the same loop, the elimination of the next level y (factors g, inv,
    right-hand side x/Δt + src) in the same direction: two independent recurrences whose
    latencies overlap. Returns χ·x."""
    n = x.shape[0]
    if up:
        s = chi[n - 1] * x[n - 1]
        y[n - 1] = (x[n - 1] * inv_dt + src[n - 1]) * inv[n - 1]
        for i in range(n - 2, -1, -1):
            xi = x[i] - e[i] * x[i + 1]
            x[i] = xi
            s += chi[i] * xi
            y[i] = (xi * inv_dt + src[i]) * inv[i] - g[i] * y[i + 1]
    else:
        s = chi[0] * x[0]
        y[0] = (x[0] * inv_dt + src[0]) * inv[0]
        for i in range(1, n):
            xi = x[i] - e[i] * x[i - 1]
            x[i] = xi
            s += chi[i] * xi
            y[i] = (xi * inv_dt + src[i]) * inv[i] - g[i] * y[i - 1]
    return s


@njit(cache=True, nogil=True)
def _transport(du, weights, out):  # pragma: no cover - compiled
    """out = −K δu for K = Dᵀ diag(c) D / h² (edge weights c / h², (nx−1,)), δu = du (nx,)."""
    n = du.shape[0]
    out[0] = 0.0
    for e in range(n - 1):
        flux = weights[e] * (du[e + 1] - du[e])
        out[e] += flux
        out[e + 1] = -flux


@njit(cache=True, nogil=True)
def tangent_product(e, g, inv, e_t, g_t, inv_t, weights, chi, du, dt, v
                    ):  # pragma: no cover - compiled
    """D v (nt,) for one direction v (nt,): the sweeps of :func:`tangent_jacobian` for one
    column, O(nt nx) (the products of matrix-free Newton–Krylov), from the
    :func:`pipelined_factors` of J(u^n) (``backward``) and of J(u^n)ᵀ; ``du`` (nt + 1, nx) a
    workspace (reused from product to product: a fresh array of that size costs page faults
    that take longer than the sweeps at 201²). Each level's substitution runs in one loop
    with the next level's elimination (their directions alternate from level to level), so
    that the two recurrences overlap."""
    nt, nx = inv.shape
    inv_dt = 1.0 / dt
    du[nt] = 0.0
    src = np.empty(nx)
    for i in range(nx):
        src[i] = -v[nt - 1] * chi[i]
    _eliminate(g[nt - 1], inv[nt - 1], src, inv_dt, du[nt], du[nt - 1], True)
    for n in range(nt - 1, 0, -1):
        for i in range(nx):
            src[i] = -v[n - 1] * chi[i]
        _substitute_and_eliminate(e[n], du[n], g[n - 1], inv[n - 1], src, inv_dt, du[n - 1],
                                  _upwards(n, nt, True), chi)
    _substitute(e[0], du[0], _upwards(0, nt, True), chi)
    out = np.empty(nt)
    dmu = np.zeros((2, nx))
    _transport(du[0], weights[0], src)
    _eliminate(g_t[0], inv_t[0], src, inv_dt, dmu[1], dmu[0], True)
    for n in range(nt - 1):
        _transport(du[n + 1], weights[n + 1], src)
        out[n] = _substitute_and_eliminate(e_t[n], dmu[n % 2], g_t[n + 1], inv_t[n + 1], src,
                                           inv_dt, dmu[(n + 1) % 2], _upwards(n, nt, False),
                                           chi)
    out[nt - 1] = _substitute(e_t[nt - 1], dmu[(nt - 1) % 2], _upwards(nt - 1, nt, False),
                              chi)
    return out


@njit(cache=True, nogil=True)
def newton_direction(e, g, inv, e_t, g_t, inv_t, weights, chi, du, dt, slope, R, rtol,
                     max_steps):  # pragma: no cover - compiled
    """(d, products): the Newton step d = S⁻¹ v, v = (S D S + I)⁻¹ S R, of one problem whose
    prices all fall (P' = ``slope`` ≤ 0, S = diag(√−P'): :func:`..potential.scaling` with
    Σ = I; d = R, the Picard step, where P' = 0), D the tangent Jacobian of the operands of
    :func:`tangent_product` (the :func:`pipelined_factors` of J(u^n) and J(u^n)ᵀ, the edge
    weights, χ and the workspace ``du``): the matrix-free Newton system in one call, by
    conjugate gradients from v = 0 on the SPD system, stopped once
    ‖S R − (S D S + I) v‖ ≤ rtol ‖S R‖ or after ``max_steps`` products D p."""
    n = R.size
    s, x, r, p, sp = np.empty(n), np.zeros(n), np.empty(n), np.empty(n), np.empty(n)
    for i in range(n):   # (loops, not array expressions: they take numba longer to compile)
        s[i] = math.sqrt(abs(slope[i]))
        r[i] = p[i] = s[i] * R[i]
    rr = r @ r
    stop = (rtol * math.sqrt(rr)) ** 2
    products = 0
    while products < max_steps and rr > stop:
        for i in range(n):
            sp[i] = s[i] * p[i]
        Ap = tangent_product(e, g, inv, e_t, g_t, inv_t, weights, chi, du, dt, sp)
        products += 1
        for i in range(n):
            Ap[i] = s[i] * Ap[i] + p[i]
        alpha = rr / (p @ Ap)
        for i in range(n):
            x[i] += alpha * p[i]
            r[i] -= alpha * Ap[i]
        rr, previous = r @ r, rr
        beta = rr / previous
        for i in range(n):
            p[i] = r[i] + beta * p[i]
    d = R.copy()
    for i in range(n):
        if s[i] > 0:
            d[i] = x[i] / s[i]
    return d, products


# -- a tree of noise scenarios (mfgwork.problems.common_noise.ScenarioTree) -------------------
# Node k of level l holds the L time steps of epoch l, after the noise state of that epoch is
# revealed. A product D v on the tree is the sweep of tangent_product node by node: backward,
# level by level from the leaves (tree_backward), each node's end value the conditional mean
# Σ_c p_c δu_c^0 of its children's first values (0 on the leaves); then forward from the
# first level (tree_forward), each node from the last δμ of its parent (0 on the first level).
# The nodes of one level are independent: each kernel takes a range of them, so that threads
# share a level; within a node, each level's substitution runs in one loop with the next
# level's elimination, as in tangent_product. With the probabilities π > 0 of the nodes,
# diag(π) D is the Hessian of the expected potential: D is self-adjoint for the inner
# product weighted by π.


@njit(cache=True, nogil=True)
def tree_factors(lower, diag, upper, lower_t, upper_t):  # pragma: no cover - compiled
    """The :func:`pipelined_factors` (e, g, inv) of J(u^n) (``backward``) and of J(u^n)ᵀ of
    every node, stacked (6, nodes, L, nx), from the bands (nodes, L, nx) of each."""
    nodes, L, n = diag.shape
    out = np.empty((6, nodes, L, n))
    for k in range(nodes):
        for m in range(L):
            if _upwards(m, L, True):
                _factor(lower[k, m], diag[k, m], upper[k, m], out[0, k, m], out[1, k, m],
                        out[2, k, m], 0, 1)
            else:
                _factor(upper[k, m], diag[k, m], lower[k, m], out[0, k, m], out[1, k, m],
                        out[2, k, m], n - 1, -1)
            if _upwards(m, L, False):
                _factor(lower_t[k, m], diag[k, m], upper_t[k, m], out[3, k, m], out[4, k, m],
                        out[5, k, m], 0, 1)
            else:
                _factor(upper_t[k, m], diag[k, m], lower_t[k, m], out[3, k, m], out[4, k, m],
                        out[5, k, m], n - 1, -1)
    return out


@njit(cache=True, nogil=True)
def tree_backward(e, g, inv, chi, level, children, branching, conditional, dt, v, du, first,
                  last):  # pragma: no cover - compiled
    """δu of the nodes first..last−1 of the level whose first node is ``level``: J_n δu^n =
    δu^{n+1}/Δt − v_n χ from the end value Σ_c p_c δu_c^0 over the children (node k's are
    ``children`` + (k − level) branching + j, the next level's first node ``children``; −1:
    leaves, end value 0). ``du`` (nodes, L + 1, nx); factors as :func:`tree_factors` gives
    them."""
    L, nx = inv.shape[1], inv.shape[2]
    inv_dt = 1.0 / dt
    src = np.empty(nx)
    for k in range(first, last):
        du[k, L] = 0.0
        if children >= 0:
            c0 = children + (k - level) * branching
            for c in range(c0, c0 + branching):
                for i in range(nx):
                    du[k, L, i] += conditional[c] * du[c, 0, i]
        for i in range(nx):
            src[i] = -v[k, L - 1] * chi[i]
        _eliminate(g[k, L - 1], inv[k, L - 1], src, inv_dt, du[k, L], du[k, L - 1], True)
        for m in range(L - 1, 0, -1):
            for i in range(nx):
                src[i] = -v[k, m - 1] * chi[i]
            _substitute_and_eliminate(e[k, m], du[k, m], g[k, m - 1], inv[k, m - 1], src,
                                      inv_dt, du[k, m - 1], _upwards(m, L, True), chi)
        _substitute(e[k, 0], du[k, 0], _upwards(0, L, True), chi)


@njit(cache=True, nogil=True)
def tree_forward(e_t, g_t, inv_t, weights, chi, level, parents, branching, dt, du, dmu, out,
                 first, last):  # pragma: no cover - compiled
    """δμ of the nodes first..last−1 of the level whose first node is ``level``: J_nᵀ δμ^{n+1}
    = δμ^n/Δt − K_n δu^n from the last δμ of the parent (node k's is ``parents`` +
    (k − level) // branching, the level above's first node ``parents``; −1: the first level,
    from 0); writes out[k, n] = χ·δμ^{n+1} and the last δμ into ``dmu`` (nodes, nx)."""
    L, nx = inv_t.shape[1], inv_t.shape[2]
    inv_dt = 1.0 / dt
    src = np.empty(nx)
    now = np.empty((2, nx))
    for k in range(first, last):
        if parents < 0:
            now[1] = 0.0
        else:
            now[1] = dmu[parents + (k - level) // branching]
        _transport(du[k, 0], weights[k, 0], src)
        _eliminate(g_t[k, 0], inv_t[k, 0], src, inv_dt, now[1], now[0], True)
        for m in range(L - 1):
            _transport(du[k, m + 1], weights[k, m + 1], src)
            out[k, m] = _substitute_and_eliminate(
                e_t[k, m], now[m % 2], g_t[k, m + 1], inv_t[k, m + 1], src, inv_dt,
                now[(m + 1) % 2], _upwards(m, L, False), chi)
        out[k, L - 1] = _substitute(e_t[k, L - 1], now[(L - 1) % 2], _upwards(L - 1, L, False),
                                    chi)
        dmu[k] = now[(L - 1) % 2]
