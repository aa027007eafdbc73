"""Equilibrium solvers: strategies that one driver steps, as diffrax steps its solvers.

An equilibrium of the discrete MFG system (:class:`System`) is a fixed point z = Φ(z) of the
best-response map on the coupling state z: Φ(z) = state(FP(HJB(running_cost(z)))). A
strategy (:class:`Strategy`: the fixed-point schemes of :mod:`.iteration`, Newton's method on
the coupling state of :mod:`.batch_newton`, the frozen-density iteration of
:mod:`.frozen_density`, Newton's method on the shared path of several populations,
:mod:`.populations`, and Newton–Krylov on the coupling of a 2-D problem,
:mod:`.coupling_newton`; Newton's method on the attendance path of the two-state game,
:mod:`.attendance_newton`, on the scenario tree, :mod:`.scenario_tree`, and on the ergodic
systems of the long run, :mod:`.stationary` and :mod:`.stationary2d`, which start from a
system of their own) holds only its settings and implements

- ``init(system, max_iter) -> state``: the named state of a solve at its first iterate;
- ``step(state) -> state``: one iteration (one best response and what follows from it; an
  outer iteration may take several);
- ``done(state) -> bool``: whether the solve stops (converged, stalled or out of budget);
- ``certify(state)``: the returned, certified iterate per problem (a ``FixedPointResult``
  for a :class:`System`).

:func:`solve` is the one loop that runs them, the progress display included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..core.backend import Backend
from ..core.types import Array


@dataclass(frozen=True)
class System:
    """The discrete system of a solve: the ``coupling`` (state, running cost, projection),
    the best-response sweeps ``hjb`` and ``fp`` (see :class:`.iteration.HJBSolver`,
    :class:`.iteration.FPSolver`), the initial density ``m0`` and terminal cost ``U_T`` on
    a grid of ``nt`` steps, on ``backend``. ``batched``: arrays carry a leading axis of
    independent problems. The first iterate: ``z_init`` (a coupling state), else the state of
    ``M_init`` (with ``U_init`` seeding the HJB solves), else m(t) = m0 (agents who do not
    move)."""

    coupling: Any
    hjb: Any
    fp: Any
    m0: Array
    U_T: Array
    nt: int
    backend: Backend
    batched: bool = False
    M_init: Array | None = None
    U_init: Array | None = None
    z_init: Array | None = None


class State(Protocol):
    """What :func:`solve` reads of a strategy's state: the best responses evaluated so far
    (``evaluations``) and the history (:class:`.iteration.History`) of the iterations."""

    evaluations: int
    history: Any


class Strategy(Protocol):
    """An equilibrium solver (module docstring)."""

    def init(self, system: Any, max_iter: int) -> Any: ...

    def step(self, state: Any) -> Any: ...

    def done(self, state: Any) -> bool: ...

    def certify(self, state: Any) -> Any: ...


def solve(strategy: Strategy, system: Any, *, max_iter: int, progress: Any = None) -> Any:
    """The equilibrium of ``system`` (what ``strategy`` starts from: a :class:`System`, or a
    game of its own) by ``strategy`` within ``max_iter`` best responses: its steps until it
    is done, then its certified result (a :class:`.iteration.FixedPointResult`, or the
    strategy's own). ``progress`` (a tqdm bar or None) advances by the
    best responses of each step and shows the last residual of the history."""
    state = strategy.init(system, max_iter)
    shown = 0
    while not strategy.done(state):
        state = strategy.step(state)
        if progress is not None and state.evaluations > shown:
            progress.update(state.evaluations - shown)
            shown = state.evaluations
            progress.set_postfix(residual=f"{state.history.residual[-1]:.2e}", refresh=False)
    return strategy.certify(state)
