"""The front door of the two-state El Farol game: ``mw.solve_two_state(problem, nt=...)``."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import numpy as np

from .core import memory
from .core.backend import get_backend, to_numpy
from .core.errors import MAX_COUNT, ConvergenceWarning, ParameterError, check_int, warn
from .numerics.attendance_newton import AttendanceNewton
from .numerics.finite_state import TwoStateScheme
from .numerics.iteration import IterationScheme, check_stopping, make_scheme
from .problems.two_state import STATES, TwoStateElFarol
from .results import Result


def switching_rates(result: Result) -> np.ndarray:
    """Optimal switching rates (β_home→bar, β_bar→home) of a two-state result at each level,
    (nt + 1, 2): (∓gap)_+ / c from the gaps u_1 − u_0 carried by the HJB sweep
    (``result.gap``; differences of U for results without it)."""
    U = to_numpy(result.U)
    d = result.arrays.get("gap", U[:, 1] - U[:, 0])
    return np.stack([np.maximum(-d, 0.0), np.maximum(d, 0.0)], axis=-1) / \
        result.params["switching_cost"]


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


def solve_two_state(problem: TwoStateElFarol, nt: int = 400, tol: float = 1e-8,
                    max_iter: int = 500, iteration: str | IterationScheme | None = None,
                    warmup: int = 0) -> Result:
    """Solve the two-state El Farol game on ``nt`` implicit Euler steps.

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
    the scheme cannot resolve (:func:`check_time_step`). ``mw.solve(problem, ...)`` takes
    the same options.

    Returns a :class:`~mfgwork.Result` with ``dims=("t", "state")``, ``labels={"state":
    ("home", "bar")}``, ``x`` the state index (0, 1), ``U`` and ``M`` (nt + 1, 2), the
    problem's observables (``res.attendance`` = M[:, 1]) and summary, ``status``
    ("converged", "max_iter" or "stalled"), ``res.gap`` (u_1 − u_0 at each level as carried
    by the sweep; :func:`switching_rates` gives the rates), and in ``extra`` the best
    responses computed (``evaluations``) and the plateau level of the problem.
    """
    started = time.perf_counter()
    if not isinstance(problem, TwoStateElFarol):
        raise ParameterError(f"problem={problem!r} is invalid: must be an "
                             "mfgwork.TwoStateElFarol")
    nt = check_int("nt", nt, low=1, high=MAX_COUNT)
    tol, max_iter = check_stopping(tol, max_iter)
    warmup = check_int("warmup", warmup, low=0)
    scheme = make_scheme(iteration)
    check_size(problem, nt, scheme)
    dt = check_time_step(problem, nt)
    t = problem.time_levels(nt)
    sweeps = TwoStateScheme(nt, dt, problem.switching_cost)
    solver = AttendanceNewton(sweeps, problem.payoff, problem.payoff_slope,
                              problem.payoff_integral, m0=problem.initial_distribution(),
                              U_T=problem.terminal_cost(), tol=tol, max_iter=max_iter,
                              warmup=warmup, mixing=scheme)
    start = problem.attendance0 if problem.plateau is None else problem.plateau
    out = solver.run(np.full(nt, start))
    if not out.converged:
        why = {"max_iter": f"max_iter={max_iter} reached",
               "stalled": "stalled: no step decreases the residual any more"}
        warn(f"two-state iteration did not reach tol={tol:g}: stopped after "
             f"{out.iterations} iterations ({why[out.reason]}); returning the "
             f"iterate of lowest certified residual {out.residual:.3g} with "
             "converged=False", ConvergenceWarning)
    timings = {"iterations": sum(out.history["time"]), "total": time.perf_counter() - started}
    params = problem.params() | {"nt": nt, "tol": tol, "max_iter": max_iter,
                                 "iteration": _described(scheme, warmup, max_iter),
                                 "warmup": warmup}
    observables = problem.observables(out.M)
    converged = bool(out.converged)
    return Result(x=np.arange(len(STATES), dtype=np.float64), t=t, U=out.U, M=out.M,
                  converged=converged, iterations=out.iterations,
                  residual=float(out.residual), history=out.history, params=params,
                  timings=timings, method="finite_state", observables=observables,
                  summary=problem.summary(t, observables), state_name="state",
                  extra={"evaluations": out.evaluations, "plateau": problem.plateau},
                  status=out.reason,
                  dims=("t", "state"), labels={"state": STATES}, arrays={"gap": out.gap})


def _described(scheme: IterationScheme, warmup: int, max_iter: int) -> dict[str, Any]:
    """What iterates: Newton's method on the attendance path, after ``warmup`` iterations of
    ``scheme`` (its ``mixing``); ``scheme`` alone where the warmup takes every iteration."""
    if warmup >= max_iter:
        return scheme.describe()
    return {"scheme": "newton", "mixing": scheme.describe()}


def check_size(problem: TwoStateElFarol, nt: int, scheme: IterationScheme) -> int:
    """Bytes of a two-state solve on ``nt`` steps, refused before any work when they do not
    fit (blaming the Anderson depth beyond its default, else nt), or when the step
    dt = T/nt is not a normal float64 number."""
    dt = problem.T / nt
    if not sys.float_info.min <= dt < math.inf:
        raise ParameterError(f"dt = T/nt = {dt!r} is out of the range of float64 (T="
                             f"{problem.T!r}, nt={nt}): use fewer time steps nt")
    return memory.check_two_state(nt, getattr(scheme, "depth", 0), get_backend("numpy"))


def time_to_level(t: Any, values: Any, level: float, tol: float) -> float | None:
    """The first time from which ``values`` stays within ``tol`` of ``level`` for at least a
    tenth of the horizon (None if it never does)."""
    t, values = np.asarray(t, dtype=float), np.asarray(values, dtype=float)
    inside = np.abs(values - level) <= tol
    span = max(1, int(np.ceil(0.1 * (len(t) - 1))))
    for n in range(len(t) - span):
        if inside[n:n + span + 1].all():
            return float(t[n])
    return None

