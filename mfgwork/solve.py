"""The front door: ``mw.solve(problem, ...)``."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .core import memory
from .core.backend import BACKENDS, Backend, get_backend, to_numpy
from .core.compiling import check_compile_steps
from .core.errors import ParameterError, check_choice, check_flag
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

METHODS = ("fdm", "particles")
NEWTON_MEMORY = 2**29  # bytes: the tangent sweeps of grids up to about 400 × 400
DEFAULT_DEPTH = 5  # Anderson's default depth: a larger one is blamed for what it adds


def solve(problem: MFGProblem, nx: int = 201, nt: int = 201, method: str = "fdm",
          backend: str | Backend = "numpy", device: str = "cpu", dtype: object = None,
          tol: float = 1e-8, max_iter: int = 200,
          iteration: str | IterationScheme | None = None,
          progress: bool | None = None, n_particles: int | None = None,
          seed: int | None = None, compile_steps: bool | str = "auto",
          initial: Result | npt.ArrayLike | None = None,
          max_memory: int | str | None = None) -> Result:
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
    residual.
    With the default iteration, a
    problem that declares a potential (Santa Fe) and stalls under Anderson (its best residual
    has not halved in 25 iterations) continues by Newton's method on the coupling state with
    the exact Jacobian of the scheme (:mod:`mfgwork.numerics.potential`; finite differences
    in float64, single solves, grids up to about 400 × 400); each Newton step counts as one
    iteration.
    ``progress``: a tqdm bar (None: shown only when the solve lasts over a second).
    ``method="particles"``: HJB by finite differences, FP by ``n_particles`` particles
    (default 100 000; see :class:`mfgwork.ParticleFP`) drawn from ``seed`` (None: a
    fresh seed, recorded in ``params``); every FP solve restarts from that seed (common random
    numbers), so the Picard map is deterministic; ``tol`` below the Monte Carlo noise floor
    1/√n_particles is raised to it with a warning. With particles on an accelerator, HJB is
    solved on the host (compiled NumPy float64 sweep) and U moved to the device once per
    iterate.
    ``initial``: where the Picard iteration starts instead of agents who do not move: a
    result on the same grid (e.g. at nearby parameters; its U and M), or a coupling state
    (Santa Fe: an attendance path, at levels 1..nt or 0..nt as ``res.attendance``; otherwise
    a density path (nt or nt + 1, nx)), the first iterate of the mixing. It saves
    iterations when the parameters moved little; shape, dtype and finiteness are checked.
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

    m0 = problem.initial_density(grid, be)
    U_T = problem.terminal_cost(grid, be)
    coupling = problem.coupling(grid, be)
    start = check_initial(initial, grid, coupling.state(be.xp.stack([m0] * (grid.nt + 1))))
    fd, hjb, fp, fp_params = _solvers(problem, grid, be, method, n_particles, seed,
                                             compile_steps, max_memory)
    warm = _warm_start(start, coupling, be)
    setup = time.perf_counter() - started
    compiled: dict[str, float] = {}
    hjb = _compile_first(hjb, be, compiled)
    fallback = _newton_fallback(coupling, iteration, method, grid, problem.nu, be, tol)
    out = _iterate(coupling, hjb, fp, m0, U_T, grid.nt, be, scheme, tol, max_iter, progress,
                   batched=False, fallback=fallback, **warm)
    fd.check_newton()
    compiling = compiled.get("seconds", 0.0)
    out.history.time_hjb[0] -= compiling   # the first HJB phase, without the compilation
    timings = {"compile": compiling, "setup": setup, **_phase_totals(out.history),
               "total": time.perf_counter() - started}
    settings = {"method": method, "tol": tol, "max_iter": max_iter,
                "iteration": scheme.describe()} | fp_params | placed
    return _result(problem, grid, be, out, None, settings, timings,
                   {"newton_iterations": fd.newton_iterations,
                    "fdm_kernels": fd.kernels.name,
                    "compiled_steps": fd.compiled_steps})


def solve_batch(problems: Sequence[MFGProblem], nx: int = 201, nt: int = 201,
                backend: str | Backend = "numpy", device: str = "cpu", dtype: object = None,
                tol: float = 1e-8, max_iter: int = 200,
                iteration: str | IterationScheme | None = None,
                progress: bool | None = None, compile_steps: bool | str = "auto",
                max_memory: int | str | None = None) -> list[Result]:
    """Solve several problems on one grid as one batched computation (finite differences).

    The problems share the domain and T; they may differ in σ and in their couplings (e.g.
    Santa Fe thresholds and payoffs over a parameter grid). On torch every array carries a
    leading batch axis, so each kernel launch serves the whole batch: this is what makes an
    accelerator pay off for finite differences. Each problem has its own Anderson mixing,
    stopping test and result (``converged``, ``residual``, ``iterations``); the iteration
    runs until every problem has converged or ``max_iter`` is reached.
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
        results = [solve(p, nx=nx, nt=nt, backend=be, tol=tol, max_iter=max_iter,
                         iteration=iteration, progress=progress, max_memory=max_memory)
                   for p in problems]
        for res in results:
            res.params |= placed
        return results
    _check_size(problems, grid, be, scheme, max_memory, batch=len(problems))
    groups = _coupling_groups(problems, grid, be)
    if len(groups) > 1:
        results: list[Any] = [None] * len(problems)
        for group in groups:
            solved = solve_batch([problems[i] for i in group], nx=nx, nt=nt, backend=be,
                                 tol=tol, max_iter=max_iter, iteration=iteration,
                                 progress=progress, compile_steps=compile_steps,
                                 max_memory=max_memory)
            for i, res in zip(group, solved, strict=True):
                res.params |= placed
                results[i] = res
        return results
    tol = _reachable_tol(tol, be)
    xp = be.xp
    m0 = xp.stack([p.initial_density(grid, be) for p in problems])
    U_T = xp.stack([p.terminal_cost(grid, be) for p in problems])
    coupling = batch_coupling([p.coupling(grid, be) for p in problems], be)
    fd = FiniteDifferences(grid, np.array([[p.nu] for p in problems]), be,
                           compile_steps=compile_steps)
    setup = time.perf_counter() - started
    out = _iterate(coupling, fd.solve_hjb, fd.solve_fp, m0, U_T, grid.nt, be, scheme, tol,
                   max_iter, progress, batched=True)
    fd.check_newton()
    timings = {"setup": setup, **_phase_totals(out.history),
               "total": time.perf_counter() - started}
    settings = {"method": "fdm", "tol": tol, "max_iter": max_iter,
                "iteration": scheme.describe(), "batch_size": len(problems)} | placed
    extra = {"newton_iterations": fd.newton_iterations, "batch_size": len(problems),
             "fdm_kernels": fd.kernels.name, "compiled_steps": fd.compiled_steps}
    return [_result(p, grid, be, out, b, settings, timings, extra)
            for b, p in enumerate(problems)]


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


def best_response_residual(result: Result, problem: MFGProblem | None = None) -> float:
    """‖z(BR(z)) − z‖₂ / ‖z(BR(z))‖₂ for the coupling state z of ``result.M`` (Santa Fe: the
    attendance path at levels 1..nt; otherwise the density path): one best response (HJB,
    then FP, as the solve did: method, backend, device, dtype and particles from
    ``result.params``). ``problem`` defaults to the Santa Fe problem of ``result.params``."""
    params = result.params
    if problem is None:
        problem = problem_from_params(params)
    if not isinstance(problem, MFGProblem):
        raise ParameterError(f"problem={problem!r} is invalid: must be an mfgwork.MFGProblem")
    M = to_numpy(result.M)
    nt, nx = M.shape[0] - 1, M.shape[1]
    grid = problem.grid(nx, nt)
    be = get_backend(result.backend, result.device, result.dtype)
    particles = result.method == "particles"
    _, hjb, fp, _ = _solvers(problem, grid, be, result.method,
                             params.get("n_particles") if particles else None,
                             params.get("seed") if particles else None)
    coupling = problem.coupling(grid, be)
    z = coupling.state(be.asarray(M))
    U = hjb(problem.terminal_cost(grid, be), coupling.running_cost(z),
            be.asarray(to_numpy(result.U)))
    gz = coupling.state(fp(U, problem.initial_density(grid, be)))
    return float(to_numpy(relative_residual(gz, z, be.xp, batched=False))[0])


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


def check_initial(initial: Any, grid: Any, state: Any) -> Result | np.ndarray | None:
    """``initial`` checked against the grid before any work: a :class:`Result` with U and M
    of shape (nt + 1, nx), or a real coupling state shaped like ``state`` (levels 1..nt) or
    with level 0 in front (dropped), finite. Returns the Result or the state (float64)."""
    if initial is None:
        return None
    levels = (grid.nt + 1, grid.nx)
    if isinstance(initial, Result):
        for name in ("M", "U"):
            value = np.asarray(to_numpy(getattr(initial, name)))
            if value.shape != levels:
                raise ParameterError(f"initial has {name} of shape {value.shape}: must match "
                                     f"the grid, {levels} for nx={grid.nx}, nt={grid.nt}")
            if not np.all(np.isfinite(value)):
                raise ParameterError(f"initial has non-finite values in {name}: a warm start "
                                     "must be finite")
        return initial
    value = np.asarray(to_numpy(initial)) if not isinstance(initial, np.ndarray) else initial
    if value.dtype.kind not in "iuf":
        raise ParameterError(f"initial of dtype {value.dtype} is invalid: must be an mfgwork "
                             "Result or a real array (the coupling state)")
    shape = tuple(np.shape(to_numpy(state)))
    with_level0 = (shape[0] + 1, *shape[1:])
    if value.shape not in (shape, with_level0):
        raise ParameterError(f"initial has shape {value.shape}: a coupling state on this grid "
                             f"has shape {shape} (levels 1..nt) or {with_level0} (levels "
                             f"0..nt), for nx={grid.nx}, nt={grid.nt}")
    if not np.all(np.isfinite(value)):
        raise ParameterError("initial has non-finite values: a warm start must be finite")
    return np.asarray(value[1:] if value.shape == with_level0 else value, dtype=np.float64)


def _warm_start(start: Result | np.ndarray | None, coupling: Any, be: Backend
                ) -> dict[str, Any]:
    """The starting iterate on ``be``: a Result's U and M, or a coupling state (projected
    onto admissible values)."""
    if start is None:
        return {}
    if isinstance(start, Result):
        return {"M_init": be.asarray(to_numpy(start.M)), "U_init": be.asarray(to_numpy(start.U))}
    return {"z_init": coupling.project(be.asarray(start.astype(be.dtype)))}


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


def _result(problem: MFGProblem, grid: Any, be: Backend, out: FixedPointResult,
            member: int | None, settings: dict[str, Any], timings: dict[str, float],
            extra: dict[str, Any]) -> Result:
    """The Result of one problem (``member`` of a batch, or None)."""
    b = 0 if member is None else member
    U, M = (out.U, out.M) if member is None else (out.U[b], out.M[b])
    observables = problem.observables(grid, M, be)
    summary = problem.summary(grid, {k: to_numpy(v) for k, v in observables.items()})
    params = problem.params() | {"nx": grid.nx, "nt": grid.nt} | settings | {
        "backend": be.name, "device": be.device, "dtype": be.dtype}
    return Result(x=be.asarray(grid.x), t=be.asarray(grid.t), U=U, M=M,
                  converged=bool(out.converged[b]), residual=float(out.residual[b]),
                  iterations=int(out.iterations[b]), history=out.history.as_dict(),
                  params=params, timings=timings, backend=be.name, device=be.device,
                  dtype=be.dtype, method=settings["method"], observables=observables,
                  summary=summary, state_name=problem.state_name, extra=extra)


def _progress_bar(progress: bool | None, total: int) -> Any:
    if progress is False:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="Picard", unit="it", leave=False,
                delay=0.0 if progress else 1.0)
