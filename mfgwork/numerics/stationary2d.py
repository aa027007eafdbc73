"""The long run in 2-D: the ergodic system on a room without exits, by Newton's method.

As in 1-D (:mod:`.stationary`), the value behaves like λ (T − t) + v(x, y) and the density
settles to m(x, y); on the nodes of the 2-D scheme (:mod:`.fdm2d.stencil`), with
E(v) = −ν L v + Ĥ(v) and J₀(v) = ∂E/∂v (the step matrix J less I/Δt, an M-matrix whose rows
sum to 0),

    λ + E(v) = F(z),  Σ V v = 0         the ergodic HJB for the running cost of z
    J₀(v)ᵀ μ = 0,     Σ μ = 1            the stationary FP (cell masses μ = V m)

with z the coupling state of m (the two bars: the attendance pair; a density coupling: m
itself). The best response Φ(z) = state(m(v(z))) is one sparse Newton iteration on the
HJB (each step one LU solve of J₀ with the column of a pinned node replaced by λ's, from the
last v) and one sparse solve of the FP (J₀ᵀ, its kernel one-dimensional, with the pinned
node's redundant row replaced by μ_k = 1, then normalised). The fixed point z = Φ(z) is
found by Newton–Krylov: GMRES on (I − DΦ) d = Φ(z) − z, each product DΦ p a forward
difference of best responses, steps damped by backtracking on ½‖Φ(z) − z‖² (Armijo), until
the certificate below holds. A room with exits has no stationary state (its mass leaves)
and is refused.

The certificate is the relative residual ‖Φ(z) − z‖ / ‖Φ(z)‖ at the coupling state z of the
returned density: one best response, as for time-dependent solves.

Φ is steep where the coupling is (the two bars at ε = 0.05: |DΦ| ≈ 7·10³ at σ = 0.5 and
3·10⁵ at σ = 0.2), and the iterate z can be no closer to the fixed point than its rounding.
The response density m(z) has the state Φ(z), a slope times that rounding away from the
fixed point, and its own certificate Φ(Φ(z)) − Φ(z) a slope more (2·10⁻⁶ at σ = 0.2). The
density returned is therefore the response moved along the Newton step d of z,
m(z) + ∂m/∂z d (one forward difference; v and λ alike), whose state is z + d by the Newton
equation: its certificate is near the slope times the rounding of z (10⁻¹¹ to 10⁻⁹), and
below that floor the iteration stops, not converged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.backend import get_backend
from ..core.errors import ConvergenceWarning, ParameterError, SolverError, warn
from ..problems.two_d import MFGProblem2D
from .batch_newton import ARMIJO, backtrack
from .fdm2d.stencil import Coefficients, Stencil
from .fdm2d.sweeps import SparsePattern
from .stationary import Stationary

#: Relative step of the differences of Φ.
STEP = 1e-7
#: The iterate residual ‖Φ(z) − z‖ / ‖Φ(z)‖ below which each step is certified (above it
#: the certificate, amplified by Φ's steepness, cannot hold).
CERTIFY_BELOW = 1e-3
#: Newton steps of one ergodic HJB solve before it is refused.
HJB_STEPS = 60
#: Refused steps of a line search before the iteration stops.
MAX_HALVINGS = 30


class ErgodicSystem2D:
    """The discrete ergodic system of ``problem`` on ``nx`` × ``ny`` nodes (NumPy float64)."""

    def __init__(self, problem: MFGProblem2D, nx: int, ny: int) -> None:
        self.problem, self.grid = problem, problem.grid(nx, ny, 1)
        if self.grid.exits:
            raise ParameterError(f"stationary=True is invalid for {type(problem).__name__} "
                                 f"with {len(self.grid.exits)} exit(s): its mass leaves "
                                 "through them, so it has no stationary state; solve a "
                                 "finite horizon, or a domain without exits")
        be = self.backend = get_backend("numpy")
        if problem.hamiltonian.depends_on_m:
            raise ParameterError(f"hamiltonian={problem.hamiltonian!r} is invalid with "
                                 "stationary=True in 2-D: the long run takes a Hamiltonian that "
                                 "does not depend on m there")
        self.stencil = Stencil(self.grid, problem.nu, problem.hamiltonian, be)
        self.pattern = SparsePattern(self.grid.active)
        self.coupling = problem.coupling(self.grid, be)
        self.active = self.grid.active
        self.volumes = np.asarray(self.grid.volumes, dtype=np.float64) * self.active
        self.evaluations = 0
        self.last_step = 0.5
        self.m0 = np.asarray(problem.initial_density(self.grid, be))
        #: the active node (counted among the active ones) that fixes the gauge of v and
        #: stands for the redundant FP row: where m0 is largest
        self.pinned = int(np.argmax(self.m0[self.active]))

    # -- the best response -------------------------------------------------------------------
    def cost(self, z: np.ndarray) -> np.ndarray:
        """F (ny, nx) of the coupling state z (one level)."""
        return np.asarray(self.coupling.running_cost(z[None]), dtype=np.float64)[0]

    def state(self, m: np.ndarray) -> np.ndarray:
        """The coupling state of the density m (one level)."""
        return np.asarray(self.coupling.state(np.stack([m, m])), dtype=np.float64)[0]

    def _operator(self, v: np.ndarray, F: np.ndarray) -> tuple[Any, np.ndarray]:
        """(J₀(v) on the active nodes, E(v) − F there)."""
        c, R = self.stencil.system(v, v, F, None)
        diag = c.diag - self.stencil.inv_dt * self.active
        return self.pattern.matrix(Coefficients(diag, c.W, c.E, c.S, c.N, None)), \
            np.asarray(R)[self.active]

    def hjb(self, F: np.ndarray, v: np.ndarray, lam: float) -> tuple[np.ndarray, float]:
        """(v, λ) of the ergodic HJB for the running cost F, Newton from (v, λ): the gauge
        v_k = const at the pinned node k, whose column of J₀ (0 in sum with the others)
        gives way to λ's column of ones (a sparse matrix, where a bordered one would fill),
        and Σ V v = 0 set by a shift at the end (E sees only differences of v)."""
        k, V = self.pinned, self.volumes
        scale = max(1.0, float(np.max(np.abs(F))))
        last = math.inf
        for _ in range(HJB_STEPS):
            J0, E = self._operator(v, F)
            r = E + lam
            size = float(np.max(np.abs(r)))
            # to round-off: Φ's steepness amplifies what the HJB leaves in the certificate
            if size <= 1e-15 * scale or (size <= 1e-11 * scale and size > 0.5 * last):
                return v - float(np.sum(V * v)) / float(np.sum(V)) * self.active, lam
            last = size
            step = self._solve(_replaced(J0, k, ones=True), -r)
            lam += float(step[k])
            step[k] = 0.0
            v = v.copy()
            v[self.active] += step
        raise SolverError(f"the ergodic HJB of the long run did not converge in {HJB_STEPS} "
                          f"Newton steps (sigma={self.problem.sigma:g}, nx={self.grid.nx}, "
                          f"ny={self.grid.ny}): use a larger sigma or more nodes")

    def fp(self, v: np.ndarray) -> np.ndarray:
        """The stationary density of v: J₀(v)ᵀ μ = 0 (cell masses μ = V m) with the row of the
        pinned node (redundant: the rows sum to 0) replaced by μ_k = 1, then Σ μ = 1."""
        k = self.pinned
        J0, _ = self._operator(v, np.zeros_like(v))
        rhs = np.zeros(self.pattern.n)
        rhs[k] = 1.0
        mu = np.maximum(self._solve(_replaced(J0, k, ones=False).T.tocsc(), rhs), 0.0)
        m = np.zeros(self.active.shape)
        m[self.active] = mu / np.sum(mu) / self.volumes[self.active]
        return m

    def respond(self, z: np.ndarray, v: np.ndarray, lam: float
                ) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
        """(v, λ, m, Φ(z)) of the best response to the coupling state z."""
        self.evaluations += 1
        v, lam = self.hjb(self.cost(z), v, lam)
        m = self.fp(v)
        return v, lam, m, self.state(m)

    def _solve(self, A: Any, b: np.ndarray) -> np.ndarray:
        from scipy.sparse.linalg import spsolve  # (on first use: SciPy is no import of mfgwork)

        x = spsolve(A, b)
        if not np.all(np.isfinite(x)):
            raise SolverError(f"a sparse system of the long run is singular (sigma="
                              f"{self.problem.sigma:g}, nx={self.grid.nx}, ny={self.grid.ny}):"
                              " use a larger sigma or more nodes")
        return x

    # -- Newton–Krylov on the coupling state (:class:`ErgodicNewtonKrylov`) -----------------
    def _direction(self, z: np.ndarray, gz: np.ndarray, v: np.ndarray, lam: float,
                   budget: int) -> np.ndarray:
        """d with (I − DΦ(z)) d = Φ(z) − z, GMRES with forward-difference products: at most
        ``budget`` of them (each a best response), four restarts of 50 at most."""
        shape, R = z.shape, (gz - z).reshape(-1)
        size = max(1.0, float(np.max(np.abs(z))))
        spent = [0]

        def apply(p: np.ndarray) -> np.ndarray:
            norm = float(np.linalg.norm(p))
            if norm == 0.0 or spent[0] >= budget:   # (GMRES's closing residual check of
                return p                             # its last cycle: past the budget)
            spent[0] += 1
            h = STEP * size / norm
            moved = self.respond(z + h * p.reshape(shape), v, lam)[3]
            return p - ((moved - gz) / h).reshape(-1)

        from scipy.sparse.linalg import LinearOperator, gmres

        n = R.size
        restart = max(1, min(n, 50, budget))
        d, _ = gmres(LinearOperator((n, n), matvec=apply, dtype=np.float64), R, rtol=1e-8,
                     restart=restart, maxiter=max(1, min(4, budget // restart)))
        return d.reshape(shape)

    def _line_search(self, z: np.ndarray, gz: np.ndarray, d: np.ndarray, v: np.ndarray,
                     lam: float, max_iter: int) -> tuple[np.ndarray, tuple] | None:
        """The first step z + t d whose residual satisfies Armijo's rule on ½‖Φ − z‖², from
        t = twice the last accepted step (at most 1), shrunk by the quadratic model of
        :func:`.batch_newton.backtrack` after a refusal."""
        norm = float(np.linalg.norm(gz - z))
        t = min(1.0, 2.0 * self.last_step)
        for _ in range(MAX_HALVINGS):
            if self.evaluations >= max_iter:
                return None
            trial = z + t * d
            out = self.respond(trial, v, lam)
            found = float(np.linalg.norm(out[3] - trial))
            if found**2 <= (1.0 - ARMIJO * t) * norm**2:
                self.last_step = t
                return trial, out
            t = backtrack(float(t), float(norm), found)
        return None

    def lifted(self, z: np.ndarray, d: np.ndarray, v: np.ndarray, lam: float, m: np.ndarray
               ) -> tuple[np.ndarray, float, np.ndarray]:
        """(v, λ, m) of the response to z moved along the step d of the coupling state, to
        first order: (v, λ, m) + ∂(v, λ, m)/∂z d by one forward difference (one best
        response), the density kept ≥ 0 with unit mass. Its state is Φ(z) + DΦ d, which is
        z + d where d is the Newton step (I − DΦ) d = Φ(z) − z."""
        norm = float(np.linalg.norm(d))
        if norm == 0.0:
            return v, lam, m
        h = STEP * max(1.0, float(np.max(np.abs(z))))
        v_h, lam_h, m_h, _ = self.respond(z + (h / norm) * d, v, lam)
        scale = norm / h
        m = np.maximum(m + scale * (m_h - m), 0.0)
        return v + scale * (v_h - v), lam + scale * (lam_h - lam), \
            m / float(np.sum(self.volumes * m))

    def certificate(self, m: np.ndarray, v: np.ndarray, lam: float) -> float:
        """‖Φ(z) − z‖ / ‖Φ(z)‖ at the coupling state z of the density m."""
        z = self.state(m)
        gz = self.respond(z, v, lam)[3]
        return _relative(gz - z, gz)


@dataclass
class KrylovState:
    """Newton–Krylov on the coupling state between steps: the system (which counts its best
    responses), the point z with its best response (v, λ, m, Φ(z)), the certified residuals
    so far and the best certified (residual, v, λ, m), and whether the iteration ended."""

    system: ErgodicSystem2D
    max_iter: int
    z: np.ndarray
    v: np.ndarray
    lam: float
    m: np.ndarray
    gz: np.ndarray
    history: dict[str, list[float]] = field(default_factory=lambda: {"residual": []})
    best: tuple[float, np.ndarray, float, np.ndarray] | None = None
    finished: bool = False

    @property
    def evaluations(self) -> int:
        """Best responses computed so far (trial points, products and certificates)."""
        return self.system.evaluations


@dataclass(frozen=True)
class ErgodicNewtonKrylov:
    """The ergodic solution, an equilibrium strategy (:mod:`.equilibrium`): Newton from the
    initial density's coupling state, each step whose iterate residual is below
    :data:`CERTIFY_BELOW` certified by one more best response (to the state of the density
    it returns), until a certificate is ≤ ``tol`` or ``max_iter`` best responses."""

    tol: float

    def init(self, system: ErgodicSystem2D, max_iter: int) -> KrylovState:
        z = system.state(system.m0)
        v, lam, m, gz = system.respond(z, np.zeros(system.active.shape), 0.0)
        return KrylovState(system, max_iter, z, v, lam, m, gz)

    def step(self, s: KrylovState) -> KrylovState:
        """The Newton–Krylov direction; where the point's residual is small, the response
        lifted along it (:meth:`ErgodicSystem2D.lifted`) certified (the response itself where
        the budget is nearly spent); then one step of the line search along the direction."""
        system = s.system
        # (of the budget, one trial of the line search and the last certificate are kept;
        # a lifted certificate takes two best responses more)
        budget = s.max_iter - system.evaluations - 2
        small = _relative(s.gz - s.z, s.gz) <= CERTIFY_BELOW
        direction = None
        if small and budget > 2:
            direction = system._direction(s.z, s.gz, s.v, s.lam, budget - 2)
            self._certify(s, *system.lifted(s.z, direction, s.v, s.lam, s.m))
        elif small or system.evaluations >= s.max_iter - 1:
            self._certify(s, s.v, s.lam, s.m)
        if s.finished:
            return s
        budget = s.max_iter - system.evaluations - 2
        if budget < 1:
            s.finished = True
            return s
        if direction is None:
            direction = system._direction(s.z, s.gz, s.v, s.lam, budget)
        found = system._line_search(s.z, s.gz, direction, s.v, s.lam, s.max_iter - 1)
        if found is None:
            s.finished = True
            return s
        s.z, (s.v, s.lam, s.m, s.gz) = found
        return s

    def _certify(self, s: KrylovState, v: np.ndarray, lam: float, m: np.ndarray) -> None:
        """One best response to the density m: its residual recorded, kept if the best so
        far, and the iteration finished if it is ≤ tol."""
        system = s.system
        z = system.state(m)
        gz = system.respond(z, v, lam)[3]
        s.history["residual"].append(_relative(gz - z, gz))
        if s.best is None or s.history["residual"][-1] < s.best[0]:
            s.best = (s.history["residual"][-1], v, lam, m)
        s.finished = s.best[0] <= self.tol

    def done(self, s: KrylovState) -> bool:
        return s.finished

    def certify(self, s: KrylovState) -> Stationary:
        system = s.system
        if s.best is None:   # the budget ran out before a certificate: certify the last point
            self._certify(s, s.v, s.lam, s.m)
        residual, v, lam, m = s.best
        converged = residual <= self.tol
        if not converged:
            warn(f"the long run did not reach tol={self.tol:g}: residual {residual:.3g} after "
                 f"{system.evaluations} best responses (max_iter={s.max_iter})",
                 ConvergenceWarning)
        return Stationary(v=v, m=m, ergodic_constant=lam, residual=residual,
                          converged=converged, iterations=system.evaluations,
                          history={"residual": s.history["residual"]})


def _replaced(A: Any, k: int, *, ones: bool) -> Any:
    """A (CSC) with its column k replaced by ones (``ones``), else by the unit vector e_k."""
    import scipy.sparse as sp

    coo = A.tocoo()
    keep = coo.col != k
    rows = np.arange(A.shape[0]) if ones else np.array([k])
    return sp.csc_matrix((np.concatenate([coo.data[keep], np.ones(rows.size)]),
                          (np.concatenate([coo.row[keep], rows]),
                           np.concatenate([coo.col[keep], np.full(rows.size, k)]))),
                         shape=A.shape)


def _relative(diff: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(diff)) / max(float(np.linalg.norm(ref)), 1e-300)
