"""Two bars: a preference θ = (θ1, θ2) ∈ [−θ_max, θ_max]² for bar 1 and bar 2.

Agents with θ_j > 0 attend bar j (possibly both). Each bar pays the Santa Fe payoff of
:mod:`mfgwork.problems.santa_fe` with its own threshold, on its crowd

    A_j(t) = ∫_{θ_j > 0} m(t, θ) dθ,   C_1 = A_1 + s A_2,   C_2 = A_2 + s A_1
    f(t, θ, m) = −F_1(C_1) 1{θ1 > 0} − F_2(C_2) 1{θ2 > 0},   g = 0,
    m0 ∝ exp(−(θ1² − 2ρ θ1 θ2 + θ2²) / (2 (1 − ρ²)))

with the spill-over s ≥ 0 (a crowd at one bar deters from the other) and the correlation ρ of
the preferences. With s = 0, ρ = 0 and H = ½|p|² the bars are independent: u is the sum and the
marginals of m are the 1-D Santa Fe solutions (:class:`~mfgwork.SantaFeBar`) of each bar, on
the same grid, to round-off (the scheme is separable). The coupling state is the pair of
attendance paths (nt, 2); on the grid 1{θ_j > 0} is the fraction of the control width above 0
(as in 1-D). Walls are reflecting, there are no exits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.backend import Backend
from ..core.errors import ParameterError, check_real
from ..core.grid import Grid
from ..core.grid2d import Grid2D
from .base import Coupling
from .hamiltonians import Hamiltonian, Quadratic
from .santa_fe import MAX_THETA, check_payoff, payoff
from .two_d import MFGProblem2D


class TwoBars(MFGProblem2D):
    """The two-bar game of the module docstring. ``thresholds`` (A*_1, A*_2), whose
    components ``threshold_1`` and ``threshold_2`` replace when given (one number each: what
    a parameter scan varies, ``mw.scan(mw.TwoBars, {"threshold_1": [...], "threshold_2":
    [...]})``); ``good``, ``bad``, ``eps`` shared by both bars; observable ``attendance``
    (nt+1, 2), its last axis the bar (:attr:`observable_axes`)."""

    name_default = "two_bars"
    state_names = ("θ1", "θ2")
    #: Named trailing axes of the observables (beyond time): the bar of ``attendance``.
    observable_axes = {"attendance": ("bar", (1, 2))}

    def __init__(self, thresholds: tuple[float, float] = (0.6, 0.6), sigma: float = 0.5,
                 T: float = 10.0, theta_max: float = 5.0, good: float = 10.0,
                 bad: float = -5.0, eps: float = 0.05, spill: float = 0.0, rho: float = 0.0,
                 hamiltonian: Hamiltonian | None = None, threshold_1: float | None = None,
                 threshold_2: float | None = None) -> None:
        if not isinstance(thresholds, list | tuple) or len(thresholds) != 2:
            raise ParameterError(f"thresholds={thresholds!r:.80} is invalid: must be a pair "
                                 "of numbers in (0, 1)")
        thresholds = tuple(
            v if one is None else check_real(name, one, low=0.0, high=1.0)
            for name, one, v in zip(("threshold_1", "threshold_2"), (threshold_1, threshold_2),
                                    thresholds, strict=True))
        values = {"thresholds": tuple(check_real("thresholds", v, low=0.0, high=1.0)
                                      for v in thresholds),
                  "theta_max": check_real("theta_max", theta_max, low=0.0, high=MAX_THETA,
                                          high_open=False),
                  "good": check_payoff("good", good), "bad": check_payoff("bad", bad),
                  "eps": check_real("eps", eps, low=0.0),
                  "spill": check_real("spill", spill, low=0.0, low_open=False),
                  "rho": check_real("rho", rho, low=-1.0, high=1.0)}
        if values["good"] < values["bad"]:
            raise ParameterError(f"good={good!r} is invalid: must be >= bad={bad!r}")
        H = Quadratic() if hamiltonian is None else hamiltonian
        if getattr(H, "depends_on_m", False):
            raise ParameterError(f"hamiltonian={H!r} is invalid for TwoBars: its coupling state"
                                 " is the attendance pair, so H must not depend on m")
        for k, v in values.items():
            object.__setattr__(self, k, v)
        tm = values["theta_max"]
        super().__init__(-tm, tm, -tm, tm, T, sigma, self._m0, _zero, self._f,
                         hamiltonian=H, name=self.name_default)

    def __repr__(self) -> str:
        return (f"TwoBars(thresholds={self.thresholds!r}, sigma={self.sigma!r}, T={self.T!r}, "
                f"spill={self.spill!r}, rho={self.rho!r})")

    def params(self) -> dict[str, Any]:
        return {"problem": self.name, "thresholds": list(self.thresholds), "sigma": self.sigma,
                "T": self.T, "theta_max": self.theta_max, "good": self.good, "bad": self.bad,
                "eps": self.eps, "spill": self.spill, "rho": self.rho,
                "hamiltonian": self.hamiltonian.params()}

    def _m0(self, X: Any, Y: Any) -> Any:
        import array_api_compat

        xp, r = array_api_compat.array_namespace(X), self.rho
        return xp.exp(-(X * X - 2 * r * X * Y + Y * Y) / (2 * (1 - r * r)))

    def _f(self, t: float, X: Any, Y: Any, m: Any) -> Any:
        """f(t, θ, m) of the module docstring from the density m on the nodes (X, Y)."""
        import array_api_compat

        xp, device = array_api_compat.array_namespace(X), array_api_compat.device(X)
        grid = self.grid(X.shape[-1], X.shape[-2], 1)
        c1, c2 = indicators(grid)
        V, chi1, chi2 = (xp.asarray(a, dtype=X.dtype, device=device) for a in (
            grid.volumes, np.broadcast_to(c1[None, :], grid.shape),
            np.broadcast_to(c2[:, None], grid.shape)))
        A = xp.stack([xp.sum(m * V * chi1), xp.sum(m * V * chi2)])
        C1, C2 = self.crowds(A, xp)
        return (-payoff(C1, self.thresholds[0], self.good, self.bad, self.eps, xp) * chi1
                - payoff(C2, self.thresholds[1], self.good, self.bad, self.eps, xp) * chi2)

    def coupling_size(self, nx: int, ny: int, nt: int) -> int:
        return 2 * nt

    def coupling(self, grid: Grid2D, backend: Backend) -> Coupling:
        return AttendancePair(self, grid, backend)

    def crowds(self, A: Any, xp: Any) -> tuple[Any, Any]:
        """(C_1, C_2) from the attendances A (..., 2)."""
        return A[..., 0] + self.spill * A[..., 1], A[..., 1] + self.spill * A[..., 0]

    def observables(self, grid: Grid2D, M: Any, backend: Backend) -> dict[str, Any]:
        pair = AttendancePair(self, grid, backend)
        return super().observables(grid, M, backend) | {"attendance": pair.attendance(M)}


def indicators(grid: Grid2D) -> tuple[np.ndarray, np.ndarray]:
    """(χ1 (nx,), χ2 (ny,)): the fractions of the control widths with θ_j > 0."""
    return (Grid(grid.x_min, grid.x_max, grid.nx, grid.T, grid.nt).cell_fraction_above(0.0),
            Grid(grid.y_min, grid.y_max, grid.ny, grid.T, grid.nt).cell_fraction_above(0.0))


class AttendancePair(Coupling):
    """z = (A_1, A_2) at levels 1..nt, shape (nt, 2); F[n] = −F_1 χ1 − F_2 χ2."""

    def __init__(self, problem: TwoBars, grid: Grid2D, backend: Backend) -> None:
        self.problem, self.backend = problem, backend
        c1, c2 = indicators(grid)
        V = grid.volumes
        self.chi1 = backend.asarray(np.broadcast_to(c1[None, :], grid.shape).copy())
        self.chi2 = backend.asarray(np.broadcast_to(c2[:, None], grid.shape).copy())
        self.w1, self.w2 = backend.asarray(V * c1[None, :]), backend.asarray(V * c2[:, None])

    def attendance(self, M: Any) -> Any:
        """(A_1, A_2) of densities M (..., ny, nx) → (..., 2)."""
        xp = self.backend.xp
        return xp.stack([xp.sum(xp.sum(M * w, axis=-1), axis=-1) for w in (self.w1, self.w2)],
                        axis=-1)

    def state(self, M: Any) -> Any:
        return self.attendance(M[..., 1:, :, :])

    def running_cost(self, z: Any) -> Any:
        p, xp = self.problem, self.backend.xp
        C1, C2 = p.crowds(z, xp)
        F1 = payoff(C1, p.thresholds[0], p.good, p.bad, p.eps, xp)
        F2 = payoff(C2, p.thresholds[1], p.good, p.bad, p.eps, xp)
        return -F1[..., None, None] * self.chi1 - F2[..., None, None] * self.chi2

    def project(self, z: Any) -> Any:
        return self.backend.xp.clip(z, 0.0, 1.0)


def _zero(X: Any, Y: Any) -> Any:
    """g = 0."""
    return 0.0 * X
