"""The 2-D front door: ``mw.solve_2d(problem, nx, ny, nt, ...)`` and ``mw.solve_2d_batch``.

Solves the MFG system of a :class:`~mfgwork.problems.two_d.MFGProblem2D` (the room, the two
bars, or a user problem) with the implicit upwind scheme of :mod:`mfgwork.numerics.fdm2d`
and returns a :class:`~mfgwork.results2d.Result2D` (a :class:`~mfgwork.Result` with dims
("t", "y", "x")). Linear systems (see
:mod:`mfgwork.numerics.fdm2d.sweeps`): ``solver="ilu"`` (numba ILU(0)-BiCGStab, the default
with NumPy), ``"direct"`` (SuperLU) or ``"krylov"`` (matrix-free stencil + batched
Jacobi-BiCGStab, the default and only choice with torch on any device; CUDA graphs on CUDA,
and with Triton one launch a solve preconditioned by two terms of the Neumann series).

API (stable):

    solve_2d(problem, nx=101, ny=None, nt=100, backend="numpy", device="cpu", dtype=None,
             tol=1e-6, max_iter=200, solver=None, iteration=None, progress=None,
             max_memory=None) -> Result2D
    solve_2d_batch(problems, <same keywords>) -> list[Result2D]

Models: :class:`~mfgwork.problems.room.Room`, :class:`~mfgwork.problems.two_bars.TwoBars`,
any :class:`~mfgwork.problems.two_d.MFGProblem2D` (with any isotropic Hamiltonian). A
Hamiltonian whose value can be traced runs the compiled assembly of the NumPy solvers and the
Triton system on CUDA, both built from its expression in s = |p|²
(:mod:`mfgwork.numerics.fdm2d.isotropic`); any other the array code.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .core import memory
from .core.backend import Backend, get_backend, to_numpy
from .core.errors import ParameterError, check_choice, check_flag, check_int
from .numerics.fdm2d import equilibrium as eq
from .numerics.fdm2d.sweeps import SOLVERS
from .numerics.iteration import Anderson, IterationScheme, check_stopping, make_scheme
from .numerics.stationary2d import ErgodicSystem2D
from .placement import resolve
from .problems.base import warn_unresolved
from .problems.two_d import MFGProblem2D
from .results2d import Result2D
from .solve import BATCH_SOLVERS, raised_tol
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


def _check_args(problems: list[Any], nx: Any, ny: Any, nt: Any, backend: Any, device: Any,
                dtype: Any, tol: Any, max_iter: Any, solver: Any, iteration: Any
                ) -> tuple[int, int, int, Backend, float, int, str, IterationScheme]:
    for p in problems:
        if not isinstance(p, MFGProblem2D):
            raise ParameterError(f"problem={p!r:.80} is invalid: must be an MFGProblem2D "
                                 "(mw.Room, mw.TwoBars or a user MFGProblem2D)")
    nx = check_int("nx", nx, low=3)
    ny = nx if ny is None else check_int("ny", ny, low=3)
    nt = check_int("nt", nt, low=1)
    tol, max_iter = check_stopping(tol, max_iter)
    if isinstance(backend, str):   # (a Backend says where already)
        placed = resolve(problems, backend=backend, device=device)
        backend, device = placed.backend, placed.device
    be = get_backend(backend, device, dtype)
    default = "ilu" if be.name == "numpy" else "krylov"
    solver = default if solver is None else check_choice("solver", solver, SOLVERS)
    if solver in ("direct", "ilu") and be.name != "numpy":
        raise ParameterError(f"solver={solver!r} is invalid with backend={be.name!r}: it runs "
                             "on NumPy (the CPU); use solver='krylov'")
    scheme = default_iteration(be.dtype) if iteration is None else make_scheme(iteration)
    return nx, ny, nt, be, tol, max_iter, solver, scheme


def check_size_2d(problems: list[Any], nx: int, ny: int, nt: int, be: Backend, solver: str,
                scheme: IterationScheme, max_memory: Any) -> int:
    """Refuse (ParameterError naming the parameter) a solve that does not fit, before work."""
    item = 4 if be.dtype == "float32" else 8
    depth = getattr(scheme, "depth", 0)
    batch = len(problems)
    sizes = [p.coupling_size(nx, ny, nt) for p in problems]
    parts = {"nx, ny and nt": batch * GRID_ARRAYS * item * (nt + 1) * nx * ny,
             "nx, ny and nt (the coupling states of the iteration)": sum(
                 memory.anderson_bytes(s, item, depth) for s in sizes)}
    if solver in ("direct", "ilu"):
        parts["nx, ny and nt (the kept Newton matrices)"] = (
            batch * KEPT_ARRAYS * item * (nt + 1) * nx * ny)
    if solver == "direct":  # the SuperLU factors (the iterative solvers need a few vectors)
        n = nx * ny
        parts["nx and ny (the sparse factorisation)"] = int(LU_BYTES * n * math.log2(n))
    return memory.check_parts(parts, be, what=f"a {nx} x {ny} x {nt} 2-D solve"
                              + (f" of {batch} problems" if batch > 1 else ""),
                              max_memory=max_memory)


def solve_2d(problem: MFGProblem2D, nx: int = 101, ny: int | None = None, nt: int = 100,
             backend: str | Backend = "numpy", device: str = "cpu", dtype: object = None,
             tol: float = 1e-6, max_iter: int = 200, solver: str | None = None,
             iteration: str | IterationScheme | None = None, progress: bool | None = None,
             max_memory: int | str | None = None, stationary: bool = False) -> Result2D:
    """Solve ``problem`` on ``nx`` × ``ny`` nodes (walls included; ``ny`` defaults to ``nx``)
    and ``nt`` time steps, to a certified relative fixed-point residual ``tol``.

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
    (:mod:`mfgwork.numerics.stationary2d`; ``nt``, T, ``solver`` and ``iteration`` play no
    part), solved in float64 on the CPU by sparse LU and returned on ``backend``.
    """
    if check_flag("stationary", stationary):
        return _long_run(problem, nx, ny, backend, device, dtype, tol, max_iter, max_memory)
    return _solve([problem], False, nx, ny, nt, backend, device, dtype, tol, max_iter,
                  solver, iteration, progress, max_memory)[0]


def solve_2d_batch(problems: Sequence[MFGProblem2D], nx: int = 101, ny: int | None = None,
                   nt: int = 100, backend: str | Backend = "numpy", device: str = "cpu",
                   dtype: object = None, tol: float = 1e-6, max_iter: int = 200,
                   solver: str | None = None, iteration: str | IterationScheme | None = None,
                   progress: bool | None = None,
                   max_memory: int | str | None = None) -> list[Result2D]:
    """Solve problems of one grid size (their own doors, obstacles, σ and coupling
    parameters; one Hamiltonian) as one batch along a leading axis with the "krylov" solver
    (every member with its own mixing and certificate), or one after the other with "ilu"
    and "direct"."""
    if not isinstance(problems, list | tuple) or not problems:
        raise ParameterError(f"problems={problems!r:.80} is invalid: must be a non-empty list "
                             "of MFGProblem2D")
    return _solve(list(problems), True, nx, ny, nt, backend, device, dtype, tol, max_iter,
                  solver, iteration, progress, max_memory)


def _solve(problems: list[Any], batch: bool, nx: Any, ny: Any, nt: Any, backend: Any,
           device: Any, dtype: Any, tol: Any, max_iter: Any, solver: Any, iteration: Any,
           progress: Any, max_memory: Any) -> list[Result2D]:
    nx, ny, nt, be, tol, max_iter, solver, scheme = _check_args(
        problems, nx, ny, nt, backend, device, dtype, tol, max_iter, solver, iteration)
    if batch:
        kinds = {(type(p), type(p.hamiltonian), repr(p.hamiltonian)) for p in problems}
        if len(kinds) > 1:
            raise ParameterError("problems is invalid: a batch needs one problem type and one "
                                 "Hamiltonian (got " + ", ".join(sorted(str(k[2])
                                                                       for k in kinds)) + ")")
    check_size_2d(problems, nx, ny, nt, be, solver, scheme, max_memory)
    for p in problems:   # (builds the grid: after the size guard)
        p.grid(nx, ny, nt).check_scales(p.sigma, be.dtype)
    warn_unresolved(problems, problems[0].grid(nx, ny, nt))
    if batch and solver != "krylov":
        return [_solve_one(p, False, nx, ny, nt, be, tol, max_iter, solver, scheme, progress)[0]
                for p in problems]
    return _solve_one(problems if batch else problems[0], batch, nx, ny, nt, be, tol,
                      max_iter, solver, scheme, progress)


def _solve_one(problems: Any, batch: bool, nx: int, ny: int, nt: int, be: Backend, tol: float,
               max_iter: int, solver: str, scheme: IterationScheme, progress: Any
               ) -> list[Result2D]:
    start = time.perf_counter()
    setup = eq.build(problems, nx, ny, nt, be, solver)
    tol = _resolvable_tol(tol, setup)
    bar = _progress_bar(progress, max_iter)
    try:
        out = eq.equilibrium(setup, scheme, tol, max_iter, bar)
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - start
    sch = setup.scheme
    if setup.coupling.feeds:
        sch.density = setup.coupling.state(out.M)
    outflow = to_numpy(sch.outflow(out.U, out.M))
    vx, vy = (to_numpy(v) for v in sch.velocity(out.U))
    U, M = to_numpy(out.U), to_numpy(out.M)
    hist = out.history.as_dict()
    timings = {"total": wall, "hjb": float(sum(hist["time_hjb"])),
               "fp": float(sum(hist["time_fp"])),
               "coupling": float(sum(hist["time_coupling"]))}
    extra = {"solver": solver, "iteration": scheme.describe(),
             "newton_iterations": sch.newton_iterations,
             "krylov_iterations": sch.krylov_iterations, "factorizations": sch.factorizations,
             "reevaluations": out.reevaluations, "coupling_newton": setup.newton}
    results = []
    for b, (p, g) in enumerate(zip(setup.problems, setup.grids, strict=True)):
        pick = (lambda a, b=b: a[b]) if batch else (lambda a: a)
        Mb = pick(M)
        flows = pick(outflow)[:, :len(g.exits)]  # (nt+1, the doors of this problem)
        obs = {k: to_numpy(v) for k, v in p.observables(g, pick(out.M), be).items()}
        labels, axes = _observable_axes(p, obs)
        results.append(Result2D(
            x=g.x, t=g.t, U=pick(U), M=Mb, converged=bool(out.converged[b]),
            iterations=int(out.iterations[b]), history=hist,
            params=p.params() | {"nx": nx, "ny": ny, "nt": nt, "tol": tol,
                                 "max_iter": max_iter},
            timings=timings, backend=be.name, device=be.device, dtype=be.dtype,
            observables=obs, extra=extra, residual=float(out.residual[b]),
            labels=labels | {"door": tuple(e.label for e in g.exits)}, axes=axes,
            arrays={"y": g.y, "velocity_x": pick(vx), "velocity_y": pick(vy),
                    "outflow": flows.sum(axis=-1), "exit_flux": flows.sum(axis=-1) / g.dt,
                    "door_outflow": flows, "obstacle": g.obstacle, "exit": g.exit},
            problem=p))
    return results


def _long_run(problem: Any, nx: Any, ny: Any, backend: Any, device: Any, dtype: Any,
              tol: Any, max_iter: Any, max_memory: Any) -> Result2D:
    """:func:`solve_2d` with ``stationary=True``: one level (t = 0), U the ergodic value v
    (Σ V v = 0), M the stationary density, ``summary["ergodic_constant"]`` λ."""
    started = time.perf_counter()
    nx, ny, _, be, tol, max_iter, _, _ = _check_args([problem], nx, ny, 1, backend, device,
                                                     dtype, tol, max_iter, None, None)
    if be.dtype != "float64":
        raise ParameterError(f"dtype={be.dtype!r} is invalid with stationary=True: the "
                             "ergodic system is solved in float64 (on the CPU)")
    n = nx * ny
    memory.check_parts({"nx and ny": int(LU_BYTES * n * math.log2(n))},
                       get_backend("numpy"), max_memory=max_memory,
                       what=f"the long run on {nx} x {ny} nodes (sparse factorisations)")
    system = ErgodicSystem2D(problem, nx, ny)
    g = system.grid
    g.check_scales(problem.sigma, "float64", steady=True)
    warn_unresolved([problem], g)
    out = system.solve(tol, max_iter)
    host = get_backend("numpy")
    M = out.m[None]
    obs = {k: to_numpy(v) for k, v in problem.observables(g, M, host).items()}
    labels, axes = _observable_axes(problem, obs)
    vx, vy = (v[None] for v in system.stencil.velocity(out.v, None))
    wall = time.perf_counter() - started
    return Result2D(
        x=g.x, t=np.zeros(1), U=be.asarray(out.v[None]), M=be.asarray(M),
        converged=out.converged, iterations=out.iterations, history=out.history,
        params=problem.params() | {"nx": nx, "ny": ny, "tol": tol, "max_iter": max_iter,
                                   "stationary": True, "iteration": {
                                       "scheme": "newton", "system": "sparse LU on the CPU"}},
        timings={"solve": wall, "total": wall}, backend=be.name, device=be.device,
        dtype=be.dtype, observables=obs, residual=out.residual, axes=axes,
        summary={"ergodic_constant": float(out.ergodic_constant)},
        labels=labels | {"door": ()},
        arrays={"y": g.y, "velocity_x": vx, "velocity_y": vy, "outflow": np.zeros(1),
                "exit_flux": np.zeros(1), "door_outflow": np.zeros((1, 0)),
                "obstacle": g.obstacle, "exit": g.exit},
        extra={"best_responses": out.iterations}, problem=problem)


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


def _progress_bar(progress: bool | None, total: int) -> Any:
    if progress is False:
        return None
    from .core.progress import progress_bar

    return progress_bar(total=total, desc="fixed point 2-D", unit="it", leave=False,
                        delay=0.0 if progress else 1.0)


FRONT_DOOR[MFGProblem2D] = solve_2d
BATCH_SOLVERS[MFGProblem2D] = solve_2d_batch
