"""Equilibria of several populations sharing one observed path (Newton on the path).

K groups with shares w_k observe z = Σ_k w_k z_k, z_k = χ·μ_k^{n+1} the observation of group
k's cell masses μ_k = w m_k; group k's running cost is F_k^n = −P_k(z_n) χ with its own price
P_k (decreasing: Santa Fe's payoff F_k(A)). The best response of group k to z is its HJB sweep
and its FP sweep (:class:`GroupSweeps`: the K groups as one batch along the leading axis), and
the equilibria are the zeros of R(z) = G(z) − z, G(z) = Σ_k w_k z_k(BR_k(z)).

**Newton on z.** By the chain rule, ∂G/∂z = −Σ_k w_k D_k diag(s_k²) with s_k² = −P_k'(z) ≥ 0
and D_k = ∂z_k/∂y_k the exact tangent Jacobian of group k's discrete scheme (symmetric positive
semi-definite: :mod:`.fdm.tangent`). The Newton step d solves

    (I + Σ_k w_k D_k diag(s_k²)) d = R,

whose matrix is not symmetric unless the prices agree (then the game has a potential, as one
population). It is solved matrix-free by GMRES (``system="gmres"``, the default: each product
is one tangent sweep of one direction per group, O(K nt nx), to the relative accuracy
min(10⁻⁴, r) of an inexact Newton step) or from the dense D_k (``system="dense"``: all nt
directions, O(K nt² nx), and an LU solve). Measured on this machine's CPU at 201²
(``benchmarks/populations.py``, 1 to 4 groups, 2 shared cores): GMRES 3–9 times faster than
the dense system (whose nt directions cost O(K nt² nx)), with 15–20 products per step and
group. d is a descent direction
of ½‖R‖² (its derivative along d is −‖R‖² up to the inexactness of the solve), and steps are
damped by Armijo backtracking on ½‖R‖², as in :mod:`.batch_newton`. Each evaluation is one
best response of all groups; the densities of an accepted z are certified by one more (the
residual of their own path, ‖G(G(z)) − G(z)‖ / ‖G(G(z))‖, and of each group's path) once r(z)
is below a trigger that a refused certificate lowers. When the line search fails, Anderson mixing
(:func:`.iteration.fixed_point`) continues from the last point with the remaining budget.

**Congestion.** Where a group's Hamiltonian depends on m, it sees the whole population's
density ρ^n = Σ_k w_k m_k^n (:mod:`mfgwork.problems.populations`), frozen at the iterate as in
a single-population solve (the step from t_{n+1} to t_n and back sees ρ^{n+1}). The shared
observation is then the pair (z, ρ), stored as one state (nt, 1 + nx) (the path in the first
column), and its fixed point is found by Anderson mixing (Newton's method needs H independent
of m: :func:`.batch_newton.newton_refusal`); the certificate is the same best response of
every group, its residuals taken over the pair.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.backend import Backend, get_backend, to_numpy
from ..core.errors import ConvergenceWarning, ParameterError, SolverError
from ..core.grid import Grid
from ..problems.base import Coupling, ScalarPotential
from ..problems.hamiltonians import Hamiltonian
from ..problems.populations import Populations, SantaFePopulations
from .batch_newton import ARMIJO, ETA, GROW, backtrack, newton_refusal
from .equilibrium import System, solve
from .fdm.sweeps import FiniteDifferences
from .fdm.tangent import tangent_jacobian, tangent_product
from .iteration import (
    Anderson,
    FixedPointResult,
    History,
    IterationScheme,
    evaluator,
    fixed_point,
    frozen_args,
    record_times,
    relative_residual,
)
from .potential import product_operands, tangent_operands

SYSTEMS = ("gmres", "dense")


class GroupSweeps:
    """The HJB and FP sweeps of K groups with diffusions ``nu`` (K,) and Hamiltonians
    ``hamiltonians`` on one grid, arrays with a leading group axis: on accelerators, when
    the groups share one Hamiltonian, one batched :class:`FiniteDifferences` (ν per member);
    otherwise one sweep per group (on the CPU the compiled loops, which take one problem)."""

    def __init__(self, grid: Grid, nu: np.ndarray, hamiltonians: list[Hamiltonian],
                 backend: Backend, compile_steps: bool | str = "auto") -> None:
        self.backend = backend
        self.batched = backend.is_accelerator and all(H == hamiltonians[0]
                                                      for H in hamiltonians)
        nu = np.asarray(nu, dtype=np.float64).reshape(-1)
        self.fds = ([FiniteDifferences(grid, nu[:, None], backend, hamiltonian=hamiltonians[0],
                                       compile_steps=compile_steps)]
                    if self.batched else
                    [FiniteDifferences(grid, float(v), backend, hamiltonian=H,
                                       compile_steps=compile_steps)
                     for v, H in zip(nu, hamiltonians, strict=True)])

    def hjb(self, U_T: Any, F: Any, guess: Any | None, density: Any | None = None) -> Any:
        """U (K, nt+1, nx); ``density`` (nt, nx): what the groups whose H depends on m see."""
        if self.batched:
            return self.fds[0].solve_hjb(U_T, F, guess, self._each(density, F.shape[0]))
        return self.backend.xp.stack([fd.solve_hjb(U_T[k], F[k], None if guess is None
                                                   else guess[k], density)
                                      for k, fd in enumerate(self.fds)])

    def fp(self, U: Any, m0: Any, density: Any | None = None) -> Any:
        """M (K, nt+1, nx); ``density`` as for :meth:`hjb`."""
        if self.batched:
            return self.fds[0].solve_fp(U, m0, self._each(density, U.shape[0]))
        return self.backend.xp.stack([fd.solve_fp(U[k], m0[k], density)
                                      for k, fd in enumerate(self.fds)])

    def _each(self, density: Any | None, groups: int) -> Any | None:
        """The density every member of the batch sees, along its leading axis."""
        return None if density is None else self.backend.xp.stack([density] * groups)

    @property
    def newton_iterations(self) -> int:
        return sum(fd.newton_iterations for fd in self.fds)

    @property
    def kernels(self) -> str:
        return self.fds[0].kernels.name

    def check_newton(self) -> None:
        for fd in self.fds:
            fd.check_newton()


class SharedPathCoupling:
    """z = Σ_k w_k z_k(M_k) (levels 1..nt), F (K, nt, nx) with F[k] group k's running cost
    of z; ``project`` is the first group's (the groups observe one kind of path). A group's
    coupling whose state is its density (H depends on m) serves through the path it observes
    (``coupling.observed``). ``crowded`` (some group's H depends on m): the state is (z, ρ)
    (nt, 1 + nx), ρ = Σ_k w_k m_k at levels 1..nt, which those groups see (module docstring).
    """

    def __init__(self, couplings: list[Coupling], shares: np.ndarray, backend: Backend,
                 crowded: bool = False) -> None:
        self.couplings = [getattr(c, "observed", None) or c for c in couplings]
        self.xp, self.crowded = backend.xp, crowded
        self.shares = [float(w) for w in shares]

    def group_paths(self, M: Any) -> Any:
        """z_k (K, nt) of the densities M (K, nt+1, nx)."""
        return self.xp.stack([c.state(M[k]) for k, c in enumerate(self.couplings)])

    def group_states(self, M: Any) -> Any:
        """Each group's part of the state: z_k (K, nt), or (z_k, m_k^{1..nt}) (K, nt, 1 + nx)
        where ``crowded``."""
        z = self.group_paths(M)
        return self.xp.concat([z[..., None], M[:, 1:, :]], axis=-1) if self.crowded else z

    def _weighted(self, parts: Any) -> Any:
        return sum(w * parts[k] for k, w in enumerate(self.shares))

    def path(self, M: Any) -> Any:
        """The shared path z (nt,) of the densities M (K, nt+1, nx)."""
        return self._weighted(self.group_paths(M))

    def state(self, M: Any) -> Any:
        return self._weighted(self.group_states(M))

    def running_cost(self, z: Any) -> Any:
        path = z[:, 0] if self.crowded else z
        return self.xp.stack([c.running_cost(path) for c in self.couplings])

    def project(self, z: Any) -> Any:
        if not self.crowded:
            return self.couplings[0].project(z)
        return self.xp.concat([self.couplings[0].project(z[:, :1]),
                               self.xp.clip(z[:, 1:], 0.0, None)], axis=-1)

    def frozen_density(self, z: Any) -> Any | None:
        """ρ^1..ρ^nt (nt, nx) that the groups whose H depends on m see (None unless
        ``crowded``)."""
        return z[:, 1:] if self.crowded else None

    def with_density(self, path: Any, m0: Any) -> Any:
        """The state of the path ``path`` (nt,) with the density of agents who stay at m0
        (K, nx): a start where only the path is known."""
        if not self.crowded:
            return path
        rho = self._weighted(m0)
        return self.xp.concat([path[:, None], self.xp.stack([rho] * path.shape[0])], axis=-1)


@dataclass
class Setup:
    """What one solve of ``problem`` on ``grid`` and ``backend`` works with."""

    coupling: SharedPathCoupling
    sweeps: GroupSweeps
    m0: Any
    U_T: Any
    potentials: list[ScalarPotential] | None


def setup(problem: Populations, grid: Grid, backend: Backend,
          compile_steps: bool | str = False) -> Setup:
    """The shared-path coupling, the group sweeps, m0 and g (K, nx) and the groups'
    potentials (None unless every group declares one and Newton's method serves its
    Hamiltonian: :func:`.batch_newton.newton_refusal`); the coupling is ``crowded`` where a
    group's Hamiltonian depends on m."""
    xp = backend.xp
    models = problem.models
    couplings = [m.coupling(grid, backend) for m in models]
    potentials = [c.potential() for c in couplings]
    if any(newton_refusal(m.hamiltonian) is not None for m in models):
        potentials = [None]
    crowded = any(m.hamiltonian.depends_on_m for m in models)
    return Setup(coupling=SharedPathCoupling(couplings, problem.shares, backend, crowded),
                 sweeps=GroupSweeps(grid, np.array([m.nu for m in models]),
                                    [m.hamiltonian for m in models], backend, compile_steps),
                 m0=xp.stack([m.initial_density(grid, backend) for m in problem.models]),
                 U_T=xp.stack([m.terminal_cost(grid, backend) for m in problem.models]),
                 potentials=None if any(p is None for p in potentials) else potentials)


def best_response_residuals(s: Setup, U: Any, M: Any) -> tuple[float, np.ndarray]:
    """One best response of every group to the path z = Σ_k w_k z_k(M) observed from the
    densities M (K, nt+1, nx) (HJB seeded by U): the path's ‖G(z) − z‖/‖G(z)‖ and each
    group's ‖z_k(BR_k(z)) − z_k(M_k)‖ / ‖z_k(BR_k(z))‖ (K,). The certified residual of M is
    the largest of them: every group best responds to what it observes."""
    xp = s.coupling.xp
    z = s.coupling.state(M)
    frozen = frozen_args(s.coupling, z)
    U_new = s.sweeps.hjb(s.U_T, s.coupling.running_cost(z), U, *frozen)
    M_new = s.sweeps.fp(U_new, s.m0, *frozen)
    s.sweeps.check_newton()
    total = relative_residual(s.coupling.state(M_new), z, xp, batched=False)
    groups = relative_residual(s.coupling.group_states(M_new), s.coupling.group_states(M), xp,
                               batched=True)
    return float(to_numpy(total)[0]), np.asarray(to_numpy(groups), dtype=np.float64)


def populations_residual(result: Any, problem: Populations | None = None) -> float:
    """The certified residual of a populations ``result`` (a :class:`mfgwork.Result`)
    recomputed, what ``Result.check`` returns for it: one best response of every group, as
    the solve certified it (on its backend, or NumPy float64 where it was certified there),
    the largest of the path's and the groups' residuals. ``problem`` defaults to the Santa
    Fe populations of ``result.params``."""
    if problem is None:
        try:
            problem = SantaFePopulations.from_params(result.params)
        except (KeyError, TypeError) as exc:
            raise ParameterError(f"the result's params do not describe Santa Fe populations "
                                 f"({exc!r}): pass the problem that was solved") from None
    if not isinstance(problem, Populations):
        raise ParameterError(f"problem={problem!r:.80} is invalid: must be an "
                             "mfgwork.Populations")
    M = to_numpy(result.M)
    grid = problem.grid(M.shape[-1], M.shape[-2] - 1)
    be = (get_backend("numpy", "cpu", "float64")
          if result.extra.get("certified_in", result.dtype) != result.dtype
          else get_backend(result.backend, result.device, result.dtype))
    path, groups = best_response_residuals(setup(problem, grid, be),
                                           be.asarray(to_numpy(result.U)), be.asarray(M))
    return max(path, float(np.max(groups)))


@dataclass
class PathNewtonResult(FixedPointResult):
    """:class:`PathNewton`'s certified result, with why it stopped (``stopped``: converged,
    stalled or max_iter) and its last accepted point (``last``: z, U), from which Anderson
    mixing may continue."""

    stopped: str = "max_iter"
    last: tuple[Any, Any] = (None, None)


@dataclass
class PathNewtonState:
    """A solve of :class:`PathNewton` between its steps: its best responses (``respond``,
    which keeps the history of its iterations), the budget ``max_iter`` of best responses,
    the current ``point``, the ``best`` certified densities (res, U, M), the certificate's
    ``trigger``, the first length of the next line search (``start``), whether ``point`` is
    certified, and why the solve stopped (``stopped``; "max_iter" while it runs)."""

    respond: _Responder
    max_iter: int
    point: dict[str, Any]
    best: dict[str, Any]
    trigger: float
    start: float = 1.0
    certified: bool = False
    stopped: str = "max_iter"

    @property
    def evaluations(self) -> int:
        return len(self.respond.history.residual)

    @property
    def history(self) -> History:
        return self.respond.history


class PathNewton:
    """Damped Newton's method on the shared path z of K groups (module docstring), with the
    groups' potentials (χ, P_k'), shares, diffusions and Hamiltonians (∂pp H bounded);
    ``system``: "gmres" or "dense". An equilibrium strategy (:mod:`.equilibrium`) whose state
    is a :class:`PathNewtonState`: it iterates until a certificate ≤ ``tol``, the line search
    fails ("stalled") or ``max_iter`` best responses were evaluated, and returns the best
    certified densities. It counts its Newton steps, Krylov products and the seconds of its
    Newton systems over its solves."""

    def __init__(self, potentials: list[ScalarPotential], shares: np.ndarray, nu: np.ndarray,
                 hamiltonians: list[Hamiltonian], *, grid: Grid, backend: Backend, tol: float,
                 system: str = "gmres", max_halvings: int = 12) -> None:
        self.potentials, self.grid, self.backend, self.tol = potentials, grid, backend, tol
        self.hamiltonians = hamiltonians
        self.shares = np.asarray(shares, dtype=np.float64)
        self.nu = np.asarray(nu, dtype=np.float64).reshape(-1)
        self.system, self.max_halvings = system, max_halvings
        self.newton_steps = self.products = 0
        self.system_seconds = 0.0

    def init(self, system: System, max_iter: int) -> PathNewtonState:
        """The best response to the system's ``z_init``, else to the path of m0 at all
        times."""
        be, xp, nt = self.backend, self.backend.xp, system.nt
        coupling = system.coupling
        respond = _Responder(evaluator(coupling, system.hjb, system.fp, system.U_T, system.m0,
                                       be), coupling, be, nt)
        z0 = (coupling.state(xp.stack([system.m0] * (nt + 1), axis=-2))
              if system.z_init is None else coupling.project(system.z_init))
        point = respond(z0, None)
        return PathNewtonState(respond=respond, max_iter=max_iter, point=point,
                               best={"res": math.inf, "U": point["U"], "M": point["M"]},
                               trigger=self.tol)

    def done(self, s: PathNewtonState) -> bool:
        """Converged, stalled, or ``max_iter`` best responses evaluated."""
        return s.stopped != "max_iter" or len(s.history.residual) >= s.max_iter

    def step(self, s: PathNewtonState) -> PathNewtonState:
        """The certificate of the point, once its residual is below the trigger (a refused
        one whose point decreases ‖R‖ is taken as a Picard step); else a line search along
        Newton's direction."""
        point = s.point
        if not s.certified and point["rel"] <= s.trigger:
            cert = s.respond(point["gz"], point["U"])
            s.certified = True
            res = s.respond.certificate(point, cert)
            if res < s.best["res"]:
                s.best = {"res": res, "U": point["U"], "M": point["M"]}
            if res <= self.tol:
                s.stopped = "converged"
                return s
            s.trigger = min(s.trigger, 0.5 * self.tol * point["rel"] / res)
            if cert["norm"] ** 2 <= (1.0 - ARMIJO) * point["norm"] ** 2:
                s.point, s.certified = cert, False   # a Picard step that decreases ‖R‖
            return s
        accepted, t = self._line_search(s.respond, point, s.start, s.max_iter)
        if accepted is None:
            if len(s.history.residual) < s.max_iter:
                s.stopped = "stalled"
            return s
        s.start = min(1.0, GROW * t)
        s.point, s.certified = accepted, False
        return s

    def certify(self, s: PathNewtonState) -> PathNewtonResult:
        """The best certified densities (one more evaluation certifies the last point if it
        was not)."""
        point, best = s.point, s.best
        if not s.certified:   # the last accepted point: one more evaluation certifies it
            cert = s.respond(point["gz"], point["U"], record=False)
            res = s.respond.certificate(point, cert)
            if res < best["res"]:
                best = {"res": res, "U": point["U"], "M": point["M"]}
        record_times(s.history, s.respond.stamps, self.backend)
        return PathNewtonResult(U=best["U"], M=best["M"],
                                converged=np.array([best["res"] <= self.tol]),
                                residual=np.array([best["res"]]),
                                iterations=np.array([len(s.history.residual)]),
                                history=s.history, stopped=s.stopped,
                                last=(point["z"], point["U"]))

    def _line_search(self, respond: _Responder, point: dict[str, Any], start: float,
                     max_iter: int) -> tuple[dict[str, Any] | None, float]:
        """(the accepted best response along Newton's direction from ``point``, or None
        after ``max_halvings`` refusals or at ``max_iter``; the step length it ended at):
        Armijo's test on ‖R‖², backtracking by the quadratic model of ‖R‖²."""
        d = self.backend.asarray(self._direction(point))
        t = start
        for _ in range(self.max_halvings + 1):
            if len(respond.history.residual) >= max_iter:
                break
            trial = respond(respond.coupling.project(point["z"] + t * d), point["U"])
            if trial["norm"] ** 2 <= (1.0 - ARMIJO * t) * point["norm"] ** 2:
                return trial, t
            t = backtrack(float(t), float(point["norm"]), float(trial["norm"]))
        return None, t

    def _direction(self, point: dict[str, Any]) -> np.ndarray:
        """d with (I + Σ_k w_k D_k diag(s_k²)) d = R (GMRES or dense); R where that fails."""
        started = time.perf_counter()
        self.newton_steps += 1
        g, z, R = self.grid, point["zh"], point["R"]
        U = np.asarray(to_numpy(point["U"]), dtype=np.float64)
        mu = np.asarray(to_numpy(point["M"]), dtype=np.float64) * g.weights
        s2 = [np.maximum(-p.price_slope(z), 0.0) for p in self.potentials]
        operands = [tangent_operands(U[k], mu[k], p.chi, float(self.nu[k]), g,
                                     self.hamiltonians[k])
                    for k, p in enumerate(self.potentials)]
        if self.system == "dense":
            J = np.eye(z.size)
            for w, ops, s in zip(self.shares, operands, s2, strict=True):
                J += w * tangent_jacobian(*ops, g.dt) * s[None, :]
            d = _solve_dense(J, R)
        else:
            d = self._gmres([product_operands(ops) for ops in operands], s2, R,
                            min(ETA, max(point["rel"], 1e-14)))
        self.system_seconds += time.perf_counter() - started
        return d if np.all(np.isfinite(d)) else R

    def _gmres(self, operands: list[tuple], s2: list[np.ndarray], R: np.ndarray,
               rtol: float) -> np.ndarray:
        from scipy.sparse.linalg import LinearOperator, gmres

        g, n = self.grid, R.size

        def apply(v: np.ndarray) -> np.ndarray:
            self.products += len(operands)
            v = np.asarray(v, dtype=np.float64).reshape(-1)
            out = v.copy()
            for w, ops, s in zip(self.shares, operands, s2, strict=True):
                out += w * tangent_product(*ops, g.dt, s * v)
            return out

        d, _ = gmres(LinearOperator((n, n), matvec=apply, dtype=np.float64), R, rtol=rtol,
                     atol=0.0, restart=n, maxiter=1)
        return d


def _solve_dense(J: np.ndarray, R: np.ndarray) -> np.ndarray:
    from scipy.linalg import LinAlgError, solve

    try:
        return solve(J, R)
    except LinAlgError:
        return R


def equilibrium(s: Setup, problem: Populations, grid: Grid, backend: Backend, *,
                scheme: IterationScheme | None, tol: float, max_iter: int, system: str,
                z_init: Any = None, progress: Any = None) -> tuple[FixedPointResult, dict]:
    """The fixed point: Newton's method on the shared path (``scheme`` None and every group
    declaring a potential), continued by Anderson mixing with the iterations left when its
    line search fails; otherwise the iteration ``scheme`` (default Anderson) alone. Returns
    the best certified result and what the Newton stage did."""
    if scheme is not None or s.potentials is None:
        return _mix(s, grid, backend, scheme or Anderson(), tol, max_iter, z_init, None,
                    progress), {}
    newton = PathNewton(s.potentials, problem.shares, [m.nu for m in problem.models],
                        [m.hamiltonian for m in problem.models], grid=grid, backend=backend,
                        tol=tol, system=system)
    out = solve(newton, System(s.coupling, s.sweeps.hjb, s.sweeps.fp, s.m0, s.U_T, grid.nt,
                               backend, z_init=z_init), max_iter=max_iter, progress=progress)
    info = {"newton_steps": newton.newton_steps, "krylov_products": newton.products,
            "newton_system": system, "system_seconds": newton.system_seconds,
            "newton_stopped": out.stopped}
    left = max_iter - int(out.iterations[0])
    if out.converged[0] or left < 1:
        return out, info
    more = _mix(s, grid, backend, Anderson(), tol, left, *out.last, progress)
    info["fallback"] = {"scheme": "anderson", "iterations": int(more.iterations[0]),
                        "residual": float(more.residual[0])}
    return _joined(out, more), info


def _mix(s: Setup, grid: Grid, backend: Backend, scheme: IterationScheme, tol: float,
         max_iter: int, z_init: Any, U_init: Any, progress: Any) -> FixedPointResult:
    """:func:`.iteration.fixed_point` on the shared path (its warning left to the caller),
    certified as Newton's iterates are: by the path's and every group's residual
    (:func:`best_response_residuals`). ``fixed_point`` stops on the path's alone, so while a
    group's refuses the certificate it goes on from its result, its ``tol`` lowered by the
    ratio, with the iterations left."""
    run = {"coupling": s.coupling, "hjb": s.sweeps.hjb, "fp": s.sweeps.fp, "m0": s.m0,
           "U_T": s.U_T}
    if z_init is not None and z_init.ndim == 1:   # a path alone (a warm start, Newton's)
        z_init = s.coupling.with_density(z_init, s.m0)
    out, inner = None, tol
    while True:
        left = max_iter - (0 if out is None else int(out.iterations[0]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            more = fixed_point(**run, nt=grid.nt, backend=backend, scheme=scheme, tol=inner,
                               max_iter=left, z_init=z_init, U_init=U_init,
                               progress=progress)
        path, groups = best_response_residuals(s, more.U, more.M)
        more.residual = np.array([max(path, float(np.max(groups)))])
        more.converged = more.residual <= tol
        out = more if out is None else _joined(out, more)
        if out.converged[0] or int(out.iterations[0]) >= max_iter or path > inner:
            return out
        inner *= 0.5 * tol / float(more.residual[0])
        z_init, U_init = s.coupling.state(more.M), more.U


def _joined(first: FixedPointResult, then: FixedPointResult) -> FixedPointResult:
    """``first`` continued by ``then``: their histories in turn, the better certified
    solution of the two, the iterations of both."""
    for key, values in then.history.as_dict().items():
        getattr(first.history, key).extend(values)
    if then.residual[0] < first.residual[0]:
        first.U, first.M = then.U, then.M
        first.residual, first.converged = then.residual, then.converged
    first.iterations = np.array([len(first.history.residual)])
    return first


def _norm(a: np.ndarray) -> float:
    return math.sqrt(float(np.sum(a * a)))


class _Responder:
    """Best responses of the shared-path Newton (:class:`PathNewton`): called with a path z
    and a guess of U, Φ(z) with its residual on the host (z, gz, U, M, R, zh, norm, rel);
    ``record``: an iteration (history, stamps)."""

    def __init__(self, evaluate: Any, coupling: SharedPathCoupling, backend: Backend,
                 nt: int) -> None:
        self.evaluate, self.coupling, self.backend, self.nt = evaluate, coupling, backend, nt
        self.history, self.stamps = History(), []
        self.last = {"stamp": backend.stamp(), "U": None, "M": None}

    def __call__(self, z: Any, guess: Any, record: bool = True) -> dict[str, Any]:
        xp, nt = self.backend.xp, self.nt
        F, U, M, gz, (t1, t2, t3) = self.evaluate(z, guess)
        host = to_numpy(xp.concat([xp.reshape(a, (-1,)) for a in (z, gz)]))
        bad = to_numpy(xp.stack([xp.sum(xp.astype(~xp.isfinite(a), a.dtype))
                                 for a in (F, U, M)]))
        if bad.any():
            raise SolverError(f"non-finite values at iteration {len(self.history.residual) + 1}"
                              " of Newton's method on the shared path: it diverged")
        zh, gh = (np.asarray(host[:nt], dtype=np.float64),
                  np.asarray(host[nt:], dtype=np.float64))
        norm = _norm(gh - zh)
        rel = norm / max(_norm(gh), 1e-300)
        out = {"z": z, "gz": gz, "U": U, "M": M, "R": gh - zh, "zh": zh, "norm": norm,
               "rel": rel}
        if record:
            self._record(rel, U, M, (t1, t2, t3))
        return out

    def _record(self, rel: float, U: Any, M: Any, times: tuple) -> None:
        xp, last = self.backend.xp, self.last
        self.history.residual.append(rel)
        for key, new in (("U", U), ("M", M)):
            old = last[key]
            change = 0.0 if old is None else float(
                to_numpy(relative_residual(new, old, xp, batched=False))[0])
            getattr(self.history, f"change_{key}").append(change)
        now = self.backend.stamp()
        self.stamps.append((last["stamp"], *times, now))
        last.update(stamp=now, U=U, M=M)

    def certificate(self, point: dict[str, Any], cert: dict[str, Any]) -> float:
        """The residual of the densities of ``point`` from the best response ``cert`` to
        their path: the largest of the path's and of each group's."""
        xp = self.backend.xp
        groups = relative_residual(self.coupling.group_states(cert["M"]),
                                   self.coupling.group_states(point["M"]), xp, batched=True)
        return max(cert["rel"], float(np.max(to_numpy(groups))))
