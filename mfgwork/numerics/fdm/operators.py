"""The discrete operators shared by the HJB and FP steps (array-API code, batched).

On the grid of :mod:`mfgwork.core.grid` (control volumes w_i, spacing h), with edge gradients
q_e = (u_{e+1} − u_e)/h and q = 0 across the walls (Neumann):

    (L u)_i = (q_i − q_{i−1}) / w_i                         diffusion
    Ĥ_i(u)  = Ĥ(x_i, q_{i−1}, q_i, m_i)                     Engquist–Osher numerical Hamiltonian

(:meth:`mfgwork.problems.hamiltonians.Hamiltonian.numerical`; for ½|p|² it is Godunov's
½ [(q_{i−1})_+² + (q_i)_−²]). The implicit Euler HJB step from u^{n+1} to u = u^n solves
R(u) = 0 with

    R(u) = (u − u^{n+1})/Δt − ν L u + Ĥ(u) − F^n,

whose exact Jacobian J(u) = I/Δt − ν L + B(u) is tridiagonal:

    lower_i = −ν/(h w_i) − ∂Ĥ_i/∂q_{i−1} / h,   upper_i = −ν/(h w_i) + ∂Ĥ_i/∂q_i / h,
    diag_i  = 1/Δt − lower_i − upper_i.

Since ∂Ĥ/∂q_{i−1} ≥ 0 ≥ ∂Ĥ/∂q_i, J is a diagonally dominant M-matrix. Where H depends on m,
the step from t_{n+1} to t_n uses m^{n+1} (frozen: J is the Jacobian in u). The FP step is
its adjoint (Achdou): with cell masses μ_i = w_i m_i,  J(u^n)ᵀ μ^{n+1} = μ^n / Δt (with the
same m^{n+1}, so it stays linear). Rows of Δt·J sum to one, so Σ μ is conserved and μ stays
≥ 0.

:func:`newton_system` computes J's bands and R together from the differences g_e = u_{e+1} −
u_e padded with g = 0 across the walls, in about twenty array operations for ½|p|²: on an
accelerator each operation is a kernel launch, and the launches, not the arithmetic, are the cost.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ...problems.hamiltonians import Hamiltonian, Quadratic

QUADRATIC = Quadratic()


class StepConstants(NamedTuple):
    """The parts of the HJB step that do not depend on u, as arrays of the backend (0-d or
    (..., n); so a compiled step does not specialize on their values)."""

    lower0: Any        # −ν/(h w_i) for i ≥ 1, 0 at the left wall
    upper0: Any        # −ν/(h w_i) for i ≤ n − 2, 0 at the right wall
    nu_inv_hw: Any     # ν/(h w_i)
    inv_dt: Any        # 1/Δt
    inv_h: Any         # 1/h
    inv_h2: Any        # 1/h²
    half_inv_h2: Any   # 1/(2h²)
    x: Any             # the nodes x_i


def step_constants(nu: Any, h: float, dt: float, inv_hw: Any, x: Any, asarray: Any
                   ) -> StepConstants:
    """:class:`StepConstants` for diffusion ``nu`` (a scalar or (B, 1)) on spacing ``h``
    and the nodes ``x``."""
    nu_inv_hw = nu * inv_hw
    lower0, upper0 = -nu_inv_hw.copy(), -nu_inv_hw.copy()
    lower0[..., 0] = upper0[..., -1] = 0.0
    return StepConstants(*(asarray(v) for v in (lower0, upper0, nu_inv_hw, 1.0 / dt,
                                                1.0 / h, 1.0 / h**2, 0.5 / h**2, x)))


def newton_system(u: Any, rhs: Any, c: StepConstants, xp: Any, hamiltonian: Hamiltonian,
                  m: Any = None) -> tuple[Any, Any, Any, Any]:
    """(lower, diag, upper) of J(u) and R(u), with ``rhs`` = u^{n+1}/Δt + F^n and ``m`` the
    density H sees (None where H does not depend on m).

    The bands have ``lower[..., 0] = upper[..., -1] = 0`` exactly (q vanishes at the walls).
    A model whose expression is ½|p|² (:meth:`~mfgwork.problems.hamiltonians.Quadratic.
    same_model`, a user's included) is specialised (:func:`_quadratic_system`: the same
    numbers, rounded as the compiled loops round them, in the fewest array operations).
    """
    padded = xp.concat([u[..., :1], u, u[..., -1:]], axis=-1)
    g = padded[..., 1:] - padded[..., :-1]                # h q_e, e = −1..n−1, 0 at the walls
    if Quadratic.same_model(hamiltonian):
        return _quadratic_system(u, g, rhs, c, xp)
    q = g * c.inv_h
    value, d_left, d_right = hamiltonian.numerical(c.x, q[..., :-1], q[..., 1:], m, xp)
    lower = c.lower0 - d_left * c.inv_h
    upper = c.upper0 + d_right * c.inv_h
    diag = c.inv_dt - lower - upper
    residual = (u * c.inv_dt - rhs - c.nu_inv_hw * (g[..., 1:] - g[..., :-1]) + value)
    return lower, diag, upper, residual


def _quadratic_system(u: Any, g: Any, rhs: Any, c: StepConstants, xp: Any
                      ) -> tuple[Any, Any, Any, Any]:
    """:func:`newton_system` for H = ½|p|² from the differences g = h q."""
    g_plus = xp.clip(g, min=0.0)
    g_minus = g - g_plus
    up_left, down_right = g_plus[..., :-1], g_minus[..., 1:]   # h (q_{i−1})_+, h (q_i)_−
    lower = c.lower0 - up_left * c.inv_h2
    upper = c.upper0 + down_right * c.inv_h2
    diag = c.inv_dt - lower - upper
    hamiltonian = (up_left * up_left + down_right * down_right) * c.half_inv_h2
    residual = (u * c.inv_dt - rhs - c.nu_inv_hw * (g[..., 1:] - g[..., :-1])
                + hamiltonian)
    return lower, diag, upper, residual


class SystemConstants(NamedTuple):
    """The u-independent parts of :func:`stacked_system` for one solver (torch tensors)."""

    bands0: Any    # (..., 3, n): lower0, 1/Δt − lower0 − upper0, upper0
    mix: Any       # (4, k): how the k u-dependent rows enter (lower, diag, upper, R)
    bounds: Any    # ½|p|²: clamp bounds (..., 6, 2, n), see stacked_system
    diffusion: Any  # (..., 2, n): ν/(h w_i) where the edges i − 1 and i are inside
    inv_h: Any     # 1/h
    inv_dt: Any    # 1/Δt
    x: Any         # the nodes x_i
    half_square: bool   # the model is ½|p|² (its rows by one clamp, see stacked_system)
    pair: Any      # other traced models: (H, ∂p H) together (symbolic.pair_function), or None
    at_zero: Any   # H(x, 0, m) where it is not identically 0 (a function of x, m), or None


def system_constants(c: StepConstants, hamiltonian: Hamiltonian, h: float, asarray: Any
                     ) -> SystemConstants:
    """:class:`SystemConstants` from the :class:`StepConstants` ``c`` of the same grid."""
    import torch

    bands0 = torch.stack(torch.broadcast_tensors(c.lower0, c.inv_dt - c.lower0 - c.upper0,
                                                 c.upper0), dim=-2)
    diffusion = -bands0[..., ::2, :]
    half_square = Quadratic.same_model(hamiltonian)
    pair, at_zero = (None, None) if half_square else _pair_of(hamiltonian)
    if half_square:   # rows g₊_{i−1}, g₋_i, their squares, the diffusion
        mix = np.array([[-1.0, 0, 0, 0, 0, 0], [1, -1, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0],
                        [0, 0, 0.5, 0.5, h**2, -h**2]]) / h**2
    elif pair is not None:   # rows ∂p H(q₊_{i−1}), ∂p H(q₋_i), H(q₊_{i−1}), H(q₋_i), diffusion
        mix = np.array([[-1.0 / h, 0, 0, 0, 0, 0], [1 / h, -1 / h, 0, 0, 0, 0],
                        [0, 1 / h, 0, 0, 0, 0], [0, 0, 1, 1, 1, -1]])
    else:                                # rows ∂Ĥ/∂q_{i−1}, ∂Ĥ/∂q_i, Ĥ, the diffusion
        mix = np.array([[-1.0 / h, 0, 0, 0, 0], [1 / h, -1 / h, 0, 0, 0],
                        [0, 1 / h, 0, 0, 0], [0, 0, 1, 1, -1]])
    one, inf = torch.ones_like(diffusion), torch.full_like(diffusion, np.inf)
    sign_low = 0 * one + asarray([[0.0], [-np.inf]])     # g₊_{i−1} ≥ 0, g₋_i free below
    sign_high = 0 * one + asarray([[np.inf], [0.0]])
    low = [one, sign_low, diffusion, sign_low, sign_low, -inf]
    high = [one, sign_high, diffusion, sign_high, sign_high, inf]
    bounds = tuple(torch.stack(torch.broadcast_tensors(*rows), dim=-3) for rows in (low, high))
    if pair is not None:   # one clamp: (g₊_{i−1}, g₋_i)
        bounds = (sign_low, sign_high)
    return SystemConstants(bands0, asarray(mix), bounds, diffusion, c.inv_h, c.inv_dt, c.x,
                           half_square, pair, at_zero)


def _pair_of(hamiltonian: Hamiltonian) -> tuple[Any, Any]:
    """(H, ∂p H) of a traced model as one generated array function ``f(x, p, m, xp)``
    (:func:`~mfgwork.problems.symbolic.pair_function`: its fields are numbers, so that the
    sub-expressions of fields alone stay numbers, not operations), and H(x, 0, m) where it is
    not identically zero; (None, None) for a model that cannot be traced or that defines its
    own numerical Hamiltonian (it keeps :meth:`Hamiltonian.numerical`)."""
    traced = hamiltonian.traced()
    if traced is None or type(hamiltonian).numerical is not Hamiltonian.numerical:
        return None, None
    return traced.array_function("pair"), (None if traced.structure.zero_at_rest else
                                           traced.array_function("value"))


def stacked_system(u: Any, neg_rhs: Any, work: tuple[Any, Any], c: SystemConstants, xp: Any,
                   hamiltonian: Hamiltonian, m: Any = None) -> Any:
    """The rows (lower, diag, upper, R) (..., 4, n) of J(u) du = R(u), Newton's step,
    ``neg_rhs`` = −(u^{n+1}/Δt + F^n), ``m`` the density H sees.

    ``work``: (``system0``, ``diff``): ``system0`` (..., 4, n) holding the u-independent
    bands (lower0, diag0, upper0) in its first rows, its last receives u/Δt − rhs; ``diff``
    (..., 2n) with zeros at both ends receives the edge differences g = h q twice, as the
    rows g_{i−1} and g_i (g = 0 across the walls). The u-dependent rows enter as one matrix
    product with ``c.mix``: for ½|p|² one clamp of (g_{i−1}, g_i) against ``c.bounds`` gives
    [1, g±, λ, g±, g±, g] (g± = (g₊_{i−1}, g₋_i), λ = ν/(h w) where the edge is inside, a
    clamp between equal bounds being that bound) and one product of its halves gives g±,
    g±², λ g: five kernels with the differences, u/Δt − rhs and the product-and-add.
    """
    import torch

    system0, diff = work
    torch.addcmul(neg_rhs, u, c.inv_dt, out=system0[..., 3, :])
    n = u.shape[-1]
    pair = u.shape[:-1] + (2, n - 1)
    torch.sub(u[..., None, 1:].expand(pair), u[..., None, :-1].expand(pair),
              out=diff[..., 1:-1].unflatten(-1, (2, n - 1)))
    edges = diff.unflatten(-1, (2, n))                       # (..., 2, n): g_{i−1}, g_i
    if c.half_square:
        parts = torch.clamp(edges[..., None, :, :], *c.bounds)
        rows = (parts[..., 3:, :, :] * parts[..., :3, :, :]).flatten(-3, -2)
    elif c.pair is not None:
        rows = _model_rows(u, edges, c, xp, m)
    else:
        q = edges * c.inv_h
        value, d_left, d_right = hamiltonian.numerical(c.x, q[..., 0, :], q[..., 1, :], m, xp)
        rows = torch.cat([*(torch.broadcast_to(v, u.shape)[..., None, :]
                            for v in (d_left, d_right, value)), c.diffusion * edges], dim=-2)
    return _plus_product(system0, c.mix, rows)


def _model_rows(u: Any, edges: Any, c: SystemConstants, xp: Any, m: Any) -> Any:
    """The rows ∂p H(q₊_{i−1}), ∂p H(q₋_i), H(q₊_{i−1}) − H(0), H(q₋_i) and the diffusion
    λ (g_{i−1}, g_i) of :func:`stacked_system` for a traced model: its generated (H, ∂p H)
    evaluated once on the pair of one-sided gradients (one clamp of the edge differences)."""
    import torch

    q = torch.clamp(edges, *c.bounds) * c.inv_h              # (..., 2, n): q₊_{i−1}, q₋_i
    density = None if m is None else m[..., None, :]
    value, slope = (v if v.shape == q.shape else torch.broadcast_to(v, q.shape)
                    for v in c.pair(c.x, q, density, torch))   # raw torch: no host reads
    if c.at_zero is not None:   # Ĥ = H(q₊) + H(q₋) − H(0)
        value = torch.cat([value[..., :1, :] - c.at_zero(c.x, 0.0 * u, m, torch)[..., None, :],
                           value[..., 1:, :]], dim=-2)
    return torch.cat([slope, value, c.diffusion * edges], dim=-2)


def _plus_product(base: Any, matrix: Any, rows: Any) -> Any:
    """base + matrix @ rows in one kernel (``addmm``, batched ``baddbmm``)."""
    import torch

    if rows.ndim == 2:
        return torch.addmm(base, matrix, rows)
    flat = rows.reshape((-1,) + rows.shape[-2:])
    out = torch.baddbmm(base.reshape((-1,) + base.shape[-2:]),
                        matrix.expand((flat.shape[0],) + matrix.shape), flat)
    return out.reshape(base.shape)


def _pad_left(v: Any, xp: Any) -> Any:
    return xp.concat([xp.zeros_like(v[..., :1]), v], axis=-1)


def _pad_right(v: Any, xp: Any) -> Any:
    return xp.concat([v, xp.zeros_like(v[..., :1])], axis=-1)


class HamiltonianTerms(NamedTuple):
    """The numerical Hamiltonian at the nodes: the one-sided gradients q_{i−1}, q_i (0 across
    the walls), Ĥ_i and its derivatives ∂Ĥ_i/∂q_{i−1} ≥ 0, ∂Ĥ_i/∂q_i ≤ 0."""

    q_left: Any
    q_right: Any
    value: Any
    d_left: Any
    d_right: Any


def hamiltonian_terms(u: Any, h: float, x: Any, m: Any, hamiltonian: Hamiltonian, xp: Any
                      ) -> HamiltonianTerms:
    """:class:`HamiltonianTerms` of the levels ``u`` (..., nx) on nodes ``x``."""
    q = (u[..., 1:] - u[..., :-1]) / h
    q_left, q_right = _pad_left(q, xp), _pad_right(q, xp)
    return HamiltonianTerms(q_left, q_right,
                            *hamiltonian.numerical(x, q_left, q_right, m, xp))


def jacobian_bands(u: Any, nu: float, h: float, dt: float, inv_hw: Any, xp: Any,
                   hamiltonian: Hamiltonian = QUADRATIC, x: Any = None, m: Any = None
                   ) -> tuple[Any, Any, Any, HamiltonianTerms]:
    """(lower, diag, upper) of J(u) and its :class:`HamiltonianTerms`; ``inv_hw`` is
    1/(h w), ``x`` the nodes and ``m`` the density H sees (both unused by ½|p|²)."""
    terms = hamiltonian_terms(u, h, x, m, hamiltonian, xp)
    lower = _pad_left(-nu * inv_hw[1:], xp) - terms.d_left / h
    upper = _pad_right(-nu * inv_hw[:-1], xp) + terms.d_right / h
    diag = 1.0 / dt - lower - upper
    return lower, diag, upper, terms


def curvature_floor(hamiltonian: Hamiltonian, h: float) -> float:
    """δ of :func:`tangent_weights`: 0 where ∂pp H is bounded, else ``CURVATURE_FLOOR``·h.
    Measured on Santa Fe with |p|^1.5/1.5 (52², the usual parameter box): Newton's iterations
    are the same for 10⁻³h and 10⁻⁶h, and grow for 10⁻²h (26 against 20) and h (no
    convergence in 100): the capped curvature must stay close to the exact one. At 201²
    (thresholds in [0.3, 0.8], σ in [0.4, 1], tol 10⁻⁶, coarse start included), 10⁻³h left
    members in a slow linear tail (threshold 0.477, σ 0.555: 200 iterations, not converged;
    40 random members: 1282 iterations, worst 200, one failure) where 10⁻⁶h converges (8
    iterations; 1026, worst 53, none); 10⁻⁹h gives the same iterations as 10⁻⁶h."""
    return 0.0 if hamiltonian.bounded_curvature else CURVATURE_FLOOR * h


#: δ = CURVATURE_FLOOR · h where ∂pp H is unbounded at p = 0.
CURVATURE_FLOOR = 1e-6


def tangent_weights(terms: HamiltonianTerms, mu_next: Any, x: Any, m: Any, h: float,
                    hamiltonian: Hamiltonian, xp: Any) -> Any:
    """The edge weights c_e / h² of the Hessian K = Dᵀ diag(c) D / h² of μ^{n+1}·Ĥ(u^n) in u
    (the tangent sweeps of Newton's method on the coupling): on edge e between nodes e and
    e + 1 with gradient q_e, c_e = μ_{e+1} ∂pp H(x_{e+1}, q_e) if q_e > 0 (it is the left
    gradient of node e + 1), μ_e ∂pp H(x_e, q_e) if q_e < 0, and 0 if q_e = 0. Where ∂pp H
    is unbounded at p = 0 (:attr:`Hamiltonian.bounded_curvature`), it is evaluated at
    sign(q_e) max(|q_e|, δ), δ = :func:`curvature_floor`: the curvature capped near p = 0, an
    approximate tangent (Newton's line search and certificate stay exact)."""
    q = terms.q_left[..., 1:]
    up, down = mu_next[..., 1:], mu_next[..., :-1]
    x_left, x_right = (None, None) if x is None else (x[..., :-1], x[..., 1:])
    m_left, m_right = (None, None) if m is None else (m[..., :-1], m[..., 1:])
    delta = curvature_floor(hamiltonian, h)
    p = q if delta == 0.0 else xp.where(q < 0, xp.clip(q, max=-delta), xp.clip(q, min=delta))
    up = up * hamiltonian.dpp(x_right, p, m_right, xp)
    down = down * hamiltonian.dpp(x_left, p, m_left, xp)
    return xp.where(q > 0, up, xp.where(q < 0, down, xp.zeros_like(q))) / (h * h)


def transpose_bands(lower: Any, diag: Any, upper: Any, xp: Any) -> tuple[Any, Any, Any]:
    """Bands of the transposed tridiagonal matrix."""
    return _pad_left(upper[..., :-1], xp), diag, _pad_right(lower[..., 1:], xp)
