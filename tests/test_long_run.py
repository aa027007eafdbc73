"""The long run (``mw.solve(problem, stationary=True)``): the ergodic system against an exact
stationary solution (first order), against the middle of long finite horizons, certified by a
best response, for several models; refusals before work; files."""

from __future__ import annotations

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.problems.verification import ErgodicProblem


def errors(problem: ErgodicProblem, nx: int) -> tuple[float, float, float]:
    res = mw.solve(problem, nx=nx, stationary=True, tol=1e-11)
    assert res.converged and res.check(problem) <= 1e-11
    x = np.asarray(res.x)
    return (float(np.max(np.abs(res.M[0] - problem.exact_m(x)))),
            float(np.max(np.abs(res.U[0] - problem.exact_v(x)))),
            abs(res.summary["ergodic_constant"] - problem.ergodic_constant))


@pytest.mark.parametrize("kw", [{}, {"a": -0.5, "mode": 2, "sigma": 0.8,
                                     "ergodic_constant": -1.0}])
def test_first_order_against_an_exact_ergodic_solution(kw):
    problem = ErgodicProblem(**kw)
    coarse, fine = errors(problem, 41), errors(problem, 161)
    for e_coarse, e_fine, name in zip(coarse, fine, ("m", "v", "λ"), strict=True):
        order = np.log2(e_coarse / e_fine) / 2
        assert 0.85 < order < 1.2, (name, e_coarse, e_fine, order)


@pytest.fixture(scope="module")
def santa_fe():
    return mw.solve(mw.SantaFeBar(), nx=51, stationary=True)


def test_long_finite_horizons_approach_the_long_run(santa_fe):
    """The middle of a finite-horizon solution tends to the stationary attendance as T grows,
    and the value's mean falls at the rate λ there."""
    A = santa_fe.summary["mean_attendance"]
    assert santa_fe.converged and 0.63 < A < 0.64
    gaps = []
    for T in (30.0, 120.0):
        nt = int(5 * T)
        res = mw.solve(mw.SantaFeBar(T=T), nx=51, nt=nt, progress=False)
        gaps.append(abs(float(res.attendance[nt // 2]) - A))
        if T == 120.0:
            w = mw.SantaFeBar().grid(51, nt).weights
            a, b = nt // 4, nt // 2
            rate = (res.U[a] @ w - res.U[b] @ w) / ((res.t[b] - res.t[a]) * w.sum())
            assert rate == pytest.approx(santa_fe.summary["ergodic_constant"], rel=0.5)
    assert gaps[1] < gaps[0] / 10 and gaps[1] < 1e-5, gaps


def test_the_certificate_is_a_best_response(santa_fe):
    assert santa_fe.check() == pytest.approx(santa_fe.residual, rel=1e-6, abs=1e-14)
    assert santa_fe.residual <= 1e-8 and santa_fe.mass_error < 1e-12
    assert (np.asarray(santa_fe.M) >= 0).all()
    shifted = mw.Result(**{k: getattr(santa_fe, k) for k in (
        "x", "t", "U", "converged", "iterations", "history", "params", "timings",
        "observables", "summary", "residual")} | {"M": np.roll(santa_fe.M, 5, axis=-1)})
    assert shifted.check() > 1e-3


@pytest.mark.parametrize("hamiltonian", [mw.Power(1.5), mw.Congestion()],
                         ids=["power", "congestion"])
def test_other_models_reach_their_long_run(hamiltonian):
    res = mw.solve(mw.SantaFeBar(hamiltonian=hamiltonian), nx=51, stationary=True)
    assert res.converged and res.check() <= 1e-8


@pytest.mark.parametrize(("options", "pattern"), [
    ({"method": "particles"}, "method='particles' is invalid with stationary=True"),
    ({"dtype": "float32"}, "dtype='float32' is invalid with stationary=True"),
    ({"stationary": "yes"}, r"stationary='yes' \(str\) is invalid"),
])
def test_what_the_long_run_does_not_do_is_refused_before_work(options, pattern, monkeypatch):
    import importlib

    monkeypatch.setattr(importlib.import_module("mfgwork.long_run"), "ErgodicSystem",
                        lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(mw.ParameterError, match=pattern):
        mw.solve(mw.SantaFeBar(), nx=21, **({"stationary": True} | options))


@pytest.mark.skipif(not mw.core.backend.torch_installed(), reason="needs torch")
def test_torch_and_numpy_agree_on_the_long_run(santa_fe):
    res = mw.solve(mw.SantaFeBar(), nx=51, stationary=True, backend="torch",
                   dtype="float64")
    assert res.backend == "torch" and res.converged
    np.testing.assert_allclose(res.M, santa_fe.M, rtol=0, atol=1e-10)
    np.testing.assert_allclose(res.U, santa_fe.U, rtol=0, atol=1e-10)
    assert abs(res.summary["ergodic_constant"] - santa_fe.summary["ergodic_constant"]) < 1e-12
    assert res.check() <= 1e-8


def test_a_stationary_result_is_saved_loaded_and_checked_again(santa_fe, tmp_path):
    santa_fe.save(tmp_path / "run")
    loaded = mw.load(tmp_path / "run")
    assert loaded.params["stationary"] is True
    assert loaded.summary["ergodic_constant"] == santa_fe.summary["ergodic_constant"]
    assert loaded.check() == pytest.approx(santa_fe.residual, rel=1e-6, abs=1e-14)
    data = santa_fe.to_xarray()
    assert data["M"].shape == (1, 51) and float(data["attendance"][0]) == pytest.approx(
        santa_fe.summary["mean_attendance"])


def test_welfare_is_refused_for_a_long_run(santa_fe):
    with pytest.raises(mw.ParameterError, match="over a finite horizon"):
        mw.welfare(santa_fe)


def test_little_noise_and_huge_grids_are_refused_with_what_to_change():
    with pytest.raises(mw.SolverError, match="use a larger sigma or more nodes"):
        mw.solve(mw.SantaFeBar(sigma=1e-5), nx=51, stationary=True)
    with pytest.raises(mw.ParameterError, match="nx too large: the long run on nx=40001"):
        mw.solve(mw.SantaFeBar(), nx=40001, stationary=True)
    with pytest.warns(mw.ResolutionWarning, match="nx=5 gives the θ step"):
        mw.solve(mw.SantaFeBar(), nx=5, stationary=True)


def test_the_planner_s_long_run_starts_from_a_finite_horizon_and_matches_it():
    """The planner's problem has no convex potential: its long run starts from the middle of
    a finite horizon, converges, and agrees with the middle of a longer one."""
    planner = mw.SantaFeBar(objective="social", T=4.0)
    res = mw.solve(planner, nx=51, stationary=True)
    assert res.converged and res.check() <= 1e-8
    assert res.params["iteration"]["start"].startswith("the middle of a finite horizon")
    assert mw.solve(mw.SantaFeBar(), nx=51, stationary=True).params["iteration"][
        "start"] == "the initial density"
    longer = mw.solve(mw.SantaFeBar(objective="social", T=60.0), nx=51, nt=300,
                      progress=False)
    assert abs(float(longer.attendance[150]) - res.summary["mean_attendance"]) < 1e-4
    assert res.summary["mean_attendance"] < 0.5   # the planner keeps the bar emptier


@pytest.mark.parametrize("kw", [{"threshold": 0.9}, {"good": 1e3}, {"good": 1e12}])
def test_where_newton_from_the_initial_density_creeps_it_starts_again_later(kw):
    """A high threshold or a large payoff: Newton from the initial density creeps (steps of
    10⁻³–10⁻⁵; at good=1e12 its systems overflow and turn singular) and never converged
    (residual 0.5 after 200 steps). It starts again from the middle of a finite horizon,
    converges, and a longer finite horizon's middle comes closer to it as T grows."""
    res = mw.solve(mw.SantaFeBar(**kw), nx=51, stationary=True)
    assert res.converged and res.check() <= 1e-8 and res.iterations <= 40
    assert res.params["iteration"]["start"].startswith(
        "the middle of a finite horizon T=20, after ")
    gaps = []
    for T in (30.0, 120.0):
        n = int(5 * T)
        finite = mw.solve(mw.SantaFeBar(T=T, **kw), nx=51, nt=n, progress=False)
        gaps.append(abs(float(finite.attendance[n // 2]) - res.summary["mean_attendance"]))
    assert gaps[1] < 2e-5 and gaps[1] <= gaps[0]


def test_a_bar_that_mixes_slowly_starts_again_from_a_longer_horizon():
    """Threshold 0.95 at σ = 0.15: from the initial density and from the middle of T = 20
    Newton creeps; from the middle of T = 200 it converges (it ended at max_iter, residual
    1.5e-2). Finite horizons T = 200 and 400 come closer to it as T grows."""
    bar = mw.SantaFeBar(threshold=0.95, sigma=0.15)
    res = mw.solve(bar, nx=31, stationary=True)
    assert res.converged and res.check() <= 1e-8
    assert res.params["iteration"]["start"] == (
        "the middle of a finite horizon T=200, after 16 Newton steps from the initial density "
        "and 16 from the middle of a finite horizon T=20")
    gaps = []
    for T in (200.0, 400.0):
        n = int(5 * T)
        finite = mw.solve(bar.with_horizon(T), nx=31, nt=n, progress=False)
        gaps.append(abs(float(finite.attendance[n // 2]) - res.summary["mean_attendance"]))
    assert gaps[1] < 1e-5 and gaps[1] < gaps[0] / 2


def test_only_a_problem_whose_horizon_can_change_starts_again():
    """The later start is a finite horizon of the same problem: Santa Fe's and a plain
    mw.MFGProblem's are made, a subclass with a constructor of its own keeps to the initial
    density (its exact ergodic solution is reached from there)."""
    from mfgwork.long_run import over_horizon
    from mfgwork.problems.verification import ErgodicProblem

    assert over_horizon(mw.SantaFeBar(good=20.0), 20.0).params() == mw.SantaFeBar(
        good=20.0, T=20.0).params()
    own = mw.MFGProblem(0, 1, 1.0, 0.5, m0=lambda x: 1 + 0 * x, g=lambda x: 0 * x,
                        f=lambda t, x, m: m)
    assert over_horizon(own, 20.0).T == 20.0 and over_horizon(own, 20.0).f is own.f
    assert over_horizon(ErgodicProblem(), 20.0) is None
    res = mw.solve(ErgodicProblem(), nx=41, stationary=True, tol=1e-11)
    assert res.converged and res.params["iteration"]["start"] == "the initial density"


def test_an_ergodic_refinement_needs_an_exact_ergodic_solution():
    from mfgwork.analysis.studies import ergodic_refinement, fitted_order

    with pytest.raises(mw.ParameterError, match="needs the exact ergodic solution"):
        ergodic_refinement(mw.SantaFeBar(), [21, 41])
    rows = ergodic_refinement(ErgodicProblem(), [41, 81], tol=1e-11)
    assert [r["nx"] for r in rows] == [41, 81]
    assert 0.85 < fitted_order(rows, "error_m") < 1.2


def test_the_two_bars_long_run_is_the_line_on_each_axis():
    """Independent bars: the 2-D ergodic system (sparse, Newton–Krylov on the attendance
    pair) is the 1-D one (dense Newton on the whole system) on each axis: product density,
    the 1-D attendance per bar, twice the 1-D ergodic constant."""
    bars = mw.solve(mw.TwoBars(), nx=31, stationary=True, tol=1e-10)
    line = mw.solve(mw.SantaFeBar(), nx=31, stationary=True, tol=1e-12)
    assert bars.converged and bars.residual <= 1e-10 and bars.M.shape == (1, 31, 31)
    assert bars.check() == pytest.approx(bars.residual, rel=1e-3, abs=1e-12)
    np.testing.assert_allclose(bars.M[0], np.outer(line.M[0], line.M[0]), atol=1e-10)
    np.testing.assert_allclose(bars.attendance[0], line.summary["mean_attendance"], atol=1e-10)
    assert bars.summary["ergodic_constant"] == pytest.approx(
        2 * line.summary["ergodic_constant"], rel=1e-8)
    assert bars.mass[0] == pytest.approx(1.0, abs=1e-12)
    on_torch = mw.solve(mw.TwoBars(), nx=21, stationary=True, backend="torch")
    assert on_torch.backend == "torch" and on_torch.converged


def test_the_two_bars_long_run_is_certified_where_its_best_response_is_steep():
    """At σ = 0.2 the attendance pair's best response has a slope near 3·10⁵: the response
    to the last iterate lies that slope times the iterate's rounding from the fixed point, and
    its own certificate a slope more (2·10⁻⁶, above the default tol). The density moved along
    the Newton step is certified far below the default tol, by an independent best response
    too, and it is the 1-D long run on each axis."""
    bars = mw.solve(mw.TwoBars(sigma=0.2), nx=21, stationary=True, tol=1e-10)
    line = mw.solve(mw.SantaFeBar(sigma=0.2), nx=21, stationary=True, tol=1e-12)
    assert bars.converged and bars.residual <= 1e-10 and bars.check() <= 1e-10
    assert bars.M.min() >= 0 and bars.mass[0] == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(bars.M[0], np.outer(line.M[0], line.M[0]),
                               atol=1e-9 * bars.M.max())
    assert bars.summary["ergodic_constant"] == pytest.approx(
        2 * line.summary["ergodic_constant"], rel=1e-8)


def test_a_long_run_without_a_stationary_state_is_refused_before_any_work():
    with pytest.raises(mw.ParameterError, match="exit.*no stationary state"):
        mw.solve(mw.Room(), nx=21, stationary=True)
    with pytest.raises(mw.ParameterError, match="dtype='float32' is invalid with stationary"):
        mw.solve(mw.TwoBars(), nx=21, stationary=True, dtype="float32", backend="torch")
    with pytest.raises(mw.ParameterError, match="stationary=1 is invalid|stationary"):
        mw.solve(mw.TwoBars(), nx=21, stationary=1)


def test_a_2d_model_of_ones_own_settles_on_its_long_run():
    """A density coupling in 2-D (Newton–Krylov on the whole density): the middle of finite
    horizons approaches the stationary density as T grows, and the value falls at the rate
    λ there."""
    def room(T):
        return mw.MFGProblem2D(-1, 1, -1, 1, T, 0.6, m0=lambda x, y: np.exp(-(x**2 + y**2)),
                               g=lambda x, y: 0 * x,
                               f=lambda t, x, y, m: m + 0.5 * (x + 0.3 * y) ** 2)

    long_run = mw.solve(room(1.0), nx=15, stationary=True, tol=1e-10)
    assert long_run.converged and long_run.check() <= 1e-10
    gaps = []
    for T in (4.0, 8.0):
        n = int(10 * T)
        res = mw.solve(room(T), nx=15, nt=n, tol=1e-8, progress=False)
        gaps.append(np.abs(res.M[n // 2] - long_run.M[0]).max() / long_run.M.max())
        rate = (res.U[n // 2 - 10] - res.U[n // 2 + 10]).mean() / 2.0
    assert gaps[1] < 5e-3 and gaps[1] < gaps[0] / 5
    assert rate == pytest.approx(long_run.summary["ergodic_constant"], rel=1e-3)


def test_a_start_that_could_not_be_made_is_not_recorded_as_taken(monkeypatch):
    """Where the finite horizon that would start the planner's long run fails, Newton starts
    from the initial density, and the result says so."""
    import warnings

    from mfgwork import fdm1d

    def failing(problem, **options):
        raise mw.SolverError("the finite horizon failed")

    monkeypatch.setattr(fdm1d, "_plateau", failing)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        res = mw.solve(mw.SantaFeBar(objective="social"), nx=31, stationary=True, max_iter=5)
    assert res.params["iteration"]["start"] == "the initial density"
