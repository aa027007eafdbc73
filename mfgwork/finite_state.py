"""The front door of the two-state El Farol game: ``mw.solve_two_state(problem, nt=...)``."""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .core import memory
from .core.backend import get_backend
from .core.errors import MAX_COUNT, ConvergenceWarning, ParameterError, check_int
from .core.storage import provenance, write_json
from .numerics.attendance_newton import AttendanceNewton
from .numerics.finite_state import TwoStateScheme
from .numerics.iteration import IterationScheme, check_stopping, make_scheme
from .problems.two_state import TwoStateElFarol
from .results import ObservablesByName


@dataclass
class TwoStateResult(ObservablesByName):
    """Solution of the two-state game: ``t`` (nt + 1,), ``U`` and ``M`` (nt + 1, 2) with
    columns (home, bar); ``observables`` the problem's paths, also readable as attributes
    (``res.attendance`` = M[:, 1]); ``summary`` its scalar headline numbers; ``history`` of
    the iteration (per iteration: certified and iterate residuals, step length, time);
    ``stopped``: why the iteration ended (converged, max_iter or stalled); ``evaluations``:
    best responses computed; ``gap``: u_1 − u_0 at each level as carried by the sweep."""

    t: np.ndarray
    U: np.ndarray
    M: np.ndarray
    converged: bool
    iterations: int
    history: dict[str, list[float]]
    params: dict[str, Any]
    timings: dict[str, float]
    residual: float
    observables: dict[str, np.ndarray] = field(default_factory=dict)
    summary: dict[str, float] = field(default_factory=dict)
    plateau: float | None = None
    stopped: str = "converged"
    evaluations: int = 0
    gap: np.ndarray | None = None

    @property
    def rates(self) -> np.ndarray:
        """Optimal switching rates (β_home→bar, β_bar→home) at each level, (nt + 1, 2), from
        the gaps u_1 − u_0 carried by the HJB sweep (``gap``; else differences of U)."""
        d = self.U[:, 1] - self.U[:, 0] if self.gap is None else self.gap
        return np.stack([np.maximum(-d, 0.0), np.maximum(d, 0.0)], axis=-1) / \
            self.params["switching_cost"]

    @property
    def mass_error(self) -> float:
        """max_t |m_0 + m_1 − 1|."""
        return float(np.max(np.abs(self.M.sum(axis=1) - 1.0)))

    def metrics(self) -> dict[str, Any]:
        """Headline numbers, JSON-ready."""
        return {"converged": bool(self.converged), "iterations": int(self.iterations),
                "residual": float(self.residual), "stopped": self.stopped,
                "evaluations": int(self.evaluations),
                "mass_error": self.mass_error, "min_mass": float(self.M.min()),
                "plateau": self.plateau, "nt": len(self.t) - 1,
                "timings": dict(self.timings)} | self.summary

    def write_files(self, folder: Path, parameters: dict[str, Any] | None = None,
                    metrics: dict[str, Any] | None = None) -> None:
        """``arrays.npz``, ``parameters.json`` and ``metrics.json`` into ``folder`` (the
        interface :func:`mfgwork.save_run` writes a result through)."""
        np.savez_compressed(folder / "arrays.npz", t=self.t, U=self.U, M=self.M,
                            **self.observables)
        write_json(folder / "parameters.json", self.params | (parameters or {}))
        write_json(folder / "metrics.json", self.metrics() | {
            "history": self.history, "observables": list(self.observables),
            "provenance": provenance()} | (metrics or {}))


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
                    warmup: int = 0) -> TwoStateResult:
    """Solve the two-state El Farol game on ``nt`` implicit Euler steps.

    Newton's method on the attendance path A(t_1..t_nt) with the exact Jacobian of the
    discrete scheme and a line search on the game's potential
    (:mod:`mfgwork.numerics.attendance_newton`), after ``warmup`` damped iterations of the
    fixed-point scheme ``iteration`` (as in :func:`mfgwork.solve`; default Anderson;
    ``warmup=max_iter`` runs that scheme alone). Every iteration certifies its iterate by
    one more best response; the solve stops at the first certified fixed-point residual
    ≤ ``tol`` (one best response to the returned attendance path reproduces it), and
    otherwise returns the iterate of lowest certified residual with ``converged=False``, a
    :class:`~mfgwork.ConvergenceWarning` naming the iterations done and why they stopped
    (``max_iter``, or ``stalled``: no step decreases the residual any more), and that reason
    in ``stopped``. Raises :class:`ParameterError` for a time step the scheme
    cannot resolve (:func:`check_time_step`).
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
    out = solver.run(np.full(nt, problem.attendance0))
    if not out.converged:
        why = {"max_iter": f"max_iter={max_iter} reached",
               "stalled": "stalled: no step decreases the residual any more (its rounding "
                          "floor, amplified by the sensitivity of the best response)"}
        warnings.warn(f"two-state iteration did not reach tol={tol:g}: stopped after "
                      f"{out.iterations} iterations ({why[out.reason]}); returning the "
                      f"iterate of lowest certified residual {out.residual:.3g} with "
                      "converged=False", ConvergenceWarning, stacklevel=2)
    timings = {"iterations": sum(out.history["time"]), "total": time.perf_counter() - started}
    params = problem.params() | {"nt": nt, "tol": tol, "max_iter": max_iter,
                                 "iteration": scheme.describe(), "warmup": warmup}
    observables = problem.observables(out.M)
    return TwoStateResult(t=t, U=out.U, M=out.M, converged=out.converged,
                          iterations=out.iterations, residual=out.residual,
                          history=out.history, params=params, timings=timings,
                          observables=observables, summary=problem.summary(t, observables),
                          plateau=problem.plateau, stopped=out.reason,
                          evaluations=out.evaluations, gap=out.gap)


def check_size(problem: TwoStateElFarol, nt: int, scheme: IterationScheme) -> int:
    """Bytes of a two-state solve on ``nt`` steps, refused before any work when they do not
    fit (blaming the Anderson depth beyond its default, else nt), or when the step
    dt = T/nt is not a normal float64 number."""
    dt = problem.T / nt
    if not sys.float_info.min <= dt < math.inf:
        raise ParameterError(f"dt = T/nt = {dt!r} is out of the range of float64 (T="
                             f"{problem.T!r}, nt={nt}): use fewer time steps nt")
    depth = getattr(scheme, "depth", 0)
    base = memory.two_state_bytes(nt, min(depth, 5))
    return memory.check_parts({"nt": base, "the Anderson depth":
                               memory.two_state_bytes(nt, depth) - base},
                              get_backend("numpy"), what=f"a two-state solve with nt={nt}")


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

