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
    ½|p|² is specialised (:func:`_quadratic_system`: the same numbers, rounded as the compiled
    loops round them, in the fewest array operations).
    """
    padded = xp.concat([u[..., :1], u, u[..., -1:]], axis=-1)
    g = padded[..., 1:] - padded[..., :-1]                # h q_e, e = −1..n−1, 0 at the walls
    if type(hamiltonian) is Quadratic:
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


def tangent_weights(terms: HamiltonianTerms, mu_next: Any, x: Any, m: Any, h: float,
                    hamiltonian: Hamiltonian, xp: Any) -> Any:
    """The edge weights c_e / h² of the Hessian K = Dᵀ diag(c) D / h² of μ^{n+1}·Ĥ(u^n) in u
    (the tangent sweeps of Newton's method on the coupling): on edge e between nodes e and
    e + 1 with gradient q_e, c_e = μ_{e+1} ∂pp H(x_{e+1}, q_e) if q_e > 0 (it is the left
    gradient of node e + 1), μ_e ∂pp H(x_e, q_e) if q_e < 0, and 0 if q_e = 0. Needs
    ∂pp H bounded (:attr:`Hamiltonian.bounded_curvature`)."""
    q = terms.q_left[..., 1:]
    up, down = mu_next[..., 1:], mu_next[..., :-1]
    if type(hamiltonian) is not Quadratic:   # (∂pp H = 1 for ½|p|²)
        x_left, x_right = (None, None) if x is None else (x[..., :-1], x[..., 1:])
        m_left, m_right = (None, None) if m is None else (m[..., :-1], m[..., 1:])
        up = up * hamiltonian.dpp(x_right, q, m_right, xp)
        down = down * hamiltonian.dpp(x_left, q, m_left, xp)
    return xp.where(q > 0, up, xp.where(q < 0, down, xp.zeros_like(q))) / (h * h)


def transpose_bands(lower: Any, diag: Any, upper: Any, xp: Any) -> tuple[Any, Any, Any]:
    """Bands of the transposed tridiagonal matrix."""
    return _pad_left(upper[..., :-1], xp), diag, _pad_right(lower[..., 1:], xp)
