"""Newton's method for scalar potential games (the fallback for steep, saturating couplings).

A coupling declares a :class:`~mfgwork.problems.base.ScalarPotential` when its running cost is
F^n = −y_n χ, with the price path y = P(z) of the observed path z_n = Σ_i χ_i μ_i^{n+1}
(μ = w m the cell masses) and P decreasing (a monotone coupling). The equilibria then
minimise the convex potential W(y) = −Σ_i μ0_i U_i^0(y) + Σ_n Δt Ψ*(y_n) (Ψ*' = −P⁻¹, U(y) the
best response to y), and by the adjoint structure of the scheme the Jacobian D = DΦ̃ of the
observed path of the best response with respect to y is the Hessian of the first term: symmetric
positive semi-definite.

The iteration runs on z itself: for a steep P the equilibrium prices sit within round-off of
P's bounds wherever z is a few widths of P away from its midpoint, so neither y nor W can
carry them. The residual R(z) = Φ(z) − z, Φ = Φ̃ ∘ P, has the Jacobian
D diag(P') − I = −S⁻¹ (S D S + I) S with S = diag(√−P'), which is never singular: the Newton
step d = S⁻¹ (S D S + I)⁻¹ S R needs one Cholesky factorisation of a matrix with eigenvalues
≥ 1, and is the Picard step wherever P is flat. D is exact: the tangent linear model of the
discrete HJB–FP system (one backward and one forward sweep of tridiagonal solves, all nt
directions at once). Steps are damped by backtracking on ½‖R‖² (for which the Newton step is
a descent direction, and which has no stationary point but the equilibrium since the Jacobian
is never singular). The returned densities are those of the best response to z; their
fixed-point residual at Φ(z) is certified by one more best response per step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.backend import Backend, to_numpy
from ..core.grid import Grid
from ..problems.base import ScalarPotential
from ..problems.hamiltonians import Hamiltonian
from .fdm.numba_kernels import compiled_model
from .fdm.operators import (
    QUADRATIC,
    curvature_floor,
    jacobian_bands,
    tangent_weights,
    transpose_bands,
)
from .fdm.tangent import pipelined_factors, spd_solve, tangent_jacobian


@dataclass
class NewtonRun:
    """A Newton continuation between its steps: the best response ``evaluate``, the iterate
    it starts from (``start``: z, U, M), the current ``point`` (z, U, M, R = Φ(z) − z, ‖R‖;
    None before the first step), the ``best`` certified iterate (res, U, M), ``records``: one
    dict per step (the certified residual, relative changes of U and M, wall time), at most
    ``budget``; ``stopped``: the line search found no decrease left."""

    evaluate: Any
    start: tuple[Any, Any, Any]
    budget: int
    point: dict[str, Any] | None = None
    best: dict[str, Any] | None = None
    records: list[dict[str, float]] = field(default_factory=list)
    stopped: bool = False

    @property
    def residual(self) -> float:
        return self.best["res"]

    @property
    def U(self) -> Any:
        return self.best["U"]

    @property
    def M(self) -> Any:
        return self.best["M"]


def tangent_operands(U: np.ndarray, mu: np.ndarray, chi: np.ndarray, nu: float,
                     grid: Grid, hamiltonian: Hamiltonian = QUADRATIC,
                     density: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """The arrays of the compiled tangent sweeps (:mod:`.fdm.tangent`) at the best response
    U with cell masses mu: the bands of J(u^n) and J(u^n)ᵀ, the edge weights of K_n
    (:func:`.fdm.operators.tangent_weights`, from ∂pp H) and χ; ``density`` (nt, nx): the
    frozen densities m^1..m^nt where H depends on m (the tangent of that frozen game). From
    the model's compiled loops (:func:`.fdm.numba_kernels.compiled_model`) where it has them,
    else from the array operators (:class:`TangentOperands`, made for this call)."""
    return TangentOperands(grid, hamiltonian)(U, mu, chi, nu, density)


class TangentOperands:
    """:func:`tangent_operands` on one grid for one Hamiltonian, with what its calls share made
    once: the model's compiled loops (None: the array operators), 1/(h w), the curvature
    floor (:func:`.fdm.operators.curvature_floor`) and the density row of a model without
    one."""

    def __init__(self, grid: Grid, hamiltonian: Hamiltonian = QUADRATIC) -> None:
        self.grid, self.hamiltonian = grid, hamiltonian
        self.compiled = compiled_model(hamiltonian)
        self.inv_hw = 1.0 / (grid.h * grid.weights)
        self.floor = curvature_floor(hamiltonian, grid.h)
        self.no_density = np.zeros((1, grid.nx))

    def __call__(self, U: np.ndarray, mu: np.ndarray, chi: np.ndarray, nu: float,
                 density: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """The operands at the best response U with cell masses mu (:func:`tangent_operands`)."""
        U = np.ascontiguousarray(U, dtype=np.float64)
        mu = np.ascontiguousarray(mu, dtype=np.float64)
        grid, hamiltonian = self.grid, self.hamiltonian
        if self.compiled is None:
            lower, diag, upper, terms = jacobian_bands(U[:-1], nu, grid.h, grid.dt,
                                                       self.inv_hw, np, hamiltonian, grid.x,
                                                       density)
            lower_t, _, upper_t = transpose_bands(lower, diag, upper, np)
            weights = tangent_weights(terms, mu[1:], grid.x, density, grid.h, hamiltonian, np)
            return tuple(np.ascontiguousarray(a, dtype=np.float64) for a in (
                lower, diag, upper, lower_t, upper_t, weights, chi))
        module, prm = self.compiled
        nt, nx = U.shape[0] - 1, U.shape[1]
        bands = np.empty((5, nt, nx))
        weights = np.empty((nt, nx - 1))
        rows = (self.no_density if density is None
                else np.ascontiguousarray(density, dtype=np.float64))
        module.tangent_bands(U, mu, rows, grid.x, prm, float(nu), grid.h, grid.dt,
                             self.inv_hw, self.floor, *bands, weights)
        return (*bands, weights, np.ascontiguousarray(chi, dtype=np.float64))


def product_operands(operands: tuple[np.ndarray, ...]) -> tuple[Any, ...]:
    """The arguments of :func:`.fdm.tangent.tangent_product` (before Δt, v) from
    :func:`tangent_operands`: the eliminations of every J(u^n) and J(u^n)ᵀ factored once
    (:func:`.fdm.tangent.pipelined_factors`) and the workspace of its products (one product
    at a time per tuple)."""
    lower, diag, upper, lower_t, upper_t, weights, chi = operands
    workspace = np.empty((diag.shape[0] + 1, diag.shape[1]))
    return (*pipelined_factors(lower, diag, upper, True),
            *pipelined_factors(lower_t, diag, upper_t, False), weights, chi, workspace)


def observed_path_jacobian(U: np.ndarray, mu: np.ndarray, chi: np.ndarray, nu: float,
                           grid: Grid, hamiltonian: Hamiltonian = QUADRATIC) -> np.ndarray:
    """D[n, j] = ∂z_n/∂y_j for z_n = χ·μ^{n+1}, μ the cell masses of the best response U to
    the running cost F^n = −y_n χ: the exact derivative of the discrete scheme (the compiled
    tangent sweeps of :mod:`.fdm.tangent`)."""
    return tangent_jacobian(*tangent_operands(U, mu, chi, nu, grid, hamiltonian), grid.dt)


class PotentialNewton:
    """Damped Newton's method for R(z) = Φ(z) − z of a potential game (a
    :class:`~mfgwork.numerics.iteration.Fallback` for single solves, stepped by
    :class:`~mfgwork.numerics.iteration.FixedPoint`): each step is one Newton step with its
    backtracking on ½‖R‖², and the certificate of the new best response."""

    def __init__(self, potential: ScalarPotential, *, grid: Grid, nu: float,
                 backend: Backend, tol: float, hamiltonian: Hamiltonian = QUADRATIC) -> None:
        self.potential, self.grid, self.nu, self.backend, self.tol = (
            potential, grid, nu, backend, tol)
        self.hamiltonian = hamiltonian

    def init(self, evaluate: Any, z: Any, U: Any, M: Any, budget: int) -> NewtonRun:
        """The run from the iterate (z, U, M), with at most ``budget`` steps."""
        return NewtonRun(evaluate, (z, U, M), budget)

    def step(self, run: NewtonRun) -> NewtonRun:
        """The first step: the best response to z and its certificate; each later one: a
        Newton step with its backtracking, and the certificate of the new best response."""
        started, evaluate = time.perf_counter(), run.evaluate
        if run.point is None:
            z, U, M = run.start
            run.point = self._respond(evaluate, np.asarray(to_numpy(z), dtype=np.float64), U)
            run.best = self._certify(evaluate, run.point)
            run.records.append(self._record(run.best["res"], run.point, {"U": U, "M": M},
                                            started))
            return run
        trial = self._line_search(evaluate, run.point, self._direction(run.point))
        if trial is None:  # no decrease left in double precision
            run.stopped = True
            return run
        previous, run.point = run.point, trial
        cert = self._certify(evaluate, run.point)
        if cert["res"] < run.best["res"]:
            run.best = cert
        run.records.append(self._record(cert["res"], run.point, previous, started))
        return run

    def done(self, run: NewtonRun) -> bool:
        """Certified to ``tol``, out of budget, or without decrease left."""
        return run.stopped or (run.best is not None and (
            run.best["res"] <= self.tol or len(run.records) >= run.budget))

    def _respond(self, evaluate: Any, z: np.ndarray, guess: Any) -> dict[str, Any]:
        """The best response to the observed path z and R(z) = Φ(z) − z."""
        _, U, M, gz, _ = evaluate(self.backend.asarray(z), guess)
        R = np.asarray(to_numpy(gz), dtype=np.float64) - z
        return {"z": z, "U": U, "M": M, "R": R, "norm": _norm(R)}

    def _direction(self, point: dict[str, Any]) -> np.ndarray:
        """d = S⁻¹ Σ (S D S + Σ)⁻¹ S R, the Newton step for R(z) = 0
        (:func:`scaling`)."""
        mu = np.asarray(to_numpy(point["M"]), dtype=np.float64) * self.grid.weights
        U = np.asarray(to_numpy(point["U"]), dtype=np.float64)
        D = observed_path_jacobian(U, mu, self.potential.chi, self.nu, self.grid,
                                   self.hamiltonian)
        s, sign = scaling(self.potential.price_slope(point["z"]))
        A = s[:, None] * (0.5 * (D + D.T)) * s[None, :] + np.diag(sign)
        if (sign > 0).all():
            v = spd_solve(np.ascontiguousarray(A), s * point["R"])
        else:   # a rising price (the planner's): symmetric indefinite
            import scipy.linalg  # (on first use: SciPy is no import of mfgwork)

            v = scipy.linalg.solve(A, s * point["R"], assume_a="sym")
        return np.where(s > 0, sign * v / np.where(s > 0, s, 1.0), point["R"])

    def _certify(self, evaluate: Any, point: dict[str, Any]) -> dict[str, Any]:
        """The fixed-point residual of the densities of ``point``: one best response to Φ(z)."""
        z = point["z"] + point["R"]
        gz = np.asarray(to_numpy(evaluate(self.backend.asarray(z), point["U"])[3]),
                        dtype=np.float64)
        res = _norm(gz - z) / max(_norm(gz), 1e-300)
        return {"res": res, "U": point["U"], "M": point["M"]}

    def _line_search(self, evaluate: Any, point: dict[str, Any], direction: np.ndarray
                     ) -> dict[str, Any] | None:
        """Backtracking from the full step until ‖R(z + t d)‖² ≤ (1 − 2·10⁻⁴ t) ‖R(z)‖²
        (Armijo's rule on ½‖R‖², for which the Newton step is a descent direction)."""
        t = 1.0
        while t > 1e-10:
            trial = self._respond(evaluate, point["z"] + t * direction, point["U"])
            if trial["norm"] ** 2 <= (1.0 - 2e-4 * t) * point["norm"] ** 2:
                return trial
            t *= 0.5
        return None

    def _record(self, res: float, point: dict[str, Any], previous: dict[str, Any],
                started: float) -> dict[str, float]:
        def change(key: str) -> float:
            a = np.asarray(to_numpy(point[key]), dtype=np.float64)
            b = np.asarray(to_numpy(previous[key]), dtype=np.float64)
            return _norm(a - b) / max(_norm(a), 1e-300)

        return {"residual": res, "change_U": change("U"), "change_M": change("M"),
                "time": time.perf_counter() - started}


def scaling(slope: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S, Σ) of the Newton system for the price slopes P': S = √|P'|, Σ = sign(−P') (+1 where
    P' = 0), so that P' = −S Σ S. The step d of (I − D P') d = R is d = S⁻¹ Σ w with
    (S D S + Σ) w = S R: symmetric positive definite where every price falls (Σ = I, a
    monotone coupling), symmetric indefinite where one rises (the planner's price), and
    nonsingular at a strict local optimum of the potential."""
    return np.sqrt(np.abs(slope)), np.where(slope > 0, -1.0, 1.0)


def _norm(a: np.ndarray) -> float:
    """‖a‖₂ over all entries (without BLAS; see :func:`.fdm.tangent.spd_solve`)."""
    return math.sqrt(float(np.sum(a * a)))
