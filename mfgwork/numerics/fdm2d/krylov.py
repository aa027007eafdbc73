"""Batched, Jacobi-preconditioned BiCGStab on arrays (..., ny, nx) (array-API code).

Solves A x = b for every leading index at once, A given as a function (the matrix-free
5-point stencil). Inner products reduce over the last two axes; the scalars of the
recurrence are (..., 1, 1) arrays, so nothing leaves the device inside the loop except the
convergence test, read every ``check_every`` iterations (one host synchronisation each).
Right preconditioning by the inverse diagonal (van der Vorst 1992):

    p ← r + β (p − ω v),  y = D⁻¹ p,  v = A y,  α = ρ / (r̂, v),  s = r − α v,
    z = D⁻¹ s,  t = A z,  ω = (t, s)/(t, t),  x ← x + α y + ω z,  r ← s − ω t.

Divisions by an exact zero (a problem whose residual vanished) are replaced by divisions by
one, which leaves that problem's iterate unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core.backend import to_numpy
from ...core.errors import SolverError


def _dot(a: Any, b: Any, xp: Any) -> Any:
    return xp.sum(xp.sum(a * b, axis=-1, keepdims=True), axis=-2, keepdims=True)


def _div(a: Any, b: Any, xp: Any) -> Any:
    return a / (b + xp.astype(b == 0.0, b.dtype))


State = tuple  # (x, r, p, v, rho, alpha, omega)


def iterate(apply: Callable[[Any], Any], inv_diag: Any, r_hat: Any, state: State, steps: int,
            xp: Any) -> State:
    """``steps`` BiCGStab iterations from ``state`` (a pure function of its arrays: on CUDA
    it is recorded once as a graph and replayed, see :class:`mfgwork.core.cuda_graphs`)."""
    x, r, p, v, rho, alpha, omega = state
    for _ in range(steps):
        rho_new = _dot(r_hat, r, xp)
        beta = _div(rho_new, rho, xp) * _div(alpha, omega, xp)
        p = r + beta * (p - omega * v)
        y = inv_diag * p
        v = apply(y)
        alpha = _div(rho_new, _dot(r_hat, v, xp), xp)
        s = r - alpha * v
        z = inv_diag * s
        t = apply(z)
        omega = _div(_dot(t, s, xp), _dot(t, t, xp), xp)
        x = x + alpha * y + omega * z
        r = s - omega * t
        rho = rho_new
    return x, r, p, v, rho, alpha, omega


def bicgstab(apply: Callable[[Any], Any], b: Any, inv_diag: Any, xp: Any, *, rtol: float,
             max_iter: int, fail: float, check_every: int = 8,
             chunk: Callable[[State, Any], State] | None = None) -> tuple[Any, int]:
    """x with ‖b − A x‖₂ ≤ ``rtol`` ‖b‖₂ per problem (or, after ``max_iter`` iterations, the
    iterate if its relative residual is ≤ ``fail``: the rounding floor of float32; otherwise
    :class:`SolverError`). Returns x and the iterations done. ``chunk(state, r_hat)``: the
    ``check_every`` iterations between two tests (default :func:`iterate`)."""
    x, r = 0.0 * b, b  # from x = 0
    r_hat = r
    b_norm = xp.sqrt(_dot(b, b, xp))
    one = 1.0 + 0.0 * b_norm
    state = (x, r, 0.0 * b, 0.0 * b, one, one, one)
    k = 0
    while k < max_iter:
        state = (iterate(apply, inv_diag, r_hat, state, check_every, xp) if chunk is None
                 else chunk(state, r_hat))
        k += check_every
        r = state[1]
        rel = to_numpy(xp.max(_div(xp.sqrt(_dot(r, r, xp)), b_norm, xp)))
        if float(rel) <= rtol:
            return state[0], k
    x = state[0]
    r = b - apply(x)
    worst = float(to_numpy(xp.max(_div(xp.sqrt(_dot(r, r, xp)), b_norm, xp))))
    if worst <= fail:
        return x, k
    raise SolverError(f"BiCGStab did not converge in {max_iter} iterations (relative "
                      f"residual {worst:.3g} > {fail:.3g})")


#: Nodes per program of the fused iterations (:mod:`.triton_krylov`).
FUSED_BLOCK = 512


def iterate_fused(coefficients: tuple[Any, ...], inv_diag: Any, r_hat: Any, state: State,
                  steps: int, transpose: bool) -> State:
    """:func:`iterate` for the stencil J (``transpose``: Jᵀ) with ``coefficients`` (diag, W,
    E, S, N) of :class:`.stencil.Coefficients`, as three Triton launches per iteration
    (:mod:`.triton_krylov`; torch tensors (..., ny, nx) on CUDA, or on CPU under Triton's
    interpreter). The same state in and out."""
    import torch

    from ...core.compiling import announce_compilation
    from . import triton_krylov as tk

    x, r, p, v, rho, alpha, omega = state
    shape = x.shape
    ny, nx = shape[-2:]
    B = x.numel() // (ny * nx)
    full = [a.expand(shape).contiguous() for a in (*coefficients, inv_diag, r_hat)]
    diag, W, E, S, N, inv, r_hat = full
    scalars = torch.stack([a.reshape(B) for a in (rho, alpha, omega)], 1)
    rr = (r_hat * r).sum(-1).sum(-1).reshape(B, 1)
    tiles = -(-ny * nx // FUSED_BLOCK)
    block = {"BLOCK": FUSED_BLOCK, "PB": max(2, 1 << (tiles - 1).bit_length())}
    if x.is_cuda:
        announce_compilation([k.fn.__name__ for k in (tk.direction_kernel, tk.step_kernel,
                                                      tk.update_kernel)])
    x, r, p, v = (a.contiguous() for a in (x, r, p, v))
    for _ in range(steps):
        new = torch.empty((B, 3), dtype=x.dtype, device=x.device)
        p_out, y, v_out, t, x_out, r_out = (torch.empty_like(x) for _ in range(6))
        rv, ts, tt, rr_out = (torch.empty((B, tiles), dtype=x.dtype, device=x.device)
                              for _ in range(4))
        tk.direction_kernel[(B, tiles)](r, p, v, inv, diag, W, E, S, N, r_hat, rr,
                                        rr.shape[1], scalars, p_out, y, v_out, rv, new, ny, nx,
                                        TRANSPOSE=transpose, **block)
        tk.step_kernel[(B, tiles)](r, v_out, inv, diag, W, E, S, N, rv, new, t, ts, tt, ny, nx,
                                   TRANSPOSE=transpose, **block)
        tk.update_kernel[(B, tiles)](x, r, v_out, y, t, inv, r_hat, ts, tt, new, x_out, r_out,
                                     rr_out, ny, nx, **block)
        x, r, p, v, scalars, rr = x_out, r_out, p_out, v_out, new, rr_out
    rho, alpha, omega = (scalars[:, i].reshape((*shape[:-2], 1, 1)) for i in range(3))
    return x, r, p, v, rho, alpha, omega
