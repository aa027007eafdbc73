"""Newton's method on the attendance path of the two-state game.

The state is the attendance path z = (A(t_1), …, A(t_nt)). The best response to z is paid
y = P(z) at the bar (P decreasing: a crowded bar pays less); its HJB sweep gives the gaps
d^n = u_1^n − u_0^n, its Kolmogorov sweep the attendance Φ(z) = m_1(t_1..t_nt), and the
equilibria are the zeros of R(z) = Φ(z) − z.

**The exact Jacobian of the discrete scheme.** One HJB step differentiates to
δd^n = a_n (δd^{n+1} − Δt δy_n), a_n = 1/(1 + Δt|d^n|/c), one Kolmogorov step to
δm_1^{n+1} = a_n (δm_1^n − (Δt/c) w_n δd^n), with w_n = m_0^{n+1} where d^n < 0 (patrons go
out) and m_1^{n+1} where d^n > 0 (they come home); at d^n = 0, where the rates have a kink,
the two one-sided derivatives are averaged. With A = diag(a) and the unit lower bidiagonal B,
(Bx)_n = x_n − a_n x_{n−1}, the backward tangent sweep is δd = −Δt A B⁻ᵀ δy and the forward
one δz = B⁻¹ A diag(−Δt w/c) δd, so

    D = ∂Φ/∂y = B⁻¹ W B⁻ᵀ,   W = diag(Δt² a_n² w_n / c) ≥ 0,

symmetric positive semi-definite (the game has a potential). The Jacobian of R is
−(D S² + I), S² = diag(−P'(z)) ≥ 0, similar to −(S D S + I): its eigenvalues are ≤ −1, so the
Newton step (D S² + I) δz = R always exists. It is solved without forming D, as the banded
symmetric system

    [S²  Bᵀ] [p]   [S² R]
    [B  −W ] [t] = [ 0  ],     δz = R − p,

interleaved (bandwidth 2) and factored by LU with partial pivoting: O(nt) per step. Where P
is flat the step is the Picard step.

**Globalisation.** The equilibria minimise the convex potential W(y) = −m0·u(t_0; y) +
Δt Σ_n Ψ*(y_n), Ψ*' = −P⁻¹ (∇W = Δt R, Hessian Δt (D + S⁻²)), which is C¹ where ½‖R‖² has
kinks (the rates are only Lipschitz in the gap). As a function of z its gradient is
−Δt S² R, and the Newton step is a descent direction: −Δt Rᵀ (S⁻² + D)⁻¹ R < 0. Steps are
damped by backtracking (Armijo) on it; once the predicted decrease falls below its rounding
(where P saturates), on ½‖R‖² with the potential not rising beyond its rounding (steps
accepted by either merit alone can alternate between two paths for ever). Trial paths are
kept in [0, 1].

**The certificate is the iterate's own.** The solution returned is an iterate z itself: its
best response (U, gaps) and the densities M = (1 − z, z) of its attendance path, with the
residual ‖Φ(z) − z‖ / ‖Φ(z)‖ of that one best response (no further evaluation); the lowest
one is kept. Returning the densities of the best response instead, of attendance Φ(z),
would be one more Picard step, whose residual ‖Φ(Φ(z)) − Φ(z)‖ is about ‖DS²‖ times that
of z: where ‖DS²‖ is large (cheap switching over a long horizon: ~10⁷ at c = 0.01, T = 100,
nt = 400, where the patrons integrate the payoff twice over the plateau) that step lifts a
residual at the rounding of z to ~10⁻⁷.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.errors import SolverError
from .finite_state import TwoStateScheme
from .iteration import IterationScheme

ARMIJO = 1e-4  # sufficient decrease per unit step (Armijo)
MIN_STEP = 2.0**-30  # backtracking gives up below this step length


@dataclass
class Point:
    """An attendance path z, its best response (U, gaps, M) and R = Φ(z) − z."""

    z: np.ndarray
    U: np.ndarray
    gap: np.ndarray
    M: np.ndarray
    R: np.ndarray

    @property
    def image(self) -> np.ndarray:
        """Φ(z): the attendance of the best response."""
        return self.z + self.R

    @property
    def residual(self) -> float:
        """‖Φ(z) − z‖ / ‖Φ(z)‖: the fixed-point residual of the path z."""
        return _norm(self.R) / max(_norm(self.image), 1e-300)

    def path_densities(self, m0: np.ndarray) -> np.ndarray:
        """The densities of the path z, (nt + 1, 2): m0, then (S − z_n, z_n), S = Σ m0."""
        total = float(np.sum(m0))
        return np.concatenate([m0[None, :], np.stack([total - self.z, self.z], axis=-1)])


@dataclass
class NewtonRun:
    """The iterate of lowest residual: the value U of its best response, the gaps
    u_1 − u_0 as carried by the sweep, the densities M of its attendance path, its
    ``residual``, whether it is ≤ tol, the iterations done, why the loop ended (``reason``:
    converged, max_iter or stalled) and the per-iteration ``history`` (residual, step
    length, wall time)."""

    U: np.ndarray
    gap: np.ndarray
    M: np.ndarray
    residual: float
    converged: bool
    iterations: int
    reason: str
    evaluations: int
    history: dict[str, list[float]] = field(default_factory=dict)


def tangent_coefficients(scheme: TwoStateScheme, gap: np.ndarray, M: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
    """(a, W) of the tangent sweeps at a best response (gaps d^0..d^nt, densities M):
    a_n = 1/(1 + Δt|d^n|/c) and W_n = Δt² a_n² w_n / c, n = 0..nt−1."""
    d = gap[:-1]
    dt, c = scheme.dt, scheme.c
    a = 1.0 / (1.0 + dt * np.abs(d) / c)
    w = np.where(d < 0, M[1:, 0], np.where(d > 0, M[1:, 1], 0.5 * (M[1:, 0] + M[1:, 1])))
    return a, dt * dt * a * a * w / c


def attendance_jacobian(scheme: TwoStateScheme, gap: np.ndarray, M: np.ndarray
                        ) -> np.ndarray:
    """D[n, j] = ∂Φ(z)_n / ∂y_j, dense (nt, nt): the backward HJB and forward Kolmogorov
    tangent sweeps applied to all nt directions at once."""
    a, W = tangent_coefficients(scheme, gap, M)
    nt = a.size
    X = np.zeros((nt, nt))  # B⁻ᵀ: column j is the backward sweep of the unit direction e_j
    below = np.zeros(nt)
    for n in range(nt - 1, -1, -1):
        X[n] = below
        X[n, n] += 1.0
        below = a[n] * X[n]
    Y = W[:, None] * X
    for n in range(1, nt):  # B⁻¹, forward
        Y[n] += a[n] * Y[n - 1]
    return Y


def newton_direction(a: np.ndarray, W: np.ndarray, s2: np.ndarray, R: np.ndarray
                     ) -> np.ndarray:
    """δz with (D S² + I) δz = R, D = B⁻¹ diag(W) B⁻ᵀ, S² = diag(s2): the banded system of
    the module docstring, unknowns interleaved as (p_0, t_0, p_1, t_1, …)."""
    nt = R.size
    ab = np.zeros((5, 2 * nt))  # ab[2 + i − j, j] = K[i, j]
    ab[2] = 1.0
    ab[1, 1::2] = -W           # row 2n:     p_n − a_n p_{n−1} − W_n t_n = 0
    ab[4, 0:-2:2] = -a[1:]
    ab[3, 0::2] = s2           # row 2n + 1: s²_n p_n + t_n − a_{n+1} t_{n+1} = s²_n R_n
    ab[0, 3::2] = -a[1:]
    rhs = np.zeros(2 * nt)
    rhs[1::2] = s2 * R
    from scipy.linalg import solve_banded  # on first use: SciPy is no import of mfgwork

    p = solve_banded((2, 2), ab, rhs, overwrite_ab=True, overwrite_b=True,
                     check_finite=False)[0::2]
    return R - p


@dataclass(frozen=True)
class TwoStateSystem:
    """The two-state game to solve: its sweeps ``scheme``, the payoff ``payoff(z)`` = P, its
    slope P' (≤ 0) and an antiderivative of P (``integral``), the initial distribution ``m0``,
    the terminal cost ``U_T`` and the first attendance path ``z0``."""

    scheme: TwoStateScheme
    payoff: Callable[[np.ndarray], np.ndarray]
    slope: Callable[[np.ndarray], np.ndarray]
    integral: Callable[[np.ndarray], np.ndarray]
    m0: np.ndarray
    U_T: np.ndarray
    z0: np.ndarray


@dataclass
class NewtonHistory:
    """Per iteration: the residual of the iterate, the length of the step taken from it (0
    for a warm-up step or none) and the wall time."""

    residual: list[float] = field(default_factory=list)
    step: list[float] = field(default_factory=list)
    time: list[float] = field(default_factory=list)


@dataclass
class AttendanceState:
    """A solve between its iterations: the ``system``, the iterations ``k`` done of
    ``max_iter``, the current ``point``, the ``best`` point so far and its residual
    (``lowest``), the warm-up ``mixer``, the best responses evaluated, why the solve ended
    (``reason``, once ``finished``) and the history."""

    system: TwoStateSystem
    max_iter: int
    mixer: Any
    point: Point | None = None
    best: Point | None = None
    lowest: float = math.inf
    k: int = 0
    evaluations: int = 0
    reason: str = "max_iter"
    finished: bool = False
    history: NewtonHistory = field(default_factory=NewtonHistory)


class AttendanceNewton:
    """Damped Newton's method for R(z) = Φ(z) − z of the two-state game (a strategy of
    :func:`.equilibrium.solve` on a :class:`TwoStateSystem`), after ``warmup`` iterations of
    a fixed-point ``mixing`` scheme; the solve stops at the first iterate of residual
    ≤ ``tol``."""

    def __init__(self, *, tol: float, warmup: int = 0,
                 mixing: IterationScheme | None = None) -> None:
        self.tol, self.warmup, self.mixing = tol, warmup, mixing

    def init(self, system: TwoStateSystem, max_iter: int) -> AttendanceState:
        """The state at the best response to the first path."""
        state = AttendanceState(system, max_iter,
                                None if self.mixing is None else self.mixing.start())
        state.point = state.best = self.respond(state, np.asarray(system.z0, np.float64))
        return state

    def done(self, state: AttendanceState) -> bool:
        return state.finished or state.k >= state.max_iter

    def step(self, state: AttendanceState) -> AttendanceState:
        """Iteration k: the current point recorded (and kept if its residual is the lowest),
        then, unless it converged or it is the last iteration, the next point."""
        started = time.perf_counter()
        k = state.k = state.k + 1
        point = state.point
        residual = point.residual
        if residual < state.lowest:
            state.lowest, state.best = residual, point
        state.history.residual.append(residual)
        moved = None
        if residual <= self.tol:
            state.reason = "converged"
        elif k < state.max_iter:
            moved = self.advance(state, point)
            if moved is None:
                state.reason = "stalled"
        state.history.step.append(0.0 if moved is None else moved[1])
        state.history.time.append(time.perf_counter() - started)
        if moved is None:
            state.finished = True
        else:
            state.point = moved[0]
        return state

    def certify(self, state: AttendanceState) -> NewtonRun:
        """The iterate of lowest residual (module docstring)."""
        best = state.best
        return NewtonRun(U=best.U, gap=best.gap, M=best.path_densities(state.system.m0),
                         residual=state.lowest, converged=state.lowest <= self.tol,
                         iterations=state.k, reason=state.reason,
                         evaluations=state.evaluations,
                         history={k: list(v) for k, v in vars(state.history).items()})

    def respond(self, state: AttendanceState, z: np.ndarray) -> Point:
        """The best response to the attendance path z, clipped to [0, 1]."""
        system = state.system
        z = np.clip(z, 0.0, 1.0)
        y = system.payoff(z)
        F = np.stack([np.zeros_like(y), -y], axis=-1)
        U, gap, M = system.scheme.best_response(system.U_T, F, system.m0)
        state.evaluations += 1
        R = M[1:, 1] - z
        if not (np.all(np.isfinite(U)) and np.all(np.isfinite(R))):
            raise SolverError(f"non-finite values in the best response at evaluation "
                              f"{state.evaluations} of the two-state game")
        return Point(z=z, U=U, gap=gap, M=M, R=R)

    def advance(self, state: AttendanceState, point: Point) -> tuple[Point, float] | None:
        """Iteration k's next point and its step length: a damped step of the mixing scheme
        during the warm-up (length 0), else the Newton step with its line search (None when
        it finds no acceptable step)."""
        if state.k <= self.warmup and self.mixing is not None:
            z = state.mixer.update(state.k, point.z, point.image, _xp())
            return self.respond(state, z), 0.0
        system = state.system
        a, W = tangent_coefficients(system.scheme, point.gap, point.M)
        return self.line_search(state, point,
                                newton_direction(a, W, -system.slope(point.z), point.R))

    def line_search(self, state: AttendanceState, point: Point, step: np.ndarray
                    ) -> tuple[Point, float] | None:
        """Backtracking from the full step until Armijo's rule holds for the potential
        (:func:`potential`, for which the Newton step is a descent direction), or, once the
        predicted decrease is below its rounding, for ½‖R‖² with the potential not rising
        beyond its rounding; None when no step length above :data:`MIN_STEP` is accepted."""
        system = state.system
        t, norm2 = 1.0, _norm(point.R) ** 2
        value = potential(system, point)
        rounding = 1e-12 * abs(value)
        slope = -system.scheme.dt * float(np.sum(-system.slope(point.z) * point.R * step))
        while t >= MIN_STEP:
            trial = self.respond(state, point.z + t * step)
            if -t * slope <= rounding:
                accept = (_norm(trial.R) ** 2 <= (1.0 - 2.0 * ARMIJO * t) * norm2
                          and potential(system, trial) <= value + rounding)
            else:
                accept = potential(system, trial) <= value + ARMIJO * t * slope
            if accept:
                return trial, t
            t *= 0.5
        return None


def potential(system: TwoStateSystem, point: Point) -> float:
    """Φ_W(z) = −m0·u(t_0) + Δt Σ_n (Π(z_n) − z_n P(z_n)), Π' = P: the convex potential
    W(y) = −m0·u(t_0; y) + Δt Σ_n Ψ*(y_n), Ψ*' = −P⁻¹, of the payoff path y = P(z), written
    in z (no inverse of P, which saturates). Its gradient is −Δt S² R."""
    z = point.z
    return float(-(system.m0 @ point.U[0])
                 + system.scheme.dt * np.sum(system.integral(z) - z * system.payoff(z)))


def _norm(a: np.ndarray) -> float:
    """‖a‖₂ over all entries."""
    return math.sqrt(float(np.sum(a * a)))


def _xp() -> Any:
    import array_api_compat.numpy as xp

    return xp
