"""Arguments of the wrong kind are refused with a ParameterError naming them, before any
work: a warm start from a result of another kind, a problem that a result does not solve,
a result that is no two-state game's, paths of different lengths, a non-bool ``coarse``, a
door off its wall."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.welfare import value_welfare

KW = {"nx": 41, "nt": 41, "progress": False}


@pytest.fixture(scope="module")
def santa_fe():
    return mw.solve(mw.SantaFeBar(), nx=21, nt=21, progress=False)


@pytest.fixture(scope="module")
def two_state():
    return mw.solve(mw.TwoStateElFarol(), nt=40)


@pytest.fixture(scope="module")
def room():
    return mw.solve(mw.Room(), nx=11, nt=10, progress=False)


@pytest.fixture(scope="module")
def populations():
    groups = mw.SantaFePopulations([mw.Population("a", 0.5, mw.SantaFeBar(threshold=0.5)),
                                    mw.Population("b", 0.5, mw.SantaFeBar(threshold=0.7))])
    return mw.solve(groups, nx=21, nt=21, progress=False)


@pytest.fixture
def no_solvers(monkeypatch):
    """Make building the best responses' solvers (the first work of a solve) fail."""
    def refuse(*args, **kwargs):
        raise AssertionError("solvers built before initial was checked")

    monkeypatch.setattr(importlib.import_module("mfgwork.fdm1d"), "solvers", refuse)


@pytest.mark.parametrize("kind, words", [
    ("room", ["initial is a Result2D of 'room'", "M of shape (11, 11, 11)"]),
    ("two_state", ["initial is a Result of 'two_state_el_farol'", "labels ['state']"]),
    ("populations", ["labels ['population']", "M of shape (2, 22, 21)"]),
])
def test_a_warm_start_of_another_kind_is_refused_naming_it(kind, words, request, no_solvers):
    other = request.getfixturevalue(kind)
    with pytest.raises(mw.ParameterError) as info:
        mw.solve(mw.SantaFeBar(), **KW, initial=other)
    for w in words + ["a Result of a 1-D solve", "SantaFeBar, x over [-5, 5]"]:
        assert w in str(info.value)


def test_a_result_on_another_domain_is_refused(santa_fe, no_solvers):
    for problem in (mw.SantaFeBar(theta_max=3.0), mw.HopfColeProblem()):
        with pytest.raises(mw.ParameterError, match=r"initial is a Result of 'santa_fe_bar'"
                           r".*M of shape \(22, 21\), x over \[-5, 5\]: must be"):
            mw.solve(problem, nx=21, nt=20, progress=False, initial=santa_fe)


def test_a_batch_refuses_a_wrong_member_before_solving_any(santa_fe, room, no_solvers):
    problems = [mw.SantaFeBar(threshold=0.6), mw.SantaFeBar(threshold=0.7)]
    with pytest.raises(mw.ParameterError, match=r"initial\[1\] is a Result2D of 'room'"):
        mw.solve(problems, **KW, initial=[santa_fe, room])


def test_welfare_refuses_a_problem_the_result_does_not_solve(santa_fe):
    for measure in (mw.welfare, value_welfare):
        with pytest.raises(mw.ParameterError, match=r"result does not solve problem: "
                           r"parameters differ .*'threshold': \(0.3, 0.6\)"):
            measure(santa_fe, mw.SantaFeBar(threshold=0.3))
        assert measure(santa_fe, mw.SantaFeBar()) == measure(santa_fe)


@pytest.mark.parametrize("kind, got", [
    ("santa_fe", "Result of 'santa_fe_bar'"), ("room", "Result2D of 'room'"),
    (None, "NoneType")])
def test_switching_rates_refuse_a_result_of_another_game(kind, got, request):
    result = None if kind is None else request.getfixturevalue(kind)
    with pytest.raises(mw.ParameterError) as info:
        mw.switching_rates(result)
    assert f"result={got}" in str(info.value)
    assert "must be a result of mw.TwoStateElFarol" in str(info.value)


def test_switching_rates_read_the_game_a_result_solves(two_state):
    rates = mw.switching_rates(two_state)
    assert rates.shape == (41, 2) and np.all(rates >= 0)
    other = dataclasses.replace(two_state, params=two_state.params | {"problem": "other"})
    with pytest.raises(mw.ParameterError, match="result=Result of 'other'"):
        mw.switching_rates(other)


@pytest.mark.parametrize("t, values, level, tol, words", [
    ([0, 1, 2], [0.1, 0.5], 0.5, 0.01, "values has 2 entries and t 3"),
    ([0, 1, 2], [0.1, 0.5, 0.5], 0.5, -0.01, "tol=-0.01 is invalid"),
    ([0, 1, 2], [0.1, 0.5, 0.5], 0.5, float("nan"), "tol=nan is invalid"),
    ([0, 1, 2], [0.1, 0.5, 0.5], float("inf"), 0.01, "level=inf is invalid"),
    ([0, 2, 1], [0.1, 0.5, 0.5], 0.5, 0.01, "must increase in even steps"),
    ([0, 1, 5], [0.1, 0.5, 0.5], 0.5, 0.01, "must increase in even steps"),
    ([0, 1, 2], [0.1, np.nan, 0.5], 0.5, 0.01, "values of shape (3,) is invalid"),
    ([[0, 1, 2]], [0.1, 0.5, 0.5], 0.5, 0.01, "t of shape (1, 3) is invalid"),
    ([0], [0.5], 0.5, 0.01, "t of shape (1,) is invalid"),
])
def test_time_to_level_refuses_paths_it_cannot_read(t, values, level, tol, words):
    with pytest.raises(mw.ParameterError) as info:
        mw.time_to_level(t, values, level, tol)
    assert words in str(info.value)


@pytest.mark.parametrize("coarse", ["no", 1, None, 0.0])
@pytest.mark.parametrize("batch", [False, True])
def test_coarse_must_be_true_or_false(coarse, batch, no_solvers):
    problem = [mw.SantaFeBar()] if batch else mw.SantaFeBar()
    with pytest.raises(mw.ParameterError, match=r"coarse=.* is invalid: must be True or False"):
        mw.solve(problem, nx=121, nt=121, coarse=coarse)


def test_a_numpy_bool_coarse_is_a_bool():
    res = mw.solve(mw.SantaFeBar(), nx=21, nt=21, progress=False, coarse=np.False_)
    assert res.converged
    with pytest.raises(mw.ParameterError, match="coarse='no'"):
        mw.solve(mw.SantaFeBar(), nx=21, nt=21, coarse="no")


def test_a_door_off_its_wall_is_refused_naming_its_center():
    def grid(door):   # x over [0, 1], y over [0, 2]
        return mw.Grid2D(0.0, 1.0, 0.0, 2.0, 11, 21, 1.0, 10, exits=(door,))

    assert grid(mw.Exit("left", 1.5, 0.1)).exit.any()
    for door, span in ((mw.Exit("left", 5.0, 0.1), "[0, 2]"),
                       (mw.Exit("bottom", 1.5, 0.1), "[0, 1]"),
                       (mw.Exit("top", -0.25, 0.1), "[0, 1]")):
        with pytest.raises(mw.ParameterError, match=rf"center={door.center!r} is invalid for "
                           rf"the exit on the {door.side} wall: must be in \{span}"):
            grid(door)


def test_a_problem_with_a_door_off_its_wall_is_refused_when_made():
    with pytest.raises(mw.ParameterError, match=r"center=5.0 is invalid .* \[0, 1\]"):
        mw.MFGProblem2D(0.0, 1.0, 0.0, 1.0, 1.0, 0.3, lambda X, Y: 1.0 + 0.0 * X,
                        lambda X, Y: 0.0 * X, lambda t, X, Y, m: 1.0 + m,
                        exits=(mw.Exit("left", 5.0, 0.1),))


def test_a_populations_name_and_open_scans_verify_are_checked(tmp_path):
    groups = [mw.Population("a", 0.5, mw.SantaFeBar()), mw.Population("b", 0.5, mw.SantaFeBar())]
    for name in (3, ""):
        with pytest.raises(mw.ParameterError, match=rf"name={name!r} is invalid: must be a non"):
            mw.SantaFePopulations(groups, name=name)
    store = tmp_path / "s.zarr"
    mw.scan(mw.SantaFeBar, {"threshold": [0.5]}, nx=11, nt=5, tol=1e-6, device="cpu",
            store=store, progress=False)
    with pytest.raises(mw.ParameterError, match="verify='no'"):
        mw.open_scan(store, verify="no")
    assert mw.open_scan(store, verify=False).sizes["threshold"] == 1
