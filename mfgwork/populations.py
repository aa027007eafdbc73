"""Several populations' discretization (:class:`PopulationsFDM`, what ``mw.solve`` of a
:class:`~mfgwork.Populations` runs; ``mw.solve_populations`` its name) and its certificate."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .core import memory
from .core.backend import Backend, get_backend, to_numpy
from .core.compiling import check_compile_steps
from .core.errors import ConvergenceWarning, ParameterError, check_choice, check_flag, warn
from .core.grid import Grid
from .fdm1d import (
    COARSE,
    COARSE_TOL,
    check_scales,
    fixed_point_bar,
    reachable_tol,
    starts_coarse,
)
from .numerics.iteration import FixedPointResult, IterationScheme, check_stopping, make_scheme
from .numerics.populations import (
    SYSTEMS,
    Setup,
    best_response_residuals,
    equilibrium,
    setup,
)
from .pipeline import Discretization, Where, run, solver_of
from .placement import place_solve
from .precision import has_float64
from .problems.populations import Populations
from .results import Result, derive_status
from .solve import SOLVERS


@dataclass(frozen=True)
class _Solve:
    """A populations solve between the stages of :class:`PopulationsFDM`: where it runs,
    its grid and set-up, the tolerance it iterates to, the path it starts from (None: agents
    who do not move), its clock, the coarse stage's iterations and the timings so far; then
    the iteration's outcome and the certificate (path residual, group residuals, dtype)."""

    where: Where
    grid: Grid
    setup: Setup
    tol: float
    z_init: Any
    started: float
    coarse_iterations: int | None
    timings: dict[str, float]
    out: FixedPointResult | None = None
    info: dict[str, Any] = field(default_factory=dict)
    certificate: tuple[float, np.ndarray, str] | None = None


@dataclass(frozen=True)
class PopulationsFDM(Discretization):
    """Solve the equilibrium of several populations (:class:`~mfgwork.Populations`, e.g.
    :class:`~mfgwork.SantaFePopulations`) on an ``nx`` × ``nt`` grid by finite differences
    (``mw.solve`` of a :class:`~mfgwork.Populations`; ``mw.solve_populations`` its name).

    Grid, ``method`` ("fdm" only), ``backend``/``device``/``dtype``, ``tol``, ``max_iter``,
    ``progress``, ``compile_steps`` and ``max_memory`` as for :func:`mfgwork.solve`.
    ``initial``: a result of the same groups (any grid; its observed path is interpolated in
    time) or the observed path itself (levels 1..nt, or 0..nt as ``res.attendance``) to
    start from instead of agents who do not move. The iteration runs on
    the shared observed path z (Santa Fe: the total attendance A = Σ_k w_k A_k at levels
    1..nt); each iteration is one best response of every group (the K groups as one batch).
    ``iteration=None`` (default): Newton's method on z with the exact tangent Jacobian of
    the scheme (``newton_system``: "gmres", matrix-free, or "dense"), a line search, and
    Anderson mixing when the line search fails (:mod:`mfgwork.numerics.populations`);
    Anderson mixing alone where a group's Hamiltonian depends on m (congestion: it sees the
    whole population's density Σ_k w_k m_k, and the iteration runs on the path and that
    density, :mod:`mfgwork.numerics.populations`); otherwise the scheme given alone (e.g.
    "anderson"). The dense system needs 8 (nt+1) nx nt bytes per group and is refused
    beyond about 400 × 400. ``coarse``: on grids at least twice as fine as 51 × 51, Newton
    starts from a 51 × 51 solve (unless
    ``initial`` is given; ``res.timings["coarse"]``, ``res.extra["coarse_iterations"]``).

    Certificate: one more best response of every group to the returned densities' path z:
    the path's relative residual ‖G(z) − z‖/‖G(z)‖ (G the share-weighted path of the best
    responses; ``res.extra["path_residual"]``) and each group's
    ‖z_k(BR_k(z)) − z_k‖/‖z_k(BR_k(z))‖ (``res.extra["group_residuals"]``); ``res.residual``
    is the largest of them (every group best responds to what it observes), ``converged``
    means it is ≤ ``tol``, and ``res.check()`` recomputes it. ``res.extra["stopped"]``:
    "converged", "max_iter" or "stalled" (with a :class:`~mfgwork.ConvergenceWarning`).
    float32 results (except on MPS and its emulation) are certified in NumPy float64 on the
    host. ``res.U`` and ``res.M`` are (K, nt+1, nx), groups in the order of
    ``res.populations``; ``res.observables`` the problem's (Santa Fe: ``attendance``,
    ``mean_state`` and per group ``attendance_<name>``, ``mean_state_<name>``).
    """

    problem: Populations
    nx: int = 201
    nt: int = 201
    method: str = "fdm"
    backend: str | Backend = "numpy"
    device: str = "cpu"
    dtype: object = None
    tol: float = 1e-8
    max_iter: int = 200
    iteration: str | IterationScheme | None = None
    newton_system: str = "gmres"
    progress: bool | None = None
    compile_steps: bool | str = "auto"
    initial: Result | Any = None
    max_memory: int | str | None = None
    coarse: bool = True

    def checked(self) -> PopulationsFDM:
        if not isinstance(self.problem, Populations):
            raise ParameterError(f"problem={self.problem!r:.80} is invalid: must be an "
                                 "mfgwork.Populations (e.g. mw.SantaFePopulations([...]))")
        nx, nt = self.nx, self.nt
        self.problem.grid(nx, nt)
        check_choice("method", self.method, ("fdm",))
        tol, max_iter = check_stopping(self.tol, self.max_iter)
        scheme = None if self.iteration is None else make_scheme(self.iteration)
        check_choice("newton_system", self.newton_system, SYSTEMS)
        dense = memory.dense_tangent_bytes(nx, nt)
        if self.newton_system == "dense" and dense > memory.NEWTON_MEMORY:
            raise ParameterError(f"newton_system='dense' is invalid on an nx={nx} x nt={nt} "
                                 f"grid: its tangent Jacobians need {dense:.3g} bytes per "
                                 f"group (at most {memory.NEWTON_MEMORY:.3g}); use 'gmres'")
        check_compile_steps(self.compile_steps)
        check_flag("progress", self.progress, optional=True)
        check_flag("coarse", self.coarse)
        return replace(self, tol=tol, max_iter=max_iter, iteration=scheme)

    def place(self) -> Where:
        backend, device, placed = place_solve(list(self.problem.models), "fdm", None, self.nx,
                                              self.nt, self.backend, self.device)
        return Where(get_backend(backend, device, self.dtype), placed)

    def memory(self, where: Where) -> tuple[dict[str, int], str]:
        grid = self.problem.grid(self.nx, self.nt)
        models = self.problem.models
        depth = getattr(self.iteration or make_scheme(None), "depth", 0)
        return memory.fdm_parts(grid.nx, grid.nt, where.backend,
                                [p.coupling_size(grid.nx, grid.nt) for p in models], depth,
                                batch=len(models))

    def start(self, where: Where, started: float) -> _Solve:
        """The scales of every group's grid (h, Δt, ν, ν Δt / h²) checked, the tolerance
        raised to what the dtype resolves, the set-up on the backend and the path Newton
        starts from: ``initial``'s, or a COARSE × COARSE solve's on fine grids."""
        problem, be = self.problem, where.backend
        grid = problem.grid(self.nx, self.nt)
        check_scales(problem.models, grid, be)
        tol = reachable_tol(self.tol, be)
        z_init = _initial_path(self.initial, problem, grid)
        s = setup(problem, grid, be, self.compile_steps)
        setup_seconds = time.perf_counter() - started
        coarse_iterations = None
        if z_init is not None:
            z_init = be.asarray(z_init)
        elif (self.coarse and self.iteration is None and s.potentials is not None
              and starts_coarse(grid)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                first = run(PopulationsFDM(problem, nx=COARSE, nt=COARSE, backend=be,
                                           tol=max(tol, COARSE_TOL), max_iter=self.max_iter,
                                           newton_system=self.newton_system, progress=False,
                                           max_memory=self.max_memory, coarse=False))[0]
            z_init = be.asarray(_interpolated_path(first, problem, grid))
            coarse_iterations = first.iterations
        coarse_seconds = time.perf_counter() - started - setup_seconds
        return _Solve(where, grid, s, tol, z_init, started, coarse_iterations,
                      {"setup": setup_seconds, "coarse": coarse_seconds})

    def iterate(self, state: _Solve) -> _Solve:
        be = state.where.backend
        bar = fixed_point_bar(self.progress, self.max_iter)
        try:
            out, info = equilibrium(state.setup, self.problem, state.grid, be,
                                    scheme=self.iteration, tol=state.tol,
                                    max_iter=self.max_iter, system=self.newton_system,
                                    z_init=state.z_init, progress=bar)
        finally:
            if bar is not None:
                bar.close()
        state.setup.sweeps.check_newton()
        be.synchronize()
        history = out.history
        return replace(state, out=out, info=info, timings=state.timings | {
            "hjb": sum(history.time_hjb), "fp": sum(history.time_fp),
            "coupling": sum(history.time_coupling)})

    def _certified(self, outcome: _Solve) -> _Solve:
        """One best response of every group to the returned densities: on the backend, or
        in NumPy float64 on the host for float32 off MPS (where float64 exists)."""
        certify_started = time.perf_counter()
        be, U, M = outcome.where.backend, outcome.out.U, outcome.out.M
        if has_float64(be):
            be = get_backend("numpy", "cpu", "float64")
            U, M = (be.asarray(to_numpy(a)) for a in (U, M))
        residual, groups = best_response_residuals(setup(self.problem, outcome.grid, be), U, M)
        finished = time.perf_counter()
        return replace(outcome, certificate=(residual, groups, be.dtype),
                       timings=outcome.timings | {"certify": finished - certify_started,
                                                  "total": finished - outcome.started})

    def results(self, outcome: _Solve) -> list[Result]:
        """The Result, of ``outcome`` with its certificate (:meth:`_certified`)."""
        outcome = self._certified(outcome)
        problem, be, grid, out = self.problem, outcome.where.backend, outcome.grid, outcome.out
        tol, max_iter, s = outcome.tol, self.max_iter, outcome.setup
        path_residual, groups, on = outcome.certificate
        residual = max(path_residual, float(np.max(groups)))
        converged = residual <= tol
        iterations = int(out.iterations[0])
        stopped = derive_status(converged, iterations, max_iter)
        if not converged:
            why = (f"max_iter={max_iter} reached" if stopped == "max_iter" else
                   "stalled: no step decreases the residual any more")
            warn(f"the populations' equilibrium did not reach tol={tol:g}: stopped after "
                 f"{iterations} iterations ({why}; certified residual {residual:.3g}); "
                 "returning the best iterate with converged=False", ConvergenceWarning)
        observables = problem.observables(grid, out.M, be)
        summary = problem.summary(grid, {k: to_numpy(v) for k, v in observables.items()})
        scheme = self.iteration
        described = ({"scheme": "newton", "system": self.newton_system, "fallback": "anderson"}
                     if scheme is None and s.potentials is not None
                     else (scheme or make_scheme(None)).describe())
        params = problem.params() | {"nx": self.nx, "nt": self.nt, "method": self.method,
                                     "tol": tol, "max_iter": max_iter,
                                     "iteration": described} | outcome.where.record | {
            "backend": be.name, "device": be.device, "dtype": be.dtype}
        extra = {"populations": list(problem.names), "shares": problem.shares.tolist(),
                 "path_residual": path_residual,
                 "group_residuals": dict(zip(problem.names, groups.tolist(), strict=True)),
                 "certified_in": on, "newton_iterations": s.sweeps.newton_iterations,
                 "fdm_kernels": s.sweeps.kernels,
                 "coarse_iterations": outcome.coarse_iterations, "stopped": stopped
                 } | outcome.info
        return [Result(x=be.asarray(grid.x), t=be.asarray(grid.t), U=out.U, M=out.M,
                       converged=bool(converged), residual=residual,
                       iterations=iterations, history=out.history.as_dict(), params=params,
                       timings=outcome.timings, backend=be.name, device=be.device,
                       dtype=be.dtype, method="fdm", observables=observables,
                       summary=summary, state_name=problem.state_name, extra=extra,
                       status=stopped, dims=("population", "t", problem.state_name),
                       labels={"population": tuple(problem.names)})]


solve_populations = solver_of(PopulationsFDM, "solve_populations")


def _initial_path(initial: Any, problem: Populations, grid: Any) -> np.ndarray | None:
    """The observed path (levels 1..nt of ``grid``) to start from: None, from a result of
    the same groups, or a path (nt,) or (nt+1,); errors name ``initial``, before work."""
    if initial is None:
        return None
    if isinstance(initial, Result):
        if initial.populations != problem.names:
            raise ParameterError(f"initial is a result of the populations "
                                 f"{initial.populations}: must be one of {problem.names}")
        return _interpolated_path(initial, problem, grid)
    path = (None if isinstance(initial, str | dict)
            else np.asarray(to_numpy(initial)))
    if (path is None or path.dtype.kind not in "iuf"
            or path.shape not in ((grid.nt,), (grid.nt + 1,))
            or not np.all(np.isfinite(path))):
        raise ParameterError(f"initial={initial!r:.60} is invalid: must be None, a result of "
                             f"the same populations, or a finite observed path of shape "
                             f"({grid.nt},) or ({grid.nt + 1},)")
    return path[-grid.nt:].astype(np.float64)


def _interpolated_path(result: Result, problem: Populations, grid: Any) -> np.ndarray:
    """The observed path of ``result`` (levels 1..nt of its grid) interpolated linearly onto
    the levels 1..nt of ``grid`` (constant before its first level)."""
    coarse_grid = problem.grid(result.x.shape[0], result.t.shape[0] - 1)
    be = get_backend("numpy", "cpu", "float64")
    s = setup(problem, coarse_grid, be)
    z = to_numpy(s.coupling.path(be.asarray(to_numpy(result.M))))
    return np.interp(grid.t[1:], coarse_grid.t[1:], z)


SOLVERS[Populations] = solve_populations
