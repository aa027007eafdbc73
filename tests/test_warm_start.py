"""``initial=`` on mw.solve: a previous Result or a coupling state (the attendance path)
starts the iteration; bad starts are refused before any work."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest

import mfgwork as mw

KW = {"nx": 61, "nt": 61, "tol": 1e-8, "progress": False}


@pytest.fixture(scope="module")
def neighbour():
    return mw.solve(mw.SantaFeBar(threshold=0.6), **KW)


def test_attendance_path_warm_start_saves_iterations_and_reaches_the_same_equilibrium(
        neighbour):
    problem = mw.SantaFeBar(threshold=0.63)
    cold = mw.solve(problem, **KW)
    A = np.asarray(neighbour.attendance)
    by_path = mw.solve(problem, initial=A, **KW)            # levels 0..nt, as res.attendance
    by_state = mw.solve(problem, initial=A[1:], **KW)       # the coupling state, levels 1..nt
    by_result = mw.solve(problem, initial=neighbour, **KW)
    assert cold.converged and by_path.converged and by_result.converged
    assert by_path.iterations < cold.iterations
    assert by_state.iterations == by_path.iterations
    assert np.array_equal(by_state.M, by_path.M)
    assert by_path.iterations == by_result.iterations   # same starting state z = A[1:]
    assert by_path.check() <= KW["tol"] * (1 + 1e-6)
    assert np.max(np.abs(by_path.M - cold.M)) <= 1e-5 * np.max(cold.M)


@pytest.mark.parametrize("initial, words", [
    (np.ones(1), ["initial has shape (1,)", "(61,)", "(62,)"]),
    (np.ones((62, 61)), ["initial has shape (62, 61)"]),
    (np.full(61, np.nan), ["initial has non-finite values"]),
    (np.array(["0.5"] * 61), ["(dtype <U3) is invalid"]),
    (np.ones(61, dtype=complex), ["(dtype complex128) is invalid"]),
    ([0.5] * 61 + [np.inf], ["initial has non-finite values"]),
    ({"A": 1}, ["(dict) is invalid"]),
])
def test_bad_initial_is_refused_before_any_solve(initial, words, monkeypatch):
    solve_module = importlib.import_module("mfgwork.fdm1d")

    def no_solvers(*args, **kwargs):
        raise AssertionError("solvers built before initial was checked")

    monkeypatch.setattr(solve_module, "solvers", no_solvers)
    with pytest.raises(mw.ParameterError) as info:
        mw.solve(mw.SantaFeBar(), **KW, initial=initial)
    for w in words:
        assert w in str(info.value)


def test_result_with_non_finite_values_is_refused(neighbour):
    U = np.array(neighbour.to_numpy().U, copy=True)
    U[3, 4] = np.nan
    broken = dataclasses.replace(neighbour, U=U)
    with pytest.raises(mw.ParameterError, match="initial has non-finite values in U"):
        mw.solve(mw.SantaFeBar(), **KW, initial=broken)


def test_levels_interpolate_as_numpy_does():
    """A coarse path's levels on a finer grid, one product with the interpolation's weights,
    equal ``np.interp`` row by row."""
    from mfgwork.warm_start import _levels

    problem = mw.SantaFeBar()
    old, new = problem.grid(21, 20), problem.grid(41, 37)
    states = np.random.default_rng(3).uniform(0.0, 1.0, (3, old.nt + 1))
    expected = np.stack([np.interp(new.t[1:], old.t, row) for row in states])
    np.testing.assert_allclose(_levels(states, old, new), expected, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(_levels(states[0], old, new), expected[0], rtol=1e-14,
                               atol=1e-15)
