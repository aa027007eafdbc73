"""Equilibria of potential games whose Hamiltonian depends on m (congestion): an outer
iteration on the density that H sees, Newton's method on the coupling state inside.

For a frozen density path ρ = (ρ^1..ρ^nt), H(x, p, ρ^{n+1}(x)) is a (t, x)-dependent convex
Hamiltonian of bounded curvature and the game keeps its potential structure (the observed path
z, e.g. Santa Fe's attendance, with its price P): its equilibrium M(ρ) is found by Newton's
method on z (:class:`~mfgwork.numerics.batch_newton.BatchNewton`, whose tangent sweeps take the
frozen ρ). The fully coupled discrete system is the fixed point ρ = M(ρ)^{1..nt}, reached by
Anderson mixing (full step, depth 5) of ρ with M(ρ), each inner Newton warm-started from the
previous one (its U and its observed path) and solved to a tolerance tied to the outer
residual (one tenth of it, at most 10⁻³, at least tol/10).

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
from typing import Any

import numpy as np

from ..core.backend import Backend, to_numpy
from ..core.errors import ConvergenceWarning, SolverError
from .batch_newton import BatchNewton
from .iteration import Anderson, FixedPointResult, History

INNER_MAX = 1e-3   # loosest tolerance of an inner Newton solve
INNER_RATIO = 0.1  # inner tolerance / outer residual


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
        self.coarse_iterations: int | None = None

    # what the front door reads of a Newton solver
    matrix_free = property(lambda self: self.inner.matrix_free)
    system_dtype = property(lambda self: self.inner.system_dtype)
    newton_steps = property(lambda self: self.inner.newton_steps)
    products = property(lambda self: self.inner.products)

    def solve(self, coupling: Any, hjb: Any, fp: Any, *, m0: Any, U_T: Any, max_iter: int,
              M_init: Any = None, U_init: Any = None, z_init: Any = None,
              progress: Any = None, batched: bool = False) -> FixedPointResult:
        """The equilibrium of one problem whose ``coupling`` is the density path (H sees
        it frozen: :meth:`~mfgwork.problems.base.Coupling.frozen_density`); ``z_init``: the
        observed path to start from, or a density path (levels 1..nt). Without a start, the
        densities (levels 0..nt) and best responses of ``start()`` (e.g. a coarse grid's
        equilibrium interpolated) are the first iterate."""
        if batched:
            raise SolverError("the frozen-density iteration solves one problem at a time")
        xp = self.backend.xp
        if M_init is None and z_init is None and self.start is not None:
            M_init, self.coarse_iterations = self.start()
        if M_init is not None:
            rho = coupling.state(M_init)
        elif z_init is not None and z_init.ndim == 2:
            rho = coupling.project(z_init)
        else:   # the initial density at all times
            rho = xp.stack([m0] * self.inner.grid.nt, axis=0)
        path = z_init if z_init is not None and z_init.ndim == 1 else None
        history = History()
        mixer = Anderson(depth=5, mixing=1.0, newton=False).start(batched=False)
        U, M = U_init, M_init
        best: dict[str, Any] = {"res": math.inf, "U": None, "M": None}
        residual, used, k = math.inf, 0, 0
        while used < max_iter:
            k += 1
            frozen = rho
            self.inner.tol = max(0.1 * self.tol,
                                 min(INNER_MAX, INNER_RATIO * residual))
            self.inner.density = np.asarray(to_numpy(frozen), dtype=np.float64)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                out = self.inner.solve(
                    self.observed,
                    lambda U_T, F, guess, _r=frozen: hjb(U_T, F, guess, _r),
                    lambda U, m0, _r=frozen: fp(U, m0, _r),
                    m0=m0, U_T=U_T, max_iter=max(1, max_iter - used - 1),
                    M_init=M, U_init=U, z_init=path, batched=False)
            used += int(out.iterations[0])
            _extend(history, out.history)
            U, M = out.U, out.M
            started = time.perf_counter()   # (the inner iterations recorded their own times)
            path = self.observed.state(M)
            # the certificate of the fully coupled system at M: one best response
            z = coupling.state(M)
            t0 = time.perf_counter()
            U_br = hjb(U_T, coupling.running_cost(z), U, z)
            t1 = time.perf_counter()
            gz = coupling.state(fp(U_br, m0, z))
            t2 = time.perf_counter()
            used += 1
            residual = _relative(gz, z)
            if not math.isfinite(residual):
                raise SolverError(f"non-finite values at outer iteration {k} of the "
                                  "frozen-density iteration: the iteration diverged")
            if residual < best["res"]:
                best = {"res": residual, "U": U, "M": M}
            history.residual.append(residual)
            history.change_U.append(_relative(U_br, U))
            history.change_M.append(residual)
            history.time_hjb.append(t1 - t0)
            history.time_fp.append(t2 - t1)
            history.time_coupling.append(time.perf_counter() - started - (t2 - t0))
            if progress is not None:
                progress.update(int(out.iterations[0]) + 1)
                progress.set_postfix(residual=f"{residual:.2e}", refresh=False)
            if residual <= self.tol:
                break
            rho = mixer.update(k, frozen, coupling.project(z), xp)
            rho = coupling.project(rho)
        self.outer_iterations = k
        converged = best["res"] <= self.tol
        if not converged:
            warnings.warn(f"the frozen-density iteration did not reach tol={self.tol:g} in "
                          f"{used} best responses (max_iter={max_iter}; final residual "
                          f"{best['res']:.3g}); returning the best certified iterate with "
                          "converged=False", ConvergenceWarning, stacklevel=3)
        return FixedPointResult(U=best["U"], M=best["M"], converged=np.array([converged]),
                                residual=np.array([best["res"]]),
                                iterations=np.array([used]), history=history)


def _relative(a: Any, b: Any) -> float:
    """‖a − b‖₂ / ‖a‖₂ (host floats)."""
    a = np.asarray(to_numpy(a), dtype=np.float64)
    b = np.asarray(to_numpy(b), dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-300))


def _extend(history: History, more: History) -> None:
    for name, values in more.__dict__.items():
        getattr(history, name).extend(values)
