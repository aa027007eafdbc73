"""The 1-D finite-difference and particle kinds of the pipeline (:mod:`mfgwork.pipeline`):
:class:`FDM1D` (one problem; ``mw.solve_continuous``), :class:`FDM1DBatch` (a list;
``mw.solve_batch``) and its coarse stage :class:`CoarseBatch`, with the pieces they share: the
iteration each solve runs (Newton's method on the coupling state, or a fixed-point scheme with
its fallback), the coarse start, the tolerances a dtype resolves and the Results."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar

import numpy as np

from .best_response import solvers
from .core import memory
from .core.backend import Backend, get_backend, to_numpy
from .core.compile_clock import compile_clock, seconds_since
from .core.compiling import check_compile_steps
from .core.errors import ConvergenceWarning, ParameterError, check_choice, check_flag, warn
from .core.frozen import FrozenDict, complete, freeze
from .core.progress import delayed_bar
from .float64_floor import measure_at_end, name_floors
from .long_run import PLATEAU_STEPS, PLATEAU_T, Ergodic1D, check_long_run, over_horizon
from .numerics.batch_newton import (
    BatchNewton,
    MemberPotentials,
    dense_on,
    device_bytes,
    first_triggers,
    member_potentials,
    newton_refusal,
    newton_tangent,
)
from .numerics.equilibrium import System
from .numerics.equilibrium import solve as solve_equilibrium
from .numerics.fdm.sweeps import FiniteDifferences
from .numerics.fdm.warmup import compile_kernels, compile_tangent
from .numerics.frozen_density import FrozenDensityNewton
from .numerics.iteration import (
    FixedPoint,
    FixedPointResult,
    HJBSolver,
    IterationScheme,
    check_stopping,
    make_scheme,
)
from .numerics.particles import check_particle_args
from .numerics.particles.memory import particle_parts
from .numerics.particles.solver import default_copies
from .numerics.potential import PotentialNewton
from .pipeline import Discretization, Where, run, solver_of
from .placement import place_solve
from .precision import certify_in_float64, finish_in_float64, has_float64
from .problems.base import (
    MFGProblem,
    batch_coupling,
    member_arrays,
    member_summaries,
    warn_unresolved,
)
from .results import Result, derive_status, updated
from .warm_start import Start, densities_on, initial_state, per_problem
from .welfare import Objective

METHODS = ("fdm", "particles")


@dataclass(frozen=True, eq=False)
class FDM1D(Discretization):
    """Solve the MFG system of the continuous ``problem`` on an ``nx`` × ``nt`` grid (what
    :func:`solve` runs for an :class:`~mfgwork.MFGProblem`; ``mw.solve_continuous`` is its
    name).

    ``nx`` counts grid points including both walls; ``nt`` time steps give ``nt + 1`` levels.
    ``method="fdm"``: implicit upwind finite differences for HJB and FP (Achdou's adjoint
    scheme). ``backend``/``device``/``dtype`` choose where it runs (see
    :func:`mfgwork.get_backend`); ``device="auto"`` runs where :func:`mfgwork.placement`
    says from the measured crossover table (a single FDM solve: the CPU), and records its
    choice and reason in ``res.params["placement"]``. The Picard iteration (``iteration``:
    "anderson" (default), "relaxation", "fictitious_play", "picard" or an
    :class:`~mfgwork.numerics.iteration.IterationScheme`) stops when the returned solution
    is a fixed point to
    ``tol``: one best response to its coupling state (for Santa Fe the attendance path A)
    reproduces it to a relative residual ``res.residual`` ≤ ``tol`` (``res.check()``
    recomputes it). Otherwise, after ``max_iter`` iterations, it returns the best iterate
    found with ``converged=False`` and a :class:`~mfgwork.ConvergenceWarning` giving its
    residual; ``res.status`` says how it ended ("converged", "max_iter", "stalled" when the
    iteration gave up before ``max_iter``, "failed" when a float32 certificate did not hold
    in float64). In float32 (finite differences, where float64 exists: the CPU and CUDA) a
    solve that claims convergence is re-certified by one best response in NumPy float64 on
    the host: ``res.residual`` is then that float64 residual
    (``res.extra["certificate"]``), and a float32 certificate that does not hold in float64
    gives ``converged=False``, ``res.extra["certificate"]["message"]`` and a
    ConvergenceWarning. On MPS (and its emulation), which has no float64, the float32
    certificate stands.
    With the default iteration (``iteration=None``), finite differences for a problem that
    declares a potential (Santa Fe) run Newton's method on the coupling state from the first
    iterate (:mod:`mfgwork.numerics.batch_newton`: the exact tangent Jacobian of the scheme,
    an SPD solve, a line search; on the CPU matrix-free by conjugate gradients, in float64
    also for float32 solves); each iteration is one best response. ``iteration="anderson"``
    (or ``mw.Anderson()``, the same solve): Anderson mixing, continued by Newton's method
    when it stalls (float64, grids up to about 400 × 400; ``mw.Anderson(newton=False)``
    mixes alone). A scheme object holds no state between solves. ``coarse`` (True or
    False): on grids at least twice as fine as 51 × 51 in x and t, Newton's method starts
    from a 51 × 51 solve (``res.extra["coarse_iterations"]``).
    ``progress``: a tqdm bar (None: shown only when the solve lasts over a second).
    ``method="particles"``: HJB by finite differences, FP by ``n_particles`` particles
    (default 100 000; see :class:`mfgwork.ParticleFP`) drawn from ``seed`` (None: a
    fresh seed, recorded in ``params``); every FP solve restarts from that seed (common random
    numbers), so the Picard map is deterministic; ``tol`` below the Monte Carlo noise floor
    1/√n_particles is raised to it with a warning. With particles on an accelerator, HJB is
    solved on the host (compiled NumPy float64 sweep) and U moved to the device once per
    iterate.
    ``initial``: a result (e.g. at nearby parameters) to start the iteration from, instead of
    agents who do not move; it saves iterations when the parameters moved little. It must be
    a result of a 1-D solve on the problem's domain [x_min, x_max] (a 2-D, finite-state,
    several populations' or long-run result is refused). On the same grid its U and M are
    the first iterate; for problems whose coupling state is one path (Santa Fe: the
    attendance path), a result on another grid, or the path itself (levels 1..nt, or 0..nt
    as ``res.attendance``), is interpolated in time.
    ``compile_steps``: ``torch.compile`` the per-time-step kernels of the generic torch path
    on devices (the Newton step of HJB, the FP step), fusing their many small operations.
    "auto" (default): on CUDA and MPS where the installed torch can compile for them; True
    or a ``torch.compile`` mode name: wherever it can (also the CPU and MPS emulation);
    False: never. The first compiled call is checked against the eager one, and a failure
    falls back to eager with a warning; ``res.extra["compiled_steps"]`` says what ran.
    ``res.timings``: seconds of ``compile`` (compiling or loading the NumPy backend's
    kernels and Newton's compiled step and tangent sweeps, done on a tiny grid by the first
    solve of a process; on a device, Triton's builds of kernels its cache did not hold,
    taken out of the phases they happened in; 0 afterwards), ``setup``, ``coarse`` (the
    51 × 51 start, 0 without one), the phases ``hjb``, ``fp`` and ``coupling`` summed over
    the iterations, ``other`` (what none of them holds, e.g. starting a progress display)
    and ``total``, their sum.
    ``max_memory``: refuse solves whose estimated memory exceeds this (bytes or text such as
    ``"4 GiB"``; default: ``$MFGWORK_MAX_MEMORY``, else the free memory of the device). The
    estimate, the diffusion number ν Δt / h² and the ranges of h, Δt and ν are checked
    before any work.
    ``objective``: "social" solves the planner's problem of a Santa Fe bar (mean field
    control: the welfare's optimum) and its equilibrium with the same options, and returns
    the planner's result with both welfares, their difference and ratio in its summary
    (:mod:`mfgwork.welfare`); "equilibrium" the equilibrium; None (default) the problem as
    it is.
    ``stationary=True``: the long run instead, the ergodic system solved directly
    (:mod:`mfgwork.long_run`: a result of one level with ``summary["ergodic_constant"]``; on
    ``nx`` nodes, in float64 with NumPy or torch on the CPU or CUDA, to ``tol`` within
    ``max_iter`` Newton steps; ``nt`` and T play no part).
    """

    problem: MFGProblem
    nx: int = 201
    nt: int = 201
    method: str = "fdm"
    backend: str | Backend = "numpy"
    device: str = "cpu"
    dtype: object = None
    tol: float = 1e-8
    max_iter: int = 200
    iteration: str | IterationScheme | None = None
    progress: bool | None = None
    n_particles: int | None = None
    seed: int | None = None
    compile_steps: bool | str = "auto"
    initial: Result | Any = None
    max_memory: int | str | None = None
    coarse: bool = True
    objective: str | None = None
    stationary: bool = False

    def checked(self) -> Discretization:
        if self.objective is not None:   # the options as given, twice (welfare.Objective)
            return Objective(replace(self, objective=None), self.objective).checked()
        if not isinstance(self.problem, MFGProblem):
            raise ParameterError(f"problem={self.problem!r} is invalid: must be an "
                                 "mfgwork.MFGProblem (e.g. mw.SantaFeBar() or "
                                 "mw.MFGProblem(...))")
        if check_flag("stationary", self.stationary):
            check_long_run(self)   # (the options it does not take, its memory)
            return Ergodic1D(self.problem, self.nx, self.tol, self.max_iter, self.method,
                             self.backend, self.device, self.dtype,
                             plateau=partial(_plateau, nx=self.nx, tol=self.tol,
                                             backend=self.backend, device=self.device,
                                             dtype=self.dtype),
                             max_memory=self.max_memory).checked()
        grid = self.problem.grid(self.nx, self.nt)
        check_choice("method", self.method, METHODS)
        n_particles, seed = self.n_particles, self.seed
        if self.method == "particles":
            n_particles, seed = check_particle_args(n_particles, seed)
        elif n_particles is not None or seed is not None:
            raise ParameterError(f"n_particles={n_particles!r}, seed={seed!r} are invalid with "
                                 f"method={self.method!r}: they apply only to "
                                 "method='particles'")
        tol, max_iter = check_stopping(self.tol, self.max_iter)
        make_scheme(self.iteration)
        check_compile_steps(self.compile_steps)
        check_flag("progress", self.progress, optional=True)
        per_problem(self.initial, [self.problem], grid, batched=False)
        return replace(self, tol=tol, max_iter=max_iter, n_particles=n_particles, seed=seed,
                       coarse=_check_coarse(self.coarse))

    def place(self) -> Where:
        backend, device, placed = place_solve(self.problem, self.method, self.n_particles,
                                              self.nx, self.nt, self.backend, self.device)
        return Where(get_backend(backend, device, self.dtype), placed)

    def memory(self, where: Where) -> tuple[dict[str, int], str]:
        """The finite-difference parts; with particles, the particles' added (their FP
        solver, :class:`~mfgwork.ParticleFP`, checks them again alone)."""
        be, grid = where.backend, self.problem.grid(self.nx, self.nt)
        if self.method == "fdm":
            return fdm_memory([self.problem], grid, be, make_scheme(self.iteration),
                              per_problem=_newton_bytes([self.problem], self.iteration, grid,
                                                        be))
        parts, _ = fdm_memory([self.problem], grid, be, make_scheme(self.iteration))
        particles, what = particle_parts(self.n_particles, grid.nx, grid.nt, be, default_copies(
            be.name == "torch" and be.kind == "cuda", grid.nx, grid.nt))
        return {k: parts.get(k, 0) + particles.get(k, 0) for k in parts | particles}, what

    def start(self, where: Where, started: float) -> Picard:
        built = compile_clock()
        problem, be, grid = self.problem, where.backend, self.problem.grid(self.nx, self.nt)
        check_scales([problem], grid, be)
        tol = reachable_tol(self.tol, be)
        if self.method == "particles":
            tol = _above_noise_floor(tol, self.n_particles)
        warm = initial_state(self.initial, [problem], grid, be, batched=False)
        m0 = problem.initial_density(grid, be)
        U_T = problem.terminal_cost(grid, be)
        coupling = problem.coupling(grid, be)
        fd, hjb, fp, fp_params = solvers(problem, grid, be, self.method, self.n_particles,
                                         self.seed, self.compile_steps, self.max_memory)
        setup = seconds_since(started, built)
        compiled: dict[str, float] = {}
        newton = (_batch_newton([coupling], self.iteration, grid, [problem], be, tol)
                  or _frozen_density_newton([coupling], self.iteration, grid, [problem], be,
                                            tol, self.coarse and not warm, self.max_iter,
                                            self.max_memory, batched=False)
                  if self.method == "fdm" else None)
        scheme = make_scheme(self.iteration)
        if newton is not None:   # its sweeps bypass ``hjb``: compile (or load) the model's now
            compiled["seconds"] = compile_kernels(be, problem.hamiltonian) + compile_tangent(
                be, problem.hamiltonian)
            compiled["apart"] = 1.0
        else:
            hjb = _compile_first(hjb, be, compiled, problem.hamiltonian)
        fallback = None if newton is not None else _newton_fallback(
            coupling, scheme, self.method, grid, problem, be, tol)
        return Picard(where, grid, [problem], scheme, tol, newton, coupling, fd, hjb, fp, m0,
                      U_T, warm, started, built, setup, fallback=fallback, fp_params=fp_params,
                      compiled=compiled, couplings=[coupling])

    def iterate(self, state: Picard) -> Picard:
        s = state
        out, coarse_iterations, coarse_seconds = _equilibrium(
            s.newton, s.problems, s.coupling, s.hjb, s.fp, s.m0, s.U_T, s.grid, s.backend,
            s.scheme, s.tol, self.max_iter, self.progress, batched=False,
            coarse=self.coarse and not isinstance(s.newton, FrozenDensityNewton),
            max_memory=self.max_memory, warm=s.warm, fallback=s.fallback)
        s.fd.check_newton()
        compiling = s.compiled.get("seconds", 0.0)
        if "apart" not in s.compiled:
            out.history.time_hjb[0] -= compiling   # the first HJB phase, without compiling
        timings = {"compile": compiling + compile_clock() - s.built, "setup": s.setup,
                   "coarse": coarse_seconds, **_phase_totals(out.history)}
        total = time.perf_counter() - s.started
        timings |= {"other": max(0.0, total - sum(timings.values())), "total": total}
        return replace(s, out=out, coarse_iterations=coarse_iterations, timings=timings)

    def results(self, outcome: Picard) -> list[Result]:
        s = outcome
        settings = {"method": self.method, "tol": s.tol, "max_iter": self.max_iter,
                    "iteration": _describe(s.scheme, s.newton)} | s.fp_params | s.where.record
        return _results(s.problems, s.grid, s.backend, s.out, False, settings, s.timings,
                        [{"newton_iterations": s.fd.newton_iterations,
                          **_newton_extra(s.newton, s.coarse_iterations, 0),
                          **_model_extra(s.couplings, s.problems, self.iteration, s.newton),
                          "fdm_kernels": s.fd.kernels.name,
                          "compiled_steps": s.fd.compiled_steps}])

    def certify(self, outcome: Picard, results: list[Result]) -> list[Result]:
        return certify_in_float64(results, outcome.problems, outcome.backend, outcome.tol,
                                  outcome.timings)


@dataclass(eq=False)
class Picard:
    """The state of a 1-D finite-difference solve between the pipeline's stages: where it
    runs, its grid, problems, iteration (``newton``: Newton's method on the coupling state
    where it runs, else ``scheme`` with ``fallback``), the best responses' solvers, the first
    iterate, the seconds of its set-up and, after the iteration, its output ``out`` and
    timings."""

    where: Where
    grid: Any
    problems: list[MFGProblem]
    scheme: IterationScheme
    tol: float
    newton: Any
    coupling: Any
    fd: FiniteDifferences
    hjb: Any
    fp: Any
    m0: Any
    U_T: Any
    warm: dict[str, Any]
    started: float
    built: float
    setup: float
    fallback: PotentialNewton | None = None
    fp_params: dict[str, Any] = field(default_factory=dict)
    compiled: dict[str, float] = field(default_factory=dict)
    couplings: list[Any] = field(default_factory=list)
    out: FixedPointResult | None = None
    coarse_iterations: list[int] | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def backend(self) -> Backend:
        return self.where.backend


#: Line-search refusals after which a float32 batch member is left to the float64 finish
FINISHED_AFTER_HALVINGS = 4


@dataclass(frozen=True, eq=False)
class FDM1DBatch(Discretization):
    """Solve several problems on one grid as one batched computation (finite differences;
    what :func:`solve` runs for a list of :class:`~mfgwork.MFGProblem`, ``mw.solve_batch``
    its name).

    The problems share the domain and T; they may differ in σ and in their couplings (e.g.
    Santa Fe thresholds and payoffs over a parameter grid). On torch every array carries a
    leading batch axis, so each kernel launch serves the whole batch: this is what makes an
    accelerator pay off for finite differences. Each problem has its own iteration (Newton's
    method for problems with a potential at the default ``iteration=None``, per problem: its
    own steps and line search; the dense tangent Jacobians of all members as one wide batch
    and a batched Cholesky solve on devices; otherwise Anderson mixing), stopping test and
    result (``converged``, ``residual``, ``iterations``); the iteration runs until every
    problem has stopped or ``max_iter`` is reached. ``initial``: a Result for all, one per
    problem (e.g. a previous batch), or paths (B, nt) / (B, nt+1) (see :func:`solve`);
    ``coarse``: as for :func:`solve`. float32 batches (except on MPS, where the float32
    certificate stands): every member is certified again by one batched best response in
    float64 on its device (``res.timings["certify"]``), and the members that Newton's
    method in float32 did not bring in are solved again in float64 there from their
    iterates, returned as float32 arrays certified in float64 (``res.extra["finished"]``,
    ``res.timings["finish"]``; :mod:`mfgwork.precision`). Newton's coupling states are
    float64 around the float32 sweeps (:class:`~mfgwork.numerics.batch_newton.
    Float64State`).
    ``device="auto"``: an accelerator from B* problems on (:func:`mfgwork.placement`),
    otherwise the CPU's compiled NumPy loops, one problem after the other (also with
    ``backend="torch"``: a torch batch on the CPU is many times slower), recorded in each
    result's ``params["placement"]``. On NumPy the problems are solved one
    after the other by :func:`solve`. Returns one :class:`Result` per problem (sharing the
    batch's history and timings). ``max_memory``: as for :func:`solve`, for the whole
    batch. Problems whose couplings differ in kind (e.g. Santa Fe, which iterates on the
    attendance path, and a generic problem, which iterates on the density) cannot share
    one batched iteration: on torch they are solved as one batch per kind, one batch after
    the other, each with its own history and timings; results keep the order of
    ``problems``. ``objective``: as for :func:`solve` (a batch of planners, then one of
    equilibria).
    """

    batched: ClassVar[bool] = True

    problem: Sequence[MFGProblem]
    nx: int = 201
    nt: int = 201
    backend: str | Backend = "numpy"
    device: str = "cpu"
    dtype: object = None
    tol: float = 1e-8
    max_iter: int = 200
    iteration: str | IterationScheme | None = None
    progress: bool | None = None
    compile_steps: bool | str = "auto"
    max_memory: int | str | None = None
    initial: Sequence[Result] | Result | Any = None
    coarse: bool = True
    objective: str | None = None

    def checked(self) -> Discretization:
        if self.objective is not None:   # the options as given, twice (welfare.Objective)
            return Objective(replace(self, objective=None), self.objective).checked()
        problems = _check_batch(self.problem)
        grid = problems[0].grid(self.nx, self.nt)
        tol, max_iter = check_stopping(self.tol, self.max_iter)
        make_scheme(self.iteration)
        check_compile_steps(self.compile_steps)
        check_flag("progress", self.progress, optional=True)
        per_problem(self.initial, problems, grid, batched=True)
        return replace(self, problem=problems, tol=tol, max_iter=max_iter,
                       coarse=_check_coarse(self.coarse))

    def place(self) -> Where:
        backend, device, placed = place_solve(self.problem, "fdm", None, self.nx, self.nt,
                                              self.backend, self.device, numpy_on_cpu=True)
        return Where(get_backend(backend, device, self.dtype), placed)

    def memory(self, where: Where) -> tuple[dict[str, int], str]:
        be, grid, problems = where.backend, self.problem[0].grid(self.nx, self.nt), self.problem
        if be.name == "numpy":   # one problem after the other
            return fdm_memory(problems, grid, be, make_scheme(self.iteration), batch=1)
        return fdm_memory(problems, grid, be, make_scheme(self.iteration), batch=len(problems),
                          per_problem=_newton_bytes(problems, self.iteration, grid, be))

    def start(self, where: Where, started: float) -> Picard | Members:
        built = compile_clock()
        problems, be = list(self.problem), where.backend
        grid = problems[0].grid(self.nx, self.nt)
        check_scales(problems, grid, be)
        if be.name == "numpy":   # one problem after the other, each through the pipeline
            tol = reachable_tol(self.tol, be)
            starts = per_problem(self.initial, problems, grid, batched=True)
            return Members([([b], FDM1D(p, nx=self.nx, nt=self.nt, backend=be, tol=tol,
                                        max_iter=self.max_iter, iteration=self.iteration,
                                        progress=self.progress, max_memory=self.max_memory,
                                        initial=start, coarse=self.coarse))
                            for b, (p, start) in enumerate(zip(problems, starts, strict=True))],
                           len(problems), where.record)
        groups, couplings = _coupling_groups(problems, grid, be)
        if len(groups) > 1:   # one batch per kind of coupling, one after the other
            starts = per_problem(self.initial, problems, grid, batched=True)
            return Members([(group, replace(
                self, problem=[problems[i] for i in group], backend=be, tol=self.tol,
                initial=None if self.initial is None else [starts[i] for i in group]))
                for group in groups], len(problems), where.record)
        tol = reachable_tol(self.tol, be)
        warm = initial_state(self.initial, problems, grid, be, batched=True)
        m0 = member_arrays(problems, "initial_density", grid, be)
        U_T = member_arrays(problems, "terminal_cost", grid, be)
        fd = FiniteDifferences(grid, np.array([[p.nu] for p in problems]), be,
                               hamiltonian=problems[0].hamiltonian,
                               compile_steps=self.compile_steps)
        setup = seconds_since(started, built)
        newton = (_batch_newton(couplings, self.iteration, grid, problems, be, tol)
                  or _frozen_density_newton(couplings, self.iteration, grid, problems, be, tol,
                                            self.coarse and not warm, self.max_iter,
                                            self.max_memory, batched=True))
        compiled = {} if newton is None else {
            "seconds": compile_tangent(be, problems[0].hamiltonian, len(problems))}
        if self.finishing(be, newton):
            # a float32 line search refused this often is at float32's noise: the member
            # stops there and is finished in float64 below (12 refusals cost 13 more
            # iterations of the whole batch for nothing; measured on the hard scan: 47 -> 28
            # iterations at most)
            newton.max_halvings = FINISHED_AFTER_HALVINGS
        if isinstance(newton, BatchNewton):
            # a coarse stage's tol is a start's, not the user's: no float64 floor is
            # computed for its stuck members (30 tangent products each)
            newton.floors = self.final
        return Picard(where, grid, problems, make_scheme(self.iteration), tol, newton,
                      batch_coupling(couplings, be), fd, fd.solve_hjb, fd.solve_fp, m0, U_T,
                      warm, started, built, setup, compiled=compiled, couplings=couplings)

    #: Whether the Results are final (False: a coarse stage, its members' Starts)
    final: ClassVar[bool] = True

    def finishing(self, be: Backend, newton: Any) -> bool:
        """Whether members left open by float32 Newton are finished in float64."""
        return self.final and has_float64(be) and newton is not None

    def iterate(self, state: Picard | Members) -> Picard | list[Result]:
        if isinstance(state, Members):
            return state.solved()
        s = state
        with warnings.catch_warnings():
            if self.finishing(s.backend, s.newton):   # members left open are finished in
                warnings.simplefilter("ignore", ConvergenceWarning)   # float64, which warns
            out, coarse_iterations, coarse_seconds = _equilibrium(
                s.newton, s.problems, s.coupling, s.hjb, s.fp, s.m0, s.U_T, s.grid,
                s.backend, s.scheme, s.tol, self.max_iter, self.progress, batched=True,
                coarse=self.coarse and not isinstance(s.newton, FrozenDensityNewton),
                max_memory=self.max_memory, warm=s.warm)
        s.fd.check_newton()
        timings = {"compile": s.compiled.get("seconds", 0.0) + compile_clock() - s.built,
                   "setup": s.setup, "coarse": coarse_seconds, **_phase_totals(out.history),
                   "total": time.perf_counter() - s.started}
        return replace(s, out=out, coarse_iterations=coarse_iterations, timings=timings)

    def results(self, outcome: Picard | list[Result]) -> list[Result]:
        if not isinstance(outcome, Picard):
            return outcome
        s = outcome
        settings = {"method": "fdm", "tol": s.tol, "max_iter": self.max_iter,
                    "iteration": _describe(s.scheme, s.newton),
                    "batch_size": len(s.problems)} | s.where.record
        extra = freeze({"newton_iterations": s.fd.newton_iterations,
                        "batch_size": len(s.problems),
                        **_model_extra(s.couplings, s.problems, self.iteration, s.newton),
                        "fdm_kernels": s.fd.kernels.name,
                        "compiled_steps": s.fd.compiled_steps})
        building, timings = time.perf_counter(), freeze(s.timings)   # (the members share it)
        results = _results(s.problems, s.grid, s.backend, s.out, True, settings, timings,
                           [extra | _newton_extra(s.newton, s.coarse_iterations, b)
                            for b in range(len(s.problems))])
        s.timings["results"] = time.perf_counter() - building
        s.timings["total"] += s.timings["results"]
        complete(timings, s.timings)   # (no one else holds it yet)
        return results

    def certify(self, outcome: Picard | list[Result], results: list[Result]) -> list[Result]:
        if not isinstance(outcome, Picard):   # each certified by its own solve
            return results
        s = outcome
        finishing = self.finishing(s.backend, s.newton)
        with warnings.catch_warnings():
            if finishing:
                warnings.simplefilter("ignore", ConvergenceWarning)
            results = certify_in_float64(results, s.problems, s.backend, s.tol, s.timings,
                                         stacked=(s.out.M, s.out.U))
        if not finishing:
            return results

        def solve_again(members: list[MFGProblem], initial: list[Result] | None,
                        float64: Backend) -> list[Result]:
            # a tenth of tol: the float32 cast of the result must still pass it
            return run(FDM1DBatch(members, nx=self.nx, nt=self.nt, backend=float64,
                                  tol=0.1 * s.tol, max_iter=self.max_iter, progress=False,
                                  compile_steps=self.compile_steps,
                                  max_memory=self.max_memory, initial=initial,
                                  coarse=initial is None))

        return finish_in_float64(results, s.problems, s.backend, s.tol, s.timings,
                                 solve_again)


class _CoarseStage:
    """The first stage of a coarse-to-fine solve (mixed into its discretization): each
    problem's :class:`~mfgwork.warm_start.Start` (its arrays, iterations and, where float64
    Newton measured it at its end, L: :func:`~mfgwork.float64_floor.measure_at_end`), no
    Result, and no float64 certificate of a float32 stage."""

    batched: ClassVar[bool]

    def start(self, where: Where, started: float) -> Any:
        state = super().start(where, started)   # type: ignore[misc]
        if isinstance(state, Picard):
            measure_at_end(state.newton, where.backend)
        return state

    def results(self, outcome: Any) -> list[Any]:
        if not isinstance(outcome, Picard):   # (a batch solved member by member)
            return outcome
        out = outcome.out
        n = len(outcome.problems)
        iterations = np.asarray(to_numpy(out.iterations)).reshape(-1)
        L, amplification = ([None] * n if v is None else [float(x) for x in v]
                            for v in (out.lipschitz, out.amplification))
        if not self.batched:
            return [Start(out.M, out.U, int(iterations[0]), L[0], amplification[0])]
        return [Start(out.M[b], out.U[b], int(iterations[b]), L[b], amplification[b])
                for b in range(n)]

    def certify(self, outcome: Any, results: list[Any]) -> list[Any]:
        return results


@dataclass(frozen=True, eq=False)
class CoarseBatch(_CoarseStage, FDM1DBatch):
    """The first stage of a coarse-to-fine batch (:class:`_CoarseStage`; float32 members
    neither certified nor finished in float64)."""

    final: ClassVar[bool] = False


@dataclass(frozen=True, eq=False)
class CoarseSingle(_CoarseStage, FDM1D):
    """The first stage of a coarse-to-fine solve of one problem (:class:`_CoarseStage`)."""


@dataclass(eq=False)
class Members:
    """A batch solved as other discretizations, each through the pipeline: ``runs`` of
    (the positions of its problems in the batch, the discretization solving them), the
    batch's size ``n`` and its placement's ``record``, added to each result's params."""

    runs: list[tuple[list[int], Discretization]]
    n: int
    record: Mapping[str, Any]

    def solved(self) -> list[Any]:
        """The results of the runs, in the batch's order."""
        out: list[Any] = [None] * self.n
        for positions, discretization in self.runs:
            for b, res in zip(positions, run(discretization), strict=True):
                out[b] = res if isinstance(res, Start) else replace(
                    res, params=res.params | self.record)
        return out


def _compile_first(hjb: HJBSolver, be: Backend, compiled: dict[str, float],
                   hamiltonian: Any) -> HJBSolver:
    """``hjb`` whose first call starts by compiling the NumPy kernels of ``hamiltonian``'s
    model on a tiny grid
    (:func:`~mfgwork.numerics.fdm.warmup.compile_kernels`), timed into
    ``compiled["seconds"]``: after the running cost of the first iterate, so bad input
    (e.g. a non-finite ``f``) is still refused before that work."""
    def first(U_T: Any, F: Any, guess: Any | None, *density: Any) -> Any:
        if "seconds" not in compiled:
            compiled["seconds"] = compile_kernels(be, hamiltonian)
        return hjb(U_T, F, guess, *density)
    return first


def _plateau(problem: Any, T: float = PLATEAU_T, **options: Any) -> Result:
    """A finite horizon ``T`` (default :data:`~mfgwork.long_run.PLATEAU_T`) of ``problem``
    (a planner's bar: the same bar over that T), whose middle level starts its long run."""
    longer = over_horizon(problem, T)
    return run(FDM1D(longer, nt=int(PLATEAU_STEPS * T), progress=False, **options))[0]


def _newton_fallback(coupling: Any, scheme: IterationScheme, method: str, grid: Any,
                     problem: MFGProblem, be: Backend, tol: float) -> PotentialNewton | None:
    """Newton's method on the potential when the problem declares one and its Hamiltonian
    allows it (:func:`newton_refusal`), for schemes that ask for it
    (``scheme.newton_continuation``: Anderson, by name or instance) with finite differences in
    float64 (its exact Jacobian is that of the scheme) and grids whose tangent sweeps fit in
    :data:`~mfgwork.core.memory.NEWTON_MEMORY` bytes ((nt+1)·nx·nt floats)."""
    potential = coupling.potential()
    if (potential is None or not scheme.newton_continuation or method != "fdm"
            or be.eps > 1e-10
            or memory.dense_tangent_bytes(grid.nx, grid.nt) > memory.NEWTON_MEMORY
            or newton_refusal(problem.hamiltonian) is not None):
        return None
    return PotentialNewton(potential, grid=grid, nu=problem.nu, backend=be, tol=tol,
                           hamiltonian=problem.hamiltonian)


def _batch_newton(couplings: list[Any], iteration: Any, grid: Any,
                  problems: Sequence[MFGProblem], be: Backend, tol: float) -> BatchNewton | None:
    """Newton's method on the coupling state for a batch (or a single problem) whose problems
    all declare a potential, with the default iteration (on the CPU it is matrix-free; devices
    compute the tangent Jacobians in chunks that fit their memory)."""
    potentials = _newton_potentials(couplings, iteration, problems)
    if potentials is None:
        return None
    return BatchNewton(potentials, grid=grid, nu=np.array([p.nu for p in problems]),
                       backend=be, tol=tol, hamiltonian=problems[0].hamiltonian)


def _newton_potentials(couplings: list[Any], iteration: Any, problems: Sequence[MFGProblem]
                       ) -> MemberPotentials | None:
    """The potentials :func:`_batch_newton` runs on, or None where it does not run."""
    potentials = member_potentials([c.potential() for c in couplings])
    if (potentials is None or iteration is not None
            or newton_refusal(problems[0].hamiltonian) is not None):
        return None
    return potentials


def _newton_bytes(problems: Sequence[MFGProblem], iteration: Any, grid: Any, be: Backend
                  ) -> int:
    """The bytes per problem that the batched Newton declares where it solves ``problems``
    from dense tangent Jacobians (on a device: :func:`~mfgwork.numerics.batch_newton.
    device_bytes`), else 0. Its question, whether the problems declare potentials, is put to
    the couplings of one problem of each class on the host (nothing is allocated on the
    device before the memory check, and a batch of 10⁴ bars builds one coupling, not 10⁴:
    the members of a class declare potentials alike)."""
    if not dense_on(be) or iteration is not None:
        return 0
    host = get_backend("numpy")
    kinds = list({type(p): p for p in problems}.values())
    if _newton_potentials([p.coupling(grid, host) for p in kinds], iteration, kinds) is None:
        return 0
    return device_bytes(grid.nx, grid.nt, 4 if be.dtype == "float32" else 8)


def _frozen_density_newton(couplings: list[Any], iteration: Any, grid: Any,
                           problems: Sequence[MFGProblem], be: Backend, tol: float,
                           coarse: bool, max_iter: int, max_memory: object, batched: bool
                           ) -> FrozenDensityNewton | None:
    """For problems (a single one unless ``batched``) with the default iteration whose H
    depends on m and whose running costs pass through couplings with a potential
    (``coupling.observed``): the outer iteration on the frozen densities with Newton's method
    on those couplings inside, started from the COARSE × COARSE equilibria's densities where
    ``coarse`` and the grid refines it."""
    observed = [getattr(c, "observed", None) for c in couplings]
    potentials = (None if any(o is None for o in observed)
                  else member_potentials([o.potential() for o in observed]))
    if potentials is None or iteration is not None:
        return None
    inner = BatchNewton(potentials, grid=grid, nu=np.array([p.nu for p in problems]),
                        backend=be, tol=tol, hamiltonian=problems[0].hamiltonian)
    if be.eps > 1e-10:   # float32: a line search refused this often is at float32's noise
        inner.max_halvings = FINISHED_AFTER_HALVINGS

    def start() -> tuple[Any, list[int]]:
        if not batched:
            first = _coarse_solve(problems, be, tol, max_iter, max_memory, batched=False)[0]
            return densities_on([first], problems, grid, be)[0], [first.iterations]
        firsts = _coarse_solve(problems, be, tol, max_iter, max_memory, batched=True)
        return densities_on(firsts, problems, grid, be), [r.iterations for r in firsts]

    return FrozenDensityNewton(batch_coupling(observed, be) if batched else observed[0], inner,
                               tol=tol, start=start if coarse and starts_coarse(grid) else None)


def _model_extra(couplings: list[Any], problems: Sequence[MFGProblem], iteration: Any,
                 newton: Any = None) -> dict[str, Any]:
    """The Hamiltonian of the solve and, where a potential game's Newton's method on the
    coupling state cannot serve it (:func:`newton_refusal`), why, or where its tangent is
    approximate (:func:`newton_tangent`), how."""
    H = problems[0].hamiltonian
    if isinstance(newton, FrozenDensityNewton):
        return {"hamiltonian": H.params(), "newton_on_coupling": newton.description,
                "outer_iterations": newton.outer_iterations}
    refusal = newton_refusal(H) or newton_tangent(H)
    potential = all(c.potential() is not None for c in couplings)
    return {"hamiltonian": H.params()} | (
        {"newton_on_coupling": refusal}
        if refusal and iteration in (None, "anderson") and (potential or H.depends_on_m)
        else {})


COARSE = 51   # the grid of the first stage of coarse-to-fine solves (nx = nt)
COARSE_TOL = 1e-5


def starts_coarse(grid: Any) -> bool:
    """Whether a solve on ``grid`` starts from a solve on the COARSE × COARSE grid: when it is
    at least twice as fine in x and in t."""
    return min(grid.nx, grid.nt) >= 2 * COARSE


def _coarse_solve(problems: Sequence[MFGProblem], be: Backend, tol: float, max_iter: int,
                  max_memory: object, batched: bool) -> list[Any]:
    """The first stage of a coarse-to-fine solve on the COARSE × COARSE grid: the
    :class:`~mfgwork.warm_start.Start` of one problem (:class:`CoarseSingle`) or of each
    member of a batch (:class:`CoarseBatch`); its own ConvergenceWarning silenced: the fine
    solve reports."""
    options = {"nx": COARSE, "nt": COARSE, "backend": be, "tol": max(tol, COARSE_TOL),
               "max_iter": max_iter, "progress": False, "max_memory": max_memory,
               "coarse": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return run(CoarseBatch(list(problems), **options) if batched
                   else CoarseSingle(problems[0], **options))


def _describe(scheme: IterationScheme, newton: BatchNewton | None) -> dict[str, Any]:
    if newton is None:
        return scheme.describe()
    return {"scheme": "newton", "system": "conjugate gradients (matrix-free)"
            if newton.matrix_free else "Cholesky (batched, tangent Jacobian)",
            "system_dtype": newton.system_dtype}


def _newton_extra(newton: BatchNewton | None, coarse_iterations: list[int] | None,
                  member: int) -> dict[str, Any]:
    if newton is None:
        return {}
    if coarse_iterations is None and isinstance(newton, FrozenDensityNewton):
        coarse_iterations = newton.coarse_iterations   # its own coarse stage
    reachable = getattr(newton, "reachable", {}).get(member)   # a float64 certificate floor
    return {"newton_steps": newton.newton_steps, "krylov_products": newton.products,
            "coarse_iterations": None if coarse_iterations is None
            else coarse_iterations[member]} | ({} if reachable is None
                                               else {"reachable_tol": reachable})


def _equilibrium(newton: BatchNewton | None, problems: Sequence[MFGProblem], coupling: Any,
                 hjb: Any, fp: Any, m0: Any, U_T: Any, grid: Any, be: Backend,
                 scheme: IterationScheme, tol: float, max_iter: int, progress: bool | None, *,
                 batched: bool, coarse: bool, max_memory: object, warm: dict[str, Any],
                 fallback: PotentialNewton | None = None
                 ) -> tuple[FixedPointResult, list[int] | None, float]:
    """The fixed point of one problem (unbatched arrays) or of a batch, one run of the
    equilibrium driver (:func:`~mfgwork.numerics.equilibrium.solve`) with the strategy
    ``newton`` where given (from a COARSE × COARSE solve on fine grids, unless ``warm``
    already starts it or ``coarse`` is False), else the iteration ``scheme`` (with
    ``fallback`` for single problems). Returns the result and the iterations of the coarse
    stage per problem (None without one) and its seconds."""
    coarse_iterations, started, built = None, time.perf_counter(), compile_clock()
    if newton is not None and coarse and not warm and starts_coarse(grid):
        starts = _coarse_solve(problems, be, tol, max_iter, max_memory, batched)
        warm = initial_state(starts if batched else starts[0], problems, grid, be,
                             batched=batched)
        coarse_iterations = [r.iterations for r in starts]
        if isinstance(newton, BatchNewton):
            name_floors(newton, starts, tol)
            newton.first_trigger = first_triggers([r.amplification for r in starts], tol)
    coarse_seconds = seconds_since(started, built)
    strategy = newton if newton is not None else FixedPoint(scheme, tol, fallback=fallback)
    system = System(coupling, hjb, fp, m0, U_T, grid.nt, be, batched=batched, **warm)
    bar = fixed_point_bar(progress, max_iter)
    try:
        out = solve_equilibrium(strategy, system, max_iter=max_iter, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    be.synchronize()
    return out, coarse_iterations, coarse_seconds


def fdm_memory(problems: Sequence[MFGProblem], grid: Any, be: Backend,
               scheme: IterationScheme, batch: int = 1, per_problem: int = 0
               ) -> tuple[dict[str, int], str]:
    """The memory parts of a finite-difference solve of ``problems`` on ``grid``
    (:func:`mfgwork.core.memory.fdm_parts`; ``per_problem``: the bytes per problem the
    solver declares)."""
    return memory.fdm_parts(grid.nx, grid.nt, be,
                            [p.coupling_size(grid.nx, grid.nt) for p in problems],
                            getattr(scheme, "depth", 0), batch, per_problem=per_problem)


def check_scales(problems: Sequence[MFGProblem], grid: Any, be: Backend) -> None:
    """The scales (h, Δt, ν, ν Δt / h²) of every problem on ``grid``, and the grid's
    resolution of their features (a warning), before any allocation on the grid."""
    for sigma in dict.fromkeys(p.sigma for p in problems):   # (a batch shares many)
        grid.check_scales(sigma, be.dtype)
    warn_unresolved(problems, grid)


def raised_tol(tol: float, floor: float, below: str, *, hint: str = "") -> float:
    """``tol``, or ``floor`` when ``tol`` is below it, with the warning "tol=… is below
    ``below``; iterating to tol=floor instead``hint``"."""
    if tol < floor:
        warn(f"tol={tol:g} is below {below}; iterating to tol={floor:.1e} instead{hint}",
             UserWarning)
        return floor
    return tol


#: The certified residuals at which float64 solves stall, measured with tol=1e-20 (NumPy, one
#: CPU core): Santa Fe 3e-14 to 8e-13 on grids of 21 to 401 points (σ 0.5 and 0.3), with
#: congestion 1e-14 to 3e-14, a generic density coupling 1e-16 to 2e-15. No formula in the
#: grid predicts them (they do not grow with nx or nt), so the warning gives the range.
FLOAT64_FLOOR_NOTE = (" (approximate: the round-off floor of the certified residual depends on "
                      "the problem and the grid, measured 1e-16 to 8e-13; where it lies above, "
                      "the iteration stops when its residual stalls and the result says so: "
                      "status 'stalled', and the residual reached)")


def reachable_tol(tol: float, be: Backend) -> float:
    """``tol``, or the residual floor of the working dtype when ``tol`` is below it (with a
    warning): 100 ε in float64, approximate (:data:`FLOAT64_FLOOR_NOTE`); 3e-4 in float32,
    where the rounding of the attendance path (about 1e-7) is amplified by the steep payoff
    in the residual of one best response."""
    floor = 100 * be.eps if be.eps < 1e-10 else 3e-4
    return raised_tol(tol, floor, f"what {be.dtype} resolves",
                      hint=FLOAT64_FLOOR_NOTE if be.eps < 1e-10 else "")


def _above_noise_floor(tol: float, n_particles: int) -> float:
    """``tol``, or the Monte Carlo noise floor 1/√N of N particles when ``tol`` is below it
    (with a warning): the densities of N particles resolve the continuum equilibrium only to
    relative errors of that order, so a smaller residual certifies nothing more."""
    floor = 1.0 / math.sqrt(n_particles)
    return raised_tol(tol, floor, "the Monte Carlo noise floor 1/sqrt(n_particles) = "
                      f"{floor:.1e} of n_particles={n_particles}",
                      hint=" (use more particles for a smaller tol)")


#: The package of the problem kinds: a member of a batch from there that is no MFGProblem is
#: a problem of another kind (with no batched path), not a mistyped argument
PROBLEMS = "mfgwork.problems"


def _check_coarse(coarse: object) -> bool:
    """``coarse`` as a bool: True or False (a NumPy bool too), else a ParameterError."""
    return check_flag("coarse", bool(coarse) if isinstance(coarse, np.bool_) else coarse)


def _check_batch(problems: Sequence[MFGProblem]) -> list[MFGProblem]:
    problems = list(problems) if isinstance(problems, (list, tuple)) else problems
    if not isinstance(problems, list) or not problems:
        raise ParameterError(f"problems={problems!r} is invalid: must be a non-empty list of "
                             "mfgwork.MFGProblem")
    for i, p in enumerate(problems):
        if not isinstance(p, MFGProblem) and type(p).__module__.startswith(PROBLEMS):
            raise ParameterError(f"problems[{i}]={p!r:.80} is invalid: a batch solves "
                                 "continuous problems (mfgwork.MFGProblem); a "
                                 f"{type(p).__name__} has no batched path: solve each with "
                                 "mw.solve")
        if not isinstance(p, MFGProblem):
            raise ParameterError(f"problems[{i}]={p!r} is invalid: must be an "
                                 "mfgwork.MFGProblem")
        for name in ("x_min", "x_max", "T"):
            if getattr(p, name) != getattr(problems[0], name):
                raise ParameterError(
                    f"problems[{i}].{name}={getattr(p, name)!r} is invalid: a batch shares one "
                    f"grid, so it must equal problems[0].{name}={getattr(problems[0], name)!r}")
    return problems


def _coupling_groups(problems: Sequence[MFGProblem], grid: Any, be: Backend
                     ) -> tuple[list[list[int]], list[Any]]:
    """Indices of ``problems`` grouped by the kind of their coupling and their Hamiltonian,
    in first-seen order; and the couplings (on ``grid`` and ``be``, one per problem)."""
    groups: dict[tuple, list[int]] = {}
    couplings = [p.coupling(grid, be) for p in problems]
    for i, (p, c) in enumerate(zip(problems, couplings, strict=True)):
        groups.setdefault((type(c), p.hamiltonian), []).append(i)
    return list(groups.values()), couplings


def _phase_totals(history: Any) -> dict[str, float]:
    return {"hjb": sum(history.time_hjb), "fp": sum(history.time_fp),
            "coupling": sum(history.time_coupling)}


def _results(problems: Sequence[MFGProblem], grid: Any, be: Backend, out: FixedPointResult,
             batched: bool, settings: dict[str, Any], timings: dict[str, float],
             extras: list[dict[str, Any]]) -> list[Result]:
    """The Results of ``problems``: the members of a batch (``batched``: U and M of ``out``
    carry the leading batch axis; each Result holds views of them) or one problem. Each
    member's observables are computed where its arrays are; its summary reads them from one
    host copy per observable for the whole batch (no per-member transfers). The first member
    of each state name is built and checked in full; the others copy it with their own fields
    (:func:`~mfgwork.results.updated`: what the members share is frozen once)."""
    Us, Ms = (out.U, out.M) if batched else (out.U[None], out.M[None])
    x, t = be.asarray(grid.x), be.asarray(grid.t)
    observables, stacked = _member_observables(problems, grid, Ms, be)
    host = {}   # {name: (the members that have it, their values stacked on the host)}
    for key in dict.fromkeys(k for o in observables for k in o):
        if key in stacked:
            host[key] = list(range(len(problems))), to_numpy(stacked[key])
            continue
        having = [b for b, o in enumerate(observables) if key in o]
        host[key] = having, to_numpy(be.xp.concat([observables[b][key][None]   # (stacked)
                                                   for b in having]))
    summaries = member_summaries(problems, grid, host)
    converged, residual, iterations = (np.asarray(to_numpy(v)).reshape(-1) for v in (
        out.converged, out.residual, out.iterations))
    shared = freeze({"nx": grid.nx, "nt": grid.nt} | settings | {
        "backend": be.name, "device": be.device, "dtype": be.dtype})
    common = {"x": x, "t": t, "history": out.history.as_dict(), "timings": timings,
              "backend": be.name, "device": be.device, "dtype": be.dtype,
              "method": settings["method"]}
    U_views, M_views = (list(freeze(a)) for a in (Us, Ms))   # (read-only views, one call)
    firsts: dict[str, Result] = {}   # {state name: its first member, built in full}
    results: list[Result | None] = []
    positions, bases, changes = [], [], []   # (the copies of a first member: where, own fields)
    for b, p in enumerate(problems):
        params = freeze(p.params()) | shared   # (a plain dict of frozen values)
        floor = extras[b].get("reachable_tol")
        if (floor is not None and floor.get("predicted") and converged[b]
                and residual[b] > params["tol"]):   # converged at its float64 floor
            params["tol"] = floor["tol"]
        status = (derive_status(bool(converged[b]), int(iterations[b]), settings["max_iter"])
                  if out.status is None else str(out.status[b]))
        change = {"U": U_views[b], "M": M_views[b], "converged": bool(converged[b]),
                  "residual": float(residual[b]), "status": status,
                  "iterations": int(iterations[b]), "params": FrozenDict(params),
                  "observables": freeze(observables[b]), "summary": freeze(summaries[b]),
                  "extra": freeze(extras[b])}
        first = firsts.get(p.state_name)
        if first is None:
            first = firsts[p.state_name] = Result(**common, **change, state_name=p.state_name)
            common = {k: getattr(first, k) for k in common}   # (frozen once)
            results.append(first)
        else:
            results.append(None)
            positions.append(b)
            bases.append(first)
            changes.append(change)
    for b, res in zip(positions, updated(bases, changes), strict=True):
        results[b] = res
    return results


def _member_observables(problems: Sequence[MFGProblem], grid: Any, Ms: Any, be: Backend
                        ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each member's observables (read-only arrays where ``Ms`` is, views of the batch's):
    members whose class marks ``observables`` as reading only the grid (:func:`~mfgwork.
    problems.base.grid_only`) in one call per class on their stacked densities, the others
    one by one; and those values stacked ({name: (B, ...)}) where one call gave every
    member's (else {})."""
    out: list[dict[str, Any]] = [{} for _ in problems]
    together: dict[Any, list[int]] = {}
    for b, p in enumerate(problems):
        method = type(p).observables
        if getattr(method, "grid_only", False):
            together.setdefault(method, []).append(b)
        else:
            out[b] = p.observables(grid, Ms[b], be)
    stacked: dict[str, Any] = {}
    for members in together.values():
        every = len(members) == len(problems)
        values = freeze(problems[members[0]].observables(
            grid, Ms if every else Ms[np.asarray(members)], be))
        rows = {k: list(v) for k, v in values.items()}   # (the members' views, one call each)
        for i, b in enumerate(members):
            out[b] = {k: v[i] for k, v in rows.items()}
        if every:
            stacked = values
    return out, stacked


def fixed_point_bar(progress: bool | None, total: int, desc: str = "fixed point") -> Any:
    """The fixed point's progress bar of ``total`` iterations (None when ``progress`` is False;
    shown at once when True, after a second when None)."""
    if progress is False:
        return None
    return delayed_bar(0.0 if progress else 1.0, total=total, desc=desc, unit="it",
                       leave=False)


solve_continuous = solver_of(FDM1D, "solve_continuous")
solve_batch = solver_of(FDM1DBatch, "solve_batch")
