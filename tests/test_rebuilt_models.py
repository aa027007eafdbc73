"""A result is certified, measured and simulated only for the model it solves: a Hamiltonian of
one's own that bears a shipped model's name is not rebuilt as the shipped model, a problem of
another kind or with other parameters is refused by ``check``, a long-run result by
``n_player``, and a damaged switching cost by ``switching_rates``."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import mfgwork as mw
import mfgwork.results as results_module

SMALL = {"nx": 21, "nt": 21, "progress": False}


@dataclasses.dataclass(frozen=True)
class Steep(mw.Quadratic):
    """H = p², under the shipped name "quadratic"."""

    def value(self, x, p, m, xp):
        return p * p


@dataclasses.dataclass(frozen=True)
class SteepPower(mw.Power):
    """H = 2 |p|^q / q, under the shipped name "power"."""

    def value(self, x, p, m, xp):
        return 2.0 * xp.abs(p) ** self.q / self.q


@pytest.fixture(scope="module")
def steep():
    bar = mw.SantaFeBar(hamiltonian=Steep())
    return bar, mw.solve(bar, **SMALL)


@pytest.fixture(scope="module")
def santa_fe():
    return mw.solve(mw.SantaFeBar(), **SMALL)


def test_a_subclass_of_a_shipped_hamiltonian_is_not_rebuilt_as_the_shipped_one(steep, tmp_path):
    bar, res = steep
    assert res.params["hamiltonian"] == {"name": "quadratic", "class": "Steep"}
    assert SteepPower(2.5).params() == {"name": "power", "class": "SteepPower", "q": 2.5}
    assert mw.Power(2.5).params() == {"name": "power", "q": 2.5}
    loaded = mw.load(res.save(tmp_path / "steep"))
    for measure in (res.check, lambda: mw.welfare(res), loaded.check):
        with pytest.raises(mw.ParameterError, match=r"hamiltonian=\{.*'class': 'Steep'.*\} "
                           "is invalid: only the shipped models .* not a model of one's own: "
                           "pass the problem that was solved"):
            measure()
    assert res.check(bar) <= 1e-8 and loaded.check(bar) <= 1e-8
    assert mw.welfare(res, bar) == mw.welfare(loaded, bar)
    with pytest.raises(mw.ParameterError, match="parameters differ"):
        res.check(mw.SantaFeBar())   # the shipped model is not the one solved


def test_a_planners_long_run_of_a_model_of_ones_own_starts_from_that_model():
    bar = mw.SantaFeBar(hamiltonian=Steep(), objective="social")
    res = mw.solve(bar, nx=41, stationary=True)
    assert res.converged and res.check(bar) <= 1e-8


def test_results_of_the_shipped_models_rebuild_as_before(santa_fe, steep, tmp_path):
    """Their records hold no class (as those saved before), and rebuild the model solved."""
    with pytest.raises(mw.ParameterError, match="not a model of one's own"):
        steep[1].check()
    run = santa_fe.save(tmp_path / "plain")
    assert json.loads((run / "parameters.json").read_text())["hamiltonian"] == {
        "name": "quadratic"}
    loaded = mw.load(run)
    assert loaded.check() == pytest.approx(santa_fe.check(), rel=1e-6, abs=1e-14)
    assert mw.welfare(loaded) == mw.welfare(santa_fe)


@pytest.fixture(scope="module")
def results(santa_fe):
    noise = mw.CommonNoise(mw.SantaFeBar(), "good", [12.0, 8.0],
                           transition=[[0.9, 0.1], [0.1, 0.9]], depth=2)
    groups = mw.SantaFePopulations([mw.Population("a", 0.5, mw.SantaFeBar(threshold=0.5)),
                                    mw.Population("b", 0.5, mw.SantaFeBar(threshold=0.7))])
    return {"santa_fe": santa_fe,
            "room": mw.solve(mw.Room(), nx=11, nt=10, progress=False),
            "common_noise": mw.solve(noise, nx=21, nt=20),
            "santa_fe_populations": mw.solve(groups, **SMALL)}


@pytest.mark.parametrize("kind, given, words", [
    ("santa_fe", mw.TwoStateElFarol(), "a result of 'santa_fe_bar' (mfgwork.SantaFeBar)"),
    ("santa_fe", mw.Room(), "a result of 'santa_fe_bar' (mfgwork.SantaFeBar)"),
    ("santa_fe", mw.SantaFeBar(threshold=0.5), "parameters differ (problem, result): "
                                               "{'threshold': (0.5, 0.6)}"),
    ("room", mw.TwoBars(), "a result of 'room' (mfgwork.Room)"),
    ("room", mw.SantaFeBar(), "a result of 'room' (mfgwork.Room)"),
    ("common_noise", mw.SantaFeBar(), "a result of 'common_noise' (mfgwork.CommonNoise)"),
    ("santa_fe_populations", mw.SantaFeBar(),
     "a result of 'santa_fe_populations' (mfgwork.SantaFePopulations)"),
], ids=["santa_fe-two_state", "santa_fe-room", "santa_fe-threshold", "room-two_bars",
        "room-santa_fe", "common_noise-santa_fe", "populations-santa_fe"])
def test_check_refuses_a_problem_the_result_does_not_solve(kind, given, words, results,
                                                           monkeypatch):
    for key in list(results_module.CERTIFICATES):
        monkeypatch.setitem(results_module.CERTIFICATES, key, _no_work)
    with pytest.raises(mw.ParameterError) as info:
        results[kind].check(given)
    text = str(info.value)
    assert text.startswith(f"problem={type(given).__name__}(") and words in text, text
    assert "pass the problem that was solved" in text


def _no_work(result, problem):
    raise AssertionError("the best response was computed before the problem was checked")


def test_a_problem_of_ones_own_is_checked_on_its_kind_and_domain():
    def model(x_max=1.0, name="mine"):
        return mw.MFGProblem(x_min=-1.0, x_max=x_max, T=1.0, sigma=0.3,
                             m0=lambda x: np.exp(-4.0 * x * x), g=lambda x: x * x,
                             f=lambda t, x, m: m, name=name)
    res = mw.solve(model(), nx=21, nt=20, progress=False)
    assert res.check(model(name="written again")) <= 1e-8   # its callables: by name only
    with pytest.raises(mw.ParameterError, match=r"problem=SantaFeBar\(.* is invalid: the result "
                       r"is a result of 'mine' \(a problem of one's own\)"):
        res.check(mw.SantaFeBar())
    with pytest.raises(mw.ParameterError, match=r"parameters differ .*'x_max': \(2.0, 1.0\)"):
        res.check(model(x_max=2.0))


def test_n_player_refuses_a_long_run_result_saying_what_it_takes():
    stationary = mw.solve(mw.SantaFeBar(), nx=41, stationary=True)
    with pytest.raises(mw.ParameterError, match=r"result=Result of the long run "
                       r"\(stationary=True\) is invalid: .*finite horizon; pass the result of "
                       r"mw.solve\(problem, nx=..., nt=...\)"):
        mw.n_player(mw.SantaFeBar(), stationary, 10)


@pytest.fixture(scope="module")
def two_state():
    return mw.solve(mw.TwoStateElFarol(), nt=40)


@pytest.mark.parametrize("cost", [0, -1.0, float("nan"), float("inf"), True, None])
def test_switching_rates_refuse_a_switching_cost_that_is_not_positive(cost, two_state):
    damaged = dataclasses.replace(two_state, params=two_state.params | {"switching_cost": cost})
    with pytest.raises(mw.ParameterError, match=r"result.params\['switching_cost'\]=.* is "
                       "invalid: must be a finite real number > 0"):
        mw.switching_rates(damaged)


def test_switching_rates_refuse_a_hand_edited_switching_cost(two_state, tmp_path):
    run = two_state.save(tmp_path / "two_state")
    params = json.loads((run / "parameters.json").read_text())
    (run / "parameters.json").write_text(json.dumps(params | {"switching_cost": "1"}))
    with pytest.raises(mw.ParameterError, match=r"result.params\['switching_cost'\]='1' \(str\) "
                       "is invalid"):
        mw.switching_rates(mw.load(run))
    assert np.isfinite(mw.switching_rates(two_state)).all()


def test_a_planners_result_and_an_equilibrium_are_told_apart():
    planner = mw.solve(mw.SantaFeBar(), **SMALL, objective="social")
    equilibrium = mw.solve(mw.SantaFeBar(), **SMALL)
    for res, other in ((planner, mw.SantaFeBar()),
                       (equilibrium, mw.SantaFeBar(objective="social"))):
        with pytest.raises(mw.ParameterError, match="parameters differ.*'objective'"):
            res.check(other)
    assert planner.check(mw.SantaFeBar(objective="social")) <= 1e-8
