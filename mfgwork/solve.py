"""The front door: ``mw.solve(problem, ...)``."""

from __future__ import annotations

import time
from typing import Any

from .backend import Backend, get_backend
from .errors import ParameterError, check_choice, check_int, check_real
from .fdm.sweeps import FiniteDifferences
from .particles import ParticleFP, check_particle_args
from .picard import IterationScheme, fixed_point, make_scheme
from .problems.base import MFGProblem
from .problems.santa_fe import SantaFeBar
from .results import Result

METHODS = ("fdm", "particles")


def solve(problem: MFGProblem, nx: int = 201, nt: int = 201, method: str = "fdm",
          backend: str | Backend = "numpy", device: str = "cpu", dtype: object = None,
          tol: float = 1e-8, max_iter: int = 200,
          iteration: str | IterationScheme | None = None,
          progress: bool | None = None, n_particles: int | None = None,
          seed: int | None = None, compile_steps: bool | str = False) -> Result:
    """Solve the MFG system of ``problem`` on an ``nx`` × ``nt`` grid.

    ``nx`` counts grid points including both walls; ``nt`` time steps give ``nt + 1`` levels.
    ``method="fdm"``: implicit upwind finite differences for HJB and FP (Achdou's adjoint
    scheme). ``backend``/``device``/``dtype`` choose where it runs (see
    :func:`mfgwork.get_backend`). The Picard iteration (``iteration``: "anderson" (default),
    "relaxation", "fictitious_play", "picard" or an :class:`~mfgwork.picard.IterationScheme`)
    stops when the relative changes of U and M are below ``tol``, or after ``max_iter``
    iterations with ``converged=False`` and a :class:`~mfgwork.errors.ConvergenceWarning`.
    ``progress``: a tqdm bar (None: shown only when the solve lasts over a second).
    ``method="particles"``: HJB by finite differences, FP by ``n_particles`` particles
    (default 100 000; see :class:`mfgwork.particles.ParticleFP`) drawn from ``seed`` (None: a
    fresh seed, recorded in ``params``); every FP solve restarts from that seed (common random
    numbers), so the Picard map is deterministic.
    ``compile_steps``: ``torch.compile`` the per-time-step kernels of the torch path (True, or
    a ``torch.compile`` mode name); it fuses their many small operations, which pays off on
    CUDA for long solves once the one-time compilation is done.
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
    tol = check_real("tol", tol, low=0.0)
    max_iter = check_int("max_iter", max_iter, low=1)
    scheme = make_scheme(iteration)
    be = get_backend(backend, device, dtype)

    m0 = problem.initial_density(grid, be)
    U_T = problem.terminal_cost(grid, be)
    coupling = problem.coupling(grid, be)
    scheme_fd = FiniteDifferences(grid, problem.nu, be, compile_steps=compile_steps)
    fp, fp_params = scheme_fd.solve_fp, {}
    if method == "particles":
        particles = ParticleFP(grid, problem.sigma, be, n_particles=n_particles, seed=seed)
        fp = particles.solve_fp
        fp_params = {"n_particles": particles.n_particles, "seed": particles.seed}
    bar = _progress_bar(progress, max_iter)
    setup = time.perf_counter() - started
    try:
        out = fixed_point(coupling, scheme_fd.solve_hjb, fp, m0=m0, U_T=U_T,
                          nt=grid.nt, backend=be, scheme=scheme, tol=tol, max_iter=max_iter,
                          progress=bar)
    finally:
        if bar is not None:
            bar.close()
    hist = out["history"]
    x, t = be.asarray(grid.x), be.asarray(grid.t)
    attendance = threshold = None
    if isinstance(problem, SantaFeBar):
        chi_w = be.asarray(grid.weights * grid.cell_fraction_above(0.0))
        attendance = be.xp.sum(out["M"] * chi_w, axis=-1)
        threshold = problem.threshold
    be.synchronize()
    timings = {"setup": setup, "hjb": sum(hist.time_hjb), "fp": sum(hist.time_fp),
               "coupling": sum(hist.time_coupling), "total": time.perf_counter() - started}
    params = problem.params() | {"nx": grid.nx, "nt": grid.nt, "method": method, "tol": tol,
                                 "max_iter": max_iter, "iteration": scheme.describe(),
                                 "backend": be.name, "device": be.device, "dtype": be.dtype
                                 } | fp_params
    return Result(x=x, t=t, U=out["U"], M=out["M"], converged=out["converged"],
                  iterations=out["iterations"], history=hist.as_dict(), params=params,
                  timings=timings, backend=be.name, device=be.device, dtype=be.dtype,
                  method=method, attendance=attendance, threshold=threshold,
                  extra={"newton_iterations": scheme_fd.newton_iterations})


def _progress_bar(progress: bool | None, total: int) -> Any:
    if progress is False:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="Picard", unit="it", leave=False,
                delay=0.0 if progress else 1.0)
