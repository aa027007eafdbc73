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
"""

from __future__ import annotations

from typing import Any


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


def hjb_residual(u: Any, u_next: Any, F: Any, q: Any, nu: float, dt: float, inv_w: Any,
                 xp: Any) -> Any:
    """R(u) = (u − u^{n+1})/Δt − ν L u + H(u) − F, given q = D u."""
    q_left = _pad_left(q, xp)
    q_right = _pad_right(q, xp)
    hamiltonian = 0.5 * (positive_part(q_left, xp) ** 2 + negative_part(q_right, xp) ** 2)
    return (u - u_next) / dt - nu * inv_w * (q_right - q_left) + hamiltonian - F


def transpose_bands(lower: Any, diag: Any, upper: Any, xp: Any) -> tuple[Any, Any, Any]:
    """Bands of the transposed tridiagonal matrix."""
    return _pad_left(upper[..., :-1], xp), diag, _pad_right(lower[..., 1:], xp)
