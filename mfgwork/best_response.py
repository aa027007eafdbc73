"""One best response to a solution, and its relative fixed-point residual: what certifies an
equilibrium (:meth:`mfgwork.Result.check`) and what the solvers' HJB and FP steps are built
from. Below the front door's solve module, which uses it.

The residual of a solution with coupling state z (Santa Fe and the two-state game: the
attendance path at levels 1..nt; otherwise the density path) is
‖z(BR(z)) − z‖₂ / ‖z(BR(z))‖₂, where BR(z) solves HJB for the running cost of z and then FP.
Each problem kind has its residual in :data:`mfgwork.results.CERTIFICATES` (a table from
problem type to function, filled here, where the solvers are; a new kind adds one entry).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .core.backend import Backend, get_backend, to_numpy
from .core.errors import ParameterError
from .numerics.fdm.sweeps import FiniteDifferences
from .numerics.fdm2d import equilibrium as fdm2d_equilibrium
from .numerics.finite_state import TwoStateScheme
from .numerics.iteration import FPSolver, HJBSolver, frozen_args, relative_residual
from .numerics.particles import ParticleFP
from .numerics.populations import populations_residual
from .numerics.stationary2d import ErgodicSystem2D
from .problems import TwoStateElFarol
from .problems.base import MFGProblem, batch_coupling, member_arrays
from .problems.populations import Populations
from .problems.two_d import MFGProblem2D
from .results import CERTIFICATES


def solvers(problem: MFGProblem, grid: Any, be: Backend, method: str,
            n_particles: int | None, seed: int | None, compile_steps: bool | str = False,
            max_memory: object = None
            ) -> tuple[FiniteDifferences, HJBSolver, FPSolver, dict[str, Any]]:
    """The HJB and FP solvers of one solve (and the particle parameters to record)."""
    H = problem.hamiltonian
    fd = FiniteDifferences(grid, problem.nu, be, hamiltonian=H, compile_steps=compile_steps)
    hjb, fp, fp_params = fd.solve_hjb, fd.solve_fp, {}
    if method == "particles":
        particles = ParticleFP(grid, problem.sigma, be, n_particles=n_particles, seed=seed,
                               max_memory=max_memory, hamiltonian=H)
        fp = particles.solve_fp
        fp_params = {"n_particles": particles.n_particles, "seed": particles.seed}
        if be.is_accelerator:  # (the CPU backends run the compiled loops already)
            fd = FiniteDifferences(grid, problem.nu, get_backend("numpy"), hamiltonian=H)
            hjb = on_host(fd.solve_hjb, be)
    return fd, hjb, fp, fp_params


def on_host(solve_hjb: Any, be: Backend) -> Any:
    """HJB solved by the compiled NumPy float64 sweep, U moved to ``be``: with particles the
    grid is small and the sequential sweep takes milliseconds on the CPU, far less than its
    thousands of tiny kernel launches on a device. One transfer each way per Picard iterate."""
    def hjb(U_T: Any, F: Any, guess: Any | None, *density: Any) -> Any:
        host = [None if a is None else np.asarray(to_numpy(a), dtype=np.float64)
                for a in (U_T, F, guess, *density)]
        return be.asarray(solve_hjb(*host))
    return hjb


def continuous_residual(result: Any, problem: MFGProblem) -> float:
    """The best-response residual of a continuous problem's result (:meth:`mfgwork.Result.
    check`)."""
    if result.params.get("stationary"):   # the long run: its own best response
        from .long_run import stationary_residual

        return stationary_residual(result, problem)
    if "certificate" in result.extra:   # a float32 result re-certified in float64
        return residual_on(result, problem, get_backend("numpy", "cpu", "float64"))
    return residual_on(result, problem,
                       get_backend(result.backend, result.device, result.dtype))


def residual_on(result: Any, problem: MFGProblem, be: Backend) -> float:
    """The best-response residual of ``result`` for the continuous ``problem``, computed on
    ``be``."""
    M = to_numpy(result.M)
    nt, nx = M.shape[0] - 1, M.shape[1]
    grid = problem.grid(nx, nt)
    particles = result.method == "particles"
    _, hjb, fp, _ = solvers(problem, grid, be, result.method,
                            result.params.get("n_particles") if particles else None,
                            result.params.get("seed") if particles else None)
    coupling = problem.coupling(grid, be)
    z = coupling.state(be.asarray(M))
    frozen = frozen_args(coupling, z)
    U = hjb(problem.terminal_cost(grid, be), coupling.running_cost(z),
            be.asarray(to_numpy(result.U)), *frozen)
    gz = coupling.state(fp(U, problem.initial_density(grid, be), *frozen))
    return float(to_numpy(relative_residual(gz, z, be.xp, batched=False))[0])


def batch_residuals_on(results: list[Any], problems: list[MFGProblem], be: Backend,
                       stacked: tuple[Any, Any] | None = None) -> np.ndarray:
    """:func:`residual_on` of finite-difference ``results`` of ``problems`` that share a
    grid, a coupling kind and a Hamiltonian (the members of one batch), computed as one
    batched best response on ``be`` (e.g. float64 on the device of a float32 batch).
    ``stacked``: their (M, U) stacked (B, nt + 1, nx), where the caller holds them (a
    batch's own arrays, of which the results hold views), else stacked here."""
    xp = be.xp
    M, U = ((be.stack([r.M for r in results]), be.stack([r.U for r in results]))
            if stacked is None else (be.asarray(a) for a in stacked))
    grid = problems[0].grid(M.shape[-1], M.shape[-2] - 1)
    coupling = batch_coupling([p.coupling(grid, be) for p in problems], be)
    fd = FiniteDifferences(grid, np.array([[p.nu] for p in problems]), be,
                           hamiltonian=problems[0].hamiltonian, compile_steps=False)
    z = coupling.state(M)
    frozen = frozen_args(coupling, z)
    U = fd.solve_hjb(member_arrays(problems, "terminal_cost", grid, be),
                     coupling.running_cost(z), U, *frozen)
    m0 = member_arrays(problems, "initial_density", grid, be)
    gz = coupling.state(fd.solve_fp(U, m0, *frozen))
    fd.check_newton()
    return np.asarray(to_numpy(relative_residual(gz, z, xp, batched=True)), dtype=np.float64)


def two_state_residual(result: Any, problem: TwoStateElFarol) -> float:
    """The best-response residual of a two-state result: the attendance path
    A = M[1:, 1] against that of one best response to it (the implicit sweeps of
    :class:`~mfgwork.numerics.finite_state.TwoStateScheme`, rates from the carried gap)."""
    M = np.asarray(to_numpy(result.M), dtype=np.float64)
    nt = M.shape[0] - 1
    sweeps = TwoStateScheme(nt, problem.T / nt, problem.switching_cost)
    coupling = problem.coupling()
    z = coupling.state(M)
    _, _, image = sweeps.best_response(problem.terminal_cost(), coupling.running_cost(z),
                                       problem.initial_distribution())
    gz = coupling.state(image)
    return float(np.linalg.norm(gz - z) / max(float(np.linalg.norm(gz)), 1e-300))


def best_response_residual_2d(result: Any, problem: MFGProblem2D) -> float:
    """The relative residual of one best response to ``result`` (NumPy float64, direct)."""
    if not isinstance(problem, MFGProblem2D):
        raise ParameterError(f"problem={problem!r:.80} is invalid: pass the MFGProblem2D "
                             "that was solved")
    nt, ny, nx = result.M.shape[0] - 1, result.y.size, result.x.size
    if getattr(result, "params", {}).get("stationary"):   # the long run: its own response
        system = ErgodicSystem2D(problem, nx, ny)
        return system.certificate(*(np.asarray(to_numpy(a), dtype=np.float64)[0]
                                    for a in (result.M, result.U)),
                                  float(result.summary["ergodic_constant"]))
    setup = fdm2d_equilibrium.build(problem, nx, ny, nt, get_backend("numpy"), "direct")
    res = fdm2d_equilibrium.best_response_residual(setup, np.asarray(result.M, dtype=np.float64),
                                    np.asarray(result.U, dtype=np.float64))
    return float(res[0])


CERTIFICATES.update({
    MFGProblem: continuous_residual, TwoStateElFarol: two_state_residual,
    Populations: populations_residual, MFGProblem2D: best_response_residual_2d})
