"""The planner's optimum (mean field control) of the Santa Fe bar and its welfare against the
equilibrium's: two computations of the welfare, first-order optimality by finite differences,
a direct minimisation, W_opt ≥ W_eq over a box, backends agreeing, refusals before work."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.optimize

import mfgwork as mw
from mfgwork.core.backend import torch_installed
from mfgwork.problems import problem_from_params
from mfgwork.problems.santa_fe import attendance_weights, marginal_price_slope
from mfgwork.welfare import price_welfare, value_welfare, welfare

COARSE = {"nx": 41, "nt": 20, "tol": 1e-12, "progress": False}
#: A short horizon keeps the coarse grids' solves and best responses to milliseconds.
BAR = {"T": 4.0, "eps": 0.1}


def prices(result, problem):
    """The price path its controls respond to (levels 1..nt) and the attendance there."""
    nt, nx = np.shape(result.M)[0] - 1, np.shape(result.M)[1]
    A = np.asarray(result.M)[1:] @ attendance_weights(problem.grid(nx, nt))[1]
    return problem.price(A), A


@pytest.fixture(scope="module")
def pair():
    problem = mw.SantaFeBar(threshold=0.5, **BAR)
    optimum = mw.solve(problem, objective="social", **COARSE)
    equilibrium = mw.solve(problem, **COARSE)
    return problem, optimum, equilibrium


def test_the_planner_result_reports_both_welfares(pair):
    problem, optimum, equilibrium = pair
    assert optimum.converged and optimum.status == "converged"
    assert optimum.params["objective"] == "social" and "objective" not in equilibrium.params
    s = optimum.summary
    assert s["welfare"] == pytest.approx(welfare(optimum))
    assert s["equilibrium_welfare"] == pytest.approx(welfare(equilibrium), rel=1e-9)
    assert s["welfare_loss"] == pytest.approx(s["welfare"] - s["equilibrium_welfare"])
    assert s["welfare_loss"] > 0 and s["price_of_anarchy"] > 1
    assert optimum.extra["equilibrium"]["status"] == "converged"
    assert optimum.timings["equilibrium"] > 0
    # the planner keeps the bar emptier than the patrons do
    assert s["mean_attendance"] < equilibrium.summary["mean_attendance"]
    # a best response to the planner's price reproduces it (the fixed point, certified)
    assert optimum.check() <= 1e-10


@pytest.mark.parametrize("which", [0, 1])
def test_welfare_from_controls_equals_welfare_from_values(pair, which):
    """The scheme's adjoint structure: −Σ w m⁰ u⁰ − Σ Δt (y − F) A equals the payoff less the
    Lagrangian cost of the controls, for the optimum and for the equilibrium."""
    result = pair[1 + which]
    assert value_welfare(result) == pytest.approx(welfare(result), rel=1e-10, abs=1e-10)


def test_the_optimum_is_stationary_and_the_equilibrium_is_not(pair):
    """Finite differences of the welfare of best responses to prices along random
    directions: zero at the planner's price, of order one at the equilibrium's."""
    problem, optimum, equilibrium = pair
    y_opt, _ = prices(optimum, problem.for_objective("social"))
    y_eq, _ = prices(equilibrium, problem)
    assert price_welfare(problem, y_opt, 41) == pytest.approx(optimum.summary["welfare"],
                                                              rel=1e-10)
    rng = np.random.default_rng(3)
    for _ in range(3):
        d = rng.standard_normal(y_opt.size)
        d /= np.linalg.norm(d)
        s = 1e-3

        def slope(y, d=d, s=s):
            return (price_welfare(problem, y + s * d, 41)
                    - price_welfare(problem, y - s * d, 41)) / (2 * s)

        at_optimum, at_equilibrium = slope(y_opt), slope(y_eq)
        assert abs(at_optimum) < 1e-4 * max(abs(at_equilibrium), 1e-2), (at_optimum,
                                                                         at_equilibrium)


def test_a_direct_minimisation_finds_no_better_price_path(pair):
    """L-BFGS over the price path (one best response per evaluation), from the equilibrium's
    prices, ends at the planner's welfare and prices."""
    problem, optimum, equilibrium = pair
    y_eq, _ = prices(equilibrium, problem)
    y_opt, _ = prices(optimum, problem.for_objective("social"))
    found = scipy.optimize.minimize(lambda y: -price_welfare(problem, y, 41), y_eq,
                                    method="L-BFGS-B", options={"maxiter": 300})
    assert -found.fun <= optimum.summary["welfare"] + 1e-9
    assert -found.fun == pytest.approx(optimum.summary["welfare"], rel=1e-6)
    assert np.max(np.abs(found.x - y_opt)) < 0.05 * np.max(np.abs(y_opt))


BOX = [(threshold, eps, sigma) for threshold in (0.3, 0.6, 0.9) for eps in (0.03, 0.1)
       for sigma in (0.3, 1.0)]


def test_the_optimum_is_worth_at_least_the_equilibrium_over_a_box():
    problems = [mw.SantaFeBar(threshold=a, eps=e, sigma=s, T=4.0) for a, e, s in BOX]
    results = mw.solve(problems, objective="social", nx=41, nt=20, progress=False)
    for (a, e, s), res in zip(BOX, results, strict=True):
        where = f"threshold={a}, eps={e}, sigma={s}"
        assert res.converged and res.extra["equilibrium"]["status"] == "converged", where
        assert res.summary["welfare_loss"] >= -1e-9, where
        ratio = res.summary["price_of_anarchy"]
        assert np.isnan(ratio) == (res.summary["equilibrium_welfare"] <= 0), where
        assert np.isnan(ratio) or ratio >= 1 - 1e-9, where


@pytest.mark.skipif(not torch_installed(), reason="needs torch")
def test_numpy_and_torch_agree_on_the_planner_batch():
    problems = [mw.SantaFeBar(threshold=a, **BAR) for a in (0.4, 0.7)]
    numpy = mw.solve(problems, objective="social", **COARSE)
    torch = mw.solve(problems, objective="social", backend="torch", **COARSE)
    for a, b in zip(numpy, torch, strict=True):
        assert a.converged and b.converged and b.backend == "torch"
        np.testing.assert_allclose(b.M, a.M, rtol=0, atol=1e-10)
        assert b.summary["welfare"] == pytest.approx(a.summary["welfare"], rel=1e-10)


@pytest.mark.skipif(not torch_installed(), reason="needs torch")
def test_the_planner_on_the_mps_path_in_float32(mps_emulation):
    problem = mw.SantaFeBar(threshold=0.5, **BAR)
    reference = mw.solve(problem, objective="social", **COARSE)
    emulated = mw.solve([problem], objective="social", backend=mps_emulation, nx=41, nt=20,
                        tol=1e-3, progress=False)[0]
    assert emulated.converged and emulated.dtype == "float32"
    assert emulated.summary["welfare"] == pytest.approx(reference.summary["welfare"],
                                                        rel=1e-3)


def test_the_planner_s_problem_is_a_bar_with_its_own_price():
    bar = mw.SantaFeBar(threshold=0.5)
    planner = bar.for_objective("social")
    assert planner.objective == "social" and bar.objective == "equilibrium"
    assert planner.for_objective("equilibrium").params() == bar.params()
    assert "objective='social'" in repr(planner)
    assert problem_from_params(planner.params()).objective == "social"
    assert pickle.loads(pickle.dumps(planner)).objective == "social"
    A = np.linspace(0.0, 1.0, 101)
    # P = F + A F' = d(A F)/dA, and its slope P' (finite differences of each)
    total = A * bar.payoff(A)
    np.testing.assert_allclose(planner.price(A)[1:-1], (total[2:] - total[:-2]) / 0.02,
                               atol=0.2)
    fd = (planner.price(A + 1e-6) - planner.price(A - 1e-6)) / 2e-6
    analytic = marginal_price_slope(A, threshold=0.5, good=10.0, bad=-5.0, eps=0.05)
    np.testing.assert_allclose(analytic, fd, rtol=1e-5, atol=1e-4)
    assert (analytic > 0).any() and (analytic < 0).any()   # not monotone


@pytest.mark.parametrize(("problem", "options", "pattern"), [
    (mw.SantaFeBar(), {"objective": "selfish"}, "objective='selfish' is invalid"),
    (mw.SantaFeBar(), {"objective": "social", "method": "particles"},
     "method='particles' is invalid with objective='social'"),
    (mw.SantaFeBar(hamiltonian=mw.Congestion()), {"objective": "social"},
     "objective='social' is invalid for problem 0"),
    (mw.HopfColeProblem(), {"objective": "social"}, "objective='social' is invalid"),
    ([mw.SantaFeBar(), mw.HopfColeProblem()], {"objective": "social"},
     "objective='social' is invalid for problem 1"),
    (mw.SantaFeBar(), {"objective": "social", "stationary": True},
     "stationary=True is invalid with objective='social'"),
])
def test_objectives_it_does_not_define_are_refused_before_work(problem, options, pattern,
                                                               monkeypatch):
    import importlib

    solve_module = importlib.import_module("mfgwork.fdm1d")

    def no_work(*args, **kwargs):
        raise AssertionError("work started")

    monkeypatch.setattr(solve_module, "_equilibrium", no_work)
    with pytest.raises(mw.ParameterError, match=pattern):
        mw.solve(problem, **options)


def test_objective_equilibrium_is_the_plain_solve():
    problem = mw.SantaFeBar(objective="social", **BAR)
    plain = mw.solve(problem.for_objective("equilibrium"), **COARSE)
    asked = mw.solve(problem, objective="equilibrium", **COARSE)
    np.testing.assert_array_equal(asked.M, plain.M)
    assert "welfare" not in asked.summary


def test_n_patrons_playing_the_planner_s_policy(pair):
    """The planner's feedback, simulated with N patrons: their attendance follows the
    planner's mean field, and one patron gains by leaving it (it is not an equilibrium),
    much more than from leaving the equilibrium's."""
    from mfgwork.analysis.n_player import n_player

    problem, optimum, equilibrium = pair
    social = n_player(problem, optimum, n_players=400, n_samples=4, seed=1)
    selfish = n_player(problem, equilibrium, n_players=400, n_samples=4, seed=1)
    assert social.distance_rms[0] < 0.1
    assert np.mean(social.attendance) < np.mean(selfish.attendance)
    assert social.gap_mean[0] > 10 * selfish.gap_mean[0] > 0
    # the same whichever bar is passed: the result says whose policy it is
    again = n_player(problem.for_objective("social"), optimum, n_players=400, n_samples=4,
                     seed=1)
    np.testing.assert_array_equal(again.gap, social.gap)


def test_a_scan_maps_the_price_of_anarchy(tmp_path):
    grid = {"threshold": [0.3, 0.8], "eps": [0.05, 0.1]}
    ds = mw.scan(mw.SantaFeBar, grid, fixed={"T": 4.0}, nx=41, nt=20, objective="social",
                 store=tmp_path / "poa.zarr", progress=False)
    assert ds.attrs["objective"] == "social" and bool(ds["converged"].all())
    loss = ds["welfare_loss"].values
    assert (loss > 0).all()
    point = mw.solve(mw.SantaFeBar(threshold=0.8, eps=0.05, T=4.0), objective="social",
                     nx=41, nt=20, progress=False)
    for name in ("welfare", "equilibrium_welfare", "price_of_anarchy"):
        assert float(ds[name].sel(threshold=0.8, eps=0.05)) == pytest.approx(
            point.summary[name], rel=1e-9)
    plain = mw.scan(mw.SantaFeBar, grid, fixed={"T": 4.0}, nx=41, nt=20, progress=False)
    assert "welfare" not in plain and "objective" not in plain.attrs


@pytest.mark.parametrize(("problem", "objective", "pattern"), [
    (mw.SantaFeBar, "pareto", "objective='pareto' is invalid"),
    (mw.HopfColeProblem, "social", "objective='social' is invalid for problem 0"),
])
def test_a_scan_refuses_an_objective_before_any_store(problem, objective, pattern, tmp_path):
    grid = {"T": [1.0, 2.0]}
    with pytest.raises(mw.ParameterError, match=pattern):
        mw.scan(problem, grid, nx=21, nt=10, objective=objective, store=tmp_path / "s.zarr",
                progress=False)
    assert not (tmp_path / "s.zarr").exists()


def test_a_batch_of_several_hamiltonians_gets_each_its_own_welfare():
    problems = [mw.SantaFeBar(threshold=0.5, **BAR),
                mw.SantaFeBar(threshold=0.5, hamiltonian=mw.Power(1.5), **BAR)]
    # (tol 1e-10: the Power(1.5) member's equilibrium is steep, L = ‖Φ'‖ ≈ 290, and its
    # certificate stops near 0.1 L² ε ≈ 2e-12, above 1e-12 on some CPUs' rounding)
    results = mw.solve(problems, objective="social", **(COARSE | {"tol": 1e-10}))
    for problem, res in zip(problems, results, strict=True):
        assert res.converged
        assert res.summary["welfare"] == pytest.approx(welfare(res, problem.for_objective(
            "social")), rel=1e-12)
        assert res.summary["welfare"] == pytest.approx(value_welfare(res), rel=1e-9)
    assert results[0].summary["welfare"] != pytest.approx(results[1].summary["welfare"])
