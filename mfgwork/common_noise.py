"""Common noise through the front door: ``mw.solve(mw.CommonNoise(problem, ...))``.

The conditional equilibrium on the scenario tree (:mod:`mfgwork.problems.common_noise`,
solved by :mod:`mfgwork.numerics.scenario_tree`), returned as one
:class:`~mfgwork.Result` whose U and M carry a leading ``"scenario"`` axis (scenarios,
nt + 1, nx), each scenario a path of the tree (labels: its states' names joined by "-"),
with the observables per scenario, ``arrays["probability"]`` (scenarios,), the noise state
of each epoch ``arrays["noise_state"]`` (scenarios, epoch; ``labels["epoch"]``: the
epochs' start times) and ``arrays["scenario_residual"]``, the certificate of each scenario.
``residual`` is the largest of them; ``summary`` holds the model's summary averaged over the
scenarios with their probabilities. ``res.check()`` recomputes the certificates: one best
response on the tree to the returned densities.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .core.backend import Backend, get_backend, to_numpy
from .core.errors import ParameterError, check_int
from .fdm1d import check_scales, reachable_tol
from .numerics.equilibrium import solve as solve_equilibrium
from .numerics.iteration import check_stopping
from .numerics.scenario_tree import TreeNewton, TreeScheme, TreeSystem
from .pipeline import Discretization, Where, solver_of
from .placement import place_solve
from .problems.base import MFGProblem, member_summaries
from .problems.common_noise import CommonNoise
from .results import CERTIFICATES, Result
from .solve import SOLVERS, solve

#: The tolerance of the model's own equilibria, one per noise state, that start Newton's
#: method on the tree.
START_TOL = 1e-6


@dataclass(frozen=True)
class _Solve:
    """A solve on the tree between the stages of :class:`ScenarioTree`: where it runs, its
    scheme, the tolerance it iterates to, the coupling state on every node it starts from,
    its timings so far; then Newton's outcome."""

    where: Where
    scheme: TreeScheme
    tol: float
    z0: np.ndarray
    timings: dict[str, float]
    out: Any = None


@dataclass(frozen=True)
class ScenarioTree(Discretization):
    """The conditional equilibrium of ``noise`` on every scenario (module docstring), on
    ``nx`` nodes and ``nt`` steps rounded up to a multiple of the depth (``mw.solve`` of a
    :class:`~mfgwork.CommonNoise`; ``mw.solve_common_noise`` its name). Newton's method on
    the tree starts from the model's equilibrium of each noise state on the nodes of that
    state; ``max_iter`` bounds the best responses on the tree (trial points and
    certificates). Checked before any work: the states differ in their coupling alone, the
    model declares a scalar potential, and the memory (:meth:`CommonNoise.estimate`) fits
    ``max_memory``."""

    noise: CommonNoise
    nx: int = 201
    nt: int = 201
    backend: str | Backend = "numpy"
    device: str = "cpu"
    dtype: object = None
    tol: float = 1e-8
    max_iter: int = 200
    max_memory: int | str | None = None

    def checked(self) -> ScenarioTree:
        noise = self.noise
        if not isinstance(noise, CommonNoise):
            raise ParameterError(f"noise={noise!r:.80} is invalid: must be an "
                                 "mfgwork.CommonNoise")
        nx = check_int("nx", self.nx, low=3)
        nt = noise.steps(self.nt)
        tol, max_iter = check_stopping(self.tol, self.max_iter)
        _check_states(noise, noise.problem.grid(nx, nt))
        return replace(self, nx=nx, nt=nt, tol=tol, max_iter=max_iter)

    def place(self) -> Where:
        backend, device, placed = place_solve(self.noise.problem, "fdm", None, self.nx,
                                              self.nt, self.backend, self.device)
        return Where(get_backend(backend, device, self.dtype), placed)

    def memory(self, where: Where) -> tuple[dict[str, int], str]:
        noise, nx, nt = self.noise, self.nx, self.nt
        estimate = noise.estimate(nx, nt)
        return ({"depth": int(estimate["bytes"])},
                f"the {noise.scenarios} scenarios of depth={noise.depth} on {nx} x {nt} "
                f"(estimated {estimate['seconds']:.3g} s on one CPU core)")

    def start(self, where: Where, started: float) -> _Solve:
        """The tolerance raised to what the dtype resolves, the grid's scales checked, the
        scheme on the tree, and the coupling state on every node from the model's
        equilibrium of the node's noise state, over the node's epoch."""
        noise, be = self.noise, where.backend
        tol = reachable_tol(self.tol, be)
        grid = noise.problem.grid(self.nx, self.nt)
        check_scales([noise.problem], grid, be)
        scheme = TreeScheme(noise, self.nx, self.nt, be)
        first = time.perf_counter()
        solved = solve(list(noise.states), nx=self.nx, nt=self.nt, progress=False, backend=be,
                       max_memory=self.max_memory, tol=max(START_TOL, tol))
        paths = np.stack([np.asarray(to_numpy(scheme.coupling_state(r.M)), dtype=np.float64)
                          for r in solved])
        tree, L = noise.tree, scheme.steps
        z0 = np.empty((tree.nodes, L))
        for level in range(tree.depth):
            nodes = tree.level(level)
            z0[nodes] = paths[tree.node_states[nodes], level * L:(level + 1) * L]
        timings = {"setup": first - started, "start": time.perf_counter() - first}
        return _Solve(where, scheme, tol, z0, timings)

    def iterate(self, state: _Solve) -> _Solve:
        solving = time.perf_counter()
        out = solve_equilibrium(TreeNewton(state.tol), TreeSystem(state.scheme, state.z0),
                                max_iter=self.max_iter, progress=None)
        return replace(state, out=out,
                       timings=state.timings | {"solve": time.perf_counter() - solving})

    def results(self, outcome: _Solve) -> list[Result]:
        """The Result of the module docstring."""
        noise, scheme, out = self.noise, outcome.scheme, outcome.out
        be, tree, grid = scheme.backend, noise.tree, scheme.grid
        U, M = scheme.scenario_paths(out.U), scheme.scenario_paths(out.M)
        model: MFGProblem = noise.problem
        observables = {k: np.asarray(to_numpy(v)) for k, v in
                       model.observables(grid, M, be).items()}
        probability = tree.probability[tree.level(tree.depth - 1)]
        everyone = list(range(tree.scenarios))
        summaries = member_summaries([model] * tree.scenarios, grid,
                                     {k: (everyone, v) for k, v in observables.items()})
        summary = {k: float(np.dot(probability, [s[k] for s in summaries]))
                   for k in summaries[0]}
        residual = out.residual
        converged = bool(residual <= outcome.tol)
        timings = outcome.timings | {"total": sum(outcome.timings.values())}
        params = noise.params() | {"nx": grid.nx, "nt": grid.nt, "T": model.T,
                                   "method": "fdm", "tol": outcome.tol,
                                   "max_iter": self.max_iter, "iteration": {
                                       "scheme": "newton", "system": "tree krylov",
                                       "start": "the model's equilibrium of each noise state"}
                                   } | outcome.where.record
        return [Result(
            x=np.asarray(grid.x), t=np.asarray(grid.t), U=U, M=M, converged=converged,
            iterations=out.iterations, history={"residual": list(out.history.residual),
                                                "time": list(out.history.time)},
            params=params, timings=timings, backend=be.name, device=be.device, dtype=be.dtype,
            observables=observables, summary=summary | {"scenarios": float(tree.scenarios)},
            state_name=model.state_name, residual=residual,
            dims=("scenario", "t", model.state_name),
            labels={"scenario": noise.labels,
                    "epoch": tuple(f"t={t:g}"
                                   for t in np.asarray(grid.t)[::scheme.steps][:-1])},
            arrays={"probability": probability, "noise_state": tree.path_states,
                    "scenario_residual": out.residuals},
            axes={"probability": ("scenario",), "noise_state": ("scenario", "epoch"),
                  "scenario_residual": ("scenario",)},
            extra={"newton_steps": len(out.history.residual), "tangent_products": out.products,
                   "nodes": tree.nodes, "estimate": noise.estimate(grid.nx, grid.nt)})]


solve_common_noise = solver_of(ScenarioTree, "solve_common_noise")


def _check_states(noise: CommonNoise, grid: Any) -> None:
    """The noise states must share the model's grid, diffusion, Hamiltonian, m0 and g (the
    noise moves the coupling only) and declare a scalar potential (Newton's method on the
    tree needs it)."""
    host = get_backend("numpy")
    model = noise.problem
    objective = getattr(model, "objective", "equilibrium")
    if objective != "equilibrium":
        raise ParameterError(f"objective={objective!r} is invalid with common noise: the "
                             "tree is solved for the equilibrium only (use the model with "
                             "objective='equilibrium')")
    first = model.coupling(grid, host)
    if first.potential() is None or model.hamiltonian.depends_on_m:
        raise ParameterError(f"problem={model!r:.80} is invalid with common noise: its "
                             "coupling must pass through a scalar observed path with a "
                             "potential (e.g. mfgwork.SantaFeBar with a Hamiltonian that does "
                             "not depend on m)")
    base = [model.initial_density(grid, host), model.terminal_cost(grid, host)]
    for value, state in zip(noise.values, noise.states, strict=True):
        same = (state.grid(grid.nx, grid.nt) == grid and state.nu == model.nu
                and state.hamiltonian == model.hamiltonian
                and all(np.array_equal(a, b) for a, b in zip(
                    base, [state.initial_density(grid, host), state.terminal_cost(grid, host)],
                    strict=True)))
        if not same:
            raise ParameterError(f"parameter={noise.parameter!r} is invalid for common noise: "
                                 f"with {noise.parameter}={value!r} the problem changes its "
                                 "domain, horizon, diffusion, Hamiltonian, m0 or g; the noise "
                                 "may move the coupling only")
        if state.coupling(grid, host).potential() is None:
            raise ParameterError(f"{noise.parameter}={value!r} is invalid for common noise: "
                                 "that state's coupling declares no scalar potential")


def common_noise_residual(result: Result, noise: CommonNoise) -> float:
    """The certificate of ``result`` (:meth:`Result.check`): one best response on the tree
    to its densities, the largest residual over the scenarios."""
    be = get_backend(result.backend, result.device, result.dtype)
    nt = int(np.size(to_numpy(result.t))) - 1
    scheme = TreeScheme(noise, int(np.size(to_numpy(result.x))), nt, be)
    M = be.asarray(np.asarray(to_numpy(result.M)))
    z = np.asarray(to_numpy(scheme.coupling.state(scheme.node_arrays(M))), dtype=np.float64)
    _, _, gz = scheme.respond(z)
    return float(np.max(scheme.scenario_norms(gz - z)
                        / np.maximum(scheme.scenario_norms(gz), 1e-300)))


SOLVERS[CommonNoise] = solve_common_noise
CERTIFICATES[CommonNoise] = common_noise_residual
