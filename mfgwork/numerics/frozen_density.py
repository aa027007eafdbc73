"""Equilibria of potential games whose Hamiltonian depends on m (congestion): an outer
iteration on the density that H sees, Newton's method on the coupling state inside.

For a frozen density path ρ = (ρ^1..ρ^nt), H(x, p, ρ^{n+1}(x)) is a (t, x)-dependent convex
Hamiltonian of bounded curvature and the game keeps its potential structure (the observed path
z, e.g. Santa Fe's attendance, with its price P): its equilibrium M(ρ) is found by Newton's
method on z (:class:`~mfgwork.numerics.batch_newton.BatchNewton`, whose tangent sweeps take the
frozen ρ). The fully coupled discrete system is the fixed point ρ = M(ρ)^{1..nt}, reached by
Anderson mixing (full step, depth 5) of ρ with M(ρ), each inner Newton warm-started from the
previous one (its U and its observed path) and solved to a tolerance tied to the outer
residual (one tenth of it, at most 10⁻³, at least tol/10; in float32 at least tol, the floor
that float32 resolves). A batch runs one outer iteration per problem side by side (its own
mixing, inner tolerance and certificate), the inner Newton solves as one batch.

The outer residual is the certificate: one best response to the density path of M(ρ) with
H seeing that same path, r = ‖BR(M)^{1..nt} − M^{1..nt}‖ / ‖BR(M)^{1..nt}‖ (the fixed-point
residual of the density coupling, as for the Anderson iteration on the whole density). A
history entry is one best response: those of the inner Newton iterations (their own
residuals) and each certificate.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..core.backend import Backend, to_numpy
from ..core.errors import ConvergenceWarning, SolverError, warn
from .batch_newton import BatchNewton, Unbatched, batch_mask, keep_where
from .equilibrium import System, solve
from .iteration import Anderson, FixedPointResult, History

INNER_MAX = 1e-3   # loosest tolerance of an inner Newton solve
INNER_RATIO = 0.1  # inner tolerance / outer residual


@dataclass
class FrozenState:
    """A frozen-density solve between its outer iterations (arrays with the batch axis): its
    ``system`` as a batch (``single``: of one problem), the ``observed`` coupling, the best
    responses used (``evaluations``) of ``max_iter``, the outer iterations ``k``, the outer
    ``mixer``, the frozen density ``rho``, the observed path ``path`` and the U, M the next
    inner solve starts from, the best certified densities (``best``, ``best_res``), the last
    certified residuals and the best responses at which each problem converged (0: open)."""

    system: System
    observed: Any
    max_iter: int
    mixer: Any
    rho: Any
    path: Any
    U: Any
    M: Any
    best: dict[str, Any]
    best_res: np.ndarray
    residual: np.ndarray
    done_at: np.ndarray
    single: bool = False
    k: int = 0
    evaluations: int = 0
    history: History = field(default_factory=History)


class FrozenDensityNewton:
    """Outer Anderson iteration on the frozen density, :class:`BatchNewton` (one problem) on
    the observed path inside; ``observed``: the coupling of the running cost alone (with a
    potential), ``inner``: the Newton solver of that coupling."""

    description = ("outer Anderson on the density H sees (frozen), Newton on the coupling "
                   "state inside (exact tangent for the frozen density); certified by one "
                   "best response of the fully coupled system")

    def __init__(self, observed: Any, inner: BatchNewton, *, tol: float,
                 start: Callable[[], tuple[Any, int]] | None = None) -> None:
        self.observed, self.inner, self.tol, self.start = observed, inner, tol, start
        self.backend: Backend = inner.backend
        self.outer_iterations = 0
        self.coarse_iterations: list[int] | None = None
        #: the tightest inner tolerance: tol/10, but tol itself in float32, whose ``tol`` is
        #: already the floor that float32 resolves (below it, inner line searches stall)
        self.inner_floor = 0.1 * tol if self.backend.eps < 1e-10 else tol
        # the inner tolerances are this iteration's, not the user's: the outer certificate
        # decides, and no float64 floor is computed for an inner solve
        inner.floors = False

    # what the front door reads of a Newton solver
    matrix_free = property(lambda self: self.inner.matrix_free)
    system_dtype = property(lambda self: self.inner.system_dtype)
    newton_steps = property(lambda self: self.inner.newton_steps)
    products = property(lambda self: self.inner.products)

    @property
    def max_halvings(self) -> int:
        return self.inner.max_halvings

    @max_halvings.setter
    def max_halvings(self, value: int) -> None:
        self.inner.max_halvings = value

    # -- the iteration (an equilibrium strategy, :mod:`.equilibrium`) -----------------------
    def init(self, system: System, max_iter: int) -> FrozenState:
        """The first frozen density of a batch of problems (one where the system is not
        batched) whose coupling is the density path (H sees it frozen:
        :meth:`~mfgwork.problems.base.Coupling.frozen_density`); ``z_init``: the observed
        paths to start from, or density paths (levels 1..nt). Without a start, the densities
        (levels 0..nt) and best responses of ``start()`` (e.g. a coarse grid's equilibria
        interpolated) are the first iterate."""
        M_init, U_init, z_init = system.M_init, system.U_init, system.z_init
        if M_init is None and z_init is None and self.start is not None:
            M_init, self.coarse_iterations = self.start()
        coupling, observed, hjb, fp = system.coupling, self.observed, system.hjb, system.fp
        if not system.batched:
            coupling, observed = Unbatched(coupling, hjb, fp), Unbatched(observed, None, None)
            hjb, fp = coupling.hjb, coupling.fp
            M_init, U_init, z_init = _one(M_init), _one(U_init), _one(z_init)
        rho, path, M_init = _first_densities(coupling, system.m0, M_init, z_init,
                                             self.inner.grid.nt, self.backend.xp)
        B = rho.shape[0]
        return FrozenState(
            system=replace(system, coupling=coupling, hjb=hjb, fp=fp, batched=True),
            observed=observed, max_iter=max_iter,
            mixer=Anderson(depth=5, mixing=1.0, newton=False).start(batched=True), rho=rho,
            path=path, U=U_init, M=M_init, best={"U": None, "M": None},
            best_res=np.full(B, math.inf), residual=np.full(B, math.inf),
            done_at=np.zeros(B, dtype=np.int64), single=not system.batched)

    def done(self, state: FrozenState) -> bool:
        """Every problem certified to ``tol``, or ``max_iter`` best responses used."""
        return state.evaluations >= state.max_iter or bool((state.done_at > 0).all())

    def step(self, state: FrozenState) -> FrozenState:
        """One outer iteration: the inner Newton solve for the frozen density ρ (to a
        tolerance tied to the outer residual), the certificate of its densities M, the best
        certified ones kept, and ρ ← the mixing of ρ with M(ρ) for the problems still open."""
        s, sys, xp = state, state.system, self.backend.xp
        k = s.k = s.k + 1
        frozen = s.rho
        self.inner.tol = np.maximum(self.inner_floor,
                                    np.minimum(INNER_MAX, INNER_RATIO * s.residual))
        self.inner.density = frozen
        inner = replace(sys, coupling=s.observed,
                        hjb=lambda U_T, F, guess, _r=frozen: sys.hjb(U_T, F, guess, _r),
                        fp=lambda U, m0, _r=frozen: sys.fp(U, m0, _r),
                        M_init=s.M, U_init=s.U, z_init=s.path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            out = solve(self.inner, inner, max_iter=max(1, s.max_iter - s.evaluations - 1))
        s.evaluations += int(np.max(out.iterations)) + 1  # (and the certificate's response)
        _extend(s.history, out.history)
        s.U, s.M = out.U, out.M
        s.path, z, s.residual, change_U = self._certificate(sys.coupling, s.observed, sys.hjb,
                                                            sys.fp, s.U, s.M, sys.U_T, sys.m0,
                                                            s.history)
        open_ = s.done_at == 0
        if not np.isfinite(s.residual[open_]).all():
            raise SolverError(f"non-finite values at outer iteration {k} of the "
                              "frozen-density iteration: the iteration diverged")
        better = open_ & (s.residual < s.best_res)
        s.best_res = np.where(better, s.residual, s.best_res)
        s.best = keep_where(s.best, better, s.U, s.M, self.backend)
        s.done_at = np.where(open_ & (s.residual <= self.tol), s.evaluations, s.done_at)
        s.history.residual.append(float(np.max(s.residual[open_])))
        s.history.certificate.append(True)
        s.history.change_U.append(float(np.max(change_U[open_])))
        s.history.change_M.append(s.history.residual[-1])
        if not (s.done_at > 0).all():
            mixed = sys.coupling.project(s.mixer.update(k, frozen, sys.coupling.project(z), xp))
            s.rho = xp.where(batch_mask(s.done_at == 0, mixed, self.backend), mixed, frozen)
        return s

    def certify(self, state: FrozenState) -> FixedPointResult:
        """The best certified densities per problem (:meth:`_result`), a single problem's
        without the batch axis."""
        self.outer_iterations = state.k
        out = self._result(state.best, state.best_res, state.done_at, state.evaluations,
                           state.max_iter, state.history)
        if state.single:
            out.U, out.M = out.U[0], out.M[0]
        return out

    def _certificate(self, coupling: Any, observed: Any, hjb: Any, fp: Any, U: Any, M: Any,
                     U_T: Any, m0: Any, history: History) -> tuple[Any, Any, np.ndarray,
                                                                   np.ndarray]:
        """The certificate of the fully coupled system at M: one best response (the running
        cost passes through the observed path), its phase times recorded. Returns (the
        observed path of M, the coupling state z of M, the residual |Φ(z) − z| / |Φ(z)| and
        the relative change of U, both per problem)."""
        xp = self.backend.xp
        started = time.perf_counter()   # (the inner iterations recorded their own times)
        path = observed.state(M)
        z = coupling.state(M)
        t0 = time.perf_counter()
        U_br = hjb(U_T, observed.running_cost(path), U, z)
        t1 = time.perf_counter()
        gz = coupling.state(fp(U_br, m0, z))
        t2 = time.perf_counter()
        residual = _relative(gz, z, xp)
        change_U = _relative(U_br, U, xp)
        history.time_hjb.append(t1 - t0)
        history.time_fp.append(t2 - t1)
        history.time_coupling.append(time.perf_counter() - started - (t2 - t0))
        return path, z, residual, change_U

    def _result(self, best: dict[str, Any], best_res: np.ndarray, done_at: np.ndarray,
                used: int, max_iter: int, history: History) -> FixedPointResult:
        """The best certified densities per problem, with a
        :class:`~mfgwork.ConvergenceWarning` for those not converged."""
        converged = best_res <= self.tol
        if not converged.all():
            warn(f"the frozen-density iteration did not reach tol={self.tol:g} for "
                 f"{int((~converged).sum())} of {converged.size} problems in {used} "
                 f"best responses (max_iter={max_iter}; final residual "
                 f"{float(np.max(best_res[~converged])):.3g}); returning the best "
                 "certified iterate with converged=False", ConvergenceWarning)
        return FixedPointResult(U=best["U"], M=best["M"], converged=converged,
                                residual=best_res,
                                iterations=np.where(done_at == 0, used, done_at),
                                history=history)


def _first_densities(coupling: Any, m0: Any, M_init: Any, z_init: Any, nt: int, xp: Any
                     ) -> tuple[Any, Any, Any]:
    """(the first frozen density ρ, the first observed path or None, the densities the first
    inner Newton starts from): ρ from M_init, else from a density state z_init, else m0 at
    all times; the path where z_init is one; the densities m0 then ρ where M_init is None."""
    if M_init is not None:
        rho = coupling.state(M_init)
    elif z_init is not None and z_init.ndim == 3:
        rho = coupling.project(z_init)
    else:   # the initial density at all times
        rho = xp.stack([m0 if m0.ndim == 2 else m0[None]] * nt, axis=1)
    path = z_init if z_init is not None and z_init.ndim == 2 else None
    if M_init is None:
        first = m0 if m0.ndim == 2 else m0[None]
        M_init = xp.concat([first[:, None], rho], axis=1)
    return rho, path, M_init


def _one(a: Any) -> Any:
    """A single problem's array as a batch of one (None stays None)."""
    return None if a is None else a[None]


def _relative(a: Any, b: Any, xp: Any) -> np.ndarray:
    """‖a − b‖₂ / ‖a‖₂ per problem (leading axis; host float64)."""
    axes = tuple(range(1, a.ndim))
    sums = to_numpy(xp.stack([xp.sum((a - b) ** 2, axis=axes), xp.sum(a * a, axis=axes)]))
    sums = np.asarray(sums, dtype=np.float64)
    return np.sqrt(sums[0]) / np.maximum(np.sqrt(sums[1]), 1e-300)


def _extend(history: History, more: History) -> None:
    """``history`` followed by an inner solve's entries, none of which certifies the fully
    coupled system (they certify the frozen one)."""
    for name, values in more.__dict__.items():
        getattr(history, name).extend([False] * len(values) if name == "certificate"
                                      else values)
