"""The long run through the front door: ``mw.solve(problem, stationary=True)``.

The ergodic system of :mod:`mfgwork.numerics.stationary` solved for a 1-D problem, returned as
a :class:`~mfgwork.Result` of one level: ``U`` (1, nx) the ergodic value v (Σ w v = 0), ``M``
(1, nx) the stationary density, ``t = (0.0,)`` (no time: the state the finite-horizon solution
rests at far from both ends), the observables at that state, ``summary["ergodic_constant"]``
λ (the cost per unit time), ``params["stationary"]`` True. ``res.check()`` recomputes its
certificate: one best response (the ergodic HJB for its density, then the stationary FP).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .core.backend import Backend, get_backend
from .core.errors import ParameterError
from .numerics.stationary import ErgodicSystem, solve_stationary
from .problems.base import MFGProblem
from .results import Result


def solve_long_run(problem: MFGProblem, *, nx: int, tol: float, max_iter: int,
                   method: str, backend: Any, device: Any, dtype: Any) -> Result:
    """The stationary solution of ``problem`` on ``nx`` nodes (module docstring), refused
    before any work for what it does not do: particles, another backend or dtype than NumPy
    float64 on the CPU."""
    if method != "fdm":
        raise ParameterError(f"method={method!r} is invalid with stationary=True: the ergodic "
                             "system is solved by finite differences (method='fdm')")
    be = backend if isinstance(backend, Backend) else get_backend(
        backend, "cpu" if device == "auto" else device, dtype)
    if be.name != "numpy" or be.dtype != "float64":
        raise ParameterError(f"backend={be.name!r}, dtype={be.dtype!r} is invalid with "
                             "stationary=True: the ergodic system (2 nx + 1 unknowns, one "
                             "dense Newton system) is solved with NumPy in float64 on the CPU")
    started = time.perf_counter()
    grid = problem.grid(nx, 1)
    grid.check_scales(problem.sigma)
    out = solve_stationary(problem, nx, tol, max_iter)
    M = out.m[None]
    observables = {k: np.asarray(v) for k, v in
                   problem.observables(grid, M, get_backend("numpy")).items()}
    summary = problem.summary(grid, observables) | {"ergodic_constant": float(out.ergodic_constant)}
    total = time.perf_counter() - started
    params = problem.params() | {"method": "fdm", "tol": tol, "max_iter": max_iter,
                                 "stationary": True, "iteration": {"scheme": "newton",
                                                                   "system": "dense"}}
    return Result(x=np.asarray(grid.x), t=np.zeros(1), U=out.v[None], M=M,
                  converged=out.converged, iterations=out.iterations,
                  history=out.history, params=params,
                  timings={"solve": total, "total": total}, backend="numpy", device="cpu",
                  dtype="float64", observables=observables, summary=summary,
                  state_name=problem.state_name, residual=out.residual)


def stationary_residual(result: Result, problem: MFGProblem) -> float:
    """The certificate of a stationary ``result`` (:meth:`Result.check`): one best response
    to its density."""
    M = np.asarray(result.M, dtype=np.float64)
    system = ErgodicSystem(problem, M.shape[-1])
    return system.certificate(M[0] * system.w, np.asarray(result.U, dtype=np.float64)[0],
                              float(result.summary["ergodic_constant"]))
