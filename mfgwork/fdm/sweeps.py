"""HJB (backward) and FP (forward) sweeps of the implicit finite-difference scheme.

:class:`FiniteDifferences` binds the scheme of :mod:`.operators` to a grid, ν and a backend.
On NumPy it runs the compiled loops of :mod:`.compiled`; on torch it runs the array-API
sweeps below with the backend's tridiagonal kernel. On accelerators (and MPS emulation) the
time loop makes no host round trip: each step takes a fixed number of Newton iterations and
the largest final Newton update is checked once after the sweep (if it is too large, the
sweep is repeated with twice the iterations).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import Backend
from ..errors import SolverError
from ..grid import Grid
from .operators import hjb_residual, jacobian_bands, transpose_bands
from .tridiag import tridiagonal_solver

MAX_NEWTON = 50


class FiniteDifferences:
    """The implicit upwind scheme on ``grid`` with diffusion ``nu`` for ``backend``."""

    def __init__(self, grid: Grid, nu: float, backend: Backend, *,
                 accelerator_newton_steps: int = 3) -> None:
        self.grid, self.nu, self.backend = grid, float(nu), backend
        self.weights = backend.asarray(grid.weights)
        self._inv_w_np = 1.0 / grid.weights
        self._inv_hw_np = 1.0 / (grid.h * grid.weights)
        self.inv_w = backend.asarray(self._inv_w_np)
        self.inv_hw = backend.asarray(self._inv_hw_np)
        self.newton_tol = 64 * backend.eps
        self.newton_steps = accelerator_newton_steps
        self.newton_iterations = 0
        self.solve_tridiagonal = tridiagonal_solver(backend)

    # -- HJB ---------------------------------------------------------------------------------
    def solve_hjb(self, U_T: Any, F: Any, guess: Any | None = None) -> Any:
        """U with U[..., nt, :] = U_T, solving the HJB steps with running costs F[..., n, :].

        ``guess`` (same shape as U, optional) seeds Newton at each step, e.g. the previous
        Picard iterate; otherwise each step starts from the later time level.
        """
        if self.backend.name == "numpy" and F.ndim == 2:
            return self._hjb_compiled(U_T, F, guess)
        if not self.backend.is_accelerator:
            return self._hjb_array(U_T, F, guess, MAX_NEWTON, adaptive=True)[0]
        steps = self.newton_steps
        while True:
            U, worst = self._hjb_array(U_T, F, guess, steps, adaptive=False)
            if float(worst) <= self.newton_tol or steps >= MAX_NEWTON:
                break
            steps *= 2
        if not float(worst) <= self.newton_tol:
            raise SolverError(f"HJB Newton did not converge in {steps} steps per time step "
                              f"(largest final relative update {float(worst):.3g})")
        return U

    def _hjb_compiled(self, U_T: np.ndarray, F: np.ndarray, guess: np.ndarray | None) -> Any:
        from . import compiled

        g = self.grid
        U = np.empty((g.nt + 1, g.nx), dtype=F.dtype)
        U[-1] = U_T
        its, bad = compiled.hjb_sweep(U, F, U if guess is None else guess, guess is not None,
                                      self.nu, g.h, g.dt, self._inv_hw_np.astype(F.dtype),
                                      self._inv_w_np.astype(F.dtype), self.newton_tol,
                                      MAX_NEWTON)
        self.newton_iterations += its
        if bad >= 0:
            raise SolverError(f"HJB Newton did not converge at time step n={bad} "
                              f"(t={g.t[bad]:.6g}) in {MAX_NEWTON} iterations")
        return U

    def _hjb_array(self, U_T: Any, F: Any, guess: Any | None, max_newton: int,
                   adaptive: bool) -> tuple[Any, Any]:
        xp, g = self.backend.xp, self.grid
        levels: list[Any] = [None] * (g.nt + 1)
        levels[g.nt] = U_T + 0.0 * F[..., 0, :]
        worst = xp.zeros_like(F[..., 0, 0])
        for n in range(g.nt - 1, -1, -1):
            u_next = levels[n + 1]
            u = u_next if guess is None else guess[..., n, :]
            for _ in range(max_newton):
                lower, diag, upper, q = jacobian_bands(u, self.nu, g.h, g.dt, self.inv_hw, xp)
                res = hjb_residual(u, u_next, F[..., n, :], q, self.nu, g.dt, self.inv_w, xp)
                du = self.solve_tridiagonal(lower, diag, upper, res)
                u = u - du
                self.newton_iterations += 1
                step = xp.max(xp.abs(du), axis=-1) / (1.0 + xp.max(xp.abs(u), axis=-1))
                if adaptive and float(xp.max(step)) <= self.newton_tol:
                    break
            else:
                if adaptive:
                    raise SolverError(f"HJB Newton did not converge at time step n={n} "
                                      f"(t={g.t[n]:.6g}) in {max_newton} iterations")
            if not adaptive:
                worst = xp.maximum(worst, step)
            levels[n] = u
        return xp.stack(levels, axis=-2), xp.max(worst)

    # -- FP ----------------------------------------------------------------------------------
    def solve_fp(self, U: Any, m0: Any) -> Any:
        """Densities M (levels 0..nt) from m0, transported by the control −∂x u of U."""
        g, xp = self.grid, self.backend.xp
        mu0 = m0 * self.weights
        if self.backend.name == "numpy" and U.ndim == 2:
            from . import compiled

            mu = np.empty_like(U)
            mu[0] = mu0
            compiled.fp_sweep(U, mu, self.nu, g.h, g.dt, self._inv_hw_np.astype(U.dtype))
            return mu * self._inv_w_np.astype(U.dtype)
        lower, diag, upper, _ = jacobian_bands(U[..., :-1, :], self.nu, g.h, g.dt,
                                               self.inv_hw, xp)
        lt, dg, ut = transpose_bands(lower, diag, upper, xp)
        masses = [mu0 + 0.0 * U[..., 0, :]]
        for n in range(g.nt):
            masses.append(self.solve_tridiagonal(lt[..., n, :], dg[..., n, :], ut[..., n, :],
                                                 masses[n] / g.dt))
        return xp.stack(masses, axis=-2) * self.inv_w
