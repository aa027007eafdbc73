"""The front door: ``mw.solve(problem, ...)``."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .core import memory
from .core.backend import BACKENDS, Backend, get_backend, to_numpy
from .core.compiling import check_compile_steps
from .core.errors import ConvergenceWarning, ParameterError, check_choice, check_flag
from .numerics.batch_newton import BatchNewton, member_potentials
from .numerics.fdm.sweeps import FiniteDifferences
from .numerics.fdm.warmup import compile_kernels
from .numerics.iteration import (
    FixedPointResult,
    FPSolver,
    HJBSolver,
    IterationScheme,
    check_stopping,
    fixed_point,
    make_scheme,
    relative_residual,
)
from .numerics.particles import ParticleFP, check_particle_args
from .numerics.potential import PotentialNewton
from .placement import placement
from .problems import problem_from_params
from .problems.base import MFGProblem, batch_coupling
from .results import Result
from .warm_start import initial_state, per_problem

METHODS = ("fdm", "particles")
NEWTON_MEMORY = 2**29  # bytes: the tangent sweeps of grids up to about 400 × 400
DEFAULT_DEPTH = 5  # Anderson's default depth: a larger one is blamed for what it adds


def solve(problem: MFGProblem, nx: int = 201, nt: int = 201, method: str = "fdm",
          backend: str | Backend = "numpy", device: str = "cpu", dtype: object = None,
          tol: float = 1e-8, max_iter: int = 200,
          iteration: str | IterationScheme | None = None,
          progress: bool | None = None, n_particles: int | None = None,
          seed: int | None = None, compile_steps: bool | str = "auto",
          initial: Result | Any = None, max_memory: int | str | None = None,
          coarse: bool = True) -> Result:
    """Solve the MFG system of ``problem`` on an ``nx`` × ``nt`` grid.

    ``nx`` counts grid points including both walls; ``nt`` time steps give ``nt + 1`` levels.
    ``method="fdm"``: implicit upwind finite differences for HJB and FP (Achdou's adjoint
    scheme). ``backend``/``device``/``dtype`` choose where it runs (see
    :func:`mfgwork.get_backend`); ``device="auto"`` runs where :func:`mfgwork.placement`
    says from the measured crossover table (a single FDM solve: the CPU), and records its
    choice and reason in ``res.params["placement"]``. The Picard iteration (``iteration``:
    "anderson" (default), "relaxation", "fictitious_play", "picard" or an
    :class:`~mfgwork.IterationScheme`) stops when the returned solution is a fixed point to
    ``tol``: one best response to its coupling state (for Santa Fe the attendance path A)
    reproduces it to a relative residual ``res.residual`` ≤ ``tol`` (``res.check()``
    recomputes it). Otherwise, after ``max_iter`` iterations, it returns the best iterate
    found with ``converged=False`` and a :class:`~mfgwork.ConvergenceWarning` giving its
    residual. In float32 (finite differences, where float64 exists: the CPU and CUDA) a
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
    also for float32 solves); each iteration is one best response. ``iteration="anderson"``:
    Anderson mixing, continued by Newton's method when it stalls (float64, grids up to about
    400 × 400). ``coarse``: on grids at least twice as fine as 51 × 51 in x and t, Newton's
    method starts from a 51 × 51 solve (``res.extra["coarse_iterations"]``).
    ``progress``: a tqdm bar (None: shown only when the solve lasts over a second).
    ``method="particles"``: HJB by finite differences, FP by ``n_particles`` particles
    (default 100 000; see :class:`mfgwork.ParticleFP`) drawn from ``seed`` (None: a
    fresh seed, recorded in ``params``); every FP solve restarts from that seed (common random
    numbers), so the Picard map is deterministic; ``tol`` below the Monte Carlo noise floor
    1/√n_particles is raised to it with a warning. With particles on an accelerator, HJB is
    solved on the host (compiled NumPy float64 sweep) and U moved to the device once per
    iterate.
    ``initial``: a result (e.g. at nearby parameters) to start the iteration from, instead of
    agents who do not move; it saves iterations when the parameters moved little. On the same
    grid its U and M are the first iterate; for problems whose coupling state is one path
    (Santa Fe: the attendance path), a result on another grid, or the path itself (levels
    1..nt, or 0..nt as ``res.attendance``), is interpolated in time.
    ``compile_steps``: ``torch.compile`` the per-time-step kernels of the generic torch path
    on devices (the Newton step of HJB, the FP step), fusing their many small operations.
    "auto" (default): on CUDA and MPS where the installed torch can compile for them; True
    or a ``torch.compile`` mode name: wherever it can (also the CPU and MPS emulation);
    False: never. The first compiled call is checked against the eager one, and a failure
    falls back to eager with a warning; ``res.extra["compiled_steps"]`` says what ran.
    ``res.timings``: seconds of ``compile`` (compiling or loading the NumPy backend's
    kernels, done on a tiny grid by the first solve of a process; 0 afterwards), ``setup``,
    the phases ``hjb``, ``fp`` and ``coupling`` summed over the iterations, and ``total``.
    ``max_memory``: refuse solves whose estimated memory exceeds this (bytes or text such as
    ``"4 GiB"``; default: ``$MFGWORK_MAX_MEMORY``, else the free memory of the device). The
    estimate, the diffusion number ν Δt / h² and the ranges of h, Δt and ν are checked
    before any work.
    """
    started = time.perf_counter()
    if not isinstance(problem, MFGProblem):
        raise ParameterError(f"problem={problem!r} is invalid: must be an mfgwork.MFGProblem "
                             "(e.g. mw.SantaFeBar() or mw.MFGProblem(...))")
    grid = problem.grid(nx, nt)
    check_choice("method", method, METHODS)
    if method == "particles":
        n_particles, seed = check_particle_args(n_particles, seed)
    elif n_particles is not None or seed is not None:
        raise ParameterError(f"n_particles={n_particles!r}, seed={seed!r} are invalid with "
                             f"method={method!r}: they apply only to method='particles'")
    tol, max_iter = check_stopping(tol, max_iter)
    scheme = make_scheme(iteration)
    check_compile_steps(compile_steps)
    check_flag("progress", progress, optional=True)
    backend, device, placed = _place(problem, method, n_particles, nx, nt, backend, device)
    be = get_backend(backend, device, dtype)
    _check_size([problem], grid, be, scheme, max_memory)
    tol = _reachable_tol(tol, be)
    if method == "particles":
        tol = _above_noise_floor(tol, n_particles)
    warm = initial_state(initial, [problem], grid, be, batched=False)

    m0 = problem.initial_density(grid, be)
    U_T = problem.terminal_cost(grid, be)
    coupling = problem.coupling(grid, be)
    fd, hjb, fp, fp_params = _solvers(problem, grid, be, method, n_particles, seed,
                                             compile_steps, max_memory)
    setup = time.perf_counter() - started
    compiled: dict[str, float] = {}
    hjb = _compile_first(hjb, be, compiled)
    newton = (_batch_newton([coupling], iteration, grid, [problem], be, tol)
              if method == "fdm" else None)
    fallback = None if newton is not None else _newton_fallback(
        coupling, iteration, method, grid, problem.nu, be, tol)
    out, coarse_iterations = _equilibrium(
        newton, [problem], coupling, hjb, fp, m0, U_T, grid, be, scheme, tol, max_iter,
        progress, batched=False, coarse=coarse, max_memory=max_memory, warm=warm,
        fallback=fallback)
    fd.check_newton()
    compiling = compiled.get("seconds", 0.0)
    out.history.time_hjb[0] -= compiling   # the first HJB phase, without the compilation
    timings = {"compile": compiling, "setup": setup, **_phase_totals(out.history),
               "total": time.perf_counter() - started}
    settings = {"method": method, "tol": tol, "max_iter": max_iter,
                "iteration": _describe(scheme, newton)} | fp_params | placed
    result = _results([problem], grid, be, out, False, settings, timings,
                      [{"newton_iterations": fd.newton_iterations,
                        **_newton_extra(newton, coarse_iterations, 0),
                        "fdm_kernels": fd.kernels.name,
                        "compiled_steps": fd.compiled_steps}])[0]
    _certify_in_float64([result], [problem], be, tol, timings)
    return result


def solve_batch(problems: Sequence[MFGProblem], nx: int = 201, nt: int = 201,
                backend: str | Backend = "numpy", device: str = "cpu", dtype: object = None,
                tol: float = 1e-8, max_iter: int = 200,
                iteration: str | IterationScheme | None = None,
                progress: bool | None = None, compile_steps: bool | str = "auto",
                max_memory: int | str | None = None,
                initial: Sequence[Result] | Result | Any = None,
                coarse: bool = True) -> list[Result]:
    """Solve several problems on one grid as one batched computation (finite differences).

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
    ``coarse``: as for :func:`solve`. float32 batches: the members that claim convergence
    are re-certified in float64 as for :func:`solve` (one best response each, NumPy float64
    on the host; ``res.timings["certify"]``), except on MPS, where the float32 certificate
    stands.
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
    ``problems``.
    """
    started = time.perf_counter()
    problems = _check_batch(problems)
    grid = problems[0].grid(nx, nt)
    tol, max_iter = check_stopping(tol, max_iter)
    scheme = make_scheme(iteration)
    check_compile_steps(compile_steps)
    check_flag("progress", progress, optional=True)
    backend, device, placed = _place(problems, "fdm", None, nx, nt, backend, device)
    backend = _cpu_batch_on_numpy(backend, device, placed)
    be = get_backend(backend, device, dtype)
    if be.name == "numpy":
        _check_size(problems, grid, be, scheme, max_memory, batch=1)
        tol = _reachable_tol(tol, be)
        starts = per_problem(initial, len(problems), batched=True)
        results = [solve(p, nx=nx, nt=nt, backend=be, tol=tol, max_iter=max_iter,
                         iteration=iteration, progress=progress, max_memory=max_memory,
                         initial=start, coarse=coarse)
                   for p, start in zip(problems, starts, strict=True)]
        for res in results:
            res.params |= placed
        return results
    _check_size(problems, grid, be, scheme, max_memory, batch=len(problems))
    groups = _coupling_groups(problems, grid, be)
    if len(groups) > 1:
        starts = per_problem(initial, len(problems), batched=True)
        results: list[Any] = [None] * len(problems)
        for group in groups:
            solved = solve_batch([problems[i] for i in group], nx=nx, nt=nt, backend=be,
                                 tol=tol, max_iter=max_iter, iteration=iteration,
                                 progress=progress, compile_steps=compile_steps,
                                 max_memory=max_memory, coarse=coarse,
                                 initial=None if initial is None
                                 else [starts[i] for i in group])
            for i, res in zip(group, solved, strict=True):
                res.params |= placed
                results[i] = res
        return results
    tol = _reachable_tol(tol, be)
    warm = initial_state(initial, problems, grid, be, batched=True)
    xp = be.xp
    m0 = xp.stack([p.initial_density(grid, be) for p in problems])
    U_T = xp.stack([p.terminal_cost(grid, be) for p in problems])
    couplings = [p.coupling(grid, be) for p in problems]
    coupling = batch_coupling(couplings, be)
    fd = FiniteDifferences(grid, np.array([[p.nu] for p in problems]), be,
                           compile_steps=compile_steps)
    setup = time.perf_counter() - started
    newton = _batch_newton(couplings, iteration, grid, problems, be, tol)
    out, coarse_iterations = _equilibrium(
        newton, problems, coupling, fd.solve_hjb, fd.solve_fp, m0, U_T, grid, be, scheme, tol,
        max_iter, progress, batched=True, coarse=coarse, max_memory=max_memory, warm=warm)
    fd.check_newton()
    timings = {"setup": setup, **_phase_totals(out.history),
               "total": time.perf_counter() - started}
    settings = {"method": "fdm", "tol": tol, "max_iter": max_iter,
                "iteration": _describe(scheme, newton), "batch_size": len(problems)} | placed
    extra = {"newton_iterations": fd.newton_iterations, "batch_size": len(problems),
             "fdm_kernels": fd.kernels.name, "compiled_steps": fd.compiled_steps}
    results = _results(problems, grid, be, out, True, settings, timings,
                       [extra | _newton_extra(newton, coarse_iterations, b)
                        for b in range(len(problems))])
    _certify_in_float64(results, problems, be, tol, timings)
    return results


def _solvers(problem: MFGProblem, grid: Any, be: Backend, method: str,
             n_particles: int | None, seed: int | None, compile_steps: bool | str = False,
             max_memory: object = None
             ) -> tuple[FiniteDifferences, HJBSolver, FPSolver, dict[str, Any]]:
    """The HJB and FP solvers of one solve (and the particle parameters to record)."""
    fd = FiniteDifferences(grid, problem.nu, be, compile_steps=compile_steps)
    hjb, fp, fp_params = fd.solve_hjb, fd.solve_fp, {}
    if method == "particles":
        particles = ParticleFP(grid, problem.sigma, be, n_particles=n_particles, seed=seed,
                               max_memory=max_memory)
        fp = particles.solve_fp
        fp_params = {"n_particles": particles.n_particles, "seed": particles.seed}
        if be.is_accelerator:  # (the CPU backends run the compiled loops already)
            fd = FiniteDifferences(grid, problem.nu, get_backend("numpy"))
            hjb = _on_host(fd.solve_hjb, be)
    return fd, hjb, fp, fp_params


def _compile_first(hjb: HJBSolver, be: Backend, compiled: dict[str, float]) -> HJBSolver:
    """``hjb`` whose first call starts by compiling the NumPy kernels on a tiny grid
    (:func:`~mfgwork.numerics.fdm.warmup.compile_kernels`), timed into
    ``compiled["seconds"]``: after the running cost of the first iterate, so bad input
    (e.g. a non-finite ``f``) is still refused before that work."""
    def first(U_T: Any, F: Any, guess: Any | None) -> Any:
        if "seconds" not in compiled:
            compiled["seconds"] = compile_kernels(be)
        return hjb(U_T, F, guess)
    return first


def _newton_fallback(coupling: Any, iteration: Any, method: str, grid: Any, nu: float,
                     be: Backend, tol: float) -> PotentialNewton | None:
    """Newton's method on the potential when the problem declares one, for the default
    iteration with finite differences in float64 (its exact Jacobian is that of the scheme)
    and grids whose tangent sweeps fit in ``NEWTON_MEMORY`` bytes ((nt+1)·nx·nt floats)."""
    potential = coupling.potential()
    if (potential is None or iteration not in (None, "anderson") or method != "fdm"
            or be.eps > 1e-10 or 8 * (grid.nt + 1) * grid.nx * grid.nt > NEWTON_MEMORY):
        return None
    return PotentialNewton(potential, grid=grid, nu=nu, backend=be, tol=tol)


def _batch_newton(couplings: list[Any], iteration: Any, grid: Any,
                  problems: Sequence[MFGProblem], be: Backend, tol: float) -> BatchNewton | None:
    """Newton's method on the coupling state for a batch (or a single problem) whose problems
    all declare a potential, with the default iteration (on the CPU it is matrix-free; devices
    compute the tangent Jacobians in chunks that fit their memory)."""
    potentials = member_potentials([c.potential() for c in couplings])
    if potentials is None or iteration is not None:
        return None
    return BatchNewton(potentials, grid=grid, nu=np.array([p.nu for p in problems]),
                       backend=be, tol=tol)


COARSE = 51   # the grid of the first stage of coarse-to-fine solves (nx = nt)
COARSE_TOL = 1e-5


def _refines(grid: Any) -> bool:
    """Whether a solve on ``grid`` starts from a solve on the COARSE × COARSE grid: when it is
    at least twice as fine in x and in t."""
    return min(grid.nx, grid.nt) >= 2 * COARSE


def _coarse_solve(solver: Any, problems: Any, be: Backend, tol: float, max_iter: int,
                  max_memory: object) -> Any:
    """The first stage of a coarse-to-fine solve (its own ConvergenceWarning silenced: the
    fine solve reports)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return solver(problems, nx=COARSE, nt=COARSE, backend=be, tol=max(tol, COARSE_TOL),
                      max_iter=max_iter, progress=False, max_memory=max_memory, coarse=False)


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
    return {"newton_steps": newton.newton_steps, "krylov_products": newton.products,
            "coarse_iterations": None if coarse_iterations is None
            else coarse_iterations[member]}


def _equilibrium(newton: BatchNewton | None, problems: Sequence[MFGProblem], coupling: Any,
                 hjb: Any, fp: Any, m0: Any, U_T: Any, grid: Any, be: Backend,
                 scheme: IterationScheme, tol: float, max_iter: int, progress: bool | None, *,
                 batched: bool, coarse: bool, max_memory: object, warm: dict[str, Any],
                 fallback: PotentialNewton | None = None
                 ) -> tuple[FixedPointResult, list[int] | None]:
    """The fixed point of one problem (unbatched arrays) or of a batch: Newton's method
    when ``newton`` is given (from a COARSE × COARSE solve on fine grids, unless ``warm``
    already starts it or ``coarse`` is False), else the iteration ``scheme`` (with
    ``fallback`` for single problems). Returns the result and the iterations of the coarse
    stage per problem (None without one)."""
    coarse_iterations = None
    if newton is not None and coarse and not warm and _refines(grid):
        starts = (_coarse_solve(solve_batch, problems, be, tol, max_iter, max_memory)
                  if batched else [_coarse_solve(solve, problems[0], be, tol, max_iter,
                                                 max_memory)])
        warm = initial_state(starts if batched else starts[0], problems, grid, be,
                             batched=batched)
        coarse_iterations = [r.iterations for r in starts]
    if newton is not None:
        out = _run_newton(newton, coupling, hjb, fp, m0, U_T, max_iter, progress,
                          batched=batched, **warm)
    else:
        out = _iterate(coupling, hjb, fp, m0, U_T, grid.nt, be, scheme, tol, max_iter,
                       progress, batched=batched, fallback=fallback, **warm)
    return out, coarse_iterations


def _run_newton(newton: BatchNewton, coupling: Any, hjb: Any, fp: Any, m0: Any, U_T: Any,
                max_iter: int, progress: bool | None, batched: bool, **warm: Any
                ) -> FixedPointResult:
    bar = _progress_bar(progress, max_iter)
    try:
        out = newton.solve(coupling, hjb, fp, m0=m0, U_T=U_T, max_iter=max_iter,
                           progress=bar, batched=batched, **warm)
    finally:
        if bar is not None:
            bar.close()
    newton.backend.synchronize()
    return out


def best_response_residual(result: Result, problem: MFGProblem | None = None) -> float:
    """‖z(BR(z)) − z‖₂ / ‖z(BR(z))‖₂ for the coupling state z of ``result.M`` (Santa Fe: the
    attendance path at levels 1..nt; otherwise the density path): one best response (HJB,
    then FP, as the solve did: method, backend, device, dtype and particles from
    ``result.params``; NumPy float64 for a float32 result re-certified in float64, whose
    ``extra`` has a ``"certificate"``). ``problem`` defaults to the Santa Fe problem of
    ``result.params``."""
    params = result.params
    if problem is None:
        problem = problem_from_params(params)
    if not isinstance(problem, MFGProblem):
        raise ParameterError(f"problem={problem!r} is invalid: must be an mfgwork.MFGProblem")
    if "certificate" in result.extra:   # a float32 result re-certified in float64
        return _best_response_residual(result, problem, get_backend("numpy", "cpu", "float64"))
    return _best_response_residual(result, problem,
                                   get_backend(result.backend, result.device, result.dtype))


def _best_response_residual(result: Result, problem: MFGProblem, be: Backend) -> float:
    """:func:`best_response_residual` of ``result`` for ``problem``, computed on ``be``."""
    M = to_numpy(result.M)
    nt, nx = M.shape[0] - 1, M.shape[1]
    grid = problem.grid(nx, nt)
    particles = result.method == "particles"
    _, hjb, fp, _ = _solvers(problem, grid, be, result.method,
                             result.params.get("n_particles") if particles else None,
                             result.params.get("seed") if particles else None)
    coupling = problem.coupling(grid, be)
    z = coupling.state(be.asarray(M))
    U = hjb(problem.terminal_cost(grid, be), coupling.running_cost(z),
            be.asarray(to_numpy(result.U)))
    gz = coupling.state(fp(U, problem.initial_density(grid, be)))
    return float(to_numpy(relative_residual(gz, z, be.xp, batched=False))[0])


def _certify_in_float64(results: list[Result], problems: Sequence[MFGProblem], be: Backend,
                        tol: float, timings: dict[str, float]) -> None:
    """Re-certify the float32 finite-difference results that claim convergence by one best
    response in NumPy float64 on the host (:func:`best_response_residual`): ``residual``
    becomes the float64 one, and a result whose float64 residual exceeds ``tol`` gets
    ``converged=False``, ``extra["certificate"]["message"]`` and a ConvergenceWarning.
    Nothing is done on MPS (and its emulation), which has no float64: there the float32
    certificate stands. ``timings["certify"]``: the seconds spent."""
    if be.dtype != "float32" or be.kind == "mps" or be.emulate_mps:
        return
    started = time.perf_counter()
    host = get_backend("numpy", "cpu", "float64")
    failed = []
    for res, problem in zip(results, problems, strict=True):
        if not res.converged or res.method != "fdm":
            continue
        residual = _best_response_residual(res, problem, host)
        record: dict[str, Any] = {"dtype": "float64", "residual": residual,
                                  "float32_residual": res.residual, "held": residual <= tol}
        if residual > tol:
            record["message"] = (f"the float32 certificate (residual {res.residual:.3g}) did "
                                 f"not hold in float64: residual {residual:.3g} > tol={tol:g}")
            res.converged = False
            failed.append(residual)
        res.extra = res.extra | {"certificate": record}
        res.residual = residual
    if failed:
        warnings.warn(f"the float32 certificate did not hold in float64 for {len(failed)} of "
                      f"{len(results)} problems (float64 residual up to {max(failed):.3g} > "
                      f"tol={tol:g}); returning them with converged=False",
                      ConvergenceWarning, stacklevel=3)
    timings["certify"] = time.perf_counter() - started
    timings["total"] += timings["certify"]


def _place(problems: Any, method: str, n_particles: int | None, nx: int, nt: int,
           backend: str | Backend, device: str) -> tuple[str | Backend, str, dict[str, Any]]:
    """(backend, device, params entry): with ``device="auto"`` (and a backend given by name)
    the choice of :func:`mfgwork.placement`, recorded as ``params["placement"]``."""
    if not isinstance(device, str) or device != "auto" or isinstance(backend, Backend):
        return backend, device, {}
    if not isinstance(backend, str) or backend not in BACKENDS:
        return backend, device, {}   # get_backend names the error
    chosen = placement(problems, method, n_particles=n_particles, nx=nx, nt=nt,
                       backend=backend)
    record = {k: v for k, v in chosen.as_dict().items() if k != "row"}
    record["table_entry"] = _compact(chosen.row)
    return chosen.backend, chosen.device, {"placement": record}


def _cpu_batch_on_numpy(backend: str | Backend, device: str, placed: dict[str, Any]
                        ) -> str | Backend:
    """The backend of a batch placed (``device="auto"``) on the CPU: NumPy, whose compiled
    loops solve the problems one after the other faster than a torch batch on the CPU (its
    many small kernels per time step cost more than they share); the record says so."""
    if not placed or device != "cpu" or backend == "numpy":
        return backend
    record = placed["placement"]
    record["reason"] += (f"; on the CPU the compiled NumPy loops, one problem after the other, "
                         f"are faster than a {backend} batch, so backend='numpy'")
    record["backend"] = "numpy"
    return "numpy"


def _compact(row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {"kind": row["kind"], "measured": row["measured"], "crossover": row.get("crossover"),
            "machine": (row.get("machine") or {}).get("name")}


def _check_size(problems: Sequence[MFGProblem], grid: Any, be: Backend,
                scheme: IterationScheme, max_memory: object, batch: int = 1) -> None:
    """The memory estimate and the scales (h, Δt, ν, ν Δt / h²) of every problem, before
    any allocation on the grid."""
    check_fdm_size(grid, be, scheme, [p.coupling_size(grid.nx, grid.nt) for p in problems],
                   max_memory, batch)
    for p in problems:
        grid.check_scales(p.sigma, be.dtype)


def check_fdm_size(grid: Any, be: Backend, scheme: IterationScheme, sizes: Sequence[int],
                   max_memory: object, batch: int = 1, what: str = "") -> int:
    """Bytes of a finite-difference solve of ``batch`` problems whose coupling states hold
    ``sizes`` values, refused (:func:`mfgwork.core.memory.check_parts`) when they do not
    fit: blaming the Anderson ``depth`` beyond its default, else the grid (and batch)."""
    itemsize = np.dtype(be.dtype).itemsize
    depth = getattr(scheme, "depth", 0)
    size = max(sizes)
    base = memory.fdm_bytes(grid.nx, grid.nt, itemsize, size, min(depth, DEFAULT_DEPTH), batch)
    extra = memory.fdm_bytes(grid.nx, grid.nt, itemsize, size, depth, batch) - base
    what = what or (f"a solve on an nx={grid.nx} x nt={grid.nt} grid" if batch == 1 else
                    f"a batch of {batch} solves on an nx={grid.nx} x nt={grid.nt} grid")
    grid_key = "nx, nt" if batch == 1 else "nx, nt or the batch size"
    return memory.check_parts({grid_key: base, "the Anderson depth": extra}, be, what=what,
                              max_memory=max_memory)


def _reachable_tol(tol: float, be: Backend) -> float:
    """``tol``, or the residual floor of the working dtype when ``tol`` is below it (with a
    warning): 100 ε in float64; 3e-4 in float32, where the rounding of the attendance path
    (about 1e-7) is amplified by the steep payoff in the residual of one best response."""
    floor = 100 * be.eps if be.eps < 1e-10 else 3e-4
    if tol < floor:
        warnings.warn(f"tol={tol:g} is below what {be.dtype} resolves; iterating to "
                      f"tol={floor:.1e} instead", UserWarning, stacklevel=3)
        return floor
    return tol


def _above_noise_floor(tol: float, n_particles: int) -> float:
    """``tol``, or the Monte Carlo noise floor 1/√N of N particles when ``tol`` is below it
    (with a warning): the densities of N particles resolve the continuum equilibrium only to
    relative errors of that order, so a smaller residual certifies nothing more."""
    floor = 1.0 / math.sqrt(n_particles)
    if tol < floor:
        warnings.warn(f"tol={tol:g} is below the Monte Carlo noise floor 1/sqrt(n_particles) "
                      f"= {floor:.1e} of n_particles={n_particles}; iterating to tol={floor:.1e}"
                      " instead (use more particles for a smaller tol)", UserWarning,
                      stacklevel=3)
        return floor
    return tol


def _check_batch(problems: Sequence[MFGProblem]) -> list[MFGProblem]:
    problems = list(problems) if isinstance(problems, (list, tuple)) else problems
    if not isinstance(problems, list) or not problems:
        raise ParameterError(f"problems={problems!r} is invalid: must be a non-empty list of "
                             "mfgwork.MFGProblem")
    for i, p in enumerate(problems):
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
                     ) -> list[list[int]]:
    """Indices of ``problems`` grouped by the kind of their coupling, in first-seen order."""
    groups: dict[type, list[int]] = {}
    for i, p in enumerate(problems):
        groups.setdefault(type(p.coupling(grid, be)), []).append(i)
    return list(groups.values())


def _on_host(solve_hjb: Any, be: Backend) -> Any:
    """HJB solved by the compiled NumPy float64 sweep, U moved to ``be``: with particles the
    grid is small and the sequential sweep takes milliseconds on the CPU, far less than its
    thousands of tiny kernel launches on a device. One transfer each way per Picard iterate."""
    def hjb(U_T: Any, F: Any, guess: Any | None) -> Any:
        host = [None if a is None else np.asarray(to_numpy(a), dtype=np.float64)
                for a in (U_T, F, guess)]
        return be.asarray(solve_hjb(*host))
    return hjb


def _iterate(coupling: Any, hjb: Any, fp: Any, m0: Any, U_T: Any, nt: int, be: Backend,
             scheme: IterationScheme, tol: float, max_iter: int, progress: bool | None,
             batched: bool, **warm: Any) -> FixedPointResult:
    bar = _progress_bar(progress, max_iter)
    try:
        out = fixed_point(coupling, hjb, fp, m0=m0, U_T=U_T, nt=nt, backend=be, scheme=scheme,
                          tol=tol, max_iter=max_iter, progress=bar, batched=batched, **warm)
    finally:
        if bar is not None:
            bar.close()
    be.synchronize()
    return out


def _phase_totals(history: Any) -> dict[str, float]:
    return {"hjb": sum(history.time_hjb), "fp": sum(history.time_fp),
            "coupling": sum(history.time_coupling)}


def _results(problems: Sequence[MFGProblem], grid: Any, be: Backend, out: FixedPointResult,
             batched: bool, settings: dict[str, Any], timings: dict[str, float],
             extras: list[dict[str, Any]]) -> list[Result]:
    """The Results of ``problems``: the members of a batch (``batched``: U and M of ``out``
    carry the leading batch axis; each Result holds views of them) or one problem. Each
    member's observables are computed where its arrays are; its summary reads them from one
    host copy per observable for the whole batch (no per-member transfers)."""
    Us, Ms = (out.U, out.M) if batched else (out.U[None], out.M[None])
    x, t = be.asarray(grid.x), be.asarray(grid.t)
    observables = [p.observables(grid, Ms[b], be) for b, p in enumerate(problems)]
    host: list[dict[str, np.ndarray]] = [{} for _ in problems]
    for key in dict.fromkeys(k for o in observables for k in o):
        having = [b for b, o in enumerate(observables) if key in o]
        values = to_numpy(be.xp.stack([observables[b][key] for b in having]))
        for i, b in enumerate(having):
            host[b][key] = values[i]
    results = []
    for b, p in enumerate(problems):
        params = p.params() | {"nx": grid.nx, "nt": grid.nt} | settings | {
            "backend": be.name, "device": be.device, "dtype": be.dtype}
        results.append(Result(
            x=x, t=t, U=Us[b], M=Ms[b], converged=bool(out.converged[b]),
            residual=float(out.residual[b]), iterations=int(out.iterations[b]),
            history=out.history.as_dict(), params=params, timings=timings, backend=be.name,
            device=be.device, dtype=be.dtype, method=settings["method"],
            observables=observables[b], summary=p.summary(grid, host[b]),
            state_name=p.state_name, extra=extras[b]))
    return results


def _progress_bar(progress: bool | None, total: int) -> Any:
    if progress is False:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="Picard", unit="it", leave=False,
                delay=0.0 if progress else 1.0)
