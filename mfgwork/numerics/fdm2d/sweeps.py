"""HJB (backward, Newton per time step) and FP (forward) sweeps of the 2-D scheme.

:class:`Scheme2D` binds the stencil of :mod:`.stencil` to a linear solver:

- ``"ilu"`` (NumPy, the CPU default): BiCGStab preconditioned by ILU(0) on the stencil, one
  numba-compiled call per solve (:mod:`.ilu_kernels`); measured about 3× faster than the
  factorisation below at 41² and 101² nodes.
- ``"direct"`` (NumPy): the Jacobian restricted to the active nodes is assembled in CSC form
  on a pattern computed once and factored by SuperLU (``scipy.sparse.linalg.splu``,
  minimum-degree ordering on AᵀA + A, no pivoting: J is a strictly diagonally dominant
  M-matrix); the FP step solves with the same factors transposed.
- ``"krylov"`` (torch on any device, and NumPy on request): the matrix-free stencil with the
  batched Jacobi-preconditioned BiCGStab of :mod:`.krylov`; batches of problems share every
  array operation; on CUDA the iterations between two convergence tests are recorded once
  as a CUDA graph and replayed (:mod:`mfgwork.core.cuda_graphs`). With Triton on CUDA the
  same BiCGStab runs as three fused launches an iteration in fixed buffers
  (:mod:`.fused_krylov`), each Newton or FP step's assembly is one recorded graph
  (:mod:`.fused_steps`), and the FP solves start from the step of the previous sweep; in
  float64, for a single problem or a batch of up to about a hundred rooms of 101², each
  solve is one launch, Newton's updates run on the device (for every model with a Triton
  assembly, :func:`.triton_assembly.model_system`) and a sweep makes ten levels per replay,
  without waiting for the host; a batch of such problems of at least
  :data:`.fused_steps.MIXED_NODES` nodes iterates in float32 inside float64 Newton updates
  and FP refinement rounds (:mod:`.fused_assembly`).

Newton stops at a time step when Δt·max|R(u)| ≤ tol·(1 + max|u|): since ‖J⁻¹‖_∞ ≤ Δt that
bounds the next Newton update, so no extra solve is spent on the test. Its updates are
inexact (the test is on the exact residual): solved to the relative residual whose linear
error alone passes the next test, between 1e-10 and 1e-2. Exact solves take Newton's test
to round-off and the FP solves to a relative residual 1e-13 (float64). Inside the fixed
point the sweeps are inexact (:meth:`Scheme2D.resolve`): both tolerances :data:`INEXACT` ×
the residual of the iterate (at least ``tol``'s), and each FP step's masses are scaled so
that it keeps the mass balance to round-off whatever its tolerance. Arrays are the full
grid (..., level, ny, nx); inactive nodes keep u (the exit costs at exits) and carry m = 0.
When H depends on m, ``density`` holds the densities m^{n+1} the steps use (levels 1..nt),
set by the coupling before each sweep.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.backend import to_numpy
from ...core.errors import ParameterError, SolverError
from ..particles.triton_kernels import fused_available
from .fused_steps import FusedSteps
from .krylov import bicgstab, iterate
from .stencil import Coefficients, Stencil

MAX_NEWTON = 50
#: Relaxation of the modified ILU(0) of the Newton matrices (:mod:`.ilu_kernels`).
MILU_RELAX = 0.9
#: ... and of their transposes, the FP matrices.
FP_RELAX = 0.5
#: BiCGStab iterations between two convergence tests (one host synchronisation each).
CHECK_EVERY = 8
SOLVERS = ("ilu", "direct", "krylov")
#: The loosest relative residual of an inexact Newton update (:meth:`Scheme2D._newton_rtol`).
NEWTON_ETA_MAX = 1e-2
#: A Krylov solve that stops at its iteration cap is accepted up to this factor above its
#: tolerance (the rounding floor of float32).
KRYLOV_FAIL = 1e3
#: The Eisenstat–Walker forcing factor γ (choice 2, exponent 2) of the Newton updates.
EW_GAMMA = 0.1
#: Inexact Picard (:meth:`Scheme2D.resolve`): the sweeps' tolerances relative to the residual
#: of the fixed-point iterate (measured on the 41² room: 1e-3 keeps Anderson's 16 iterations
#: and cuts the Krylov iterations threefold; 1e-2 takes 44 iterations).
INEXACT = 1e-3


class SparsePattern:
    """The CSC pattern of J on the active nodes of one grid and the gather that fills it from
    the stacked coefficients (diag, W, E, S, N)."""

    def __init__(self, active: np.ndarray) -> None:
        ny, nx = active.shape
        size = ny * nx
        index = np.full(active.shape, -1, dtype=np.int64)
        index[active] = np.arange(int(active.sum()))
        self.index, self.n = index, int(active.sum())
        rows, cols, src = [index[active]], [index[active]], [np.flatnonzero(active)]
        for k, (axis, step) in enumerate(((-1, -1), (-1, 1), (-2, -1), (-2, 1)), start=1):
            nb = np.full(active.shape, -1, dtype=np.int64)
            if axis == -1:
                (nb[:, 1:] if step < 0 else nb[:, :-1])[...] = (
                    index[:, :-1] if step < 0 else index[:, 1:])
            else:
                (nb[1:, :] if step < 0 else nb[:-1, :])[...] = (
                    index[:-1, :] if step < 0 else index[1:, :])
            pair = active & (nb >= 0)
            rows.append(index[pair])
            cols.append(nb[pair])
            src.append(k * size + np.flatnonzero(pair))
        rows, cols, src = (np.concatenate(a) for a in (rows, cols, src))
        order = np.lexsort((rows, cols))
        self.indices, self.src = rows[order], src[order]
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=self.n))])

    def matrix(self, c: Coefficients) -> Any:
        import scipy.sparse as sp

        data = np.stack([c.diag, c.W, c.E, c.S, c.N]).reshape(-1)[self.src]
        return sp.csc_matrix((data, self.indices, self.indptr), shape=(self.n, self.n))


class Scheme2D:
    """The implicit upwind scheme on a :class:`Stencil` with a linear ``solver``."""

    def __init__(self, stencil: Stencil, *, solver: str = "direct") -> None:
        self.stencil, self.backend, self.xp = stencil, stencil.backend, stencil.xp
        self.solver = solver
        if solver in ("direct", "ilu"):
            if self.backend.name != "numpy" or stencil.batched:
                raise ParameterError(f"solver={solver!r} serves single NumPy problems")
            self.pattern = SparsePattern(stencil.active_np)
            self.mask = stencil.active_np
        g = stencil.grid
        eps = self.backend.eps
        r = float(np.max(stencil.nu)) * g.dt * max(1 / g.hx**2, 1 / g.hy**2)
        # the exact solves: Newton to round-off, the FP solves to 1e-13 (float64); the
        # Newton updates looser (Newton's stopping test is on the exact residual R, so an
        # update accurate to 1e-10 costs nothing in the result)
        self.exact = (64 * eps * max(1.0, r), 1e-13 if self.backend.dtype == "float64"
                      else 1e-6)
        self.newton_tol, self.krylov_rtol = self.exact
        self.newton_rtol = 1e-10 if self.backend.dtype == "float64" else 1e-6
        self.max_krylov = 20 * (g.nx + g.ny)
        self.density: Any = None
        #: the cell masses of the last FP sweep (the iterative solves start from its steps)
        self._last_masses: list[Any] | None = None
        #: (U, density, J per level) of the last HJB sweep (NumPy solvers), which the FP sweep
        #: of that same U reuses instead of assembling J again
        self._jacobians: tuple[Any, Any, list[Any]] | None = None
        self.use_cuda_graphs = self.backend.kind == "cuda" and solver == "krylov"
        #: the Newton and FP steps by :mod:`.fused_steps` (fused BiCGStab, recorded assembly):
        #: torch on CUDA with Triton installed
        self.fused_krylov = solver == "krylov" and fused_available(self.backend)
        self._fused: FusedSteps | None = None
        self._graphs: dict[tuple, Any] = {}
        self.newton_iterations = 0
        self.krylov_iterations = 0
        self.factorizations = 0

    # -- helpers -----------------------------------------------------------------------------
    def resolve(self, residual: float | np.ndarray | None) -> None:
        """The accuracy of the next sweeps, for a fixed-point iterate of relative residual
        ``residual`` (per problem of a batch: host (B,); None: the exact solves): Newton's
        test and the FP solves' relative residual at :data:`INEXACT` × ``residual``, never
        tighter than the exact solves' (inexact Picard: an evaluation of the fixed-point map
        need not be resolved far below the residual it is to reduce; the FP steps keep their
        mass balance exactly whatever the tolerance, :meth:`_conserved`). Per problem, the
        tolerances are host arrays (B,)."""
        if residual is None or np.ndim(residual) == 0:
            scale = 0.0 if residual is None else INEXACT * float(residual)
            self.newton_tol, self.krylov_rtol = (max(e, scale) for e in self.exact)
            return
        scale = INEXACT * np.asarray(residual, dtype=np.float64)
        self.newton_tol, self.krylov_rtol = (np.maximum(e, scale) for e in self.exact)

    def _conserved(self, c: Coefficients, mass: Any, rhs: Any) -> Any:
        """The FP step's masses μ (a solve of Jᵀμ = b to a relative residual) scaled so that
        Σ_k μ_k Σ_j J_kj = Σ b exactly: the columns of Jᵀ sum to 1/Δt + Σ_d o^d, so the step
        keeps Σμ^n = Σμ^{n+1} + outflow to round-off (positive, a relative change at the
        solve's tolerance)."""
        xp = self.xp
        out_rate = _sum2(mass * (c.diag + c.W + c.E + c.S + c.N), xp)
        total = _sum2(rhs, xp)
        ratio = xp.where(out_rate > 0, total / xp.where(out_rate > 0, out_rate, 1.0), 1.0)
        return mass * ratio[..., None, None]

    def _m(self, n: int) -> Any:
        """m^{n+1} for the step n (None when H does not depend on m)."""
        return None if self.density is None else self.density[..., n, :, :]

    def _newton_rtol(self, scale: np.ndarray, norm: np.ndarray,
                     previous: np.ndarray | None) -> float:
        """The relative residual ‖R − J δ‖₂ ≤ η ‖R‖₂ a Newton update needs (inexact Newton,
        Eisenstat & Walker 1996): the loosest of (a) η whose linear residual alone, Δt·η‖R‖₂,
        stays a quarter below the stopping test's bound ``newton_tol``·(1 + max|u|) and
        (b) the forcing term ``EW_GAMMA``·(‖R‖₂/‖R_prev‖₂)² (``NEWTON_ETA_MAX`` at a level's
        first update), within [``newton_rtol``, ``NEWTON_ETA_MAX``]. The stopping test is on
        the exact residual, so η only sets how many updates it takes."""
        dt = self.stencil.grid.dt
        eta = float(np.min(self.newton_tol * scale / (4.0 * dt * np.maximum(norm, 1e-300))))
        ew = NEWTON_ETA_MAX if previous is None else float(
            np.max(EW_GAMMA * (norm / np.maximum(previous, 1e-300)) ** 2))
        return min(NEWTON_ETA_MAX, max(self.newton_rtol, eta, ew))

    def newton_start(self, u_next: Any, guess_n: Any, guess_next: Any) -> Any:
        """Newton's start at a level n from the guess of an HJB sweep: the guess's u^n moved
        by the change the sweep has already made at the level above (exits keep their
        cost)."""
        active = self.stencil.active
        return (guess_n + u_next - guess_next) * active + u_next * (1.0 - active)

    @staticmethod
    def forcing_constants() -> tuple[float, float]:
        """(``NEWTON_ETA_MAX``, ``EW_GAMMA``) of :meth:`_newton_rtol`, for the rule's copy on
        the device (:mod:`.fused_steps`)."""
        return NEWTON_ETA_MAX, EW_GAMMA

    def _newton_measures(self, u: Any, R: Any) -> tuple[np.ndarray, ...]:
        """Per problem (host float64 arrays): Δt·max|R|/(1 + max|u|) (Newton's stopping
        test), 1 + max|u| and ‖R‖₂."""
        dt = self.stencil.grid.dt
        if self.solver == "ilu" and R.dtype == np.float64:  # one compiled pass
            from .assembly_kernels import residual_norms

            r_max, u_max, sq = residual_norms(u, R)
            scale = np.array([1.0 + u_max])
            return np.array([dt * r_max]) / scale, scale, np.array([np.sqrt(sq)])
        return tuple(np.asarray(to_numpy(a), dtype=np.float64).reshape(-1)
                     for a in self.newton_measures(u, R))

    def newton_measures(self, u: Any, R: Any) -> tuple[Any, Any, Any]:
        """The measures of :meth:`_newton_measures` as backend arrays (no host transfer)."""
        xp = self.xp
        scale = 1.0 + _max2(xp.abs(u), xp)
        return (self.stencil.grid.dt * _max2(xp.abs(R), xp) / scale, scale,
                xp.sqrt(_sum2(R * R, xp)))

    def _solve(self, c: Coefficients, rhs: Any, transpose: bool = False,
               guess: Any = None, rtol: float | None = None) -> Any:
        if rtol is None:
            rtol = self.krylov_rtol if transpose else self.newton_rtol
        if self.solver == "ilu":
            return self._solve_ilu(c, rhs, transpose, guess, rtol)
        if self.solver == "direct":
            import scipy.sparse.linalg as sla

            lu = sla.splu(self.pattern.matrix(c), permc_spec="MMD_AT_PLUS_A",
                          diag_pivot_thresh=0.0)
            self.factorizations += 1
            out = np.zeros_like(rhs)
            out[self.mask] = lu.solve(np.ascontiguousarray(rhs[self.mask]),
                                      trans="T" if transpose else "N")
            return out
        st = self.stencil
        op = st.operator(c, transpose)
        inv_diag = 1.0 / c.diag
        chunk = self._graphed_chunk(c, inv_diag, transpose) if self.use_cuda_graphs else None
        x, k = bicgstab(op, rhs, inv_diag, self.xp, rtol=rtol, max_iter=self.max_krylov,
                        fail=KRYLOV_FAIL * rtol, check_every=CHECK_EVERY, chunk=chunk,
                        x0=guess)
        self.krylov_iterations += k
        return x

    def _fused_steps(self) -> FusedSteps:
        if self._fused is None:
            self._fused = FusedSteps(self, CHECK_EVERY, KRYLOV_FAIL)
        return self._fused

    def _graphed_chunk(self, c: Coefficients, inv_diag: Any, transpose: bool) -> Any:
        """BiCGStab's iterations between two tests as a CUDA graph (recorded at the first
        call per shape and direction, checked bitwise against the eager call), or None."""
        st, xp = self.stencil, self.xp
        coefs = (c.diag, c.W, c.E, c.S, c.N, inv_diag)

        def fn(diag: Any, W: Any, E: Any, S: Any, N: Any, inv: Any, r_hat: Any,
               *state: Any) -> Any:
            cc = Coefficients(diag, W, E, S, N, None)
            op = st.operator(cc, transpose)
            return iterate(op, inv, r_hat, state, CHECK_EVERY, xp)

        key = (transpose, tuple(c.diag.shape))

        def chunk(state: Any, r_hat: Any) -> Any:
            args = (*coefs, r_hat, *state)
            if key in self._graphs:
                return self._graphs[key].run(*args)
            eager = fn(*args)
            from ...core.cuda_graphs import record_checked

            graphed = record_checked(fn, eager, *args, what="BiCGStab iterations")
            if graphed is None:
                self.use_cuda_graphs = False
            else:
                self._graphs[key] = graphed
            return eager

        return chunk

    def _solve_ilu(self, c: Coefficients, rhs: np.ndarray, transpose: bool,
                   guess: np.ndarray | None, rtol: float) -> np.ndarray:
        from .ilu_kernels import ilu_bicgstab, transpose_stencil

        nbrs = (c.W, c.E, c.S, c.N)
        if transpose:
            nbrs = transpose_stencil(*nbrs)
        flat = [np.ascontiguousarray(a).reshape(-1) for a in (c.diag, *nbrs, rhs)]
        x = np.zeros_like(flat[-1]) if guess is None else np.array(guess, dtype=rhs.dtype
                                                                   ).reshape(-1)
        its, rel = ilu_bicgstab(rhs.shape[-1], *flat, x, rtol, self.max_krylov,
                                FP_RELAX if transpose else MILU_RELAX)
        self.krylov_iterations += its
        if not rel <= KRYLOV_FAIL * rtol:
            raise SolverError(f"ILU-BiCGStab did not converge in {self.max_krylov} iterations "
                              f"(relative residual {rel:.3g})")
        return x.reshape(rhs.shape)

    # -- HJB ---------------------------------------------------------------------------------
    def solve_hjb(self, U_T: Any, F: Any, guess: Any | None = None) -> Any:
        """U (..., nt+1, ny, nx) with U[..., nt] = U_T (exits at their cost), the running
        costs F (..., nt, ny, nx); ``guess`` seeds Newton at each step."""
        xp, st, g = self.xp, self.stencil, self.stencil.grid
        levels: list[Any] = [None] * (g.nt + 1)
        levels[g.nt] = U_T + 0.0 * F[..., 0, :, :]
        keep = self.solver in ("ilu", "direct")
        jacobians: list[Any] = [None] * g.nt

        def initial(n: int) -> Any:
            u_next = levels[n + 1]
            return u_next if guess is None else self.newton_start(
                u_next, guess[..., n, :, :], guess[..., n + 1, :, :])

        def where(n: int) -> str:
            return f"time step n={n} (t={g.t[n]:.6g})"

        first = g.nt - 1
        if self.fused_krylov:   # levels in groups without waiting (one-launch solves)
            first = self._fused_steps().sweep(levels, F, guess, self._m, MAX_NEWTON, where)
        for n in range(first, -1, -1):
            u_next, u = levels[n + 1], initial(n)
            F_n, m = F[..., n, :, :], self._m(n)
            if self.fused_krylov:
                levels[n] = self._fused_steps().newton_level(u, u_next, F_n, m, MAX_NEWTON,
                                                             where(n))
                continue
            previous = None
            for _ in range(MAX_NEWTON + 1):
                c, R = st.system(u, u_next, F_n, m)
                size, scale, norm = self._newton_measures(u, R)
                if bool(np.all(size <= self.newton_tol)):
                    break
                u = u - self._solve(c, R, rtol=self._newton_rtol(scale, norm, previous))
                previous = norm
                self.newton_iterations += 1
            else:
                raise SolverError(f"HJB Newton did not converge at {where(n)} in {MAX_NEWTON} "
                                  "iterations")
            levels[n] = u
            if keep:
                jacobians[n] = c  # J(U^n, m^{n+1}): the FP step's matrix, exactly
        U = xp.stack(levels, axis=-3)
        self._jacobians = (U, self.density, jacobians) if keep else None
        return U

    # -- FP ----------------------------------------------------------------------------------
    def solve_fp(self, U: Any, m0: Any) -> Any:
        """Densities M (levels 0..nt) from m0 (0 off the active nodes), transported by U."""
        xp, st, g = self.xp, self.stencil, self.stencil.grid
        last = self._last_masses
        kept = self._jacobians
        same = kept is not None and kept[0] is U and kept[1] is self.density
        while True:
            masses = [m0 * st.volumes * st.active]
            grouped = self.fused_krylov and self._fused_steps().fp_sweep(U, self.density,
                                                                         masses, last)
            for n in range(g.nt if not grouped else 0):
                # the previous sweep's step μ^{n+1} − μ^n from this sweep's μ^n
                guess = masses[n] if last is None else masses[n] + (last[n + 1] - last[n])
                if self.fused_krylov:
                    masses.append(self._fused_steps().fp_level(U[..., n, :, :], self._m(n),
                                                               masses[n], guess))
                    continue
                c = kept[2][n] if same else st.jacobian(U[..., n, :, :], self._m(n))
                rhs = masses[n] * st.inv_dt
                masses.append(self._conserved(c, self._solve(c, rhs, transpose=True,
                                                             guess=guess), rhs))
            # a fused sweep whose one-launch solves could not run is made again in chunks
            if not self.fused_krylov or self._fused_steps().fp_report():
                break
        if self.solver != "direct":
            self._last_masses = masses
        return xp.stack(masses, axis=-3) / st.volumes

    def outflow(self, U: Any, M: Any) -> Any:
        """The mass that leaves through each door during each step (..., nt+1, doors) (0 at
        level 0): Δt Σ_k o_k^d(U^n, m^{n+1}) μ_k^{n+1}, the terms by which the FP step from
        μ^n to μ^{n+1} of these (U, M) loses mass (module docstring of :mod:`.stencil`)."""
        xp, st, g = self.xp, self.stencil, self.stencil.grid
        flows = []
        for levels in self._level_groups(g.nt):
            c = st.jacobian(_time_first(U[..., levels, :, :], xp), self._m_levels(levels))
            mu = _time_first(M[..., levels.start + 1:levels.stop + 1, :, :], xp) * st.volumes
            flows.append(g.dt * _sum2(c.out * mu[..., None, :, :], xp))
        flows = xp.concat(flows, axis=0)           # (nt, ..., doors)
        return xp.moveaxis(xp.concat([0.0 * flows[:1], flows], axis=0), 0, -2)

    def velocity(self, U: Any) -> tuple[Any, Any]:
        """(α_x, α_y) = −∂p Ĥ at levels 0..nt (..., nt+1, ny, nx): level n from U^n and
        m^{n+1} (level nt from U_T and m^nt)."""
        xp, st, g = self.xp, self.stencil, self.stencil.grid
        vx, vy = [], []
        for levels in self._level_groups(g.nt + 1):
            a, b = st.velocity(_time_first(U[..., levels, :, :], xp), self._m_levels(levels))
            vx.append(a)
            vy.append(b)
        return tuple(xp.moveaxis(xp.concat(v, axis=0), 0, -3) for v in (vx, vy))

    def _level_groups(self, count: int) -> list[slice]:
        """Slices of the levels 0..count−1 whose arrays, time first, hold about
        :data:`LEVEL_GROUP` values each (the post-processing's array operations on several
        levels at once)."""
        size = max(1, LEVEL_GROUP // int(np.prod(self.stencil.active.shape)))
        return [slice(n, min(n + size, count)) for n in range(0, count, size)]

    def _m_levels(self, levels: slice) -> Any:
        """m^{n+1} for the steps n in ``levels``, time first (None when H does not depend on
        m); the level nt past the last step takes m^nt, as the last step."""
        if self.density is None:
            return None
        xp, nt = self.xp, self.stencil.grid.nt
        m = self.density[..., levels.start:min(levels.stop, nt), :, :]
        if levels.stop > nt:
            m = xp.concat([m, self.density[..., nt - 1:nt, :, :]], axis=-3)
        return _time_first(m, xp)


#: Values per array of the post-processing's groups of levels (:meth:`Scheme2D._level_groups`).
LEVEL_GROUP = 1 << 22


def _time_first(a: Any, xp: Any) -> Any:
    """Levels (..., L, ny, nx) as (L, ..., ny, nx): the stencil's arrays then broadcast."""
    return xp.moveaxis(a, -3, 0)


def _max2(a: Any, xp: Any) -> Any:
    """Max over the last two axes."""
    return xp.max(xp.max(a, axis=-1), axis=-1)


def _sum2(a: Any, xp: Any) -> Any:
    """Sum over the last two axes."""
    return xp.sum(xp.sum(a, axis=-1), axis=-1)
