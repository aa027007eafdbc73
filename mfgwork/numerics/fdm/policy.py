"""Policy evaluation: the expected cost of agents who follow the feedback of a given U.

An agent who moves by dX = α dt + σ dW with the fixed feedback α = −∂x u of a solved U, and
pays ½|α|² + f per unit time and g at T, has the expected cost v solving the linear equation

    −∂t v − ν ∂xx v − α ∂x v = ½|α|² + f,   v(T) = g,   reflecting walls.

Discretized as the HJB scheme of :mod:`.operators` with the control frozen at its upwind
optimum for U (a⁻ = (q_{i−1})_+ to the left, a⁺ = −(q_i)_− to the right, q = D u^n): the
implicit step from v^{n+1} to v^n is the linear system

    J(u^n) v^n = v^{n+1}/Δt + F^n + H(u^n),   H_i(u) = ½ [(q_{i−1})_+² + (q_i)_−²],

with J the HJB Newton Jacobian at u^n (tridiagonal M-matrix). Since J(u) u = u/Δt − ν L u +
2 H(u), v = U exactly when F is the running cost U was solved with; for any other F the
best response (HJB with that F) costs at most v, by the comparison principle of the
monotone scheme.
"""

from __future__ import annotations

from typing import Any

from ...core.backend import Backend
from ...core.grid import Grid
from .operators import jacobian_bands, negative_part, positive_part
from .tridiag import tridiagonal_solver


def evaluate_policy(U: Any, F: Any, V_T: Any, grid: Grid, nu: float, backend: Backend) -> Any:
    """v (…, nt + 1, nx) of agents following −∂x u of ``U`` (nt + 1, nx) against the running
    costs ``F`` (…, nt, nx) and terminal cost ``V_T`` (nx,). Leading axes of F are a batch
    (e.g. one running cost per realised attendance path), sharing U's matrices."""
    xp = backend.xp
    solve = tridiagonal_solver(backend)
    inv_hw = backend.asarray(1.0 / (grid.h * grid.weights))
    levels: list[Any] = [None] * (grid.nt + 1)
    levels[grid.nt] = V_T + 0.0 * F[..., 0, :]
    for n in range(grid.nt - 1, -1, -1):
        lower, diag, upper, q = jacobian_bands(U[n], nu, grid.h, grid.dt, inv_hw, xp)
        zero = xp.zeros_like(q[..., :1])
        hamiltonian = 0.5 * (xp.concat([zero, positive_part(q, xp)], axis=-1) ** 2
                             + xp.concat([negative_part(q, xp), zero], axis=-1) ** 2)
        rhs = levels[n + 1] / grid.dt + F[..., n, :] + hamiltonian
        bands = (xp.broadcast_to(b, rhs.shape) for b in (lower, diag, upper))
        levels[n] = solve(*bands, rhs)
    return xp.stack(levels, axis=-2)
