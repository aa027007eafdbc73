"""The long run through the front door: ``mw.solve(problem, stationary=True)``.

The ergodic system of :mod:`mfgwork.numerics.stationary` solved for a 1-D problem (NumPy by
default, torch float64 on the CPU or CUDA the same way), returned as
a :class:`~mfgwork.Result` of one level: ``U`` (1, nx) the ergodic value v (Σ w v = 0), ``M``
(1, nx) the stationary density, ``t = (0.0,)`` (no time: the state the finite-horizon solution
rests at far from both ends), the observables at that state, ``summary["ergodic_constant"]``
λ (the cost per unit time), ``params["stationary"]`` True. ``res.check()`` recomputes its
certificate: one best response (the ergodic HJB for its density, then the stationary FP).
Its running cost must not depend on t (:func:`check_autonomous`), and the options of a
finite horizon that it does not take are refused (:func:`check_long_run`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Any

import numpy as np

from .core.backend import Backend, get_backend, to_numpy
from .core.errors import ConvergenceWarning, ParameterError, SolverError, check_flag
from .numerics.equilibrium import solve as solve_equilibrium
from .numerics.iteration import check_stopping
from .numerics.stationary import ErgodicNewton, ErgodicSystem
from .pipeline import Discretization, Where
from .placement import place_solve
from .problems.base import MFGProblem, warn_unresolved
from .results import Result

#: The horizon whose middle level starts the long run of a problem without a convex
#: potential (measured on Santa Fe planners, thresholds 0.3–0.9, ε 0.02–0.1, nx 101: T = 20
#: with 5 steps a unit of time starts Newton 3–4 steps from the solution), and that of an
#: equilibrium where Newton from the initial density does not converge (Santa Fe, σ 0.2–1,
#: thresholds 0.3–0.9, ε 0.02–0.2, payoffs 10–1000, nx 51: all 81 converge in 3–14 steps).
PLATEAU_T = 20.0
#: Time steps of that horizon per unit of time.
PLATEAU_STEPS = 5
#: The horizons whose middle levels start an equilibrium's long run again, in turn, where
#: Newton from the start before has not converged: T = 20 starts the 81 bars of
#: :data:`PLATEAU_T`, and T = 200 bars that mix slowly (threshold 0.95 at σ = 0.15: from
#: the middle of T = 20 or 60 Newton creeps, from that of T = 200 it converges in 5 steps).
LATER_HORIZONS = (PLATEAU_T, 200.0)
#: Dense (2 nx + 1)² float64 arrays held at once by a Newton step (the Jacobian, its
#: factorisation, the best response's system), with margin.
DENSE_COPIES = 4
#: The options of a finite-horizon 1-D solve that the long run does not take.
NOT_TAKEN = ("iteration", "n_particles", "seed", "compile_steps", "initial", "coarse")


@dataclass(frozen=True, eq=False)
class Ergodic1D(Discretization):
    """The stationary solution of ``problem`` on ``nx`` nodes (module docstring): what
    ``mw.solve(problem, stationary=True)`` runs, on the backend of ``backend``/``device``/
    ``dtype`` (NumPy by default, torch on the CPU or CUDA), refused before any work for
    particles and for float32 (MPS). A problem without a convex potential (the planner's,
    ``objective="social"``: Newton's method from the initial density finds another critical
    point or none) starts from the middle of a finite horizon of :data:`PLATEAU_T`
    (``plateau(problem)``: the finite-horizon result, from the front door), where the
    solution already rests near the long run. An equilibrium starts from the initial density
    and takes that start where Newton has not converged in
    :data:`~mfgwork.numerics.stationary.RESTART_AFTER` steps (with large payoffs, high
    thresholds or little noise it creeps); a problem whose horizon cannot be changed
    (:func:`over_horizon`) keeps to the initial density."""

    problem: MFGProblem
    nx: int
    tol: float
    max_iter: int
    method: str
    backend: Any
    device: Any
    dtype: Any
    plateau: Callable[[MFGProblem], Result] | None = None
    max_memory: Any = None

    def checked(self) -> Ergodic1D:
        if self.method != "fdm":
            raise ParameterError(f"method={self.method!r} is invalid with stationary=True: "
                                 "the ergodic system is solved by finite differences "
                                 "(method='fdm')")
        tol, max_iter = check_stopping(self.tol, self.max_iter)
        return replace(self, tol=tol, max_iter=max_iter)

    def place(self) -> Where:
        backend, device, placed = place_solve(self.problem, "fdm", None, self.nx, 1,
                                              self.backend, self.device)
        be = backend if isinstance(backend, Backend) else get_backend(backend, device,
                                                                      self.dtype)
        if be.dtype != "float64":
            raise ParameterError(f"dtype={be.dtype!r} is invalid with stationary=True: the "
                                 "ergodic system is ill-conditioned in float32 (its "
                                 "certificate stalls near 1e-3 at nx = 101); use float64 "
                                 "(NumPy, or torch on the CPU or CUDA)")
        self.problem.grid(self.nx, 1).check_scales(self.problem.sigma, be.dtype, steady=True)
        return Where(be, placed)

    def memory(self, where: Where) -> tuple[dict[str, int], str]:
        return ({"nx": DENSE_COPIES * 8 * (2 * self.nx + 1) ** 2},
                f"the long run on nx={self.nx} nodes (dense Newton systems)")

    def start(self, where: Where, started: float) -> tuple[Where, float, ErgodicNewton, str]:
        problem = self.problem
        check_autonomous(problem, problem.grid(self.nx, 1), where.backend)
        warn_unresolved([problem], problem.grid(self.nx, 1))
        if self.plateau is None or over_horizon(problem, PLATEAU_T) is None:
            return where, started, ErgodicNewton(self.tol), "the initial density"
        if getattr(problem, "objective", "equilibrium") != "equilibrium":
            first = self._middle(PLATEAU_T)   # (None: that horizon's solve failed)
            return (where, started, ErgodicNewton(self.tol, first), "the initial density"
                    if first is None else f"the middle of a finite horizon T={PLATEAU_T:g}")
        later = tuple(partial(self._middle, T) for T in LATER_HORIZONS)
        return where, started, ErgodicNewton(self.tol, later=later), "the initial density"

    def _middle(self, T: float) -> tuple[np.ndarray, np.ndarray] | None:
        """(v, m) of the middle level of a finite horizon ``T`` (a start need not be
        converged: its warning is not shown), None where that solve fails."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            try:
                finite = self.plateau(self.problem, T=T)
            except SolverError:
                return None
        middle = np.shape(finite.M)[0] // 2
        return to_numpy(finite.U)[middle], to_numpy(finite.M)[middle]

    def iterate(self, state: tuple[Where, float, ErgodicNewton, str]) -> tuple[Any, ...]:
        where, started, newton, started_from = state
        out = solve_equilibrium(newton, ErgodicSystem(self.problem, self.nx, where.backend),
                                max_iter=self.max_iter)
        if out.restarts:
            started_from = _later_start(out.restarts)
        return out, where, started, started_from

    def results(self, outcome: tuple[Any, ...]) -> list[Result]:
        out, where, started, started_from = outcome
        problem, be = self.problem, where.backend
        grid = problem.grid(self.nx, 1)
        M = out.m[None]
        observables = {k: np.asarray(v) for k, v in
                       problem.observables(grid, M, get_backend("numpy")).items()}
        summary = problem.summary(grid, observables) | {
            "ergodic_constant": float(out.ergodic_constant)}
        total = time.perf_counter() - started
        params = problem.params() | {"method": "fdm", "tol": self.tol,
                                     "max_iter": self.max_iter, "stationary": True,
                                     "iteration": {"scheme": "newton", "system": "dense",
                                                   "start": started_from}} | where.record
        return [Result(x=np.asarray(grid.x), t=np.zeros(1), U=out.v[None], M=M,
                       converged=out.converged, iterations=out.iterations,
                       history=out.history, params=params,
                       timings={"solve": total, "total": total}, backend=be.name,
                       device=be.device, dtype=be.dtype, observables=observables,
                       summary=summary, state_name=problem.state_name,
                       residual=out.residual)]


def _later_start(restarts: Sequence[tuple[int, int]]) -> str:
    """Where Newton's last start came from, and the steps before it from each earlier one,
    in words (``params["iteration"]["start"]``), from ``(step, index into LATER_HORIZONS)``."""
    names = ("the initial density",
             *(f"the middle of a finite horizon T={T:g}" for T in LATER_HORIZONS))
    at = [k for k, _ in restarts]
    steps = [k - before for k, before in zip(at, [0, *at[:-1]], strict=True)]
    froms = [names[0], *(names[i + 1] for _, i in restarts[:-1])]
    taken = [f"{steps[0]} Newton steps from {froms[0]}",
             *(f"{n} from {f}" for n, f in zip(steps[1:], froms[1:], strict=True))]
    return f"{names[restarts[-1][1] + 1]}, after {' and '.join(taken)}"


def over_horizon(problem: MFGProblem, T: float) -> MFGProblem | None:
    """``problem`` over the horizon ``T``: its ``with_horizon`` (Santa Fe's), else the
    dataclass with ``T`` replaced; None where neither applies (a subclass whose constructor
    takes other arguments)."""
    if hasattr(problem, "with_horizon"):
        return problem.with_horizon(T)
    try:
        return replace(problem, T=T)
    except TypeError:
        return None


def stationary_residual(result: Result, problem: MFGProblem) -> float:
    """The certificate of a stationary ``result`` (:meth:`Result.check`): one best response
    to its density, on the backend it was solved on."""
    be = get_backend(result.backend, result.device, result.dtype)
    system = ErgodicSystem(problem, np.shape(result.M)[-1], be)
    M, U = (be.asarray(np.asarray(to_numpy(a))[0]) for a in (result.M, result.U))
    return system.certificate(M * system.w, U, float(result.summary["ergodic_constant"]))


def check_long_run(solve: Any) -> None:
    """The options of ``solve`` (a 1-D finite-horizon discretization given
    ``stationary=True``) checked before any work as the long run takes them: those of
    :data:`NOT_TAKEN` refused (:func:`refuse_not_taken`), ``nt`` (no part in it) and
    ``progress`` checked as a finite horizon checks them (``max_memory`` is the
    :class:`Ergodic1D`'s, held to by the pipeline)."""
    refuse_not_taken(solve, NOT_TAKEN)
    solve.problem.grid(solve.nx, solve.nt)
    check_flag("progress", solve.progress, optional=True)


def refuse_not_taken(solve: Any, names: Sequence[str]) -> None:
    """Refuse the options ``names`` of ``solve`` (a dataclass of a finite horizon's options)
    given other than their defaults: the long run does not take them."""
    for option in fields(solve):
        value, default = getattr(solve, option.name), option.default
        if option.name in names and value is not default and not (
                type(value) is type(default) and value == default):
            raise ParameterError(f"{option.name}={value!r:.60} is invalid with stationary=True: "
                                 "it does not apply to the long run (Newton's method on the "
                                 "ergodic system); leave it out")


def check_autonomous(problem: Any, grid: Any, backend: Backend) -> None:
    """Refuse ``problem`` if its running cost depends on t: the long run has no time. The
    cost of its initial density on ``grid`` (one step to T, where the long run evaluates
    f) is compared with that on a horizon of T/2."""
    m = problem.initial_density(grid, backend)
    costs = []
    for g in (grid, replace(grid, T=grid.T / 2)):
        coupling = problem.coupling(g, backend)
        cost = coupling.running_cost(coupling.state(backend.xp.stack([m, m])))[0]
        costs.append(np.asarray(to_numpy(cost), dtype=np.float64))
    gap = float(np.max(np.abs(costs[0] - costs[1])))
    if gap > 1e-12 * max(1.0, float(np.max(np.abs(costs[0])))):
        raise ParameterError(f"f={problem.params()['f']} is invalid with stationary=True: the "
                             "long run needs a running cost independent of t, and "
                             f"f(T, x, m0) and f(T/2, x, m0) differ by up to {gap:.3g}; make f "
                             "independent of t, or solve a finite horizon")
