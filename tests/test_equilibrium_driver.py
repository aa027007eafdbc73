"""The equilibrium driver: one loop over a strategy's init/step/done/certify, the progress
display advanced by the best responses of each step; every 1-D equilibrium (the long runs
too), the two-state game, the scenario tree, the shared-path Newton of populations and the
coupling Newton of the 2-D two bars run through it."""

from dataclasses import dataclass, field

import numpy as np
import pytest

import mfgwork as mw
from mfgwork import common_noise, fdm1d, finite_state
from mfgwork.numerics import equilibrium
from mfgwork.numerics import populations as numerics_populations
from mfgwork.numerics.attendance_newton import AttendanceNewton
from mfgwork.numerics.batch_newton import BatchNewton
from mfgwork.numerics.coupling_newton import CouplingNewtonKrylov
from mfgwork.numerics.fdm2d import equilibrium as equilibrium_2d
from mfgwork.numerics.frozen_density import FrozenDensityNewton
from mfgwork.numerics.iteration import FixedPoint, History
from mfgwork.numerics.populations import PathNewton
from mfgwork.numerics.scenario_tree import TreeNewton


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
    runs = _spied(monkeypatch, fdm1d, "solve_equilibrium")
    res = mw.solve(problem, nx=31, nt=30, progress=False, **options)
    assert [type(s) for s, _ in runs] == [kind]
    assert res.converged and res.residual <= 1e-8
    assert len(res.history["residual"]) >= res.iterations
    assert np.all(np.isfinite(np.asarray(res.history["residual"])))


def _spied(monkeypatch, module, name="solve"):
    """The strategies and results of the driver's runs from ``module`` (which calls the
    driver by ``name``)."""
    runs = []

    def spy(strategy, system, *, max_iter, progress=None):
        out = equilibrium.solve(strategy, system, max_iter=max_iter, progress=progress)
        runs.append((strategy, out))
        return out

    monkeypatch.setattr(module, name, spy)
    return runs


def test_the_long_run_is_one_run_of_the_driver(monkeypatch):
    """Newton's method on the ergodic system (stationary=True) is a strategy of the driver:
    stepped until certified, one Newton step a best response."""
    import importlib

    from mfgwork.numerics.stationary import ErgodicNewton

    runs = _spied(monkeypatch, importlib.import_module("mfgwork.long_run"), "solve_equilibrium")
    res = mw.solve(mw.SantaFeBar(), nx=41, stationary=True)
    assert [type(s) for s, _ in runs] == [ErgodicNewton]
    assert res.converged and res.iterations == len(res.history["residual"])
    assert res.history["residual"][-1] == res.residual <= 1e-8


def test_the_2d_long_run_is_one_run_of_the_driver(monkeypatch):
    """Newton–Krylov on the 2-D ergodic system's coupling state is a strategy of the driver,
    its certified residuals in the history, the last the best."""
    import importlib

    from mfgwork.numerics.stationary2d import ErgodicNewtonKrylov

    runs = _spied(monkeypatch, importlib.import_module("mfgwork.solve2d"), "solve_equilibrium")
    res = mw.solve(mw.TwoBars(), nx=15, stationary=True)
    assert [type(s) for s, _ in runs] == [ErgodicNewtonKrylov]
    assert res.converged and min(res.history["residual"]) == res.residual <= 1e-6


@pytest.mark.parametrize(("solve", "module", "kind"), [
    (lambda: mw.solve(mw.TwoStateElFarol(), nt=100, warmup=3), finite_state, AttendanceNewton),
    (lambda: mw.solve(mw.CommonNoise(mw.SantaFeBar(), "good", (12.0, 8.0), depth=2,
                                     transition=[[0.8, 0.2], [0.2, 0.8]]),
                      nx=31, nt=20), common_noise, TreeNewton)])
def test_the_newton_variants_are_one_run_of_the_driver(monkeypatch, solve, module, kind):
    """The two-state game and the scenario tree: one run of the driver, whose loop takes
    every iteration (a step per iteration of the two-state game, per Newton step on the
    tree) and counts every best response."""
    runs, steps = [], []

    def spy(strategy, system, *, max_iter, progress=None):
        runs.append(strategy)
        step = strategy.step
        monkeypatch.setattr(strategy, "step", lambda state: steps.append(1) or step(state))
        bar = _Bar()
        out = equilibrium.solve(strategy, system, max_iter=max_iter, progress=bar)
        assert bar.n == (out.evaluations if kind is AttendanceNewton else out.iterations)
        return out

    monkeypatch.setattr(module, "solve_equilibrium", spy)
    res = solve()
    assert [type(s) for s in runs] == [kind]
    assert res.converged and res.residual <= 1e-8
    if kind is AttendanceNewton:
        assert len(steps) == res.iterations == len(res.history["residual"]) >= 4
    else:
        assert len(steps) == res.extra["newton_steps"] - 1 >= 1


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
