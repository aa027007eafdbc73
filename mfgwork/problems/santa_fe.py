"""The Santa Fe Bar (El Farol) coordination game with a continuous preference θ.

State θ ∈ [−θ_max, θ_max]; agents with θ > 0 go to the bar.

    A(t) = ∫_{θ>0} m(t, θ) dθ                                  attendance fraction
    F(A) = G − (G − B) · s((A − A*) / ε),  s(z) = 1/(1 + e^(−z))   smoothed threshold payoff
    f(t, θ, m) = −F(A(t)) · 1{θ > 0},   g = 0,   m0 ∝ exp(−θ²/2)

Attending earns F(A), staying home earns 0; F decreases in A (crowd aversion), so the
coupling is monotone and the equilibrium unique. On the grid, 1{θ > 0} is the fraction of each
control volume with θ > 0 (½ at θ = 0 when 0 is a grid point), and A = Σ_i w_i 1{θ_i > 0} m_i.

The planner's problem (``objective="social"``, mean field control) maximises the total
welfare ∫ A F(A) dt − E ∫ ½|α|² dt instead: its optimality system is the same HJB–FP system
with the marginal payoff P(A) = d(A F(A))/dA = F(A) + A F'(A) in place of F, what one more
patron adds to the total (F' < 0: less than F, the planner keeps the bar emptier). P is not
monotone (P' = 2F' + A F'' changes sign above A* for small ε), so the planner's problem has no
convex potential and may have several critical points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cached_property, lru_cache, partial
from typing import Any

import numpy as np

from ..core.backend import Backend
from ..core.errors import ParameterError, check_choice, check_real
from ..core.grid import Grid
from .base import Coupling, DensityCoupling, MFGProblem, ScalarPotential, grid_only
from .hamiltonians import Hamiltonian, Quadratic, hamiltonian_from_params

#: Largest |good|, |bad| accepted: the payoff times T is the scale of u, whose gradient the
#: Hamiltonian squares; far beyond it the HJB Newton steps lose float64 precision (they fail
#: at 1e100) long before the numbers overflow.
MAX_PAYOFF = 1e12
#: Largest θ_max accepted: m0 ∝ exp(−θ²/2) needs θ² finite in float64.
MAX_THETA = 1e150
DEFAULTS = {"threshold": 0.6, "sigma": 0.5, "T": 10.0, "theta_max": 5.0, "good": 10.0,
            "bad": -5.0, "eps": 0.05}
#: What the agents' controls solve for: the Nash equilibrium (each agent's own payoff F), or
#: the planner's optimum (mean field control: the marginal payoff F + A F').
OBJECTIVES = ("equilibrium", "social")


def logistic(z: Any, xp: Any) -> Any:
    """s(z) = 1 / (1 + e^(−z)), written to avoid overflow for large |z| (a tensor's own
    ``sigmoid``: one kernel on a device, where the expression launches eight)."""
    sigmoid = getattr(z, "sigmoid", None)
    if sigmoid is not None:
        return sigmoid()
    e = xp.exp(-xp.abs(z))
    d = 1.0 + e
    return xp.where(z >= 0, 1.0 / d, e / d)


class SantaFeBar(MFGProblem):
    """Santa Fe Bar with preference θ; see the module docstring for the model.

    ``objective``: "equilibrium" (the Nash equilibrium) or "social" (the planner's optimum;
    see :meth:`for_objective`). Observables: ``attendance`` A(t) and ``mean_state`` E[θ](t);
    summary: mean, min and max attendance, ``time_overcrowded`` (time with A > A*) and
    ``final_mean_preference``.
    """

    state_name = "θ"
    name_default = "santa_fe_bar"

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> SantaFeBar:
        """The problem whose :meth:`params` are ``params`` (extra keys are ignored)."""
        H = params.get("hamiltonian")
        return cls(**{k: params[k] for k in DEFAULTS},
                   hamiltonian=Quadratic() if H is None else hamiltonian_from_params(H),
                   objective=params.get("objective", "equilibrium"))

    threshold: float
    theta_max: float
    good: float
    bad: float
    eps: float
    objective: str

    def __init__(self, threshold: float = 0.6, sigma: float = 0.5, T: float = 10.0,
                 theta_max: float = 5.0, good: float = 10.0, bad: float = -5.0,
                 eps: float = 0.05, *, hamiltonian: Hamiltonian | None = None,
                 objective: str = "equilibrium") -> None:
        object.__setattr__(self, "objective", check_choice("objective", objective, OBJECTIVES))
        values = {"threshold": check_real("threshold", threshold, low=0.0, high=1.0),
                  "theta_max": check_real("theta_max", theta_max, low=0.0, high=MAX_THETA,
                                          high_open=False),
                  "eps": check_real("eps", eps, low=0.0),
                  "good": check_payoff("good", good),
                  "bad": check_payoff("bad", bad)}
        if values["good"] < values["bad"]:
            raise ParameterError(f"good={good!r} is invalid: must be >= bad={bad!r} (the payoff "
                                 "of an uncrowded bar cannot be below that of a crowded one)")
        for k, v in values.items():
            object.__setattr__(self, k, v)
        super().__init__(x_min=-values["theta_max"], x_max=values["theta_max"], T=T,
                         sigma=sigma, m0=gaussian_m0, g=zero_terminal_cost, f=self.running_cost,
                         name=self.name_default,
                         hamiltonian=Quadratic() if hamiltonian is None else hamiltonian)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in DEFAULTS)
        if self.hamiltonian != Quadratic():
            args += f", hamiltonian={self.hamiltonian!r}"
        if self.objective != "equilibrium":
            args += f", objective={self.objective!r}"
        return f"SantaFeBar({args})"

    def params(self) -> dict[str, Any]:
        """The parameters (``objective`` only for the planner's problem: the equilibrium's
        parameters stay those that earlier results and stores recorded)."""
        social = {"objective": self.objective} if self.objective != "equilibrium" else {}
        return ({"problem": self.name} | {k: getattr(self, k) for k in DEFAULTS}
                | {"hamiltonian": self.hamiltonian.params()} | social)

    def for_objective(self, objective: str) -> SantaFeBar:
        """This bar with ``objective`` ("equilibrium" or "social"): the same parameters and
        Hamiltonian, the agents' price F or the planner's F + A F'."""
        check_choice("objective", objective, OBJECTIVES)
        return self if objective == self.objective else self._with(objective=objective)

    def with_horizon(self, T: float) -> SantaFeBar:
        """This bar over the horizon ``T``: the same parameters, Hamiltonian and objective."""
        return self._with(T=T)

    def _with(self, **changes: Any) -> SantaFeBar:
        """This bar with ``changes`` to its parameters or objective, the rest as they are."""
        return type(self)(**({k: getattr(self, k) for k in DEFAULTS}
                             | {"hamiltonian": self.hamiltonian, "objective": self.objective}
                             | changes))

    def payoff(self, A: Any, xp: Any = np) -> Any:
        """F(A) = G − (G − B) s((A − A*)/ε)."""
        return payoff(A, self.threshold, self.good, self.bad, self.eps, xp)

    def price(self, A: Any, xp: Any = np) -> Any:
        """The payoff of going that the controls respond to: F(A) for the equilibrium,
        F(A) + A F'(A) for the planner."""
        if self.objective == "social":
            return marginal_payoff(A, self.threshold, self.good, self.bad, self.eps, xp)
        return self.payoff(A, xp)

    def running_cost(self, t: float, theta: Any, m: Any) -> Any:
        """f(t, θ, m) = −F(A) · 1{θ > 0}, with A computed from m on the grid ``theta`` (the
        full-density form of the coupling; the solver iterates on A(t) alone)."""
        import array_api_compat

        xp = array_api_compat.array_namespace(theta)
        fraction, weights = attendance_weights(self.grid(theta.shape[0], 1))
        chi, chi_w = (xp.asarray(a, dtype=theta.dtype, device=array_api_compat.device(theta))
                      for a in (fraction, weights))
        return -self.price(xp.sum(chi_w * m), xp) * chi

    def unresolved(self, grid: Grid) -> list[str]:
        """The θ step h must resolve the initial density m0 ∝ exp(−θ²/2), whose standard
        deviation is 1 (h ≤ 1: at least two nodes per unit on each side of its peak), and
        the threshold θ = 0 (h ≤ θ_max/2: a node strictly between θ = 0 and each wall, so
        that attendance and staying home each have one)."""
        need = min(1.0, self.theta_max / 2)
        if grid.h <= need * (1 + 1e-12):
            return []
        nx_min = math.ceil(2 * self.theta_max / need - 1e-9) + 1
        return [f"nx={grid.nx} gives the θ step h = {grid.h:.3g} on [-{self.theta_max:g}, "
                f"{self.theta_max:g}], coarser than {need:g}: the grid resolves neither the "
                "initial density m0 ∝ exp(-θ²/2) (standard deviation 1) nor the attendance on "
                "each side of the threshold θ = 0, so the solution is that of the coarse "
                f"scheme only; use nx >= {nx_min} (h <= {need:g})"]

    def coupling_size(self, nx: int, nt: int) -> int:
        """The coupling state is the attendance path A(t) at levels 1..nt (the densities
        there where H depends on m)."""
        return nt * nx if self.hamiltonian.depends_on_m else nt

    def coupling(self, grid: Grid, backend: Backend) -> Coupling:
        """Iterate on the attendance path A(t) only: the running cost passes through it
        alone. A Hamiltonian that depends on m sees the whole density, so then the coupling
        state is the density path (the full-density form of the running cost)."""
        if self.hamiltonian.depends_on_m:
            return DensityCoupling(self.running_cost, grid, backend, congested=True,
                                   observed=AttendanceCoupling(self, grid, backend))
        return AttendanceCoupling(self, grid, backend)

    @grid_only
    def observables(self, grid: Grid, M: Any, backend: Backend) -> dict[str, Any]:
        """A(t) = Σ_i w_i 1{θ_i > 0} m_i and the mean preference E[θ](t)."""
        weights = backend.asarray(attendance_weights(grid)[1])
        return super().observables(grid, M, backend) | {
            "attendance": backend.xp.sum(M * weights, axis=-1)}

    def summary(self, grid: Grid, observables: dict[str, np.ndarray]) -> dict[str, float]:
        return self.summaries([self], grid, {k: np.asarray(v)[None]
                                             for k, v in observables.items()})[0]

    @classmethod
    def summaries(cls, problems: Sequence[SantaFeBar], grid: Grid,
                  observables: dict[str, np.ndarray]) -> list[dict[str, float]]:
        """Mean, max and min attendance, the time A > A* (trapezoidal) and the final mean
        preference of each problem, computed for the batch at once."""
        A = np.asarray(observables["attendance"], dtype=np.float64)
        over = (A > np.array([[p.threshold] for p in problems])).astype(np.float64)
        columns = {"mean_attendance": A.mean(axis=-1), "max_attendance": A.max(axis=-1),
                   "min_attendance": A.min(axis=-1),
                   "time_overcrowded": (0.5 * (over[:, 1:] + over[:, :-1])
                                        * (grid.t[1:] - grid.t[:-1])).sum(axis=-1),
                   "final_mean_preference": np.asarray(observables["mean_state"])[:, -1]}
        return [{k: float(v[b]) for k, v in columns.items()} for b in range(len(problems))]


def check_payoff(name: str, value: object) -> float:
    """A payoff (``good`` or ``bad``): a finite real number with |value| <= MAX_PAYOFF."""
    return check_real(name, value, low=-MAX_PAYOFF, high=MAX_PAYOFF, low_open=False,
                      high_open=False)


@lru_cache(maxsize=16)
def attendance_weights(grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """(χ, w χ) on ``grid``: χ_i the fraction of control volume i with θ > 0, w_i its width,
    so that A = Σ_i w_i χ_i m_i."""
    chi = grid.cell_fraction_above(0.0)
    return chi, grid.weights * chi


def payoff(A: Any, threshold: Any, good: Any, bad: Any, eps: Any, xp: Any = np) -> Any:
    """F(A) = G − (G − B) s((A − A*)/ε); the parameters may be arrays (one per problem)."""
    return good - (good - bad) * logistic((A - threshold) / eps, xp)


def logistic_price_slope(A: Any, *, threshold: Any, good: Any, bad: Any, eps: Any) -> Any:
    """F'(A) = −(G − B) s'(x)/ε for x = (A − A*)/ε, s'(x) = e^(−|x|)/(1 + e^(−|x|))² (no
    overflow where F saturates); the parameters may be arrays that broadcast against A (a
    NumPy array, or a tensor computed on its device)."""
    xp = _namespace(A)
    e = xp.exp(-xp.abs((A - threshold) / eps))
    return -(good - bad) / eps * e / (1.0 + e) ** 2


def _namespace(A: Any) -> Any:
    """NumPy for a NumPy array (at once), else the array namespace of ``A``."""
    if isinstance(A, np.ndarray):
        return np
    import array_api_compat

    return array_api_compat.array_namespace(A)


def marginal_payoff(A: Any, threshold: Any, good: Any, bad: Any, eps: Any, xp: Any = np
                    ) -> Any:
    """P(A) = F(A) + A F'(A) = G − (G − B) (s(x) + (A/ε) s'(x)), x = (A − A*)/ε: the planner's
    price (the parameters may be arrays, one per problem)."""
    x = (A - threshold) / eps
    e = xp.exp(-xp.abs(x))
    return good - (good - bad) * (logistic(x, xp) + A / eps * e / (1.0 + e) ** 2)


def marginal_price_slope(A: Any, *, threshold: Any, good: Any, bad: Any, eps: Any) -> Any:
    """P'(A) = 2F'(A) + A F''(A) = −(G − B) s'(x)/ε · (2 + (A/ε)(1 − 2 s(x))), of either
    sign; s'' = s'(1 − 2s) (A as for :func:`logistic_price_slope`)."""
    xp = _namespace(A)
    x = (A - threshold) / eps
    e = xp.exp(-xp.abs(x))
    s = xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    return -(good - bad) / eps * e / (1.0 + e) ** 2 * (2.0 + A / eps * (1.0 - 2.0 * s))


def gaussian_m0(theta: Any) -> Any:
    """m0 ∝ exp(−θ²/2) (normalized by the solver on the domain)."""
    import array_api_compat

    return array_api_compat.array_namespace(theta).exp(-0.5 * theta**2)


def zero_terminal_cost(theta: Any) -> Any:
    """g = 0."""
    return 0.0 * theta


class AttendanceCoupling(Coupling):
    """z = A(t_1..t_nt); F[n] = −F(A[n]) · 1{θ > 0}; A kept in [0, 1]."""

    def __init__(self, problem: SantaFeBar, grid: Grid, backend: Backend) -> None:
        self.problem, self.backend = problem, backend
        self.chi_np, self._weights_np = attendance_weights(grid)

    # on the backend when first used: a batch's stacked coupling reads its first member's
    @cached_property
    def chi(self) -> Any:
        return self.backend.asarray(self.chi_np)

    @cached_property
    def attendance_weights(self) -> Any:
        return self.backend.asarray(self._weights_np)

    def state(self, M: Any) -> Any:
        return self.backend.xp.sum(M[1:, :] * self.attendance_weights, axis=-1)

    def running_cost(self, z: Any) -> Any:
        return -self.problem.price(z, self.backend.xp)[:, None] * self.chi[None, :]

    def project(self, z: Any) -> Any:
        return z.clip(0.0, 1.0)   # NumPy's and torch's own clip (the array-API one is slower)

    def potential(self) -> ScalarPotential:
        """Santa Fe is a potential game with price y = F(A), F'(A) = −(G − B) s'(x)/ε for
        x = (A − A*)/ε, s'(x) = e^(−|x|)/(1 + e^(−|x|))² (no overflow where F saturates); the
        planner's problem has the price F + A F' (:func:`marginal_price_slope`), whose
        potential, the total welfare, is not convex."""
        p = self.problem
        slope = marginal_price_slope if p.objective == "social" else logistic_price_slope
        return ScalarPotential(chi=self.chi_np, price_slope=partial(
            slope, threshold=p.threshold, good=p.good, bad=p.bad, eps=p.eps),
            any_namespace=True)

    @classmethod
    def stacked(cls, couplings: list[Coupling], backend: Backend) -> Coupling:
        return StackedAttendanceCoupling(couplings, backend)


class StackedAttendanceCoupling(Coupling):
    """Santa Fe problems on one grid side by side: z = A (B, nt), F (B, nt, nx), each row
    with its own threshold and payoffs; every operation serves the whole batch at once."""

    def __init__(self, couplings: list[AttendanceCoupling], backend: Backend) -> None:
        self.backend = backend
        first = couplings[0]
        self.chi, self.attendance_weights = first.chi, first.attendance_weights
        self.params = [backend.asarray(np.array([[getattr(c.problem, k)] for c in couplings]))
                       for k in ("threshold", "good", "bad", "eps")]
        social = np.array([[c.problem.objective == "social"] for c in couplings])
        #: 1 for the planner's problems, 0 for equilibria (None: no planner in the batch)
        self.social = backend.asarray(social.astype(np.float64)) if social.any() else None

    def state(self, M: Any) -> Any:
        return self.backend.xp.sum(M[:, 1:, :] * self.attendance_weights, axis=-1)

    def running_cost(self, z: Any) -> Any:
        xp = self.backend.xp
        price = payoff(z, *self.params, xp)
        if self.social is not None:   # F + A F' = the planner's price where social is 1
            price = (1.0 - self.social) * price + self.social * marginal_payoff(
                z, *self.params, xp)
        return -price[..., None] * self.chi

    def project(self, z: Any) -> Any:
        return z.clip(0.0, 1.0)
