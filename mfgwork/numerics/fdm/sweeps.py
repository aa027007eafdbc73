"""HJB (backward) and FP (forward) sweeps of the implicit finite-difference scheme.

:class:`FiniteDifferences` binds the scheme of :mod:`.operators` to a grid, ν and a backend,
and runs the sweeps that the table of :mod:`.kernels` names for it. On the CPU (NumPy arrays,
and torch CPU tensors through zero-copy views) these are the compiled loops of
:mod:`.numba_kernels`; on CUDA with Triton the fused batched sweeps of :mod:`.triton_sweeps`
(whole time loop and per-step Newton in one launch, non-convergence flags read back with the
next host synchronisation); on other accelerators and under MPS emulation the array-API
sweeps below with the backend's tridiagonal kernel. The array-API time loop makes no host
round trip: each step takes a fixed number of Newton iterations and
the largest final Newton update is checked once after the sweep (if it is too large, the
sweep is repeated with twice the iterations). By quadratic convergence the error left after
a last update δ is about C δ², so an update of 0.1·√tol leaves an error near tol. On CUDA
each sweep is recorded once as a CUDA graph and replayed (``cuda_graphs``), which removes the
launch cost of its many small kernels; ``compile_steps`` fuses them with ``torch.compile``.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import numpy as np

from ...core.backend import Backend
from ...core.errors import SolverError
from ...core.grid import Grid
from .kernels import FDKernels, fdm_kernels
from .operators import hjb_residual, jacobian_bands, transpose_bands

MAX_NEWTON = 50


class Constants(NamedTuple):
    """Scheme constants as 0-d / 1-d arrays of the backend (so compiled steps don't
    specialize on their values)."""

    nu: Any
    h: Any
    dt: Any
    inv_hw: Any
    inv_w: Any


def newton_step(u: Any, u_next: Any, F_n: Any, c: Constants, *, solve: Any, xp: Any
                ) -> tuple[Any, Any]:
    """One Newton iteration for R(u) = 0 (one HJB time step); returns the new u and the
    update relative to 1 + max|u| (per batch member)."""
    lower, diag, upper, q = jacobian_bands(u, c.nu, c.h, c.dt, c.inv_hw, xp)
    du = solve(lower, diag, upper, hjb_residual(u, u_next, F_n, q, c.nu, c.dt, c.inv_w, xp))
    u = u - du
    return u, xp.max(xp.abs(du), axis=-1) / (1.0 + xp.max(xp.abs(u), axis=-1))


def fp_step(lower_t: Any, diag: Any, upper_t: Any, mu: Any, c: Constants, *,
            solve: Any) -> Any:
    """One FP step for cell masses: J(u^n)ᵀ μ^{n+1} = μ^n / Δt."""
    return solve(lower_t, diag, upper_t, mu / c.dt)


def _host(a: Any) -> np.ndarray:
    """A NumPy view of a host array (NumPy, or a torch CPU tensor without copying)."""
    return a if isinstance(a, np.ndarray) else np.ascontiguousarray(a.numpy())


def _start_copy(status: Any) -> tuple[Any, Any]:
    """A host copy of a device tensor started without waiting, and the event marking its end
    (None on the CPU, where the copy is done already)."""
    if status.device.type != "cuda":
        return status.numpy(), None
    import torch

    host = torch.empty(status.shape, dtype=status.dtype, pin_memory=True)
    host.copy_(status, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return host.numpy(), event


def _compiled(newton: Any, fp: Any, mode: str) -> tuple[Any, Any]:
    """``torch.compile`` the per-step kernels (fusing their many small ops)."""
    import torch

    return (torch.compile(newton, mode=mode, dynamic=False),
            torch.compile(fp, mode=mode, dynamic=False))


class FiniteDifferences:
    """The implicit upwind scheme on ``grid`` with diffusion ``nu`` for ``backend``."""

    def __init__(self, grid: Grid, nu: float | np.ndarray, backend: Backend, *,
                 accelerator_newton_steps: int = 4,
                 compile_steps: bool | str = False, cuda_graphs: bool | None = None,
                 kernels: FDKernels | None = None) -> None:
        self.grid, self.backend = grid, backend
        self.kernels = fdm_kernels(backend) if kernels is None else kernels
        self._hjb_sweep, self._fp_sweep = self.kernels.bind(self)
        self.nu = np.asarray(nu, dtype=np.float64)  # a scalar, or (B, 1) for a batch
        self.weights = backend.asarray(grid.weights)
        self._inv_w_np = 1.0 / grid.weights
        self._inv_hw_np = 1.0 / (grid.h * grid.weights)
        self.inv_w = backend.asarray(self._inv_w_np)
        self.inv_hw = backend.asarray(self._inv_hw_np)
        self.newton_tol = 64 * backend.eps
        self.accept_tol = max(self.newton_tol, 0.1 * self.newton_tol**0.5)
        self.newton_steps = accelerator_newton_steps
        self.newton_iterations = 0
        solve = self.kernels.tridiagonal
        self._consts = Constants(backend.asarray(self.nu), backend.asarray(grid.h),
                                 backend.asarray(grid.dt), self.inv_hw, self.inv_w)
        self._newton = partial(newton_step, solve=solve, xp=backend.xp)
        self._fp_kernel = partial(fp_step, solve=solve)
        self._pending: list[tuple[Any, Any]] = []  # fused sweeps' status, read back later
        self._nu_device: Any = None
        self.use_cuda_graphs = (backend.kind == "cuda" and self.kernels.hjb == "_hjb_accelerated"
                                if cuda_graphs is None else cuda_graphs)
        self._graphs: dict[tuple, Any] = {}
        if compile_steps:
            self._newton, self._fp_kernel = _compiled(
                self._newton, self._fp_kernel,
                "default" if compile_steps is True else compile_steps)

    # -- HJB ---------------------------------------------------------------------------------
    def solve_hjb(self, U_T: Any, F: Any, guess: Any | None = None) -> Any:
        """U with U[..., nt, :] = U_T, solving the HJB steps with running costs F[..., n, :].

        ``guess`` (same shape as U, optional) seeds Newton at each step, e.g. the previous
        Picard iterate; otherwise each step starts from the later time level.
        """
        return self._hjb_sweep(U_T, F, guess)

    def _hjb_host(self, U_T: Any, F: Any, guess: Any | None) -> Any:
        if F.ndim == 2:
            host = [None if a is None else _host(a) for a in (U_T, F, guess)]
            return self._from_host(self._hjb_compiled(*host))
        return self._hjb_array(U_T, F, guess, MAX_NEWTON, adaptive=True)[0]

    def _hjb_accelerated(self, U_T: Any, F: Any, guess: Any | None) -> Any:
        steps = self.newton_steps
        while True:
            U, worst = self._hjb_fixed(U_T, F, guess, steps)
            self.newton_iterations += steps * self.grid.nt
            worst = float(worst)
            if worst <= self.accept_tol or steps >= MAX_NEWTON:
                break
            steps = min(2 * steps, MAX_NEWTON)
        if not worst <= self.accept_tol:
            raise SolverError(f"HJB Newton did not converge in {steps} steps per time step "
                              f"(largest final relative update {worst:.3g})")
        self.newton_steps = steps  # what sufficed here serves the next (closer) iterate
        return U

    def _hjb_fused(self, U_T: Any, F: Any, guess: Any | None) -> Any:
        from . import triton_sweeps

        self.check_newton()  # the previous sweep's flags (read without a wait by now)
        single = F.ndim == 2
        if single:
            U_T, F, guess = U_T[None], F[None], None if guess is None else guess[None]
        g = self.grid
        U, status = triton_sweeps.hjb_sweep(U_T, F, guess, self._nu_per_problem(F.shape[0]),
                                            g.h, g.dt, self.inv_hw, self.inv_w,
                                            self.newton_tol, MAX_NEWTON)
        self._pending.append(_start_copy(status))
        return U[0] if single else U

    def check_newton(self) -> None:
        """Read the fused sweeps' Newton flags and counts; raise :class:`SolverError` if a
        time step of some problem did not converge. Called before each fused HJB sweep and
        by the front door after the iteration, so it waits only on finished work."""
        pending, self._pending = self._pending, []
        for status, event in pending:
            if event is not None:
                event.synchronize()
            bad, iterations = np.asarray(status)
            self.newton_iterations += int(iterations.max())
            if (bad >= 0).any():
                b = int(np.argmax(bad >= 0))
                where = f" for problem {b} of the batch" if bad.size > 1 else ""
                raise SolverError(f"HJB Newton did not converge at time step n={bad[b]} "
                                  f"(t={self.grid.t[bad[b]]:.6g}){where} in {MAX_NEWTON} "
                                  "iterations")

    def _nu_per_problem(self, batch: int) -> Any:
        """ν as a (batch,) array of the backend (one value per problem)."""
        if self._nu_device is None or self._nu_device.shape[0] != batch:
            nu = np.full(batch, float(self.nu)) if self.nu.ndim == 0 else self.nu.reshape(-1)
            self._nu_device = self.backend.asarray(nu)
        return self._nu_device

    def _from_host(self, a: np.ndarray) -> Any:
        if self.backend.name == "numpy":
            return a
        import torch

        return torch.from_numpy(a)

    def _hjb_compiled(self, U_T: np.ndarray, F: np.ndarray, guess: np.ndarray | None) -> Any:
        from . import numba_kernels

        g = self.grid
        U = np.empty((g.nt + 1, g.nx), dtype=F.dtype)
        U[-1] = U_T
        its, bad = numba_kernels.hjb_sweep(U, F, U if guess is None else guess, guess is not None,
                                      float(self.nu), g.h, g.dt,
                                      self._inv_hw_np.astype(F.dtype),
                                      self._inv_w_np.astype(F.dtype), self.newton_tol,
                                      MAX_NEWTON)
        self.newton_iterations += its
        if bad >= 0:
            raise SolverError(f"HJB Newton did not converge at time step n={bad} "
                              f"(t={g.t[bad]:.6g}) in {MAX_NEWTON} iterations")
        return U

    def _hjb_array(self, U_T: Any, F: Any, guess: Any | None, max_newton: int,
                   adaptive: bool) -> tuple[Any, Any]:
        xp, g = self.backend.xp, self.grid
        levels: list[Any] = [None] * (g.nt + 1)
        levels[g.nt] = U_T + 0.0 * F[..., 0, :]
        worst = xp.zeros_like(F[..., 0, 0])
        for n in range(g.nt - 1, -1, -1):
            u_next = levels[n + 1]
            u = u_next if guess is None else guess[..., n, :]
            if adaptive:
                for _ in range(max_newton):
                    u, step = self._newton(u, u_next, F[..., n, :], self._consts)
                    self.newton_iterations += 1
                    if float(xp.max(step)) <= self.newton_tol:
                        break
                else:
                    raise SolverError(f"HJB Newton did not converge at time step n={n} "
                                      f"(t={g.t[n]:.6g}) in {max_newton} iterations")
            else:
                for _ in range(max_newton):
                    u, step = self._newton(u, u_next, F[..., n, :], self._consts)
                worst = xp.maximum(worst, step)
            levels[n] = u
        return xp.stack(levels, axis=-2), xp.max(worst)

    def _hjb_fixed(self, U_T: Any, F: Any, guess: Any | None, steps: int) -> tuple[Any, Any]:
        """The sweep with ``steps`` Newton iterations per time step (graph-replayed on CUDA)."""
        def sweep(U_T: Any, F: Any, *guess: Any) -> tuple[Any, Any]:
            return self._hjb_array(U_T, F, guess[0] if guess else None, steps, adaptive=False)

        args = (U_T, F) if guess is None else (U_T, F, guess)
        return self._graphed(("hjb", steps, len(args)), sweep, args)

    def _graphed(self, key: tuple, fn: Any, args: tuple) -> Any:
        """``fn(*args)``; with CUDA graphs on, recorded at the first call and replayed after."""
        if not self.use_cuda_graphs:
            return fn(*args)
        if key in self._graphs:
            return self._graphs[key].run(*args)
        eager = fn(*args)
        from ...core.cuda_graphs import record_checked

        graphed = record_checked(fn, eager, *args, what=f"{key[0].upper()} sweep")
        if graphed is None:
            self.use_cuda_graphs = False
        else:
            self._graphs[key] = graphed
        return eager

    # -- FP ----------------------------------------------------------------------------------
    def solve_fp(self, U: Any, m0: Any) -> Any:
        """Densities M (levels 0..nt) from m0, transported by the control −∂x u of U."""
        return self._fp_sweep(U, m0 * self.weights) * self.inv_w

    def _fp_host(self, U: Any, mu0: Any) -> Any:
        if U.ndim == 3:
            return self._fp_array(U, mu0)
        from . import numba_kernels

        g = self.grid
        U_host = _host(U)
        mu = np.empty_like(U_host)
        mu[0] = _host(mu0)
        numba_kernels.fp_sweep(U_host, mu, float(self.nu), g.h, g.dt,
                               self._inv_hw_np.astype(U_host.dtype))
        return self._from_host(mu)

    def _fp_accelerated(self, U: Any, mu0: Any) -> Any:
        return self._graphed(("fp",), self._fp_array, (U, mu0))

    def _fp_fused(self, U: Any, mu0: Any) -> Any:
        from . import triton_sweeps

        single = U.ndim == 2
        if single:
            U, mu0 = U[None], mu0[None]
        mu = triton_sweeps.fp_sweep(U, mu0, self._nu_per_problem(U.shape[0]), self.grid.h,
                                    self.grid.dt, self.inv_hw)
        return mu[0] if single else mu

    def _fp_array(self, U: Any, mu0: Any) -> Any:
        g, xp = self.grid, self.backend.xp
        nu_levels = self._consts.nu[..., None, :] if self.nu.ndim else self._consts.nu
        lower, diag, upper, _ = jacobian_bands(U[..., :-1, :], nu_levels, g.h, g.dt,
                                               self.inv_hw, xp)
        lt, dg, ut = transpose_bands(lower, diag, upper, xp)
        masses = [mu0 + 0.0 * U[..., 0, :]]
        for n in range(g.nt):
            masses.append(self._fp_kernel(lt[..., n, :], dg[..., n, :], ut[..., n, :],
                                          masses[n], self._consts))
        return xp.stack(masses, axis=-2)
