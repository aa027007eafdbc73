"""The 2-D kind of the pipeline (:mod:`mfgwork.pipeline`): :class:`FDM2D`, :class:`FDM2DBatch`
and the long run :class:`Ergodic2D`, behind ``mw.solve`` of an
:class:`~mfgwork.problems.two_d.MFGProblem2D` (or a list), and ``mw.solve_2d`` and
``mw.solve_2d_batch``, their names.

They solve the MFG system of a :class:`~mfgwork.problems.two_d.MFGProblem2D` (the room, the two
bars, or a user problem) with the implicit upwind scheme of :mod:`mfgwork.numerics.fdm2d`
and return a :class:`~mfgwork.results2d.Result2D` (a :class:`~mfgwork.Result` with dims
("t", "y", "x")). Linear systems (see
:mod:`mfgwork.numerics.fdm2d.sweeps`): ``solver="ilu"`` (numba ILU(0)-BiCGStab, the default
with NumPy), ``"direct"`` (SuperLU) or ``"krylov"`` (matrix-free stencil + batched
Jacobi-BiCGStab, the default and only choice with torch on any device; CUDA graphs on CUDA,
and with Triton one launch a solve preconditioned by two terms of the Neumann series).

API (stable; the fields of :class:`FDM2D` and :class:`FDM2DBatch`):

    solve_2d(problem, nx=101, ny=None, nt=100, backend="numpy", device="cpu", dtype=None,
             tol=1e-6, max_iter=200, solver=None, iteration=None, progress=None,
             max_memory=None, stationary=False) -> Result2D
    solve_2d_batch(problems, <the same keywords but stationary>) -> list[Result2D]

Models: :class:`~mfgwork.problems.room.Room`, :class:`~mfgwork.problems.two_bars.TwoBars`,
any :class:`~mfgwork.problems.two_d.MFGProblem2D` (with any isotropic Hamiltonian). A
Hamiltonian whose value can be traced runs the compiled assembly of the NumPy solvers and the
Triton system on CUDA, both built from its expression in s = |p|²
(:mod:`mfgwork.numerics.fdm2d.isotropic`); any other the array code.
"""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Self

import numpy as np

from .core import memory
from .core.backend import Backend, get_backend, to_numpy
from .core.errors import ParameterError, check_choice, check_flag, check_int
from .fdm1d import fixed_point_bar, raised_tol
from .long_run import check_autonomous, refuse_not_taken
from .numerics.equilibrium import solve as solve_equilibrium
from .numerics.fdm2d import equilibrium as eq
from .numerics.fdm2d.sweeps import SOLVERS
from .numerics.iteration import Anderson, IterationScheme, check_stopping, make_scheme
from .numerics.stationary2d import ErgodicNewtonKrylov, ErgodicSystem2D
from .pipeline import Discretization, Where, solver_of
from .placement import resolve
from .problems.base import warn_unresolved
from .problems.two_d import MFGProblem2D
from .results2d import Result2D
from .solve import BATCH_SOLVERS
from .solve import SOLVERS as FRONT_DOOR

#: Arrays of (nt+1) × ny × nx floats a solve holds besides the coupling states: U, M, their
#: next iterates, the running cost, the best and lowest iterates of the iteration, the
#: sweeps' level lists and the velocity fields of the result.
GRID_ARRAYS = 12
#: Arrays of (nt+1) × ny × nx floats the NumPy solvers keep besides: the HJB sweep's last
#: Newton matrices (diag, W, E, S, N, out per level) for the FP sweep, the last FP masses.
KEPT_ARRAYS = 7
#: Bytes per unknown of a SuperLU factor of the 5-point matrix on N nodes: about
#: 4 N log2 N entries (measured 3.8 N at N = 101², minimum degree), 12 bytes each.
LU_BYTES = 48
#: The smallest tol a solve iterates to, in units of the tolerance of Newton's exact test
#: (64 ε max(1, ν Δt / h²)): 1.1e-4 in float32 on the 21² × 12 room (where tol = 1e-5 once
#: certified an iterate whose HJB sweeps had returned their guess), about 1e-13 in float64.
RESOLVABLE = 10.0


def default_iteration(dtype: str = "float64") -> IterationScheme:
    """Anderson mixing (depth 8) with β = 0.5 and λ = 1e-4; in float64 the regularization
    of each difference against its own size (``column_scaling``): monotone couplings of the
    2-D models converge in a few tens of best responses. Measured (NumPy, 101² room): at
    congestion 4, 48 best responses with depth 5 and λ scaled by the whole history (the
    first steps' large differences drown the recent ones), 35 with the columns scaled (the
    same as λ = 1e-8 scaled by the history, which on an H100 took the 64 rooms of
    ``benchmarks/room.py`` from 38 to 34); without congestion 12 → 7. In float32 the scaled
    columns let a batch's float32 certificate pass where one best response in float64 found
    the residual 13 % above the raised tol (21² rooms): float32 keeps the history's scale."""
    return Anderson(depth=8, mixing=0.5, column_scaling=dtype == "float64")


def _placed(problems: list[Any], backend: str | Backend, device: str, dtype: object
            ) -> Backend:
    """The backend 2-D ``problems`` run on: the placement rule
    (:func:`mfgwork.placement.resolve`) for a backend's name (a :class:`Backend` says where
    already), then :func:`mfgwork.get_backend`."""
    if isinstance(backend, str):
        placed = resolve(problems, backend=backend, device=device)
        backend, device = placed.backend, placed.device
    return get_backend(backend, device, dtype)


def _checked_sizes(problems: list[Any], nx: Any, ny: Any, nt: Any, tol: Any, max_iter: Any
                   ) -> tuple[int, int, Any, float, int]:
    """The problems (each an MFGProblem2D) and the grid and stopping options checked, in this
    order: ``nx``, ``ny`` (default ``nx``), ``nt`` (unless None: the long run has no time
    steps), ``tol`` and ``max_iter``."""
    for p in problems:
        if not isinstance(p, MFGProblem2D):
            raise ParameterError(f"problem={p!r:.80} is invalid: must be an MFGProblem2D "
                                 "(mw.Room, mw.TwoBars or a user MFGProblem2D)")
    nx = check_int("nx", nx, low=3)
    ny = nx if ny is None else check_int("ny", ny, low=3)
    nt = None if nt is None else check_int("nt", nt, low=1)
    tol, max_iter = check_stopping(tol, max_iter)
    return nx, ny, nt, tol, max_iter


def _one_grid(problems: list[MFGProblem2D]) -> bool:
    """Whether ``problems`` share the extents and the horizon T that a batch's one stencil
    takes from its first grid (steps hx, hy and Δt; each keeps its own obstacles and exits)."""
    return len({(p.x_min, p.x_max, p.y_min, p.y_max, p.T) for p in problems}) == 1


class _FiniteDifferences2D(Discretization):
    """The stages :class:`FDM2D` and :class:`FDM2DBatch` share; their fields are the problem
    (the problems) and the options of :func:`mfgwork.solve_2d`."""

    nx: int
    ny: int | None
    nt: int
    backend: str | Backend
    device: str
    dtype: object
    tol: float
    max_iter: int
    solver: str | None
    iteration: str | IterationScheme | None
    progress: bool | None

    @property
    @abstractmethod
    def members(self) -> list[MFGProblem2D]:
        """The problems solved."""

    def _options_checked(self) -> Self:
        """This discretization with the options checked that need no backend."""
        nx, ny, nt, tol, max_iter = _checked_sizes(self.members, self.nx, self.ny, self.nt,
                                                   self.tol, self.max_iter)
        solver = None if self.solver is None else check_choice("solver", self.solver, SOLVERS)
        iteration = None if self.iteration is None else make_scheme(self.iteration)
        return replace(self, nx=nx, ny=ny, nt=nt, tol=tol, max_iter=max_iter, solver=solver,
                       iteration=iteration)

    def on(self, backend: Backend) -> Self:
        """This discretization with the defaults that depend on the backend filled in:
        ``solver`` ("ilu" with NumPy, "krylov" with torch) and ``iteration``
        (:func:`default_iteration` of its dtype)."""
        solver = ("ilu" if backend.name == "numpy" else "krylov") if self.solver is None \
            else self.solver
        iteration = default_iteration(backend.dtype) if self.iteration is None \
            else self.iteration
        return replace(self, solver=solver, iteration=iteration)

    def place(self) -> Where:
        be = _placed(self.members, self.backend, self.device, self.dtype)
        if self.solver in ("direct", "ilu") and be.name != "numpy":
            raise ParameterError(f"solver={self.solver!r} is invalid with backend={be.name!r}: "
                                 "it runs on NumPy (the CPU); use solver='krylov'")
        return Where(be)

    def memory(self, where: Where) -> tuple[dict[str, int], str]:
        """The grid arrays of each problem (:data:`GRID_ARRAYS`, and :data:`KEPT_ARRAYS` with
        the NumPy solvers), the coupling states of the iteration, and with "direct" the
        SuperLU factors (:data:`LU_BYTES`; the iterative solvers need a few vectors)."""
        solving, be = self.on(where.backend), where.backend
        nx, ny, nt = self.nx, self.ny, self.nt
        item = 4 if be.dtype == "float32" else 8
        depth = getattr(solving.iteration, "depth", 0)
        batch = len(self.members)
        sizes = [p.coupling_size(nx, ny, nt) for p in self.members]
        parts = {"nx, ny and nt": batch * GRID_ARRAYS * item * (nt + 1) * nx * ny,
                 "nx, ny and nt (the coupling states of the iteration)": sum(
                     memory.anderson_bytes(s, item, depth) for s in sizes)}
        if solving.solver in ("direct", "ilu"):
            parts["nx, ny and nt (the kept Newton matrices)"] = (
                batch * KEPT_ARRAYS * item * (nt + 1) * nx * ny)
        if solving.solver == "direct":
            n = nx * ny
            parts["nx and ny (the sparse factorisation)"] = int(LU_BYTES * n * math.log2(n))
        return parts, (f"a {nx} x {ny} x {nt} 2-D solve"
                       + (f" of {batch} problems" if batch > 1 else ""))

    def start(self, where: Where, started: float) -> Any:
        """The scales of every problem's grid checked (after the memory: it builds the grid)
        and the unresolved features warned of; then the set-up on the backend, or, for a
        batch with a NumPy solver or of members with different extents or horizons
        (:func:`_one_grid`), its members to solve one after the other."""
        be, solving = where.backend, self.on(where.backend)
        for p in self.members:
            p.grid(self.nx, self.ny, self.nt).check_scales(p.sigma, be.dtype)
        warn_unresolved(self.members, self.members[0].grid(self.nx, self.ny, self.nt))
        if self.batched and (solving.solver != "krylov" or not _one_grid(self.members)):
            return [FDM2D(p, nx=self.nx, ny=self.ny, nt=self.nt, backend=be, device=be.device,
                          dtype=be.dtype, tol=self.tol, max_iter=self.max_iter,
                          solver=solving.solver, iteration=solving.iteration,
                          progress=self.progress) for p in self.members]
        return solving.set_up(be, started)

    def set_up(self, backend: Backend, started: float) -> tuple[Self, eq.Setup, float]:
        """(this discretization with ``tol`` raised to what the grid resolves, the set-up of
        its scheme on ``backend``, ``started``); options as :meth:`on` fills them in."""
        setup = eq.build(self.members if self.batched else self.members[0], self.nx,
                         self.ny, self.nt, backend, self.solver)
        return replace(self, tol=_resolvable_tol(self.tol, setup)), setup, started

    def iterate(self, state: Any) -> Any:
        """The certified fixed point (:func:`mfgwork.numerics.fdm2d.equilibrium.equilibrium`)
        with a progress bar, timed; a NumPy batch's members each solved in turn, their
        :class:`Result2D` at once (one set-up held at a time)."""
        if isinstance(state, list):
            return [r for one in state
                    for r in one.results(one.iterate(one.set_up(one.backend,
                                                                time.perf_counter())))]
        solving, setup, started = state
        bar = fixed_point_bar(solving.progress, solving.max_iter, "fixed point 2-D")
        try:
            out = eq.equilibrium(setup, solving.iteration, solving.tol, solving.max_iter, bar)
        finally:
            if bar is not None:
                bar.close()
        return solving, setup, out, time.perf_counter() - started

    def results(self, outcome: Any) -> list[Result2D]:
        if isinstance(outcome, list):   # (a NumPy batch's, made by :meth:`iterate`)
            return outcome
        solving, setup, out, wall = outcome
        be, batch, sch = setup.backend, solving.batched, setup.scheme
        if setup.coupling.feeds:
            sch.density = setup.coupling.state(out.M)
        outflow = to_numpy(sch.outflow(out.U, out.M))
        vx, vy = (to_numpy(v) for v in sch.velocity(out.U))
        U, M = to_numpy(out.U), to_numpy(out.M)
        hist = out.history.as_dict()
        timings = {"total": wall, "hjb": float(sum(hist["time_hjb"])),
                   "fp": float(sum(hist["time_fp"])),
                   "coupling": float(sum(hist["time_coupling"]))}
        extra = {"solver": solving.solver, "iteration": solving.iteration.describe(),
                 "newton_iterations": sch.newton_iterations,
                 "krylov_iterations": sch.krylov_iterations,
                 "factorizations": sch.factorizations, "reevaluations": out.reevaluations,
                 "coupling_newton": setup.newton}
        results = []
        for b, (p, g) in enumerate(zip(setup.problems, setup.grids, strict=True)):
            pick = (lambda a, b=b: a[b]) if batch else (lambda a: a)
            flows = pick(outflow)[:, :len(g.exits)]  # (nt+1, the doors of this problem)
            obs = {k: to_numpy(v) for k, v in p.observables(g, pick(out.M), be).items()}
            labels, axes = _observable_axes(p, obs)
            results.append(Result2D(
                x=g.x, t=g.t, U=pick(U), M=pick(M), converged=bool(out.converged[b]),
                iterations=int(out.iterations[b]), history=hist,
                params=p.params() | {"nx": self.nx, "ny": self.ny, "nt": self.nt,
                                     "tol": solving.tol, "max_iter": self.max_iter},
                timings=timings, backend=be.name, device=be.device, dtype=be.dtype,
                observables=obs, extra=extra, residual=float(out.residual[b]),
                labels=labels | {"door": tuple(e.label for e in g.exits)}, axes=axes,
                arrays={"y": g.y, "velocity_x": pick(vx), "velocity_y": pick(vy),
                        "outflow": flows.sum(axis=-1),
                        "exit_flux": flows.sum(axis=-1) / g.dt, "door_outflow": flows,
                        "obstacle": g.obstacle, "exit": g.exit},
                problem=p))
        return results


@dataclass(frozen=True)
class FDM2D(_FiniteDifferences2D):
    """Solve ``problem`` on ``nx`` × ``ny`` nodes (walls included; ``ny`` defaults to ``nx``)
    and ``nt`` time steps, to a certified relative fixed-point residual ``tol``
    (``mw.solve`` of an :class:`~mfgwork.MFGProblem2D`; ``mw.solve_2d`` is its name).

    The system (ν = σ²/2 on Ω ⊂ ℝ², the rectangle less the obstacles; zero flux through
    walls, exits absorbing; :mod:`mfgwork.problems.two_d`):
    −∂t u − ν Δu + H(x, ∇u, m) = f(t, x, m), u(T) = g; ∂t m − ν Δm − div(m ∂pH(x, ∇u, m)) = 0,
    m(0) = m0 / ∫ m0; implicit in time, monotone upwind in space
    (:mod:`mfgwork.numerics.fdm2d`).

    ``backend``/``device``/``dtype`` as :func:`mfgwork.get_backend`; ``solver``: "ilu"
    (NumPy default), "direct" (NumPy) or "krylov" (torch default, also on NumPy);
    ``iteration``: as :func:`mfgwork.solve` (default: :func:`default_iteration`, Anderson
    depth 8, β = 0.5); where the coupling state is a path of a few scalars (the two bars'
    attendance pair) and float64, Newton–Krylov on it comes first, continued by the fixed
    point if it stalls (:func:`mfgwork.numerics.fdm2d.equilibrium.uses_newton`;
    ``extra["coupling_newton"]`` tells its steps; ``mw.Anderson(newton=False)`` iterates
    the fixed point alone). Arguments
    are checked and the memory estimated (``max_memory``) before any work. A solve that does
    not reach ``tol`` in ``max_iter`` best responses returns its best iterate with
    ``converged=False`` and a :class:`~mfgwork.ConvergenceWarning`.

    ``stationary=True``: the long run instead, the ergodic system of a domain without exits
    (:class:`Ergodic2D`; ``nt`` and T play no part, ``nt`` checked as for a finite horizon;
    ``solver`` and ``iteration`` other than None are refused), solved in float64 on the CPU
    by sparse LU and returned on ``backend``; a running cost that depends on t is
    refused.
    """

    problem: MFGProblem2D
    nx: int = 101
    ny: int | None = None
    nt: int = 100
    backend: str | Backend = "numpy"
    device: str = "cpu"
    dtype: object = None
    tol: float = 1e-6
    max_iter: int = 200
    solver: str | None = None
    iteration: str | IterationScheme | None = None
    progress: bool | None = None
    max_memory: int | str | None = None
    stationary: bool = False

    @property
    def members(self) -> list[MFGProblem2D]:
        return [self.problem]

    def checked(self) -> FDM2D | Ergodic2D:
        if check_flag("stationary", self.stationary):
            refuse_not_taken(self, ("solver", "iteration"))
            check_int("nt", self.nt, low=1)
            check_flag("progress", self.progress, optional=True)
            return Ergodic2D(self.problem, self.nx, self.ny, self.backend, self.device,
                             self.dtype, self.tol, self.max_iter, self.max_memory).checked()
        return self._options_checked()


@dataclass(frozen=True)
class FDM2DBatch(_FiniteDifferences2D):
    """Solve problems of one grid size (their own doors, obstacles, σ and coupling
    parameters; one Hamiltonian) as one batch along a leading axis with the "krylov" solver
    (every member with its own mixing and certificate) where they share the extents and T,
    else one after the other, as with "ilu" and "direct" (``mw.solve`` of a list of
    :class:`~mfgwork.MFGProblem2D`;
    ``mw.solve_2d_batch`` is its name; options as :class:`FDM2D`)."""

    batched: ClassVar[bool] = True

    problems: Sequence[MFGProblem2D]
    nx: int = 101
    ny: int | None = None
    nt: int = 100
    backend: str | Backend = "numpy"
    device: str = "cpu"
    dtype: object = None
    tol: float = 1e-6
    max_iter: int = 200
    solver: str | None = None
    iteration: str | IterationScheme | None = None
    progress: bool | None = None
    max_memory: int | str | None = None

    @property
    def members(self) -> list[MFGProblem2D]:
        return list(self.problems)

    def checked(self) -> FDM2DBatch:
        if not isinstance(self.problems, list | tuple) or not self.problems:
            raise ParameterError(f"problems={self.problems!r:.80} is invalid: must be a "
                                 "non-empty list of MFGProblem2D")
        checked = replace(self, problems=list(self.problems))._options_checked()
        kinds = {(type(p), type(p.hamiltonian), repr(p.hamiltonian)) for p in checked.members}
        if len(kinds) > 1:
            raise ParameterError("problems is invalid: a batch needs one problem type and one "
                                 "Hamiltonian (got " + ", ".join(sorted(str(k[2])
                                                                       for k in kinds)) + ")")
        return checked


@dataclass(frozen=True)
class OnTheHost(Where):
    """Where a solve runs on the CPU in NumPy float64 (``backend``) and returns its results
    on another backend (``returned_on``, where they were asked for)."""

    returned_on: Backend | None = None


@dataclass(frozen=True)
class Ergodic2D(Discretization):
    """The long run of a 2-D problem without exits (``mw.solve_2d(..., stationary=True)``,
    which :meth:`FDM2D.checked` turns into this): the ergodic system
    λ − ν Δv + H(x, ∇v, m) = f(x, m), −ν Δm − div(m ∂pH(x, ∇v, m)) = 0, ∫ m = 1, Σ V v = 0
    (:mod:`mfgwork.numerics.stationary2d`: Newton–Krylov on the coupling state, each best
    response by sparse LU), in float64 on the CPU (:class:`OnTheHost`), returned on
    ``backend``: one level (t = 0), U the ergodic value v, M the stationary density,
    ``summary["ergodic_constant"]`` λ. Refuses a dtype other than float64."""

    problem: MFGProblem2D
    nx: int = 101
    ny: int | None = None
    backend: str | Backend = "numpy"
    device: str = "cpu"
    dtype: object = None
    tol: float = 1e-6
    max_iter: int = 200
    max_memory: int | str | None = None

    def checked(self) -> Ergodic2D:
        nx, ny, _, tol, max_iter = _checked_sizes([self.problem], self.nx, self.ny, None,
                                                  self.tol, self.max_iter)
        return replace(self, nx=nx, ny=ny, tol=tol, max_iter=max_iter)

    def place(self) -> OnTheHost:
        be = _placed([self.problem], self.backend, self.device, self.dtype)
        if be.dtype != "float64":
            raise ParameterError(f"dtype={be.dtype!r} is invalid with stationary=True: the "
                                 "ergodic system is solved in float64 (on the CPU)")
        return OnTheHost(get_backend("numpy"), returned_on=be)

    def memory(self, where: Where) -> tuple[dict[str, int], str]:
        """The sparse LU factors (:data:`LU_BYTES`) on the host."""
        n = self.nx * self.ny
        return ({"nx and ny": int(LU_BYTES * n * math.log2(n))},
                f"the long run on {self.nx} x {self.ny} nodes (sparse factorisations)")

    def start(self, where: Where, started: float
              ) -> tuple[ErgodicSystem2D, Backend, float]:
        assert isinstance(where, OnTheHost) and where.returned_on is not None
        system = ErgodicSystem2D(self.problem, self.nx, self.ny)
        system.grid.check_scales(self.problem.sigma, "float64", steady=True)
        check_autonomous(self.problem, system.grid, where.backend)
        warn_unresolved([self.problem], system.grid)
        return system, where.returned_on, started

    def iterate(self, state: tuple[ErgodicSystem2D, Backend, float]) -> tuple[Any, ...]:
        system, be, started = state
        return system, be, started, solve_equilibrium(ErgodicNewtonKrylov(self.tol), system,
                                                      max_iter=self.max_iter)

    def results(self, outcome: tuple[Any, ...]) -> list[Result2D]:
        system, be, started, out = outcome
        problem, g = self.problem, system.grid
        M = out.m[None]
        obs = {k: to_numpy(v)
               for k, v in problem.observables(g, M, get_backend("numpy")).items()}
        labels, axes = _observable_axes(problem, obs)
        vx, vy = (v[None] for v in system.stencil.velocity(out.v, None))
        wall = time.perf_counter() - started
        return [Result2D(
            x=g.x, t=np.zeros(1), U=be.asarray(out.v[None]), M=be.asarray(M),
            converged=out.converged, iterations=out.iterations, history=out.history,
            params=problem.params() | {"nx": self.nx, "ny": self.ny, "tol": self.tol,
                                       "max_iter": self.max_iter, "stationary": True,
                                       "iteration": {"scheme": "newton",
                                                     "system": "sparse LU on the CPU"}},
            timings={"solve": wall, "total": wall}, backend=be.name, device=be.device,
            dtype=be.dtype, observables=obs, residual=out.residual, axes=axes,
            summary={"ergodic_constant": float(out.ergodic_constant)},
            labels=labels | {"door": ()},
            arrays={"y": g.y, "velocity_x": vx, "velocity_y": vy, "outflow": np.zeros(1),
                    "exit_flux": np.zeros(1), "door_outflow": np.zeros((1, 0)),
                    "obstacle": g.obstacle, "exit": g.exit},
            extra={"best_responses": out.iterations}, problem=problem)]


solve_2d = solver_of(FDM2D, "solve_2d")
solve_2d_batch = solver_of(FDM2DBatch, "solve_2d_batch")


def _resolvable_tol(tol: float, setup: eq.Setup) -> float:
    """``tol``, or :data:`RESOLVABLE` times the tolerance of Newton's exact test (with a
    warning) when ``tol`` is below it: an evaluation of the fixed-point map resolves changes
    of the coupling no finer than that test, and one below it can return its HJB guess
    unchanged, a residual of 0 that certifies nothing."""
    newton = setup.scheme.exact[0]
    return raised_tol(tol, RESOLVABLE * newton, f"what {setup.backend.dtype} resolves on this "
                      f"grid (Newton's test at {newton:.1e})")


def _observable_axes(problem: MFGProblem2D, observables: dict[str, Any]
                     ) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """The labels and axes of the observables (nt+1, k) beyond time: named by the problem's
    ``observable_axes`` (the two bars' attendance: ("t", "bar"), labels "1", "2"), else
    ``<name>_index`` with labels "0".."k-1"."""
    named = getattr(problem, "observable_axes", {})
    labels, axes = {}, {}
    for name, path in observables.items():
        if np.ndim(path) == 2:
            dim, values = named.get(name, (f"{name}_index", range(np.shape(path)[1])))
            labels[dim], axes[name] = tuple(str(v) for v in values), ("t", dim)
    return labels, axes


FRONT_DOOR[MFGProblem2D] = solve_2d
BATCH_SOLVERS[MFGProblem2D] = solve_2d_batch
