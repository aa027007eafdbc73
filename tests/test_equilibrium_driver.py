"""The equilibrium driver: one loop over a strategy's init/step/done/certify, the progress
display advanced by the best responses of each step; every 1-D equilibrium, the shared-path
Newton of populations and the coupling Newton of the 2-D two bars run through it."""

from dataclasses import dataclass, field

import numpy as np
import pytest

import mfgwork as mw
from mfgwork import fdm1d
from mfgwork.numerics import equilibrium
from mfgwork.numerics import populations as numerics_populations
from mfgwork.numerics.batch_newton import BatchNewton
from mfgwork.numerics.coupling_newton import CouplingNewtonKrylov
from mfgwork.numerics.fdm2d import equilibrium as equilibrium_2d
from mfgwork.numerics.frozen_density import FrozenDensityNewton
from mfgwork.numerics.iteration import FixedPoint, History
from mfgwork.numerics.populations import PathNewton


@dataclass
class _Halving:
    """z ← z/2 from z = 1 until z ≤ tol; every other step evaluates two best responses, a
    step that evaluates none records nothing."""

    z: float = 1.0
    evaluations: int = 0
    steps: int = 0
    history: History = field(default_factory=History)


class _Halver:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def init(self, system, max_iter):
        self.calls.append("init")
        return _Halving()

    def step(self, state):
        state.steps += 1
        if state.steps % 3 == 0:   # nothing evaluated
            return state
        state.z /= 2
        state.evaluations += 1 + state.steps % 2
        state.history.residual.append(state.z)
        return state

    def done(self, state):
        return state.z <= 1e-3 or state.steps >= 100

    def certify(self, state):
        self.calls.append("certify")
        return state


class _Bar:
    def __init__(self) -> None:
        self.n, self.postfix = 0, []

    def update(self, n):
        self.n += n

    def set_postfix(self, residual, refresh):
        self.postfix.append(residual)


def test_the_driver_steps_a_strategy_until_it_is_done_and_counts_its_best_responses():
    strategy, bar = _Halver(), _Bar()
    out = equilibrium.solve(strategy, None, max_iter=100, progress=bar)
    assert strategy.calls == ["init", "certify"]
    assert out.z <= 1e-3 < 2 * out.z
    assert bar.n == out.evaluations
    assert len(bar.postfix) == len(out.history.residual)   # none for an empty step
    assert bar.postfix[-1] == f"{out.z:.2e}"


@pytest.mark.parametrize(("problem", "options", "kind"), [
    (mw.SantaFeBar(), {}, BatchNewton),
    (mw.SantaFeBar(), {"iteration": "anderson"}, FixedPoint),
    (mw.SantaFeBar(hamiltonian=mw.Congestion(1.0)), {}, FrozenDensityNewton)])
def test_every_1d_equilibrium_is_one_run_of_the_driver(monkeypatch, problem, options, kind):
    runs = []

    def spy(strategy, system, *, max_iter, progress=None):
        runs.append(strategy)
        return equilibrium.solve(strategy, system, max_iter=max_iter, progress=progress)

    monkeypatch.setattr(fdm1d, "solve_equilibrium", spy)
    res = mw.solve(problem, nx=31, nt=30, progress=False, **options)
    assert [type(s) for s in runs] == [kind]
    assert res.converged and res.residual <= 1e-8
    assert len(res.history["residual"]) >= res.iterations
    assert np.all(np.isfinite(np.asarray(res.history["residual"])))


def _spied(monkeypatch, module):
    """The strategies and results of the driver's runs from ``module``."""
    runs = []

    def spy(strategy, system, *, max_iter, progress=None):
        out = equilibrium.solve(strategy, system, max_iter=max_iter, progress=progress)
        runs.append((strategy, out))
        return out

    monkeypatch.setattr(module, "solve", spy)
    return runs


def test_the_shared_path_newton_of_populations_is_one_run_of_the_driver(monkeypatch):
    runs = _spied(monkeypatch, numerics_populations)
    groups = [mw.Population("a", 0.5, mw.SantaFeBar()),
              mw.Population("b", 0.5, mw.SantaFeBar(threshold=0.7))]
    res = mw.solve(mw.SantaFePopulations(groups), nx=31, nt=30, progress=False)
    assert [type(s) for s, _ in runs] == [PathNewton]
    out = runs[0][1]
    assert res.converged and out.stopped == "converged" and res.residual <= 1e-8
    assert res.iterations == int(out.iterations[0]) == len(out.history.residual)


def test_the_coupling_newton_of_two_bars_is_one_run_of_the_driver(monkeypatch):
    runs = _spied(monkeypatch, equilibrium_2d)
    res = mw.solve_2d(mw.TwoBars(T=2.0), nx=9, nt=6, tol=1e-9, progress=False)
    assert [type(s) for s, _ in runs] == [CouplingNewtonKrylov]
    out, info = runs[0][1], res.extra["coupling_newton"]
    assert res.converged and out.reason == info["reason"] == "converged"
    assert res.iterations == info["steps"] == len(out.history.residual)
