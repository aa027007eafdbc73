"""Batched, right-preconditioned BiCGStab on arrays (..., ny, nx) (array-API code).

Solves A x = b for every leading index at once, A given as a function (the matrix-free
5-point stencil). Inner products reduce over the last two axes; the scalars of the
recurrence are (..., 1, 1) arrays, so nothing leaves the device inside the loop except the
convergence test, read every ``check_every`` iterations (one host synchronisation each).
Right preconditioning by M⁻¹, the inverse diagonal D⁻¹ or a function (van der Vorst 1992):

    p ← r + β (p − ω v),  y = M⁻¹ p,  v = A y,  α = ρ / (r̂, v),  s = r − α v,
    z = M⁻¹ s,  t = A z,  ω = (t, s)/(t, t),  x ← x + α y + ω z,  r ← s − ω t.

Divisions by an exact zero (a problem whose residual vanished) are replaced by divisions by
one, which leaves that problem's iterate unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...core.backend import to_numpy
from ...core.errors import SolverError


def _dot(a: Any, b: Any, xp: Any) -> Any:
    return xp.sum(xp.sum(a * b, axis=-1, keepdims=True), axis=-2, keepdims=True)


def _div(a: Any, b: Any, xp: Any) -> Any:
    return a / (b + xp.astype(b == 0.0, b.dtype))


State = tuple  # (x, r, p, v, rho, alpha, omega)


def iterate(apply: Callable[[Any], Any], precondition: Any, r_hat: Any, state: State,
            steps: int, xp: Any) -> State:
    """``steps`` BiCGStab iterations from ``state`` (a pure function of its arrays: on CUDA
    it is recorded once as a graph and replayed, see :class:`mfgwork.core.cuda_graphs`);
    ``precondition``: the inverse diagonal, or a function v ↦ M⁻¹ v."""
    if not callable(precondition):
        inv_diag = precondition

        def precondition(v: Any) -> Any:
            return inv_diag * v

    x, r, p, v, rho, alpha, omega = state
    for _ in range(steps):
        rho_new = _dot(r_hat, r, xp)
        beta = _div(rho_new, rho, xp) * _div(alpha, omega, xp)
        p = r + beta * (p - omega * v)
        y = precondition(p)
        v = apply(y)
        alpha = _div(rho_new, _dot(r_hat, v, xp), xp)
        s = r - alpha * v
        z = precondition(s)
        t = apply(z)
        omega = _div(_dot(t, s, xp), _dot(t, t, xp), xp)
        x = x + alpha * y + omega * z
        r = s - omega * t
        rho = rho_new
    return x, r, p, v, rho, alpha, omega


def bicgstab(apply: Callable[[Any], Any], b: Any, precondition: Any, xp: Any, *,
             rtol: float | np.ndarray, max_iter: int, fail: float | np.ndarray,
             check_every: int = 8,
             chunk: Callable[[State, Any], State] | None = None,
             x0: Any = None) -> tuple[Any, int]:
    """x with ‖b − A x‖₂ ≤ ``rtol`` ‖b‖₂ per problem (or, after ``max_iter`` iterations, the
    iterate if its relative residual is ≤ ``fail``: the rounding floor of float32; otherwise
    :class:`SolverError`), from ``x0`` (default 0; a start that already meets ``rtol`` costs
    no iteration). ``rtol`` and ``fail``: one for all problems, or one per problem (host
    arrays (B,)). Returns x and the iterations done. ``chunk(state, r_hat)``: the
    ``check_every`` iterations between two tests (default :func:`iterate`)."""
    x, r = (0.0 * b, b) if x0 is None else (x0, b - apply(x0))
    r_hat = r
    b_norm = xp.sqrt(_dot(b, b, xp))

    def relative(r: Any) -> np.ndarray:   # per problem, on the host
        return np.reshape(to_numpy(_div(xp.sqrt(_dot(r, r, xp)), b_norm, xp)), (-1,))

    if x0 is not None and np.all(relative(r) <= rtol):
        return x, 0
    one = 1.0 + 0.0 * b_norm
    state = (x, r, 0.0 * b, 0.0 * b, one, one, one)
    k = 0
    while k < max_iter:
        state = (iterate(apply, precondition, r_hat, state, check_every, xp) if chunk is None
                 else chunk(state, r_hat))
        k += check_every
        if np.all(relative(state[1]) <= rtol):
            return state[0], k
    x = state[0]
    rel = relative(b - apply(x))
    if np.all(rel <= fail):
        return x, k
    worst = int(np.argmax(rel / fail))
    raise SolverError(f"BiCGStab did not converge in {max_iter} iterations (relative "
                      f"residual {rel[worst]:.3g} > {np.broadcast_to(fail, rel.shape)[worst]:.3g})")
