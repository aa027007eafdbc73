"""HJB (backward) and FP (forward) sweeps of the implicit finite-difference scheme.

:class:`FiniteDifferences` binds the scheme of :mod:`.operators` to a grid, ν, a Hamiltonian
and a backend, and runs the sweeps of the strategy that the table of :mod:`.kernels` chooses
for them. For every model whose value can be traced, on the CPU (NumPy arrays, and torch CPU tensors
through zero-copy views), these are the compiled loops of :mod:`.numba_kernels` (one template
with the model's generated functions), for other Hamiltonians the array-API sweeps below with
LAPACK; on CUDA with Triton the fused batched sweeps of :mod:`.triton_sweeps` for every
model Triton can print (whole time loop and per-step Newton in one launch, non-convergence
flags read back with the next host synchronisation); on other accelerators and under MPS
emulation the array-API sweeps below with the backend's tridiagonal kernel.
The array-API time loop makes no host round trip: each step takes a fixed number of Newton
iterations and the largest final Newton update is checked once after the sweep (if it is
too large, the sweep is repeated with twice the iterations). By quadratic convergence the
error left after a last update δ is about C δ², so an update of 0.1·√tol leaves an error
near tol.

Every array operation of a time step is a kernel launch on a device, so the generic path
keeps them few (3 ⌈log2 nx⌉ + 6 per Newton iteration, see ``tests/test_torch_path.py``):
the workspaces and the u-independent rows of the Newton system are made once per sweep,
the Jacobian bands and the residual come from one clamp and one product-and-add
(:func:`.operators.stacked_system`), the tridiagonal solve is a PCR of three kernels a level
(:func:`.tridiag.pcr_stacked`), the FP matrices of all time steps are reduced at once before
the sweep (:func:`.tridiag.pcr_factor`; inverted where they fit, so that an FP step is one
matrix-vector product), and the Newton update size is checked once per sweep. On CUDA each
sweep is recorded once as a CUDA graph and replayed (``cuda_graphs``); ``compile_steps``
fuses a time step's kernels with ``torch.compile`` (checked against the eager step at its
first call, see :mod:`mfgwork.core.compiling`).
"""

from __future__ import annotations

from functools import cached_property, partial
from typing import Any

import numpy as np

from ...core.backend import Backend, to_numpy
from ...core.compiling import CheckedCompile, wants_compile
from ...core.errors import ParameterError, SolverError
from ...core.grid import Grid
from ...problems.hamiltonians import Hamiltonian, Quadratic
from .kernels import FDKernels, fdm_kernels
from .operators import (
    StepConstants,
    SystemConstants,
    jacobian_bands,
    newton_system,
    stacked_system,
    step_constants,
    system_constants,
    transpose_bands,
)
from .tridiag import (
    full_float32_products,
    pcr_apply,
    pcr_apply_padded,
    pcr_factor,
    pcr_padding,
    pcr_reduce,
    pcr_workspace,
)

MAX_NEWTON = 50
#: The most entries (problems × nt × nx²) for which the device FP sweep forms the inverse
#: step matrices (one kernel a step instead of two a PCR level; 8 Mi entries: 32 MiB in
#: float32, formed in ⌈log2 nx⌉ wide kernels).
DENSE_FP_ENTRIES = 1 << 23


def newton_step(u: Any, rhs: Any, c: StepConstants, m: Any = None, *, solve: Any, xp: Any,
                hamiltonian: Hamiltonian) -> tuple[Any, Any]:
    """One Newton iteration for R(u) = 0 (``rhs`` = u^{n+1}/Δt + F^n, ``m`` the density H
    sees); returns the new u and the update."""
    du = solve(*newton_system(u, rhs, c, xp, hamiltonian, m))
    return u - du, du


def device_newton_step(u: Any, neg_rhs: Any, work: tuple[Any, ...], c: SystemConstants,
                       m: Any = None, *, xp: Any, hamiltonian: Hamiltonian) -> tuple[Any, Any]:
    """One Newton iteration on a device (``neg_rhs`` = −(u^{n+1}/Δt + F^n)): the system of
    :func:`.operators.stacked_system` reduced by PCR; returns the new u = u − d/diagonal (the
    last division folded into the update) and the reduced rows (diagonal, d) (..., 2, n),
    whose ratio is the update. ``work``: the system and edge-difference workspaces and the
    PCR workspace."""
    import torch

    system0, diff, pcr_work = work
    reduced = pcr_reduce(stacked_system(u, neg_rhs, (system0, diff), c, xp, hamiltonian, m),
                         pcr_work)
    return torch.addcdiv(u, reduced[..., 1, :], reduced[..., 0, :], value=-1.0), reduced


def relative_update(du: Any, u: Any, xp: Any) -> Any:
    """max|du| / (1 + max|u|) over the last axis."""
    return xp.max(xp.abs(du), axis=-1) / (1.0 + xp.max(xp.abs(u), axis=-1))


def newton_done(step: float, before: float, tol: float) -> bool:
    """Whether Newton's method at a level has its root within ``tol``: the relative update
    ``step`` is, or the error left after it by the contraction from the update ``before``
    (0: none yet), step² / (before − step), is within tol / 64 (rounding, for tol = 64 ε;
    the compiled loops' rule, :mod:`.model_loops`)."""
    return step <= tol or (before > step and 64.0 * step * step <= tol * (before - step))


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


class FiniteDifferences:
    """The implicit upwind scheme on ``grid`` with diffusion ``nu`` and the Hamiltonian
    ``hamiltonian`` (default ½|p|²) for ``backend``; ``kernels``: a strategy of
    :mod:`.kernels` (default: the first of the backend's entries that carries the
    Hamiltonian)."""

    def __init__(self, grid: Grid, nu: float | np.ndarray, backend: Backend, *,
                 hamiltonian: Hamiltonian | None = None, accelerator_newton_steps: int = 4,
                 compile_steps: bool | str = "auto", cuda_graphs: bool | None = None,
                 kernels: FDKernels | None = None) -> None:
        self.grid, self.backend = grid, backend
        self.hamiltonian = Quadratic() if hamiltonian is None else hamiltonian
        if kernels is None:   # the first of the table that carries the Hamiltonian
            kernels = fdm_kernels(backend, self.hamiltonian)
        elif not kernels.carries(self.hamiltonian):
            raise ParameterError(f"kernels={kernels.name!r} is invalid with "
                                 f"hamiltonian={self.hamiltonian!r}: those kernels carry "
                                 f"{kernels.carries_what} only")
        self.kernels = kernels
        self._hjb_sweep = partial(self.kernels.hjb, self)
        self._fp_sweep = partial(self.kernels.fp, self)
        self.x = backend.asarray(grid.x)
        self.nu = np.asarray(nu, dtype=np.float64)  # a scalar, or (B, 1) for a batch
        self.weights = backend.asarray(grid.weights)
        self._inv_w_np = 1.0 / grid.weights
        self._inv_hw_np = 1.0 / (grid.h * grid.weights)
        self.inv_w = backend.asarray(self._inv_w_np)
        self.inv_hw = backend.asarray(self._inv_hw_np)
        self._model: tuple[Any, np.ndarray] | None = None   # the compiled loops' module, prm
        self._host_arrays: dict[np.dtype, tuple[np.ndarray, ...]] = {}
        self.newton_tol = 64 * backend.eps
        self.accept_tol = max(self.newton_tol, 0.1 * self.newton_tol**0.5)
        self.newton_steps = accelerator_newton_steps
        self.newton_iterations = 0
        self._solve = self.kernels.tridiagonal
        self._newton = partial(newton_step, solve=self._solve, xp=backend.xp,
                               hamiltonian=self.hamiltonian)
        self._device_newton = partial(device_newton_step, xp=backend.xp,
                                      hamiltonian=self.hamiltonian)
        self._system: SystemConstants | None = None
        self._fp_step = pcr_apply_padded
        self._pending: list[tuple[Any, Any]] = []  # fused sweeps' status, read back later
        self._nu_device: Any = None
        self.use_cuda_graphs = (backend.kind == "cuda" and self.kernels.cuda_graphs
                                if cuda_graphs is None else cuda_graphs)
        self._graphs: dict[tuple, Any] = {}
        mode, self.compile_reason = (
            wants_compile(compile_steps, backend) if backend.is_accelerator
            else (None, "the CPU runs compiled loops and LAPACK"))
        if mode is not None:
            rtol = 512 * backend.eps
            self._device_newton = CheckedCompile(self._device_newton, mode, "HJB Newton step",
                                                 rtol)
            self._fp_step = CheckedCompile(pcr_apply_padded, mode, "FP time step", rtol)

    @cached_property
    def _consts(self) -> StepConstants:
        """The constants of the array-API time steps (made at their first use: the compiled
        loops need none)."""
        return step_constants(self.nu, self.grid.h, self.grid.dt, self._inv_hw_np, self.grid.x,
                              self.backend.asarray)

    @property
    def compiled_steps(self) -> dict[str, Any]:
        """Whether the time steps run ``torch.compile``d, and why (or why not)."""
        step = self._device_newton
        if isinstance(step, CheckedCompile):
            return {"compiled": bool(step.active), "reason": step.reason}
        return {"compiled": False, "reason": self.compile_reason}

    def _frozen(self, density: Any | None) -> Any | None:
        """``density`` where H depends on m (then it is required), else None."""
        if not self.hamiltonian.depends_on_m:
            return None
        if density is None:
            raise ParameterError(f"density=None is invalid with hamiltonian="
                                 f"{self.hamiltonian!r}, which depends on m: pass the "
                                 "densities m^1..m^nt that H sees (shape (..., nt, nx))")
        return density

    # -- HJB ---------------------------------------------------------------------------------
    def solve_hjb(self, U_T: Any, F: Any, guess: Any | None = None,
                  density: Any | None = None) -> Any:
        """U with U[..., nt, :] = U_T, solving the HJB steps with running costs F[..., n, :].

        ``guess`` (same shape as U, optional; e.g. the previous Picard iterate) seeds Newton:
        step n starts from guess^n + (u^{n+1} − guess^{n+1}), the guess shifted by the change
        found at the later level (about a fifth fewer Newton iterations than from guess^n
        over Santa Fe solves at 201²); without it, from u^{n+1}. ``density``
        (..., nt, nx): where H depends on m, the densities m^1..m^nt it sees (the step from
        t_{n+1} to t_n uses m^{n+1}); ignored otherwise.
        """
        return self._hjb_sweep(U_T, F, guess, self._frozen(density))

    def _hjb_accelerated(self, U_T: Any, F: Any, guess: Any | None, density: Any | None
                         ) -> Any:
        steps = self.newton_steps
        while True:
            U, sizes = self._hjb_fixed(U_T, F, guess, steps, density)
            self.newton_iterations += steps * self.grid.nt
            worst, worst_before = (float(v) for v in to_numpy(sizes))  # last, last but one
            if worst <= self.accept_tol or steps >= MAX_NEWTON:
                break
            steps = min(2 * steps, MAX_NEWTON)
        if not worst <= self.accept_tol:
            raise SolverError(f"HJB Newton did not converge in {steps} steps per time step "
                              f"(largest final relative update {worst:.3g})")
        # what sufficed here serves the next (closer) iterate; one step fewer if the last
        # but one update was already ten times below the acceptance threshold
        self.newton_steps = steps - (steps > 1 and worst_before <= 0.1 * self.accept_tol)
        return U

    def _hjb_fused(self, U_T: Any, F: Any, guess: Any | None, density: Any | None = None
                   ) -> Any:
        self.check_newton()  # the previous sweep's flags (read without a wait by now)
        single = F.ndim == 2
        if single:
            U_T, F, guess = U_T[None], F[None], None if guess is None else guess[None]
        U, status = self.hjb_with_status(U_T, F, guess, density)
        self._pending.append(_start_copy(status))
        return U[0] if single else U

    def hjb_with_status(self, U_T: Any, F: Any, guess: Any | None, density: Any | None = None
                        ) -> tuple[Any, Any]:
        """The fused HJB sweep of a batch (B, ·) and its Newton status (2, B) left where it is,
        read by nothing here: its reader passes it to :meth:`count_newton` (a recorded
        evaluation reads it with its sums, :mod:`..recorded_evaluation`)."""
        from . import triton_sweeps

        g = self.grid
        return triton_sweeps.hjb_sweep(U_T, F, guess, self._nu_per_problem(F.shape[0]), g.h,
                                       g.dt, self.inv_hw, self.inv_w, self.newton_tol,
                                       MAX_NEWTON,
                                       model=triton_sweeps.model_kernels(self.hamiltonian),
                                       x=self.x, density=density)

    def check_newton(self) -> None:
        """Read the fused sweeps' Newton flags and counts; raise :class:`SolverError` if a
        time step of some problem did not converge. Called before each fused HJB sweep and
        by the front door after the iteration, so it waits only on finished work."""
        pending, self._pending = self._pending, []
        for status, event in pending:
            if event is not None:
                event.synchronize()
            self.count_newton(np.asarray(status))

    def count_newton(self, status: np.ndarray) -> None:
        """Count the Newton iterations of a fused sweep's host ``status`` (2, B) (row 0: the
        first time step that did not converge, −1 where all did; row 1: the iterations);
        :class:`SolverError` where a time step did not converge."""
        bad, iterations = status
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

    def _hjb_compiled(self, U_T: Any, F: Any, guess: Any | None, density: Any | None
                      ) -> Any:
        """The compiled (numba) sweep of one problem on host arrays: the template scheme
        with the model's generated functions (:mod:`.numba_kernels`)."""
        F = _host(F)
        module, prm, rows = self._compiled_model(density, F.dtype)
        g = self.grid
        U = np.empty((g.nt + 1, g.nx), dtype=F.dtype)
        U[-1] = _host(U_T)
        inv_hw, inv_w, _ = self._host_constants(F.dtype)
        its, bad = module.hjb_sweep(U, F, U if guess is None else _host(guess),
                                    guess is not None, rows, g.x, prm, float(self.nu), g.h,
                                    g.dt, inv_hw, inv_w, self.newton_tol, MAX_NEWTON)
        return self._compiled_sweep_done(U, its, bad)

    def _compiled_model(self, density: Any | None, dtype: Any) -> tuple[Any, Any, Any]:
        """(compiled module, fields ``prm``, density rows) of the model: the frozen density
        on the host, or one row of zeros where H does not depend on m."""
        if self._model is None:   # traced once per scheme, not once per sweep
            from . import numba_kernels

            self._model = numba_kernels.compiled_model(self.hamiltonian)
        module, prm = self._model
        rows = (self._host_constants(dtype)[2] if density is None
                else np.ascontiguousarray(_host(density), dtype=dtype))
        return module, prm, rows

    def _host_constants(self, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """1/(h w), 1/w and a row of zeros (the density of a model without one) in
        ``dtype`` for the compiled sweeps (made once per dtype; the sweeps only read them)."""
        if dtype not in self._host_arrays:
            self._host_arrays[dtype] = (self._inv_hw_np.astype(dtype),
                                        self._inv_w_np.astype(dtype),
                                        np.zeros((1, self.grid.nx), dtype=dtype))
        return self._host_arrays[dtype]

    def _compiled_sweep_done(self, U: np.ndarray, iterations: int, bad: int) -> Any:
        """U of a compiled HJB sweep, its Newton iterations counted; :class:`SolverError` if
        the time step ``bad`` (≥ 0) did not converge."""
        self.newton_iterations += iterations
        if bad >= 0:
            raise SolverError(f"HJB Newton did not converge at time step n={bad} "
                              f"(t={self.grid.t[bad]:.6g}) in {MAX_NEWTON} iterations")
        return self._from_host(U)

    def _hjb_array(self, U_T: Any, F: Any, guess: Any | None, max_newton: int = MAX_NEWTON,
                   density: Any | None = None) -> tuple[Any, Any]:
        """The array-API sweep on the host: Newton to ``newton_tol`` per step
        (:func:`newton_done`; host reads),
        at most ``max_newton`` iterations; returns U and zeros (no pending updates)."""
        xp, g = self.backend.xp, self.grid
        levels: list[Any] = [None] * (g.nt + 1)
        levels[g.nt] = U_T + 0.0 * F[..., 0, :]
        for n in range(g.nt - 1, -1, -1):
            u_next = levels[n + 1]
            u = u_next if guess is None else guess[..., n, :] + (u_next - guess[..., n + 1, :])
            m = None if density is None else density[..., n, :]
            rhs = u_next * self._consts.inv_dt + F[..., n, :]
            before = 0.0
            for _ in range(max_newton):
                u, du = self._newton(u, rhs, self._consts, m)
                self.newton_iterations += 1
                step = float(xp.max(relative_update(du, u, xp)))
                if newton_done(step, before, self.newton_tol):
                    break
                before = step
            else:
                raise SolverError(f"HJB Newton did not converge at time step n={n} "
                                  f"(t={g.t[n]:.6g}) in {max_newton} iterations")
            levels[n] = u
        return xp.stack(levels, axis=-2), xp.zeros_like(F[..., 0, 0])

    def _device_constants(self) -> SystemConstants:
        if self._system is None:
            self._system = system_constants(self._consts, self.hamiltonian, self.grid.h,
                                            self.backend.asarray)
        return self._system

    def _hjb_device(self, U_T: Any, F: Any, guess: Any | None, steps: int,
                    density: Any | None) -> tuple[Any, Any]:
        """The device sweep: ``steps`` Newton iterations per time step (no host read), in
        workspaces allocated once per sweep; returns U and the largest relative last and
        last-but-one Newton updates, (2,), computed after the time loop."""
        import torch

        g, c, xp = self.grid, self._device_constants(), self.backend.xp
        u = U_T + 0.0 * F[..., 0, :]
        system0 = u.new_empty(u.shape[:-1] + (4, g.nx))
        system0[..., :3, :] = c.bands0
        work = (system0, u.new_zeros(u.shape[:-1] + (2 * g.nx,)), pcr_workspace(system0))
        neg_F = -F
        levels, updates = [u], []   # updates: the last and the last but one of each step
        for n in range(g.nt - 1, -1, -1):
            neg_rhs = torch.addcmul(neg_F[..., n, :], u, c.inv_dt, value=-1.0)
            m = None if density is None else density[..., n, :]
            u = u if guess is None else guess[..., n, :] + (u - guess[..., n + 1, :])
            du = before = None
            for _ in range(steps):
                before = du
                u, du = self._device_newton(u, neg_rhs, work, c, m)
            levels.append(u)
            updates += [du, du if before is None else before]
        U = torch.stack(levels[::-1], dim=-2)
        reduced = torch.stack(updates, dim=-3).unflatten(-3, (g.nt, 2))   # (..., nt, 2, 2, n)
        du = reduced[..., 1, :] / reduced[..., 0, :]
        size = relative_update(du, xp.flip(U[..., :-1, None, :], axis=-3), xp)  # (..., nt, 2)
        return U, xp.max(xp.reshape(xp.moveaxis(size, -1, 0), (2, -1)), axis=1)

    def _hjb_fixed(self, U_T: Any, F: Any, guess: Any | None, steps: int,
                   density: Any | None = None) -> tuple[Any, Any]:
        """The sweep with ``steps`` Newton iterations per time step (graph-replayed on CUDA)."""
        given = (guess is not None, density is not None)

        def sweep(U_T: Any, F: Any, *rest: Any) -> tuple[Any, Any]:
            it = iter(rest)
            guess, density = (next(it) if g else None for g in given)
            with full_float32_products(F):
                return self._hjb_device(U_T, F, guess, steps, density)

        args = tuple(a for a in (U_T, F, guess, density) if a is not None)
        return self._graphed(("hjb", steps, *given), sweep, args)

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
    def solve_fp(self, U: Any, m0: Any, density: Any | None = None,
                 source: Any | None = None) -> Any:
        """Densities M (levels 0..nt) from m0, transported by the control −∂p H(x, ∂x u, m)
        of U; ``density``: as for :meth:`solve_hjb` (the step from t_n to t_{n+1} uses
        m^{n+1}, frozen). ``source`` (..., nt, nx), for verification: a source S^{n+1} added
        to the step from t_n to t_{n+1} (J(u^n)ᵀ μ^{n+1} = μ^n/Δt + w S^{n+1}; array-API
        sweep)."""
        density = self._frozen(density)
        if source is not None:
            return self._fp_array(U, m0 * self.weights, density, source * self.weights
                                  ) * self.inv_w
        return self._fp_sweep(U, m0 * self.weights, density) * self.inv_w

    def _fp_compiled(self, U: Any, mu0: Any, density: Any | None) -> Any:
        """The compiled (numba) FP sweep of one problem on host arrays."""
        g = self.grid
        U_host = _host(U)
        module, prm, rows = self._compiled_model(density, U_host.dtype)
        mu = np.empty_like(U_host)
        mu[0] = _host(mu0)
        module.fp_sweep(U_host, mu, rows, g.x, prm, float(self.nu), g.h, g.dt,
                        self._host_constants(U_host.dtype)[0])
        return self._from_host(mu)

    def _fp_accelerated(self, U: Any, mu0: Any, density: Any | None) -> Any:
        args = (U, mu0) if density is None else (U, mu0, density)
        return self._graphed(("fp", len(args)), self._fp_array, args)

    def _fp_fused(self, U: Any, mu0: Any, density: Any | None = None) -> Any:
        from . import triton_sweeps

        single = U.ndim == 2
        if single:
            U, mu0 = U[None], mu0[None]
        mu = triton_sweeps.fp_sweep(U, mu0, self._nu_per_problem(U.shape[0]), self.grid.h,
                                    self.grid.dt, self.inv_hw,
                                    model=triton_sweeps.model_kernels(self.hamiltonian),
                                    x=self.x, density=density)
        return mu[0] if single else mu

    def _fp_array(self, U: Any, mu0: Any, density: Any | None = None,
                  source: Any | None = None) -> Any:
        """The array-API sweep J(u^n)ᵀ μ^{n+1} = μ^n/Δt (+ ``source``, cell masses)."""
        g, xp = self.grid, self.backend.xp
        nu_levels = self.nu[..., None, :] if self.nu.ndim else self.nu
        lower, diag, upper, _ = jacobian_bands(U[..., :-1, :], self.backend.asarray(nu_levels),
                                               g.h, g.dt, self.inv_hw, xp, self.hamiltonian,
                                               self.x, density)
        lt, dg, ut = transpose_bands(lower, diag, upper, xp)
        if self.backend.is_accelerator and source is None:
            with full_float32_products(U):
                return self._fp_device(lt, dg, ut, mu0 + 0.0 * U[..., 0, :])
        masses = [mu0 + 0.0 * U[..., 0, :]]
        for n in range(g.nt):
            rhs = masses[n] * self._consts.inv_dt
            if source is not None:
                rhs = rhs + source[..., n, :]
            masses.append(self._solve(lt[..., n, :], dg[..., n, :], ut[..., n, :], rhs))
        return xp.stack(masses, axis=-2)

    def _fp_device(self, lower: Any, diag: Any, upper: Any, mu0: Any) -> Any:
        """The FP sweep on a device, μ^{n+1} = (Δt J_nᵀ)⁻¹ μ^n for the bands (..., nt, n) of
        J_nᵀ. Every step's matrix is known, so they are reduced at once (:func:`.tridiag.
        pcr_factor`, with 1/(Δt diag) folded into the first level). Where the matrices
        (Δt J_nᵀ)⁻¹ of all steps fit in ``DENSE_FP_ENTRIES`` entries, they are formed by
        applying the reduction to the unit vectors and a step is one matrix-vector product
        (nonnegative entries and μ: no cancellation; columns summing to one); otherwise a
        step is two kernels per level, reading μ^n from and writing μ^{n+1} into a
        zero-padded row."""
        import torch
        from torch.nn.functional import pad as pad_with_zeros

        g, n = self.grid, self.grid.nx
        inv_diag, levels = pcr_factor(lower, diag, upper)
        scale = pad_with_zeros(inv_diag * self._consts.inv_dt, (1, 1)).unfold(-1, n, 1)
        levels[0] = levels[0] * scale                     # w_k(i) · scale_{i + k − 1}
        if mu0[..., 0].numel() * g.nt * n * n <= DENSE_FP_ENTRIES:
            # inverse[..., k, j, :] = (Δt J_kᵀ)⁻¹ e_j
            inverse = pcr_apply([w[..., None, :, :] for w in levels],
                                torch.eye(n, dtype=mu0.dtype, device=mu0.device))
            masses = [mu0]
            for k in range(g.nt):
                masses.append((masses[k][..., None, :] @ inverse[..., k, :, :])[..., 0, :])
            return torch.stack(masses, dim=-2)
        pad = pcr_padding(n)
        rows = mu0.new_zeros(mu0.shape[:-1] + (g.nt + 1, n + 2 * pad))
        rows[..., 0, pad:pad + n] = mu0
        work = mu0.new_zeros(mu0.shape[:-1] + (n + 2 * pad,))
        for k in range(g.nt):
            self._fp_step([w[..., k, :, :] for w in levels], rows[..., k, :], work,
                          rows[..., k + 1, pad:pad + n])
        return rows[..., pad:pad + n]
