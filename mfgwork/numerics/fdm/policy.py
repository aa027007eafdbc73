"""Policy evaluation: the expected cost of agents who follow the feedback of a given U.

An agent who moves by dX = α dt + σ dW with the fixed feedback α = −∂p H(x, ∂x u, m) of a
solved U, and pays the running cost L(x, α, m) + f per unit time (L the Lagrangian, the convex
conjugate of H: L = p ∂p H − H at the optimum) and g at T, has the expected cost v solving the
linear equation

    −∂t v − ν ∂xx v − α ∂x v = L + f,   v(T) = g,   reflecting walls.

Discretized as the HJB scheme of :mod:`.operators` with the control frozen at its upwind
optimum for U (the derivatives ∂Ĥ/∂q_{i−1}, ∂Ĥ/∂q_i of the numerical Hamiltonian at
q = D u^n): the implicit step from v^{n+1} to v^n is the linear system

    J(u^n) v^n = v^{n+1}/Δt + F^n + L_i(u^n),   L_i = q_{i−1} ∂Ĥ/∂q_{i−1} + q_i ∂Ĥ/∂q_i − Ĥ_i,

with J the HJB Newton Jacobian at u^n (tridiagonal M-matrix). Since J(u) u = u/Δt − ν L u +
Σ q ∂Ĥ/∂q, v = U exactly when F is the running cost U was solved with; for any other F the
best response (HJB with that F) costs at most v, by the comparison principle of the
monotone scheme (½|p|²: L = Ĥ = ½[(q_{i−1})_+² + (q_i)_−²]).
"""

from __future__ import annotations

from typing import Any

from ...core.backend import Backend
from ...core.grid import Grid
from ...problems.hamiltonians import Hamiltonian
from .kernels import tridiagonal_solver
from .operators import QUADRATIC, jacobian_bands


def evaluate_policy(U: Any, F: Any, V_T: Any, grid: Grid, nu: float, backend: Backend,
                    hamiltonian: Hamiltonian = QUADRATIC, density: Any = None) -> Any:
    """v (…, nt + 1, nx) of agents following −∂p H(x, ∂x u, m) of ``U`` (nt + 1, nx) against
    the running costs ``F`` (…, nt, nx) and terminal cost ``V_T`` (nx,). Leading axes of F
    are a batch (e.g. one running cost per realised attendance path), sharing U's matrices.
    ``density``: m^1..m^nt (nt, nx) where H depends on m (step n sees m^{n+1})."""
    xp = backend.xp
    solve = tridiagonal_solver(backend)
    inv_hw = backend.asarray(1.0 / (grid.h * grid.weights))
    x = backend.asarray(grid.x)
    levels: list[Any] = [None] * (grid.nt + 1)
    levels[grid.nt] = V_T + 0.0 * F[..., 0, :]
    for n in range(grid.nt - 1, -1, -1):
        m = None if density is None else density[n]
        lower, diag, upper, h = jacobian_bands(U[n], nu, grid.h, grid.dt, inv_hw, xp,
                                               hamiltonian, x, m)
        lagrangian = h.q_left * h.d_left + h.q_right * h.d_right - h.value
        rhs = levels[n + 1] / grid.dt + F[..., n, :] + lagrangian
        bands = (xp.broadcast_to(b, rhs.shape) for b in (lower, diag, upper))
        levels[n] = solve(*bands, rhs)
    return xp.stack(levels, axis=-2)
