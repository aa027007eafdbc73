"""The long run: the ergodic (stationary) MFG system, solved directly by Newton's method.

As T → ∞ the value behaves like λ (T − t) + v(x) and the density settles to m(x):

    λ − ν v'' + H(x, v', m) = f(x, m),     −ν m'' − (m ∂p H(x, v', m))' = 0,
    ∫ m = 1,  ∫ v = 0  (v is defined up to a constant; λ, the ergodic constant, is not).

On the grid these are the time-dependent scheme's own operators without the time step
(:mod:`.fdm.operators`): with E(v) = −ν L v + Ĥ(v) and J₀(v) = ∂E/∂v (tridiagonal; the step
matrix J less I/Δt), the unknowns v, the cell masses μ = w m and λ solve

    λ + E(v) − F(μ) = 0,    J₀(v)ᵀ μ = 0 (its last row replaced by Σ μ = 1),    Σ w v = 0,

F the running cost of the coupling state of m (one level). Rows of J₀ sum to zero, so its
transposed equations sum to zero: one is redundant, and the mass takes its place. Newton's
method runs on all 2 nx + 1 unknowns at once with the exact Jacobian in v and λ
(∂(J₀ᵀ μ)/∂v is the Hessian of μ·Ĥ, :func:`.fdm.operators.tangent_weights`) and in μ either
exactly (a coupling with a scalar potential: ∂F_i/∂μ_j = −P′(A) χ_i χ_j) or by central
differences (any other coupling, and where H depends on m); a dense solve (the system is
small: 403 unknowns at nx = 201), and a line search on the residual's norm that keeps μ ≥ 0.

The certificate is a best response, as for time-dependent solves: for the returned density,
the ergodic HJB alone (Newton in v and λ) and the stationary FP of its v give a new
density; the relative residual of the coupling states (Santa Fe: the attendance) is what
``converged`` is judged on.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.backend import get_backend
from ..core.errors import ConvergenceWarning, warn
from ..problems.base import MFGProblem
from .fdm.operators import hamiltonian_terms, tangent_weights

#: Relative step of the central differences in μ (of the largest cell mass).
MU_STEP = 1e-6
#: Halvings of a line search before the iteration gives up.
MAX_HALVINGS = 30


@dataclass(frozen=True)
class Stationary:
    """The ergodic solution on nx nodes: the value v (Σ w v = 0), the density m, the
    ergodic constant λ, the certified residual and Newton's history."""

    v: np.ndarray
    m: np.ndarray
    ergodic_constant: float
    residual: float
    converged: bool
    iterations: int
    history: dict[str, list[float]]


class ErgodicSystem:
    """The discrete ergodic system of ``problem`` on ``nx`` nodes (NumPy, float64)."""

    def __init__(self, problem: MFGProblem, nx: int) -> None:
        self.problem, self.grid = problem, problem.grid(nx, 1)
        self.backend = get_backend("numpy", "cpu", "float64")
        g = self.grid
        self.h, self.w, self.x, self.nu = g.h, np.asarray(g.weights), np.asarray(g.x), problem.nu
        self.inv_hw = 1.0 / (g.h * self.w)
        self.coupling = problem.coupling(g, self.backend)
        self.H = problem.hamiltonian
        self.potential = None if self.H.depends_on_m else self.coupling.potential()

    # -- the pieces -------------------------------------------------------------------------
    def cost(self, mu: np.ndarray) -> np.ndarray:
        """F(μ): the running cost (nx,) of the coupling state of m = μ / w (one level)."""
        m = mu / self.w
        return np.asarray(self.coupling.running_cost(self.coupling.state(np.stack([m, m]))))[0]

    def operator(self, v: np.ndarray, mu: np.ndarray) -> tuple[Any, np.ndarray, Any]:
        """(terms of Ĥ, E(v), J₀(v) as a dense matrix)."""
        m = mu / self.w if self.H.depends_on_m else None
        terms = hamiltonian_terms(v, self.h, self.x, m, self.H, np)
        diffusion = (terms.q_right - terms.q_left) / self.w
        E = -self.nu * diffusion + terms.value
        lower = np.concatenate([[0.0], -self.nu * self.inv_hw[1:]]) - terms.d_left / self.h
        upper = np.concatenate([-self.nu * self.inv_hw[:-1], [0.0]]) + terms.d_right / self.h
        J0 = np.diag(-lower - upper) + np.diag(lower[1:], -1) + np.diag(upper[:-1], 1)
        return terms, E, J0

    def residual(self, v: np.ndarray, mu: np.ndarray, lam: float) -> np.ndarray:
        """(HJB rows, FP rows with the mass last, the normalisation of v): 2 nx + 1 values."""
        _, E, J0 = self.operator(v, mu)
        fp = J0.T @ mu
        fp[-1] = mu.sum() - 1.0
        return np.concatenate([lam + E - self.cost(mu), fp, [self.w @ v]])

    def jacobian(self, v: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """The exact Jacobian in v and λ; in μ exact for a scalar potential with H independent
        of m, else by central differences."""
        n = self.grid.nx
        terms, _, J0 = self.operator(v, mu)
        m = mu / self.w if self.H.depends_on_m else None
        c = tangent_weights(terms, mu, self.x, m, self.h, self.H, np)   # edges' c_e / h²
        K = np.zeros((n, n))
        idx = np.arange(n - 1)
        K[idx, idx] += c
        K[idx + 1, idx + 1] += c
        K[idx, idx + 1] -= c
        K[idx + 1, idx] -= c
        jac = np.zeros((2 * n + 1, 2 * n + 1))
        jac[:n, :n], jac[:n, 2 * n] = J0, 1.0
        jac[n:2 * n, :n], jac[n:2 * n, n:2 * n] = K, J0.T
        if self.potential is not None:
            chi = np.asarray(self.potential.chi)
            A = chi @ mu
            jac[:n, n:2 * n] = np.outer(chi, chi) * float(self.potential.price_slope(
                np.array([A]))[0])   # F = −P(A) χ: ∂F/∂μ = −P′ χ χᵀ, the row is −∂F/∂μ
        else:
            jac[:n, n:2 * n] = self._mass_columns(v, mu)
        jac[2 * n - 1, :] = 0.0
        jac[2 * n - 1, n:2 * n] = 1.0
        jac[2 * n, :n] = self.w
        return jac

    def _mass_columns(self, v: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """∂(HJB rows)/∂μ by central differences (the FP rows' own μ-dependence through an H
        that depends on m is left to the line search: J₀ᵀ stands for it)."""
        n = mu.size
        step = MU_STEP * max(float(mu.max()), 1e-300)
        cols = np.empty((n, n))
        for j in range(n):
            up, down = mu.copy(), mu.copy()
            up[j] += step
            down[j] -= step
            cols[:, j] = (self._hjb_rows(v, up) - self._hjb_rows(v, down)) / (2 * step)
        return cols

    def _hjb_rows(self, v: np.ndarray, mu: np.ndarray) -> np.ndarray:
        return self.operator(v, mu)[1] - self.cost(mu)

    # -- the best response (the certificate) ------------------------------------------------
    def best_response(self, mu: np.ndarray, v: np.ndarray, lam: float
                      ) -> tuple[np.ndarray, float, np.ndarray]:
        """(v, λ) of the ergodic HJB with the running cost of μ frozen (Newton from v, λ),
        and the stationary density of that v: μ′ with J₀(v)ᵀ μ′ = 0, Σ μ′ = 1."""
        n, F = mu.size, self.cost(mu)
        for _ in range(100):
            terms, E, J0 = self.operator(v, mu)
            r = np.concatenate([lam + E - F, [self.w @ v]])
            if np.max(np.abs(r)) <= 1e-13 * max(1.0, np.max(np.abs(F))):
                break
            jac = np.zeros((n + 1, n + 1))
            jac[:n, :n], jac[:n, n], jac[n, :n] = J0, 1.0, self.w
            step = np.linalg.solve(jac, -r)
            v, lam = v + step[:n], lam + step[n]
        J0 = self.operator(v, mu)[2]
        system = J0.T.copy()
        system[-1, :] = 1.0
        rhs = np.zeros(n)
        rhs[-1] = 1.0
        return v, float(lam), np.linalg.solve(system, rhs)

    def certificate(self, mu: np.ndarray, v: np.ndarray, lam: float) -> float:
        """‖z(BR(μ)) − z(μ)‖ / ‖z(BR(μ))‖ for the coupling states z of the densities."""
        _, _, mu_br = self.best_response(mu, v, lam)
        z = self._state(mu)
        z_br = self._state(mu_br)
        return float(np.linalg.norm(z_br - z) / max(np.linalg.norm(z_br), 1e-300))

    def _state(self, mu: np.ndarray) -> np.ndarray:
        m = mu / self.w
        return np.asarray(self.coupling.state(np.stack([m, m]))).ravel()


def solve_stationary(problem: MFGProblem, nx: int, tol: float, max_iter: int) -> Stationary:
    """Newton's method on the ergodic system of ``problem`` (module docstring), from v = 0,
    λ = 0 and the initial density, until the certificate is ≤ ``tol`` or ``max_iter``
    Newton steps; a :class:`~mfgwork.ConvergenceWarning` where it is not reached."""
    system = ErgodicSystem(problem, nx)
    n = nx
    m0 = np.asarray(problem.initial_density(system.grid, system.backend), dtype=np.float64)
    v, mu, lam = np.zeros(n), m0 * system.w / float(m0 @ system.w), 0.0
    history: dict[str, list[float]] = {"residual": [], "system": [], "time": []}
    best = (math.inf, v, mu, lam)
    for _ in range(max_iter):
        started = time.perf_counter()
        R = system.residual(v, mu, lam)
        step = np.linalg.solve(system.jacobian(v, mu), -R)
        v, mu, lam = _line_search(system, v, mu, lam, step, float(np.linalg.norm(R)))
        certified = system.certificate(mu, v, lam)
        history["residual"].append(certified)
        history["system"].append(float(np.linalg.norm(system.residual(v, mu, lam))))
        history["time"].append(time.perf_counter() - started)
        if certified < best[0]:
            best = (certified, v, mu, lam)
        if certified <= tol:
            break
    residual, v, mu, lam = best
    k = len(history["residual"])
    if residual > tol:
        warn(f"the ergodic system did not reach tol={tol:g} in {k} Newton steps "
             f"(max_iter={max_iter}; final residual {residual:.3g}); returning the best "
             "certified iterate with converged=False", ConvergenceWarning)
    return Stationary(v=v, m=mu / system.w, ergodic_constant=lam, residual=residual,
                      converged=residual <= tol, iterations=k, history=history)


def _line_search(system: ErgodicSystem, v: np.ndarray, mu: np.ndarray, lam: float,
                 step: np.ndarray, norm: float) -> tuple[np.ndarray, np.ndarray, float]:
    """The longest of the steps 1, ½, ¼, … that keeps μ ≥ 0 and lowers ‖R‖ (the last tried
    after :data:`MAX_HALVINGS`)."""
    n, t = v.size, 1.0
    for _ in range(MAX_HALVINGS):
        v_t, mu_t, lam_t = v + t * step[:n], mu + t * step[n:2 * n], lam + t * step[2 * n]
        if (mu_t >= 0).all() and np.linalg.norm(system.residual(v_t, mu_t, lam_t)) < norm:
            return v_t, mu_t, lam_t
        t *= 0.5
    return v_t, np.maximum(mu_t, 0.0), lam_t
