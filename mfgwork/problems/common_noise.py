"""Common noise: a shock that hits every agent at once, as a Markov chain on a scenario tree.

A parameter of a problem (Santa Fe: the payoff ``good`` of an uncrowded bar, the bar's
attractiveness) takes one of n values, its *noise state*. The horizon [0, T] is cut into
``depth`` epochs of equal length; the state of epoch l is revealed to everyone at its start,
drawn from ``initial`` for the first epoch and from row s of ``transition`` after state s. The
n^depth sequences of states are the *scenarios*, the leaves of a tree whose node at level l
is one history (s_0, …, s_l).

The equilibrium is conditional on the history: on each node the agents solve the HJB with
that node's coupling, and at the end of an epoch their value is the conditional mean over
the next state, u(t_{l+1}⁻) = Σ_s' p(s' | s_l) u_{s'}(t_{l+1}⁺); the density of a node starts
from its parent's last density. Between revelations nothing is random but the agents' own
noise, so each node is an ordinary (deterministic) epoch of the model. With one state, or with
every state alike, the problem is the model itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..core.errors import ParameterError, check_int, check_real
from .base import MFGProblem

#: Most levels of a tree.
MAX_DEPTH = 32
#: Most scenarios (leaves) of a tree: n^depth ≤ this.
MAX_SCENARIOS = 2**16
#: How far the probabilities of a row may sum from 1.
PROBABILITY_SLACK = 1e-9
#: What joins the states' names into a scenario's label.
SEPARATOR = "-"


@dataclass(frozen=True, eq=False)
class ScenarioTree:
    """The tree of ``depth`` levels of a chain on ``branching`` states: level l has
    branching^(l+1) nodes (the histories s_0..s_l), numbered level by level (``offsets``:
    the first node of each level, and the number of nodes last); node q of a level
    (counted within it) is in state q mod n, its parent is node q // n of the level above and
    its children nodes q n + s'. ``conditional``: the probability of each node given its
    parent (the first level: ``initial``); ``probability``: of its history."""

    branching: int
    depth: int
    transition: np.ndarray
    initial: np.ndarray

    @cached_property
    def offsets(self) -> np.ndarray:
        sizes = [self.branching ** (level + 1) for level in range(self.depth)]
        return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    @property
    def nodes(self) -> int:
        return int(self.offsets[-1])

    @property
    def scenarios(self) -> int:
        return self.branching ** self.depth

    def level(self, level: int) -> slice:
        """The nodes of ``level``."""
        return slice(int(self.offsets[level]), int(self.offsets[level + 1]))

    @cached_property
    def node_states(self) -> np.ndarray:
        """The noise state of each node (nodes,)."""
        return np.concatenate([np.arange(self.branching ** (lv + 1)) % self.branching
                               for lv in range(self.depth)])

    @cached_property
    def conditional(self) -> np.ndarray:
        parts = [self.initial]
        for lv in range(1, self.depth):
            q = np.arange(self.branching ** (lv + 1))
            parts.append(self.transition[(q // self.branching) % self.branching,
                                         q % self.branching])
        return np.concatenate(parts)

    @cached_property
    def probability(self) -> np.ndarray:
        p = self.conditional.copy()
        for lv in range(1, self.depth):
            q = np.arange(self.branching ** (lv + 1))
            p[self.level(lv)] *= p[self.level(lv - 1)][q // self.branching]
        return p

    def path_nodes(self, level: int) -> np.ndarray:
        """The node of each scenario at ``level`` (counted within the level), (scenarios,)."""
        return np.arange(self.scenarios) // self.branching ** (self.depth - 1 - level)

    @cached_property
    def path_states(self) -> np.ndarray:
        """The noise state of each scenario in each epoch (scenarios, depth)."""
        return np.stack([self.path_nodes(lv) % self.branching for lv in range(self.depth)],
                        axis=1)


class CommonNoise:
    """``problem`` whose ``parameter`` switches between ``values`` as a Markov chain
    revealed at the start of each of ``depth`` epochs (module docstring): ``transition``
    (n, n), row s the law of the next state after s; ``initial`` (n,), the law of the first
    state (default: uniform); ``names``: one label per state, non-empty, that joined by
    :data:`SEPARATOR` label every scenario apart (default: the values, or s0, s1, … where
    they would not).
    ``mw.solve(noise)`` returns the conditional equilibrium on every scenario."""

    name = "common_noise"

    def __init__(self, problem: MFGProblem, parameter: str, values: Sequence[float], *,
                 transition: Any, depth: int, initial: Sequence[float] | None = None,
                 names: Sequence[str] | None = None) -> None:
        if not isinstance(problem, MFGProblem) or not hasattr(type(problem), "from_params"):
            raise ParameterError(f"problem={problem!r:.80} is invalid: must be an "
                                 "mfgwork.MFGProblem rebuilt from its parameters (e.g. "
                                 "mfgwork.SantaFeBar)")
        params = problem.params()
        numeric = [k for k, v in params.items() if isinstance(v, int | float)
                   and not isinstance(v, bool)]
        if parameter not in numeric:
            raise ParameterError(f"parameter={parameter!r} is invalid: must be one of "
                                 f"{numeric} (the numbers of {type(problem).__name__})")
        values = tuple(check_real(f"values[{i}]", v) for i, v in enumerate(_listed(
            "values", values)))
        n = len(values)
        if n < 1:
            raise ParameterError("values=() is invalid: give at least one noise state")
        self.problem, self.parameter, self.values = problem, parameter, values
        self.depth = check_int("depth", depth, low=1, high=MAX_DEPTH)
        if n**self.depth > MAX_SCENARIOS:
            raise ParameterError(f"depth={depth!r} is invalid with {n} states: {n}^{depth} "
                                 f"scenarios exceed {MAX_SCENARIOS}; lower depth")
        self.transition = _stochastic("transition", transition, (n, n))
        self.initial = _stochastic("initial", np.full(n, 1.0 / n) if initial is None
                                   else initial, (n,))
        self.tree = ScenarioTree(n, self.depth, self.transition, self.initial)
        self.names = (_default_names(values, self.tree) if names is None
                      else tuple(str(s) for s in _listed("names", names)))
        if len(self.names) != n or len(set(self.names)) != n or not all(self.names):
            raise ParameterError(f"names={names!r} is invalid: must be {n} distinct labels, "
                                 "one per value, none empty")
        #: One label per scenario: its states' names joined by :data:`SEPARATOR` (distinct)
        self.labels = _labels(self.names, self.tree)
        if len(set(self.labels)) != self.scenarios:
            raise ParameterError(f"names={names!r} is invalid: joined by {SEPARATOR!r} into "
                                 "the scenarios' labels, they label two scenarios alike; "
                                 f"choose names without {SEPARATOR!r}")
        self.states = tuple(type(problem).from_params(params | {parameter: v}) for v in values)

    def __repr__(self) -> str:
        def rounded(a: np.ndarray) -> list:
            return np.round(a, 12).tolist()

        return (f"CommonNoise({self.problem!r}, {self.parameter!r}, {self.values!r}, "
                f"transition={rounded(self.transition)!r}, depth={self.depth}, "
                f"initial={rounded(self.initial)!r})")

    @property
    def scenarios(self) -> int:
        return self.tree.scenarios

    @property
    def T(self) -> float:
        return float(self.problem.T)

    def steps(self, nt: int) -> int:
        """The time steps of a solve asked for ``nt``: rounded up to a multiple of
        ``depth`` (each epoch a whole number of steps)."""
        nt = check_int("nt", nt, low=1)
        return self.depth * math.ceil(nt / self.depth)

    def params(self) -> dict[str, Any]:
        return {"problem": self.name, "model": self.problem.params(),
                "parameter": self.parameter, "values": list(self.values),
                "transition": self.transition.tolist(), "initial": self.initial.tolist(),
                "depth": self.depth, "names": list(self.names)}

    @classmethod
    def from_params(cls, params: dict[str, Any], model: MFGProblem) -> CommonNoise:
        """The noise of ``params`` (:meth:`params`) on ``model``."""
        return cls(model, params["parameter"], params["values"],
                   transition=params["transition"], initial=params["initial"],
                   depth=params["depth"], names=params["names"])

    def node_bytes(self, nx: int, nt: int) -> int:
        """Bytes a float64 solve holds per node of the tree, each node (nt/depth + 1) × nx
        values: :data:`NODE_ARRAYS` of them."""
        return NODE_ARRAYS * 8 * (self.steps(nt) // self.depth + 1) * nx

    def estimate(self, nx: int = 201, nt: int = 201) -> dict[str, float]:
        """What a solve on ``nx`` × ``nt`` costs, before it starts: ``scenarios``,
        ``nodes``, ``cells`` (node time steps × nx: the work of one sweep, against nt × nx
        for the model alone), ``bytes`` (float64 arrays held, with the scenarios' result
        arrays) and ``seconds`` (one CPU core, from :data:`SECONDS_PER_CELL`); ``nx`` checked
        as the solve checks it."""
        nx = check_int("nx", nx, low=3)
        steps = self.steps(nt) // self.depth
        cells = self.tree.nodes * steps * nx
        result = 3 * 8 * self.scenarios * (self.steps(nt) + 1) * nx
        return {"scenarios": self.scenarios, "nodes": self.tree.nodes, "cells": cells,
                "bytes": self.tree.nodes * self.node_bytes(nx, nt) + result,
                "seconds": SECONDS_PER_CELL * cells}


#: (steps + 1) × nx float64 arrays a solve holds per node: U, M and their trial and kept
#: copies, the running cost, the tangent's five bands, six factors and edge weights, and the
#: tangent workspace, with margin.
NODE_ARRAYS = 24
#: One-core seconds of a whole solve per cell (a node's time step at one grid point),
#: measured on Santa Fe trees of depth 2 to 6 at 201² (8 best responses, 76–117 tangent
#: products: 2.4–2.6 µs a cell).
SECONDS_PER_CELL = 2.5e-6


def _default_names(values: tuple[float, ...], tree: ScenarioTree) -> tuple[str, ...]:
    """The values as names where they differ and label every scenario apart, else s0, s1,
    …."""
    names = tuple(f"{v:g}" for v in values)
    plain = len(set(names)) == len(names) and \
        len(set(_labels(names, tree))) == tree.scenarios
    return names if plain else tuple(f"s{i}" for i in range(len(values)))


def _labels(names: Sequence[str], tree: ScenarioTree) -> tuple[str, ...]:
    """Each scenario's states' names joined by :data:`SEPARATOR`."""
    return tuple(SEPARATOR.join(names[s] for s in row) for row in tree.path_states)


def _listed(name: str, values: Any) -> list[Any]:
    if isinstance(values, str | bytes) or not hasattr(values, "__len__"):
        raise ParameterError(f"{name}={values!r:.80} is invalid: must be a sequence")
    return list(values)


def _stochastic(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as a float64 array of ``shape`` whose rows are probability vectors."""
    try:
        a = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"{name}={value!r:.80} is invalid: must be an array of "
                             f"probabilities of shape {shape}") from None
    if a.shape != shape:
        raise ParameterError(f"{name} of shape {a.shape} is invalid: must have shape {shape} "
                             "(one entry per noise state)")
    sums = a.reshape(-1, shape[-1]).sum(axis=1)
    if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(
            np.abs(sums - 1.0) > PROBABILITY_SLACK):
        raise ParameterError(f"{name}={a.tolist()!r:.120} is invalid: entries must be >= 0 "
                             "and each row must sum to 1")
    return a
