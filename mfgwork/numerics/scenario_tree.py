"""The conditional equilibrium on a tree of noise scenarios (:mod:`mfgwork.problems.common_noise`).

Every node of the tree is an epoch of L = nt/depth time steps of the model's own scheme: the
HJB sweeps run level by level from the leaves (each node's end value the conditional mean of
its children's first values, the leaves' the terminal cost g), the FP sweeps from the first
level (each node from its parent's last density, the first level from m0); a level is one
batched sweep. The coupling state z is the observed path (Santa Fe: the attendance) on every
node (nodes, L), Φ(z) that of the best response to the prices of z.

The fixed point is found by Newton's method on R(z) = Φ(z) − z (as in :mod:`.potential` for one
problem): the direction d = S⁻¹ Σ w with (S D S + Σ) w = S R, D the exact tangent of the
scheme on the tree (:class:`TreeTangent`), each product one tangent sweep of the tree (a
level's nodes shared among threads). D is self-adjoint for the inner product weighted by the
nodes' probabilities only where all are positive (a node of probability 0, after a
transition that cannot happen, still has its equilibrium, but no weight), so the system is
solved by GMRES, which asks neither symmetry nor definiteness (it takes as many products as
conjugate gradients on the symmetrised system: 117 against 124 on the depth-6 Santa Fe tree
at 201²). Steps are damped by backtracking on ½‖R‖². The returned densities are those of the
best response to z; their residual, max over the scenarios of ‖Φ(z') − z'‖ / ‖Φ(z')‖ on the
scenario's nodes for z' = Φ(z), is certified by one more best response.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.backend import Backend, to_numpy
from ..core.grid import Grid
from ..problems.base import MFGProblem, batch_coupling
from ..problems.common_noise import CommonNoise
from .batch_newton import ETA, member_potentials
from .fdm.sweeps import FiniteDifferences
from .fdm.tangent import tree_backward, tree_factors, tree_forward
from .potential import scaling, tangent_operands

#: Armijo's constant of the line search on ½‖R‖².
ARMIJO = 2e-4
#: Smallest step the line search tries.
SMALLEST_STEP = 1e-10
#: GMRES's products between restarts, and its most cycles: Santa Fe trees of depth 6 at
#: 201² need 10–40 products a Newton step.
KRYLOV_RESTART = 200
KRYLOV_CYCLES = 4


@dataclass
class TreePoint:
    """An iterate: z (nodes, L) on the host, the best response U, M (nodes, L + 1, nx) on the
    backend, R = Φ(z) − z and ‖R‖."""

    z: np.ndarray
    U: Any
    M: Any
    R: np.ndarray
    norm: float


@dataclass
class TreeHistory:
    """Per certified iterate (the first, then one per Newton step): its certified residual,
    the relative residual of the iterate itself and the wall time (the certificate's, then
    the step's with its certificate)."""

    residual: list[float] = field(default_factory=list)
    iterate_residual: list[float] = field(default_factory=list)
    time: list[float] = field(default_factory=list)


@dataclass
class TreeOutcome:
    """The best certified iterate: U, M, its residual per scenario (scenarios,), the best
    responses evaluated (``iterations``) and the tangent products, and the history of the
    certified iterates."""

    U: Any
    M: Any
    residuals: np.ndarray
    iterations: int
    products: int
    history: TreeHistory = field(default_factory=TreeHistory)

    @property
    def residual(self) -> float:
        return float(np.max(self.residuals))


@dataclass(frozen=True)
class TreeSystem:
    """The game on the tree to solve: its ``scheme`` and the coupling state ``z0`` (host,
    (nodes, L)) Newton's method starts from."""

    scheme: TreeScheme
    z0: np.ndarray


@dataclass
class TreeState:
    """A solve between its Newton steps: the ``scheme``, the best responses evaluated of
    ``max_iter`` and the tangent products, the current ``point``, the best certified iterate
    (its ``U``, ``M``, ``residuals`` per scenario and their largest, ``lowest``), whether the
    line search found no step (``finished``) and the history."""

    scheme: TreeScheme
    max_iter: int
    point: TreePoint | None = None
    U: Any = None
    M: Any = None
    residuals: np.ndarray | None = None
    lowest: float = math.inf
    evaluations: int = 0
    products: int = 0
    finished: bool = False
    history: TreeHistory = field(default_factory=TreeHistory)


class TreeScheme:
    """The model's scheme on the nodes of ``noise``'s tree, on ``nx`` nodes and ``nt`` steps
    (a multiple of the depth) for ``backend``: :meth:`respond` is Φ."""

    def __init__(self, noise: CommonNoise, nx: int, nt: int, backend: Backend) -> None:
        model: MFGProblem = noise.problem
        self.noise, self.tree, self.backend = noise, noise.tree, backend
        self.grid = model.grid(nx, nt)
        self.steps = nt // noise.depth
        self.epoch = Grid(self.grid.x_min, self.grid.x_max, nx, model.T / noise.depth,
                          self.steps)
        self.fd = FiniteDifferences(self.epoch, model.nu, backend, hamiltonian=model.hamiltonian)
        couplings = [noise.states[s].coupling(self.grid, backend) for s in range(len(noise.values))]
        self.potentials = member_potentials([c.potential() for c in couplings])
        self.whole = couplings[0]
        self.coupling = batch_coupling([couplings[s] for s in self.tree.node_states], backend)
        self.m0 = model.initial_density(self.grid, backend)
        self.g = model.terminal_cost(self.grid, backend)
        self.conditional = backend.asarray(self.tree.conditional)

    def respond(self, z: np.ndarray, guess: Any = None) -> tuple[Any, Any, np.ndarray]:
        """U, M of the best response to the coupling state z (host, (nodes, L)) and Φ(z)."""
        be, tree, n = self.backend, self.tree, self.tree.branching
        F = self.coupling.running_cost(be.asarray(z))
        nx = self.grid.nx
        U = be.zeros((tree.nodes, self.steps + 1, nx))
        end = be.xp.broadcast_to(self.g, (tree.scenarios, nx))
        for level in range(tree.depth - 1, -1, -1):
            nodes = tree.level(level)
            U[nodes] = self._level(self.fd.solve_hjb, end, F[nodes],
                                   None if guess is None else guess[nodes])
            if level:
                weighted = U[nodes][:, 0] * self.conditional[nodes][:, None]
                end = be.xp.sum(be.xp.reshape(weighted, (-1, n, nx)), axis=1)
        M = be.xp.zeros_like(U)
        start = be.xp.broadcast_to(self.m0, (n, nx))
        for level in range(tree.depth):
            nodes = tree.level(level)
            M[nodes] = self._level(self.fd.solve_fp, U[nodes], start)
            if level < tree.depth - 1:
                parents = np.arange(n ** (level + 2)) // n
                start = M[nodes][_index(parents, M), self.steps]
        self.fd.check_newton()
        return U, M, np.asarray(to_numpy(self.coupling.state(M)), dtype=np.float64)

    def _level(self, sweep: Any, *arrays: Any) -> Any:
        """``sweep`` of the nodes of one level: one batched call on an accelerator, one call
        per node on the CPU (where single sweeps run the compiled loops and batches the
        array sweeps)."""
        if self.backend.is_accelerator:
            return sweep(*arrays)
        xp = self.backend.xp
        return xp.stack([sweep(*(None if a is None else a[k] for a in arrays))
                         for k in range(arrays[0].shape[0])])

    def coupling_state(self, M: Any) -> Any:
        """The observed path (nt,) of densities M (nt + 1, nx) of the whole horizon."""
        return self.whole.state(M)

    def node_arrays(self, a: Any) -> Any:
        """Scenario paths (scenarios, nt + 1, ...) as node arrays (nodes, L + 1, ...): node q of
        level l from the first scenario through it, over its epoch and the epoch's end."""
        tree, L = self.tree, self.steps
        parts = []
        for level in range(tree.depth):
            first = np.arange(tree.branching ** (level + 1)) * tree.branching ** (
                tree.depth - 1 - level)
            parts.append(a[_index(first, a), level * L:(level + 1) * L + 1])
        return self.backend.xp.concat(parts, axis=0)

    def scenario_norms(self, a: np.ndarray) -> np.ndarray:
        """‖a‖ on each scenario's nodes (scenarios,) for a on the nodes (nodes, L)."""
        tree = self.tree
        squares = np.zeros(tree.scenarios)
        for level in range(tree.depth):
            squares += np.sum(a[tree.level(level)] ** 2, axis=1)[tree.path_nodes(level)]
        return np.sqrt(squares)

    def scenario_paths(self, a: Any) -> Any:
        """Node arrays (nodes, L + 1, ...) as scenario paths (scenarios, nt + 1, ...): each
        epoch from the scenario's node (its first level) and the last level from the
        leaf."""
        be, tree, L = self.backend, self.tree, self.steps
        parts = [a[tree.level(level)][_index(tree.path_nodes(level), a), :L]
                 for level in range(tree.depth)]
        last = a[tree.level(tree.depth - 1)][_index(tree.path_nodes(tree.depth - 1), a), L:]
        return be.xp.concat([*parts, last], axis=1)


class TreeTangent:
    """The tangent D = ∂Φ/∂y of the scheme on the tree at the best response U, M (node arrays):
    ``tangent(v)`` = D v for a direction v (nodes, L) of the prices, by the compiled sweeps
    of :mod:`.fdm.tangent` (the factors of every step matrix made once here, the nodes shared
    among :func:`threads` threads), the nodes of each level shared among them."""

    def __init__(self, scheme: TreeScheme, U: Any, M: Any) -> None:
        self.scheme, tree = scheme, scheme.tree
        U = np.asarray(to_numpy(U), dtype=np.float64)
        mu = np.asarray(to_numpy(M), dtype=np.float64) * scheme.grid.weights
        nodes, L, nx = tree.nodes, scheme.steps, scheme.grid.nx
        self.factors, self.weights = np.empty((6, nodes, L, nx)), np.empty((nodes, L, nx - 1))
        model = scheme.noise.problem

        def factor(first: int, last: int) -> None:   # the nodes first..last−1
            bands = np.empty((5, last - first, L, nx))
            for k in range(first, last):
                *bands[:, k - first], self.weights[k], _ = tangent_operands(
                    U[k], mu[k], scheme.potentials.chi, model.nu, scheme.epoch,
                    model.hamiltonian)
            self.factors[:, first:last] = tree_factors(*bands)

        _shared(factor, slice(0, nodes))
        self.chi = np.ascontiguousarray(scheme.potentials.chi, dtype=np.float64)
        self.du, self.dmu = np.empty((nodes, L + 1, nx)), np.empty((nodes, nx))

    def __call__(self, v: np.ndarray) -> np.ndarray:
        tree, dt = self.scheme.tree, self.scheme.epoch.dt
        e, g, inv, e_t, g_t, inv_t = self.factors
        n, offsets = tree.branching, tree.offsets
        out = np.empty_like(v)
        for level in range(tree.depth - 1, -1, -1):
            children = int(offsets[level + 1]) if level < tree.depth - 1 else -1
            _shared(tree_backward, tree.level(level), e, g, inv, self.chi,
                    int(offsets[level]), children, n, tree.conditional, dt, v, self.du)
        for level in range(tree.depth):
            parents = int(offsets[level - 1]) if level else -1
            _shared(tree_forward, tree.level(level), e_t, g_t, inv_t, self.weights, self.chi,
                    int(offsets[level]), parents, n, dt, self.du, self.dmu, out)
        return out


class TreeNewton:
    """Damped Newton–Krylov on R(z) = Φ(z) − z on the tree (module docstring), a strategy of
    :func:`.equilibrium.solve` on a :class:`TreeSystem`: it stops once the best certified
    residual is ≤ ``tol``, the best responses reach ``max_iter`` or the line search finds no
    step."""

    def __init__(self, tol: float) -> None:
        self.tol = tol

    def init(self, system: TreeSystem, max_iter: int) -> TreeState:
        """The state at the first point, certified."""
        if system.scheme.potentials is None:
            raise ValueError("the model declares no scalar potential")
        state = TreeState(system.scheme, max_iter)
        state.point = self._respond(state, system.z0, None)
        self._certify(state, time.perf_counter())
        return state

    def done(self, state: TreeState) -> bool:
        return (state.finished or not state.lowest > self.tol
                or state.evaluations >= state.max_iter)

    def step(self, state: TreeState) -> TreeState:
        """One Newton step with its line search, and the certificate of the new point."""
        started = time.perf_counter()
        trial = self._line_search(state, state.point, self._direction(state, state.point))
        if trial is None:   # no decrease left, or the budget spent
            state.finished = True
            return state
        state.point = trial
        self._certify(state, started)
        return state

    def certify(self, state: TreeState) -> TreeOutcome:
        """The best certified iterate, with the counts and the history."""
        return TreeOutcome(U=state.U, M=state.M, residuals=state.residuals,
                           iterations=state.evaluations, products=state.products,
                           history=state.history)

    def _respond(self, state: TreeState, z: np.ndarray, guess: Any) -> TreePoint:
        state.evaluations += 1
        U, M, gz = state.scheme.respond(z, guess)
        R = gz - z
        return TreePoint(z=z, U=U, M=M, R=R, norm=_norm(R))

    def _certify(self, state: TreeState, started: float) -> None:
        """The residual of the densities of the current point per scenario, by one best
        response to Φ(z) = z + R, recorded with the time since ``started``; the point is the
        best one if its residual is the lowest."""
        point = state.point
        z = point.z + point.R
        state.evaluations += 1
        _, _, gz = state.scheme.respond(z, point.U)
        norms = state.scheme.scenario_norms
        residuals = norms(gz - z) / np.maximum(norms(gz), 1e-300)
        residual = float(np.max(residuals))
        history = state.history
        history.residual.append(residual)
        history.iterate_residual.append(point.norm / max(_norm(z), 1e-300))
        history.time.append(time.perf_counter() - started)
        if state.residuals is None or residual < state.lowest:
            state.U, state.M, state.residuals, state.lowest = point.U, point.M, residuals, residual

    def _direction(self, state: TreeState, point: TreePoint) -> np.ndarray:
        """d = S⁻¹ Σ w, (S D S + Σ) w = S R by GMRES (restarted every
        :data:`KRYLOV_RESTART` products) to the relative accuracy min(ETA, r) (an inexact
        Newton step; r the relative residual of z)."""
        scheme = state.scheme
        tangent = TreeTangent(scheme, point.U, point.M)
        s, sign = scaling(scheme.potentials.price_slope(point.z, scheme.tree.node_states))

        def apply(x: np.ndarray) -> np.ndarray:
            state.products += 1
            x = x.reshape(s.shape)
            return (s * tangent(s * x) + sign * x).reshape(-1)

        from scipy.sparse.linalg import LinearOperator, gmres  # (on first use)

        n = point.z.size
        rel = point.norm / max(_norm(point.z + point.R), 1e-300)
        w, _ = gmres(LinearOperator((n, n), matvec=apply, dtype=np.float64),
                     (s * point.R).reshape(-1), rtol=min(ETA, max(rel, 1e-14)),
                     restart=KRYLOV_RESTART, maxiter=KRYLOV_CYCLES)
        w = w.reshape(s.shape)
        return np.where(s > 0, sign * w / np.where(s > 0, s, 1.0), point.R)

    def _line_search(self, state: TreeState, point: TreePoint, direction: np.ndarray
                     ) -> TreePoint | None:
        """Backtracking from the full step until ‖R(z + t d)‖² ≤ (1 − 2·10⁻⁴ t) ‖R(z)‖², with
        a best response left for the certificate."""
        scheme = state.scheme
        t = 1.0
        while t > SMALLEST_STEP and state.evaluations < state.max_iter - 1:
            z = np.asarray(to_numpy(scheme.coupling.project(
                scheme.backend.asarray(point.z + t * direction))), dtype=np.float64)
            trial = self._respond(state, z, point.U)
            if trial.norm**2 <= (1.0 - ARMIJO * t) * point.norm**2:
                return trial
            t *= 0.5
        return None


#: Fewest nodes a thread takes of a level.
NODES_PER_THREAD = 4
#: The threads of the tangent sweeps, by the process that made them (a forked child makes
#: its own: it inherits the pool's bookkeeping but none of its threads).
_POOLS: dict[int, ThreadPoolExecutor] = {}


def threads() -> int:
    """The threads of the tangent sweeps: the cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def _shared(kernel: Any, nodes: slice, *args: Any) -> None:
    """``kernel(*args, first, last)`` over the nodes of one level, in ranges run by a pool of
    :func:`threads` threads (the kernels release the GIL) where the level is large enough."""
    count = min(threads(), (nodes.stop - nodes.start) // NODES_PER_THREAD)
    if count < 2:
        kernel(*args, nodes.start, nodes.stop)
        return
    pool = _POOLS.get(os.getpid())
    if pool is None:
        pool = _POOLS[os.getpid()] = ThreadPoolExecutor(max_workers=threads(),
                                                        thread_name_prefix="mfgwork-tangent")
    bounds = np.linspace(nodes.start, nodes.stop, count + 1).astype(int)
    for job in [pool.submit(kernel, *args, int(a), int(b))
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)]:
        job.result()


def _norm(a: np.ndarray) -> float:
    return math.sqrt(float(np.sum(a * a)))


def _index(rows: np.ndarray, like: Any) -> Any:
    """Host row indices as an index of ``like``'s library and device."""
    if isinstance(like, np.ndarray):
        return rows
    import torch

    return torch.as_tensor(rows, device=like.device)
