"""The long run: the ergodic (stationary) MFG system, solved directly by Newton's method.

As T → ∞ the value behaves like λ (T − t) + v(x) and the density settles to m(x):

    λ − ν v'' + H(x, v', m) = f(x, m),     −ν m'' − (m ∂p H(x, v', m))' = 0,
    ∫ m = 1,  ∫ v = 0  (v is defined up to a constant; λ, the ergodic constant, is not).

On the grid these are the time-dependent scheme's own operators without the time step
(:mod:`.fdm.operators`): with E(v) = −ν L v + Ĥ(v) and J₀(v) = ∂E/∂v (tridiagonal; the step
matrix J less I/Δt), the unknowns v, the cell masses μ = w m and λ solve

    λ + E(v) − F(μ) = 0,    J₀(v)ᵀ μ = 0 (its last row replaced by Σ μ = 1),    Σ w v = 0,

F the running cost of the coupling state of m (one level). Rows of J₀ sum to zero, so its
transposed equations sum to zero: one is redundant, and the mass takes its place. Newton's
method runs on all 2 nx + 1 unknowns at once with the exact Jacobian in v and λ
(∂(J₀ᵀ μ)/∂v is the Hessian of μ·Ĥ, :func:`.fdm.operators.tangent_weights`) and in μ either
exactly (a running cost with a scalar potential: ∂F_i/∂μ_j = −P′(A) χ_i χ_j) or by central
differences (any other coupling; and Ĥ's own dependence on m, which is local: one difference
along all nodes); a dense solve (the system is
small: 403 unknowns at nx = 201), and a line search on the residual's norm that keeps μ ≥ 0.

The certificate is a best response, as for time-dependent solves: for the returned density,
the ergodic HJB alone (Newton in v and λ) and the stationary FP of its v give a new
density; the relative residual of the coupling states (Santa Fe: the attendance) is what
``converged`` is judged on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.backend import Backend, get_backend, to_numpy
from ..core.errors import ConvergenceWarning, SolverError, warn
from ..problems.base import MFGProblem
from .fdm.operators import hamiltonian_terms, tangent_weights

#: Relative step of the central differences in μ (of the largest cell mass).
MU_STEP = 1e-6
#: Halvings of a line search before the iteration gives up.
MAX_HALVINGS = 30
#: Newton steps from a start after which a solve with a later start (the middle of a finite
#: horizon) takes it: from the initial density Newton converges in 5–14 steps where it
#: converges (Santa Fe, σ 0.2–1, thresholds 0.3–0.9, ε 0.02–0.2, payoffs 10–1000, nx 51),
#: and elsewhere it creeps along steps of 10⁻³–10⁻⁵ (59 of those 81 bars).
RESTART_AFTER = 16


@dataclass(frozen=True)
class Stationary:
    """The ergodic solution on the nodes (1-D, and (ny, nx) in 2-D: :mod:`.stationary2d`):
    the value v (Σ w v = 0), the density m, the ergodic constant λ, the certified residual,
    the iterations and Newton's history."""

    v: np.ndarray
    m: np.ndarray
    ergodic_constant: float
    residual: float
    converged: bool
    iterations: int
    history: dict[str, list[float]]
    #: (step, which) of each later start taken: the Newton steps before it, its index
    restarts: tuple[tuple[int, int], ...] = ()


class ErgodicSystem:
    """The discrete ergodic system of ``problem`` on ``nx`` nodes, on ``backend`` (default
    NumPy float64; torch on any device: the same operations, one dense solve per step)."""

    def __init__(self, problem: MFGProblem, nx: int, backend: Backend | None = None) -> None:
        self.problem, self.grid = problem, problem.grid(nx, 1)
        self.backend = be = backend or get_backend("numpy", "cpu", "float64")
        self.xp, g = be.xp, self.grid
        self.h, self.nu = g.h, problem.nu
        self.w, self.x = be.asarray(g.weights), be.asarray(g.x)
        self.inv_hw = be.asarray(1.0 / (g.h * np.asarray(g.weights)))
        self.coupling = problem.coupling(g, be)
        self.H = problem.hamiltonian
        #: the running cost's scalar potential (F = −P(A) χ), also where H depends on m and
        #: the coupling iterates on densities but observes a path with one (Santa Fe)
        observed = getattr(self.coupling, "observed", None) or self.coupling
        self.potential = observed.potential()

    # -- the pieces -------------------------------------------------------------------------
    def cost(self, mu: Any) -> Any:
        """F(μ): the running cost (nx,) of the coupling state of m = μ / w (one level)."""
        m = mu / self.w
        return self.coupling.running_cost(self.coupling.state(self.xp.stack([m, m])))[0]

    def operator(self, v: Any, mu: Any) -> tuple[Any, Any, Any]:
        """(terms of Ĥ, E(v), J₀(v) as a dense matrix)."""
        xp = self.xp
        m = mu / self.w if self.H.depends_on_m else None
        terms = hamiltonian_terms(v, self.h, self.x, m, self.H, xp)
        diffusion = (terms.q_right - terms.q_left) / self.w
        E = -self.nu * diffusion + terms.value
        zero = xp.zeros_like(v[:1])
        lower = xp.concat([zero, -self.nu * self.inv_hw[1:]]) - terms.d_left / self.h
        upper = xp.concat([-self.nu * self.inv_hw[:-1], zero]) + terms.d_right / self.h
        return terms, E, self._tridiagonal(lower[1:], -lower - upper, upper[:-1])

    def _tridiagonal(self, below: Any, diag: Any, above: Any) -> Any:
        """The dense matrix with these three diagonals."""
        n = diag.shape[0]
        A = self.xp.zeros((n, n), dtype=diag.dtype, **self._on)
        i = self.xp.arange(n, **self._on)
        j = i[:-1]
        A[i, i] = diag
        A[j + 1, j] = below
        A[j, j + 1] = above
        return A

    @property
    def _on(self) -> dict[str, Any]:
        return {} if self.backend.name == "numpy" else {"device": self.backend.native_device}

    def residual(self, v: Any, mu: Any, lam: float) -> Any:
        """(HJB rows, FP rows with the mass last, the normalisation of v): 2 nx + 1 values."""
        xp = self.xp
        _, E, J0 = self.operator(v, mu)
        fp = xp.concat([(J0.T @ mu)[:-1], xp.reshape(xp.sum(mu) - 1.0, (1,))])
        return xp.concat([lam + E - self.cost(mu), fp, xp.reshape(self.w @ v, (1,))])

    def jacobian(self, v: Any, mu: Any) -> Any:
        """The exact Jacobian in v and λ; in μ exact for a scalar potential with H independent
        of m, else by central differences."""
        xp, n = self.xp, self.grid.nx
        terms, _, J0 = self.operator(v, mu)
        m = mu / self.w if self.H.depends_on_m else None
        c = tangent_weights(terms, mu, self.x, m, self.h, self.H, xp)   # edges' c_e / h²
        zero = xp.zeros_like(c[:1])
        K = self._tridiagonal(-c, xp.concat([c, zero]) + xp.concat([zero, c]), -c)
        jac = xp.zeros((2 * n + 1, 2 * n + 1), dtype=v.dtype, **self._on)
        jac[:n, :n], jac[:n, 2 * n] = J0, 1.0
        jac[n:2 * n, :n], jac[n:2 * n, n:2 * n] = K, J0.T
        jac[:n, n:2 * n] = self._cost_block(mu) + self._hamiltonian_block(v, mu)
        jac[2 * n - 1, :] = 0.0
        jac[2 * n - 1, n:2 * n] = 1.0
        jac[2 * n, :n] = self.w
        return jac

    def _cost_block(self, mu: Any) -> Any:
        """−∂F/∂μ: P′(A) χ χᵀ for a scalar potential (exact), else central differences of
        the running cost, one column per node."""
        if self.potential is not None:
            chi = self.backend.asarray(self.potential.chi)
            A = float(to_numpy(chi @ mu))
            slope = float(self.potential.price_slope(np.array([A]))[0])
            return slope * (chi[:, None] * chi[None, :])
        n = mu.shape[0]
        step = MU_STEP * max(float(to_numpy(self.xp.max(mu))), 1e-300)
        eye = self.xp.eye(n, dtype=mu.dtype, **self._on) * step
        return self.xp.stack([(self.cost(mu - eye[j]) - self.cost(mu + eye[j])) / (2 * step)
                              for j in range(n)], axis=1)

    def _hamiltonian_block(self, v: Any, mu: Any) -> Any:
        """∂Ĥ/∂μ where H depends on m (0 otherwise): diagonal, since Ĥ_i sees m_i alone,
        so one central difference along all nodes at once (the FP rows' own dependence on
        m through H is left to the line search: J₀ᵀ stands for it)."""
        if not self.H.depends_on_m:
            return 0.0
        step = MU_STEP * max(float(to_numpy(self.xp.max(mu))), 1e-300)
        diagonal = (self.operator(v, mu + step)[1] - self.operator(v, mu - step)[1]) / (2 * step)
        n = mu.shape[0]
        return self._tridiagonal(self.xp.zeros(n - 1, dtype=mu.dtype, **self._on), diagonal,
                                 self.xp.zeros(n - 1, dtype=mu.dtype, **self._on))

    # -- the best response (the certificate) ------------------------------------------------
    def best_response(self, mu: Any, v: Any, lam: float) -> tuple[Any, float, Any]:
        """(v, λ) of the ergodic HJB with the running cost of μ frozen (Newton from v, λ),
        and the stationary density of that v: μ′ with J₀(v)ᵀ μ′ = 0, Σ μ′ = 1."""
        xp, n, F = self.xp, mu.shape[0], self.cost(mu)
        scale = max(1.0, float(to_numpy(xp.max(xp.abs(F)))))
        for _ in range(100):
            _, E, J0 = self.operator(v, mu)
            r = xp.concat([lam + E - F, xp.reshape(self.w @ v, (1,))])
            if float(to_numpy(xp.max(xp.abs(r)))) <= 1e-13 * scale:
                break
            jac = xp.zeros((n + 1, n + 1), dtype=v.dtype, **self._on)
            jac[:n, :n], jac[:n, n], jac[n, :n] = J0, 1.0, self.w
            step = self.solve(jac, -r)
            v, lam = v + step[:n], lam + float(to_numpy(step[n]))
        system = self.xp.concat([self.operator(v, mu)[2].T[:-1],
                                 xp.ones((1, n), dtype=v.dtype, **self._on)])
        rhs = xp.concat([xp.zeros(n - 1, dtype=v.dtype, **self._on),
                         xp.ones(1, dtype=v.dtype, **self._on)])
        return v, lam, self.solve(system, rhs)

    def solve(self, A: Any, b: Any) -> Any:
        """A⁻¹ b, a singular A refused with what to change."""
        try:
            return self.xp.linalg.solve(A, b)
        except (np.linalg.LinAlgError, RuntimeError) as exc:   # NumPy's, torch's
            raise SolverError(
                f"a Newton system of the long run is singular (sigma={self.problem.sigma:g}, "
                f"nx={self.grid.nx}: {exc}); with little noise the stationary density "
                "concentrates beyond what the grid resolves: use a larger sigma or more "
                "nodes") from None

    def certificate(self, mu: Any, v: Any, lam: float) -> float:
        """‖z(BR(μ)) − z(μ)‖ / ‖z(BR(μ))‖ for the coupling states z of the densities."""
        _, _, mu_br = self.best_response(mu, v, lam)
        z, z_br = self._state(mu), self._state(mu_br)
        return float(np.linalg.norm(z_br - z) / max(np.linalg.norm(z_br), 1e-300))

    def _state(self, mu: Any) -> np.ndarray:
        m = mu / self.w
        return np.asarray(to_numpy(self.coupling.state(self.xp.stack([m, m]))),
                          dtype=np.float64).ravel()


@dataclass
class ErgodicState:
    """Newton's method on the ergodic system between steps: the iterate (v, μ, λ), the
    best certified one (``best``: its residual, v, μ, λ), the steps taken (``k``) and their
    history (certified residual, residual of the system, seconds), the later starts tried
    (``tried``; the last at step ``last_start``) and those taken (``restarts``: step, index)."""

    system: ErgodicSystem
    tol: float
    max_iter: int
    v: Any
    mu: Any
    lam: float
    best: tuple[float, Any, Any, float]
    history: dict[str, list[float]]
    k: int = 0
    tried: int = 0
    last_start: int = 0
    restarts: list[tuple[int, int]] = field(default_factory=list)

    @property
    def evaluations(self) -> int:
        """Newton steps taken (each certified by one best response)."""
        return self.k


@dataclass(frozen=True)
class ErgodicNewton:
    """Newton's method on the ergodic system (module docstring), an equilibrium strategy
    (:mod:`.equilibrium`): from λ = 0 and ``start`` = (v, m) (host arrays, e.g. a level in
    the middle of a long finite horizon; default v = 0 and the initial density) until the
    certificate is ≤ ``tol`` or ``max_iter`` Newton steps; a
    :class:`~mfgwork.ConvergenceWarning` where it is not reached. ``later`` (callables each
    returning such a start, or None) are taken in turn, λ = 0 again, each after
    :data:`RESTART_AFTER` steps from the start before that did not converge (at once where
    a step meets a singular system or overflows); the best certified iterate of all is
    returned."""

    tol: float
    start: tuple[Any, Any] | None = None
    later: tuple[Callable[[], tuple[Any, Any] | None], ...] = ()

    def init(self, system: ErgodicSystem, max_iter: int) -> ErgodicState:
        v, mu = _starting(system, self.start)
        return ErgodicState(system, self.tol, max_iter, v, mu, 0.0, (math.inf, v, mu, 0.0),
                            {"residual": [], "system": [], "time": []})

    def step(self, s: ErgodicState) -> ErgodicState:
        """One Newton step with its line search, certified by one best response (from the
        later start where it is due, or at once where a step from the initial density meets a
        singular system or overflows)."""
        started, system = time.perf_counter(), s.system
        if s.tried < len(self.later) and s.k - s.last_start >= RESTART_AFTER:
            self._restart(s)
        restarts = s.tried < len(self.later)
        try:
            with np.errstate(over="ignore", invalid="ignore"):   # (a certificate is finite, or
                R = system.residual(s.v, s.mu, s.lam)            # never the best; see below)
                step = system.solve(system.jacobian(s.v, s.mu), -R)
                s.v, s.mu, s.lam = _line_search(system, s.v, s.mu, s.lam, step, _norm(R))
                certified = system.certificate(s.mu, s.v, s.lam)
        except SolverError:
            if not restarts:
                raise
            certified = math.nan
        if restarts and not math.isfinite(certified):
            self._restart(s)
            return self.step(s)
        s.history["residual"].append(certified)
        s.history["system"].append(_norm(system.residual(s.v, s.mu, s.lam)))
        s.history["time"].append(time.perf_counter() - started)
        if certified < s.best[0]:
            s.best = (certified, s.v, s.mu, s.lam)
        s.k += 1
        return s

    def _restart(self, s: ErgodicState) -> None:
        """Take the next later start (the iterate stays where it is if none could be made)."""
        later = self.later[s.tried]()
        s.tried, s.last_start = s.tried + 1, s.k
        if later is not None:
            (s.v, s.mu), s.lam = _starting(s.system, later), 0.0
            s.restarts.append((s.k, s.tried - 1))

    def done(self, s: ErgodicState) -> bool:
        return s.best[0] <= self.tol or s.k >= s.max_iter

    def certify(self, s: ErgodicState) -> Stationary:
        residual, v, mu, lam = s.best
        if residual > self.tol:
            warn(f"the ergodic system did not reach tol={self.tol:g} in {s.k} Newton steps "
                 f"(max_iter={s.max_iter}; final residual {residual:.3g}); returning the best "
                 "certified iterate with converged=False", ConvergenceWarning)
        return Stationary(v=np.asarray(to_numpy(v)), m=np.asarray(to_numpy(mu / s.system.w)),
                          ergodic_constant=lam, residual=residual,
                          converged=residual <= self.tol, iterations=s.k, history=s.history,
                          restarts=tuple(s.restarts))


def _starting(system: ErgodicSystem, start: tuple[Any, Any] | None) -> tuple[Any, Any]:
    """(v with Σ w v = 0, the cell masses μ) of ``start`` = (v, m) (host arrays), or of v = 0
    and the initial density."""
    xp, be = system.xp, system.backend
    if start is None:
        v, m = xp.zeros_like(system.w), system.problem.initial_density(system.grid, be)
    else:
        v, m = (be.asarray(np.asarray(a, dtype=np.float64)) for a in start)
        v = v - xp.sum(v * system.w) / xp.sum(system.w)
    return v, m * system.w / xp.sum(m * system.w)


def _norm(a: Any) -> float:
    return float(np.linalg.norm(np.asarray(to_numpy(a), dtype=np.float64)))


def _line_search(system: ErgodicSystem, v: Any, mu: Any, lam: float, step: Any, norm: float
                 ) -> tuple[Any, Any, float]:
    """The longest of the steps 1, ½, ¼, … that keeps μ ≥ 0 and lowers ‖R‖ (the last tried
    after :data:`MAX_HALVINGS`)."""
    n, t = v.shape[0], 1.0
    d_lam = float(to_numpy(step[2 * n]))
    for _ in range(MAX_HALVINGS):
        v_t, mu_t, lam_t = v + t * step[:n], mu + t * step[n:2 * n], lam + t * d_lam
        if (bool(to_numpy(system.xp.all(mu_t >= 0)))
                and _norm(system.residual(v_t, mu_t, lam_t)) < norm):
            return v_t, mu_t, lam_t
        t *= 0.5
    return v_t, system.xp.clip(mu_t, min=0.0), lam_t
