"""The front door of the two-state El Farol game: ``mw.solve_two_state(problem, nt=...)``."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .core import memory
from .core.backend import get_backend
from .core.errors import MAX_COUNT, ParameterError, check_int
from .core.storage import provenance, write_json
from .numerics.finite_state import TwoStateScheme
from .numerics.iteration import IterationScheme, check_stopping, fixed_point, make_scheme
from .problems.two_state import TwoStateElFarol
from .results import ObservablesByName


@dataclass
class TwoStateResult(ObservablesByName):
    """Solution of the two-state game: ``t`` (nt + 1,), ``U`` and ``M`` (nt + 1, 2) with
    columns (home, bar); ``observables`` the problem's paths, also readable as attributes
    (``res.attendance`` = M[:, 1]); ``summary`` its scalar headline numbers; ``history`` of
    the fixed-point iteration."""

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

    @property
    def rates(self) -> np.ndarray:
        """Optimal switching rates (β_home→bar, β_bar→home) at each level, (nt + 1, 2)."""
        d = self.U[:, 1] - self.U[:, 0]
        return np.stack([np.maximum(-d, 0.0), np.maximum(d, 0.0)], axis=-1) / \
            self.params["switching_cost"]

    @property
    def mass_error(self) -> float:
        """max_t |m_0 + m_1 − 1|."""
        return float(np.max(np.abs(self.M.sum(axis=1) - 1.0)))

    def metrics(self) -> dict[str, Any]:
        """Headline numbers, JSON-ready."""
        return {"converged": bool(self.converged), "iterations": int(self.iterations),
                "residual": float(self.residual),
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


def solve_two_state(problem: TwoStateElFarol, nt: int = 400, tol: float = 1e-8,
                    max_iter: int = 500, iteration: str | IterationScheme | None = None
                    ) -> TwoStateResult:
    """Solve the two-state El Farol game on ``nt`` implicit Euler steps.

    The forward–backward system is coupled by the fixed-point iteration of
    :func:`mfgwork.numerics.iteration.fixed_point` on the attendance path A(t_1..t_nt)
    (``iteration`` as in :func:`mfgwork.solve`; default Anderson); it stops when the
    certified fixed-point residual of the returned solution (one best response to its
    attendance path reproduces it) is at most ``tol``.
    """
    started = time.perf_counter()
    if not isinstance(problem, TwoStateElFarol):
        raise ParameterError(f"problem={problem!r} is invalid: must be an "
                             "mfgwork.TwoStateElFarol")
    nt = check_int("nt", nt, low=1, high=MAX_COUNT)
    tol, max_iter = check_stopping(tol, max_iter)
    scheme = make_scheme(iteration)
    check_size(problem, nt, scheme)
    t = problem.time_levels(nt)
    sweeps = TwoStateScheme(nt, problem.T / nt, problem.switching_cost)
    out = fixed_point(problem.coupling(), sweeps.solve_hjb, sweeps.solve_fp,
                      m0=problem.initial_distribution(), U_T=problem.terminal_cost(), nt=nt,
                      backend=get_backend("numpy"), scheme=scheme, tol=tol, max_iter=max_iter)
    history = out.history
    timings = {"hjb": sum(history.time_hjb), "fp": sum(history.time_fp),
               "total": time.perf_counter() - started}
    params = problem.params() | {"nt": nt, "tol": tol, "max_iter": max_iter,
                                 "iteration": scheme.describe()}
    observables = problem.observables(out.M)
    return TwoStateResult(t=t, U=out.U, M=out.M, converged=bool(out.converged[0]),
                          iterations=int(out.iterations[0]), residual=float(out.residual[0]),
                          history=history.as_dict(),
                          params=params, timings=timings, observables=observables,
                          summary=problem.summary(t, observables), plateau=problem.plateau)


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

