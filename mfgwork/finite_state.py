"""The two-state El Farol game's discretization (:class:`FiniteState`, what ``mw.solve`` of a
:class:`~mfgwork.TwoStateElFarol` runs) and its analysis (switching rates, times to a level)."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .core import memory
from .core.backend import get_backend, to_numpy
from .core.errors import MAX_COUNT, ConvergenceWarning, ParameterError, check_int, check_real, warn
from .numerics.attendance_newton import AttendanceNewton, TwoStateSystem
from .numerics.equilibrium import solve as solve_equilibrium
from .numerics.finite_state import TwoStateScheme
from .numerics.iteration import IterationScheme, check_stopping, make_scheme
from .pipeline import Discretization, Where, solver_of
from .problems.two_state import STATES, TwoStateElFarol
from .results import Result


def switching_rates(result: Result) -> np.ndarray:
    """Optimal switching rates (β_home→bar, β_bar→home) of a two-state result at each level,
    (nt + 1, 2): (∓gap)_+ / c from the gaps u_1 − u_0 carried by the HJB sweep
    (``result.gap``; differences of U for results without it). Any other result is
    refused, as is a switching cost c that is not a positive finite number."""
    _check_two_state(result)
    c = check_real("result.params['switching_cost']", result.params["switching_cost"],
                   low=0.0)
    U = to_numpy(result.U)
    d = result.arrays.get("gap", U[:, 1] - U[:, 0])
    return np.stack([np.maximum(-d, 0.0), np.maximum(d, 0.0)], axis=-1) / c


def _check_two_state(result: object) -> None:
    """Refuse what is not a result of :class:`~mfgwork.TwoStateElFarol` (U (nt+1, 2) over
    the states home and bar, its switching cost in ``params``)."""
    if (isinstance(result, Result) and result.params.get("problem") == TwoStateElFarol.name
            and result.states == STATES and np.shape(result.U)[1:] == (len(STATES),)
            and "switching_cost" in result.params):
        return
    what = type(result).__name__
    if isinstance(result, Result):
        what += (f" of {result.params.get('problem')!r} with dims {tuple(result.dims)} and "
                 f"U of shape {np.shape(result.U)}")
    raise ParameterError(f"result={what} is invalid: must be a result of "
                         "mw.TwoStateElFarol (dims ('t', 'state'), U of shape (nt+1, 2))")


MAX_STEP_RATE = 1e3  # the largest Δt · (fastest switching rate) the solver accepts


def check_time_step(problem: TwoStateElFarol, nt: int) -> float:
    """Δt = T/nt, refused (:class:`ParameterError`) where the scheme cannot resolve the
    game: a step holding more than :data:`MAX_STEP_RATE` of the fastest switching times
    1/β_max (β_max = :attr:`TwoStateElFarol.fastest_rate`), or values T·max|F| that overflow."""
    dt = problem.T / nt
    beta = problem.fastest_rate
    if not (math.isfinite(dt) and math.isfinite(beta) and dt * beta <= MAX_STEP_RATE):
        limit = MAX_STEP_RATE / beta if beta > 0 else math.inf
        steps = problem.T / limit
        least = f"{math.ceil(steps)}" if steps < 1e12 else f"{steps:.3g}"
        raise ParameterError(
            f"T={problem.T!r} and nt={nt!r} are invalid: the time step T/nt={dt:.3g} holds "
            f"{dt * beta:.3g} switching times 1/β_max = √(c/(2 max(|G|, |B|))) = "
            f"{1.0 / beta:.3g}; it must hold at most {MAX_STEP_RATE:g} (T/nt ≤ {limit:.3g}: "
            f"nt ≥ {least} for this T, or T ≤ {nt * limit:.3g} for "
            "this nt), beyond which switching saturates within a step and the certificate "
            "says nothing about the game")
    scale = problem.T * max(abs(problem.good), abs(problem.bad), problem.good - problem.bad)
    if not scale < 1e300:
        raise ParameterError(f"T={problem.T!r} is invalid: T·max|F| = {scale:.3g} overflows "
                             "the values; must be < 1e300")
    return dt


@dataclass(frozen=True)
class FiniteState(Discretization):
    """Solve the two-state El Farol game on ``nt`` implicit Euler steps (``mw.solve`` of a
    :class:`~mfgwork.TwoStateElFarol`; ``mw.solve_two_state`` is its old name).

    Newton's method on the attendance path A(t_1..t_nt) with the exact Jacobian of the
    discrete scheme and a line search on the game's potential
    (:mod:`mfgwork.numerics.attendance_newton`), after ``warmup`` damped iterations of the
    fixed-point scheme ``iteration`` (as in :func:`mfgwork.solve`; default Anderson;
    ``warmup=max_iter`` runs that scheme alone), from the plateau path A ≡ A* + ε log(G/(−B))
    where nobody switches (the attendance of most of a long evening; A ≡ A_0 where the payoff
    does not vanish). The solve stops at the first iterate whose fixed-point residual is
    ≤ ``tol`` (one best response to its attendance path reproduces it) and returns that
    iterate: ``M`` the densities of its attendance path, ``U`` the value of the best
    response to it. Otherwise it returns the iterate of lowest residual with
    ``converged=False``, a :class:`~mfgwork.ConvergenceWarning` naming the iterations done
    and why they stopped (``max_iter``, or ``stalled``: no step decreases the residual any
    more), and that reason in ``status``. Raises :class:`ParameterError` for a time step
    the scheme cannot resolve (:func:`check_time_step`). NumPy float64 on the CPU.

    Returns a :class:`~mfgwork.Result` with ``dims=("t", "state")``, ``labels={"state":
    ("home", "bar")}``, ``x`` the state index (0, 1), ``U`` and ``M`` (nt + 1, 2), the
    problem's observables (``res.attendance`` = M[:, 1]) and summary, ``status``
    ("converged", "max_iter" or "stalled"), ``res.gap`` (u_1 − u_0 at each level as carried
    by the sweep; :func:`switching_rates` gives the rates), and in ``extra`` the best
    responses computed (``evaluations``) and the plateau level of the problem.
    """

    problem: TwoStateElFarol
    nt: int = 400
    tol: float = 1e-8
    max_iter: int = 500
    iteration: str | IterationScheme | None = None
    warmup: int = 0

    def checked(self) -> FiniteState:
        if not isinstance(self.problem, TwoStateElFarol):
            raise ParameterError(f"problem={self.problem!r} is invalid: must be an "
                                 "mfgwork.TwoStateElFarol")
        nt = check_int("nt", self.nt, low=1, high=MAX_COUNT)
        tol, max_iter = check_stopping(self.tol, self.max_iter)
        warmup = check_int("warmup", self.warmup, low=0)
        iteration = make_scheme(self.iteration)
        check_time_range(self.problem, nt)
        check_time_step(self.problem, nt)
        return replace(self, nt=nt, tol=tol, max_iter=max_iter, iteration=iteration,
                       warmup=warmup)

    def place(self) -> Where:
        return Where(get_backend("numpy"))

    def memory(self, where: Where) -> tuple[dict[str, int], str]:
        depth = getattr(self.iteration, "depth", 0)
        base = memory.two_state_bytes(self.nt, min(depth, memory.DEFAULT_DEPTH))
        return ({"nt": base, "the Anderson depth": memory.two_state_bytes(self.nt, depth) - base},
                f"a two-state solve with nt={self.nt}")

    def start(self, where: Where, started: float
              ) -> tuple[AttendanceNewton, TwoStateSystem, float]:
        p = self.problem
        sweeps = TwoStateScheme(self.nt, p.T / self.nt, p.switching_cost)
        system = TwoStateSystem(
            sweeps, p.payoff, p.payoff_slope, p.payoff_integral,
            m0=np.asarray(p.initial_distribution(), dtype=np.float64),
            U_T=np.asarray(p.terminal_cost(), np.float64),
            z0=np.full(self.nt, p.attendance0 if p.plateau is None else p.plateau))
        newton = AttendanceNewton(tol=self.tol, warmup=self.warmup, mixing=self.iteration)
        return newton, system, started

    def iterate(self, state: tuple[AttendanceNewton, TwoStateSystem, float]
                ) -> tuple[Any, float]:
        newton, system, started = state
        out = solve_equilibrium(newton, system, max_iter=self.max_iter, progress=None)
        if not out.converged:
            why = {"max_iter": f"max_iter={self.max_iter} reached",
                   "stalled": "stalled: no step decreases the residual any more"}
            warn(f"two-state iteration did not reach tol={self.tol:g}: stopped after "
                 f"{out.iterations} iterations ({why[out.reason]}); returning the "
                 f"iterate of lowest certified residual {out.residual:.3g} with "
                 "converged=False", ConvergenceWarning)
        return out, started

    def results(self, outcome: tuple[Any, float]) -> list[Result]:
        out, started = outcome
        p = self.problem
        t = p.time_levels(self.nt)
        timings = {"iterations": sum(out.history["time"]),
                   "total": time.perf_counter() - started}
        params = p.params() | {"nt": self.nt, "tol": self.tol, "max_iter": self.max_iter,
                               "iteration": _described(self.iteration, self.warmup,
                                                       self.max_iter),
                               "warmup": self.warmup}
        observables = p.observables(out.M)
        return [Result(x=np.arange(len(STATES), dtype=np.float64), t=t, U=out.U, M=out.M,
                       converged=bool(out.converged), iterations=out.iterations,
                       residual=float(out.residual), history=out.history, params=params,
                       timings=timings, method="finite_state", observables=observables,
                       summary=p.summary(t, observables), state_name="state",
                       extra={"evaluations": out.evaluations, "plateau": p.plateau},
                       status=out.reason, dims=("t", "state"), labels={"state": STATES},
                       arrays={"gap": out.gap})]


solve_two_state = solver_of(FiniteState, "solve_two_state")


def _described(scheme: IterationScheme, warmup: int, max_iter: int) -> dict[str, Any]:
    """What iterates: Newton's method on the attendance path, after ``warmup`` iterations of
    ``scheme`` (its ``mixing``); ``scheme`` alone where the warmup takes every iteration."""
    if warmup >= max_iter:
        return scheme.describe()
    return {"scheme": "newton", "mixing": scheme.describe()}


def check_time_range(problem: TwoStateElFarol, nt: int) -> None:
    """Refuse a step dt = T/nt that is not a normal float64 number."""
    dt = problem.T / nt
    if not sys.float_info.min <= dt < math.inf:
        raise ParameterError(f"dt = T/nt = {dt!r} is out of the range of float64 (T="
                             f"{problem.T!r}, nt={nt}): use fewer time steps nt")


def time_to_level(t: Any, values: Any, level: float, tol: float) -> float | None:
    """The first time from which ``values`` stays within ``tol`` of ``level`` for at least a
    tenth of the horizon (None if it never does). ``t``: evenly spaced increasing times,
    ``values`` the path at them (both finite, 1-D, of one length ≥ 2); ``level`` finite,
    ``tol`` ≥ 0 finite."""
    t, values = _check_path(t, values)
    level = check_real("level", level)
    tol = check_real("tol", tol, low=0.0, low_open=False)
    inside = np.abs(values - level) <= tol
    span = max(1, int(np.ceil(0.1 * (len(t) - 1))))
    for n in range(len(t) - span):
        if inside[n:n + span + 1].all():
            return float(t[n])
    return None


def _check_path(t: Any, values: Any) -> tuple[np.ndarray, np.ndarray]:
    """``t`` and ``values`` as float64 arrays, refused unless finite, 1-D, of one length ≥ 2
    and ``t`` increasing in even steps (to a thousandth of a step)."""
    arrays = []
    for name, v in (("t", t), ("values", values)):
        try:
            a = np.asarray(to_numpy(v), dtype=np.float64)
        except (TypeError, ValueError):
            raise ParameterError(f"{name}={v!r:.60} is invalid: must be a 1-D array of finite "
                                 "real numbers") from None
        if a.ndim != 1 or a.size < 2 or not np.isfinite(a).all():
            raise ParameterError(f"{name} of shape {a.shape} is invalid: must be a 1-D array "
                                 "of at least 2 finite real numbers")
        arrays.append(a)
    t, values = arrays
    if values.size != t.size:
        raise ParameterError(f"values has {values.size} entries and t {t.size}: they must "
                             "have one length (a value at each time)")
    steps = np.diff(t)
    step = (t[-1] - t[0]) / (t.size - 1)
    if not (step > 0 and np.all(np.abs(steps - step) <= 1e-3 * step)):
        raise ParameterError(f"t={t!r:.60} is invalid: must increase in even steps (the "
                             "time levels of a result, res.t)")
    return t, values
