"""The discrete operators shared by the HJB and FP steps (array-API code, batched).

On the grid of :mod:`mfgwork.core.grid` (control volumes w_i, spacing h), with edge gradients
q_e = (u_{e+1} − u_e)/h and q = 0 across the walls (Neumann):

    (L u)_i = (q_i − q_{i−1}) / w_i                         diffusion
    H_i(u)  = ½ [ (q_{i−1})_+² + (q_i)_−² ]                 Godunov / Engquist–Osher for ½|p|²

The implicit Euler HJB step from u^{n+1} to u = u^n solves R(u) = 0 with

    R(u) = (u − u^{n+1})/Δt − ν L u + H(u) − F^n,

whose exact Jacobian J(u) = I/Δt − ν L + B(u) is tridiagonal:

    lower_i = −ν/(h w_i) − (q_{i−1})_+/h,   upper_i = −ν/(h w_i) + (q_i)_−/h,
    diag_i  = 1/Δt − lower_i − upper_i.

J is a diagonally dominant M-matrix. The FP step is its adjoint (Achdou): with cell masses
μ_i = w_i m_i,  J(u^n)ᵀ μ^{n+1} = μ^n / Δt.  Columns of Δt·J sum to one, so Σ μ is conserved
and μ stays ≥ 0.

:func:`newton_system` computes J's bands and R together from the differences g_e = u_{e+1} −
u_e padded with g = 0 across the walls, in about twenty array operations: on an accelerator
each operation is a kernel launch, and the launches, not the arithmetic, are the cost.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class StepConstants(NamedTuple):
    """The parts of the HJB step that do not depend on u, as arrays of the backend (0-d or
    (..., n); so a compiled step does not specialize on their values)."""

    lower0: Any        # −ν/(h w_i) for i ≥ 1, 0 at the left wall
    upper0: Any        # −ν/(h w_i) for i ≤ n − 2, 0 at the right wall
    nu_inv_hw: Any     # ν/(h w_i)
    inv_dt: Any        # 1/Δt
    inv_h2: Any        # 1/h²
    half_inv_h2: Any   # 1/(2h²)


def step_constants(nu: Any, h: float, dt: float, inv_hw: Any, asarray: Any) -> StepConstants:
    """:class:`StepConstants` for diffusion ``nu`` (a scalar or (B, 1)) on spacing ``h``."""
    nu_inv_hw = nu * inv_hw
    lower0, upper0 = -nu_inv_hw.copy(), -nu_inv_hw.copy()
    lower0[..., 0] = upper0[..., -1] = 0.0
    return StepConstants(*(asarray(v) for v in (lower0, upper0, nu_inv_hw, 1.0 / dt,
                                                1.0 / h**2, 0.5 / h**2)))


def newton_system(u: Any, rhs: Any, c: StepConstants, xp: Any) -> tuple[Any, Any, Any, Any]:
    """(lower, diag, upper) of J(u) and R(u), with ``rhs`` = u^{n+1}/Δt + F^n.

    The bands have ``lower[..., 0] = upper[..., -1] = 0`` exactly (g vanishes at the walls).
    """
    padded = xp.concat([u[..., :1], u, u[..., -1:]], axis=-1)
    g = padded[..., 1:] - padded[..., :-1]                # h q_e, e = −1..n−1, 0 at the walls
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


def positive_part(v: Any, xp: Any) -> Any:
    """(v)_+ = max(v, 0), as arithmetic (exact; no scalar tensors, so CUDA-graph safe)."""
    return 0.5 * (v + xp.abs(v))


def negative_part(v: Any, xp: Any) -> Any:
    """(v)_− = min(v, 0), as arithmetic (exact)."""
    return 0.5 * (v - xp.abs(v))


def jacobian_bands(u: Any, nu: float, h: float, dt: float, inv_hw: Any, xp: Any
                   ) -> tuple[Any, Any, Any, Any]:
    """(lower, diag, upper) of J(u) and the edge gradients q; ``inv_hw`` is 1/(h w)."""
    q = (u[..., 1:] - u[..., :-1]) / h
    lower = _pad_left(-nu * inv_hw[1:] - positive_part(q, xp) / h, xp)
    upper = _pad_right(-nu * inv_hw[:-1] + negative_part(q, xp) / h, xp)
    diag = 1.0 / dt - lower - upper
    return lower, diag, upper, q


def transpose_bands(lower: Any, diag: Any, upper: Any, xp: Any) -> tuple[Any, Any, Any]:
    """Bands of the transposed tridiagonal matrix."""
    return _pad_left(upper[..., :-1], xp), diag, _pad_right(lower[..., 1:], xp)
