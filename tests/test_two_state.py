"""The two-state El Farol game: exact implicit steps, mass conservation, the plateau where the
payoff vanishes, first order in Δt, and an equilibrium that is its own best response."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.finite_state import time_to_level
from mfgwork.numerics.finite_state import TwoStateScheme


@pytest.fixture(scope="module")
def solved():
    return mw.solve_two_state(mw.TwoStateElFarol(), nt=400)


def test_mass_is_conserved_and_nonnegative(solved):
    assert solved.converged
    assert solved.mass_error < 1e-13
    assert solved.M.min() >= 0.0
    assert solved.M.shape == solved.U.shape == (401, 2)


def test_attendance_plateau_where_the_payoff_vanishes(solved):
    problem = mw.TwoStateElFarol()
    level = 0.6 + 0.05 * math.log(10.0 / 5.0)
    assert problem.plateau == pytest.approx(level, abs=1e-15)
    A, t = solved.attendance, solved.t
    middle = (t > 0.3 * problem.T) & (t < 0.7 * problem.T)
    assert np.max(np.abs(A[middle] - level)) < 1e-6
    assert abs(float(problem.payoff(A[200]))) < 1e-4
    # nobody switches on the plateau; at t = 0 patrons flow into the bar (A0 = 0.5 < level)
    assert np.max(solved.rates[middle]) < 1e-5
    assert solved.rates[0, 0] > 0.1 and solved.rates[0, 1] == 0.0
    assert 0 < time_to_level(t, A, level, 0.005) < 0.2 * problem.T


@pytest.mark.parametrize("threshold, good, bad", [(0.4, 6.0, -3.0), (0.7, 10.0, -20.0)])
def test_plateau_follows_the_parameters(threshold, good, bad):
    problem = mw.TwoStateElFarol(threshold=threshold, good=good, bad=bad)
    res = mw.solve_two_state(problem, nt=200)
    level = threshold + 0.05 * math.log(good / -bad)
    assert abs(res.attendance[100] - level) < 1e-6


def test_steps_solve_the_implicit_scheme(solved):
    """The closed-form HJB step against the residual of the implicit equations, and the
    Kolmogorov step against a linear solve of (I − Δt Qᵀ) m^{n+1} = m^n."""
    problem = mw.TwoStateElFarol()
    nt, dt = 400, problem.T / 400
    scheme = TwoStateScheme(nt, dt, problem.switching_cost)
    rng = np.random.default_rng(0)
    F = rng.normal(scale=5.0, size=(nt, 2))
    U = scheme.solve_hjb(np.zeros(2), F)
    assert np.max(np.abs(scheme.hjb_residual(U, F))) < 1e-9
    M = scheme.solve_fp(U, np.array([0.3, 0.7]))
    beta = scheme.rates(U)
    for n in (0, 17, nt - 1):
        b0, b1 = beta[n]
        Q = np.array([[-b0, b0], [b1, -b1]])
        np.testing.assert_allclose(np.linalg.solve(np.eye(2) - dt * Q.T, M[n]), M[n + 1],
                                   rtol=1e-13, atol=1e-15)


def test_equilibrium_is_its_own_best_response(solved):
    problem = mw.TwoStateElFarol()
    scheme = TwoStateScheme(400, problem.T / 400, problem.switching_cost)
    F = problem.coupling().running_cost(solved.attendance[1:])
    M = scheme.solve_fp(scheme.solve_hjb(np.zeros(2), F), problem.initial_distribution())
    # the returned solution is certified: one best response reproduces it to the residual
    assert solved.converged and solved.residual <= 1e-8
    assert np.max(np.abs(M[:, 1] - solved.attendance)) < 1e-6


def test_first_order_in_time():
    problem = mw.TwoStateElFarol()
    ref = mw.solve_two_state(problem, nt=6400)
    errors = []
    for nt in (50, 100, 200, 400):
        res = mw.solve_two_state(problem, nt=nt)
        errors.append(np.max(np.abs(res.attendance - ref.attendance[::6400 // nt])))
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all((orders > 0.8) & (orders < 1.3)), (errors, orders)


def test_switching_cost_slows_the_approach():
    cheap = mw.solve_two_state(mw.TwoStateElFarol(switching_cost=0.5), nt=400)
    dear = mw.solve_two_state(mw.TwoStateElFarol(switching_cost=5.0), nt=400)
    level = mw.TwoStateElFarol().plateau
    t_cheap = time_to_level(cheap.t, cheap.attendance, level, 0.005)
    t_dear = time_to_level(dear.t, dear.attendance, level, 0.005)
    assert t_cheap is not None and t_dear is not None and t_dear > 2 * t_cheap


def test_saved_like_any_run(tmp_path, solved):
    folder = mw.save_run(tmp_path / "two_state", solved, parameters={"out_dir": "x"})
    with np.load(folder / "arrays.npz") as data:
        np.testing.assert_array_equal(data["attendance"], solved.attendance)
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["observables"] == ["attendance"] and metrics["mass_error"] < 1e-13
    assert metrics["mean_attendance"] == pytest.approx(float(np.mean(solved.M[:, 1])))
    assert json.loads((folder / "parameters.json").read_text())["switching_cost"] == 1.0


def test_the_problem_owns_its_observables(solved):
    assert list(solved.observables) == ["attendance"]
    np.testing.assert_array_equal(solved.attendance, solved.M[:, 1])
    assert solved.summary["time_overcrowded"] == pytest.approx(10.0, abs=0.5)  # A > A* soon
    with pytest.raises(AttributeError, match="observables: attendance"):
        getattr(solved, "mean_state")  # noqa: B009 - the attribute access is the test


def test_bad_input():
    with pytest.raises(mw.ParameterError, match="switching_cost=0.0 is invalid"):
        mw.TwoStateElFarol(switching_cost=0.0)
    with pytest.raises(mw.ParameterError, match="attendance0=1.5 is invalid"):
        mw.TwoStateElFarol(attendance0=1.5)
    with pytest.raises(mw.ParameterError, match="good=1.0 is invalid"):
        mw.TwoStateElFarol(good=1.0, bad=2.0)
    with pytest.raises(mw.ParameterError, match="nt=0 is invalid"):
        mw.solve_two_state(mw.TwoStateElFarol(), nt=0)
    with pytest.raises(mw.ParameterError, match="must be an mfgwork.TwoStateElFarol"):
        mw.solve_two_state(mw.SantaFeBar())
    assert mw.TwoStateElFarol(bad=1.0).plateau is None
