"""The two-state El Farol game: a finite-state mean field game in continuous time.

Each patron is at home (state 0) or at the bar (state 1) and controls the rate β ≥ 0 at which
it switches to the other state, at cost c β²/2 per unit time (c: ``switching_cost``). At the
bar it earns F(A(t)) per unit time, at home 0, where A(t) = m_1(t) is the attendance and

    F(A) = G − (G − B) · s((A − A*)/ε),   s(z) = 1/(1 + e^(−z))

is the smoothed payoff of the Santa Fe Bar. Costs are minimised (as everywhere in mfgwork):
the running cost is f_0 = 0 at home and f_1 = −F(A) at the bar, and u_i(t) is the smallest
expected cost to go from state i. With the Hamiltonian min_β [c β²/2 + β (u_j − u_i)]:

    −u_i' + ((u_i − u_j)_+)² / (2c) = f_i(A(t)),    u_i(T) = 0             (HJB, backward)
    β_i* = (u_i − u_j)_+ / c     (leave i when staying there costs more than switching)
    m_1' = β_0* m_0 − β_1* m_1,   m_0 = 1 − m_1,   m_1(0) = A_0           (Kolmogorov)

In the middle of a long horizon the attendance settles where nobody switches, u_0 = u_1,
which needs f_0 = f_1: F(A) = 0, i.e. A = A* + ε log(G/(−B)) (for B < 0 < G).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from ..core.errors import ParameterError, check_int, check_real
from .base import Coupling
from .santa_fe import check_payoff, logistic

STATES = ("home", "bar")


@dataclass(frozen=True)
class TwoStateElFarol:
    """Two-state El Farol with switching rates as the control; see the module docstring."""

    threshold: float = 0.6
    T: float = 10.0
    good: float = 10.0
    bad: float = -5.0
    eps: float = 0.05
    switching_cost: float = 1.0
    attendance0: float = 0.5

    def __post_init__(self) -> None:
        check_real("threshold", self.threshold, low=0.0, high=1.0)
        check_real("T", self.T, low=0.0)
        check_real("eps", self.eps, low=0.0)
        check_real("switching_cost", self.switching_cost, low=0.0)
        check_real("attendance0", self.attendance0, low=0.0, high=1.0, low_open=False,
                   high_open=False)
        good, bad = check_payoff("good", self.good), check_payoff("bad", self.bad)
        if good < bad:
            raise ParameterError(f"good={good!r} is invalid: must be >= bad={bad!r} (the "
                                 "payoff of an uncrowded bar cannot be below that of a "
                                 "crowded one)")
        for name in ("threshold", "T", "good", "bad", "eps", "switching_cost", "attendance0"):
            object.__setattr__(self, name, float(getattr(self, name)))

    name: ClassVar[str] = "two_state_el_farol"

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> TwoStateElFarol:
        """The problem whose :meth:`params` are ``params`` (extra keys are ignored)."""
        return cls(**{f.name: params[f.name] for f in fields(cls)})

    def params(self) -> dict[str, Any]:
        """JSON-ready description of the problem."""
        return {"problem": self.name} | {k: getattr(self, k) for k in (
            "threshold", "T", "good", "bad", "eps", "switching_cost", "attendance0")}

    def payoff(self, A: Any, xp: Any = np) -> Any:
        """F(A) = G − (G − B) s((A − A*)/ε)."""
        return self.good - (self.good - self.bad) * logistic((A - self.threshold) / self.eps, xp)

    def payoff_slope(self, A: Any) -> Any:
        """F'(A) = −(G − B) s(x)(1 − s(x)) / ε, x = (A − A*)/ε (≤ 0: a crowded bar pays
        less), without overflow for large |x|."""
        e = np.exp(-np.abs((np.asarray(A, dtype=np.float64) - self.threshold) / self.eps))
        return -(self.good - self.bad) / self.eps * e / (1.0 + e) ** 2

    def payoff_integral(self, A: Any) -> Any:
        """∫ F dA = G A − (G − B) ε log(1 + e^x), x = (A − A*)/ε (up to a constant)."""
        x = (np.asarray(A, dtype=np.float64) - self.threshold) / self.eps
        softplus = np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))
        return self.good * A - (self.good - self.bad) * self.eps * softplus

    @property
    def fastest_rate(self) -> float:
        """√(2 max(|G|, |B|)/c): no optimal switching rate exceeds it (the gap |u_1 − u_0|
        of the scheme stays below √(2c max|F|))."""
        return math.sqrt(2.0 * max(abs(self.good), abs(self.bad)) / self.switching_cost)

    @property
    def plateau(self) -> float | None:
        """A* + ε log(G/(−B)), the attendance at which F vanishes (None unless B < 0 < G)."""
        if not self.bad < 0 < self.good:
            return None
        return self.threshold + self.eps * math.log(self.good / -self.bad)

    def initial_distribution(self) -> np.ndarray:
        """(m_0, m_1)(0) = (1 − A_0, A_0)."""
        return np.array([1.0 - self.attendance0, self.attendance0])

    def terminal_cost(self) -> np.ndarray:
        """u(T) = (0, 0)."""
        return np.zeros(2)

    def observables(self, M: Any) -> dict[str, Any]:
        """Paths observed from the distributions ``M`` (…, nt + 1, 2): the attendance
        A(t) = m_1(t)."""
        return {"attendance": M[..., 1]}

    def summary(self, t: Any, observables: dict[str, Any]) -> dict[str, float]:
        """Scalar headline numbers of one solution: mean, min and max attendance, the
        attendance at T/2, and the time with A > A* (trapezoidal in t)."""
        A = np.asarray(observables["attendance"], dtype=np.float64)
        over = (A > self.threshold).astype(np.float64)
        return {"mean_attendance": float(A.mean()), "min_attendance": float(A.min()),
                "max_attendance": float(A.max()), "attendance_mid": float(A[len(A) // 2]),
                "time_overcrowded": float(np.sum(0.5 * (over[1:] + over[:-1]) * np.diff(t)))}

    def coupling(self) -> TwoStateCoupling:
        """Iterate on the attendance path A(t_1..t_nt)."""
        return TwoStateCoupling(self)

    def time_levels(self, nt: int) -> np.ndarray:
        """t_0..t_nt of ``nt`` steps on [0, T]."""
        return np.linspace(0.0, self.T, check_int("nt", nt, low=1) + 1)


class TwoStateCoupling(Coupling):
    """z = A(t_1..t_nt) = M[1:, 1]; F[n] = (0, −F(A[n])) enters the HJB step from t_{n+1} to
    t_n (as for Santa Fe); A kept in [0, 1]."""

    def __init__(self, problem: TwoStateElFarol) -> None:
        self.problem = problem

    def state(self, M: Any) -> Any:
        return M[1:, 1]

    def running_cost(self, z: Any) -> Any:
        return np.stack([np.zeros_like(z), -self.problem.payoff(z)], axis=-1)

    def project(self, z: Any) -> Any:
        return np.clip(z, 0.0, 1.0)
