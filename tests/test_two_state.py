"""The two-state El Farol game: exact implicit steps, mass conservation, the plateau where the
payoff vanishes, first order in Δt, and an equilibrium that is its own best response."""

from __future__ import annotations

import json
import math
import re
import time

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.finite_state import time_to_level
from mfgwork.numerics.attendance_newton import (
    AttendanceNewton,
    TwoStateSystem,
    attendance_jacobian,
    newton_direction,
    tangent_coefficients,
)
from mfgwork.numerics.equilibrium import solve
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
    assert np.max(mw.switching_rates(solved)[middle]) < 1e-5
    rates = mw.switching_rates(solved)
    assert rates[0, 0] > 0.1 and rates[0, 1] == 0.0
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


def test_rates_come_from_the_carried_gap(solved):
    scheme = TwoStateScheme(400, 10.0 / 400, 1.0)
    np.testing.assert_array_equal(mw.switching_rates(solved), scheme.gap_rates(solved.gap))
    np.testing.assert_allclose(mw.switching_rates(solved), scheme.rates(solved.U), rtol=0,
                               atol=1e-12)
    np.testing.assert_allclose(solved.gap, solved.U[:, 1] - solved.U[:, 0], atol=1e-12)


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


# --- Newton on the attendance path: convergence over the switching costs, its certificate,
# its Jacobian, and honest failures --------------------------------------------------------

def reference_best_response(problem, A, nt):
    """The attendance path of one best response to A, by the implicit equations written out
    step by step (a quadratic per HJB step, a 2 × 2 linear solve per Kolmogorov step):
    independent of the compiled sweeps and of the solver."""
    dt, c = problem.T / nt, problem.switching_cost
    y = problem.payoff(np.asarray(A, dtype=float))
    gap = np.zeros(nt + 1)
    for n in range(nt - 1, -1, -1):
        r = gap[n + 1] / dt - y[n]  # d/Δt + d|d|/(2c) = r, the root of the right sign
        gap[n] = math.copysign(c * (-1.0 / dt + math.sqrt(1.0 / dt**2 + 2.0 * abs(r) / c)),
                               r)
    m = problem.initial_distribution()
    out = np.empty(nt)
    for n in range(nt):
        b0, b1 = max(-gap[n], 0.0) / c, max(gap[n], 0.0) / c
        Q = np.array([[-b0, b0], [b1, -b1]])
        m = np.linalg.solve(np.eye(2) - dt * Q.T, m)
        out[n] = m[1]
    return out


def newton_from(problem, nt, z0, max_iter):
    """The solver's Newton iteration for ``problem`` (tol 1e-8) from the path ``z0``."""
    scheme = TwoStateScheme(nt, problem.T / nt, problem.switching_cost)
    system = TwoStateSystem(scheme, problem.payoff, problem.payoff_slope,
                            problem.payoff_integral, m0=problem.initial_distribution(),
                            U_T=problem.terminal_cost(), z0=z0)
    return solve(AttendanceNewton(tol=1e-8), system, max_iter=max_iter)


def certified_residual(problem, res, nt):
    A = res.attendance[1:]
    again = reference_best_response(problem, A, nt)
    return np.linalg.norm(again - A) / np.linalg.norm(again)


@pytest.mark.parametrize("switching_cost, T", [
    (0.01, 1.0), (0.01, 10.0), (0.01, 30.0), (0.01, 100.0), (0.0316, 30.0), (0.0316, 100.0),
    (0.1, 10.0), (0.1, 60.0), (0.1, 100.0), (0.3, 10.0), (0.3, 100.0), (1.0, 100.0),
    (10.0, 30.0), (100.0, 100.0)])
def test_converges_across_switching_costs(switching_cost, T):
    """Certified equilibria where the Anderson iteration failed (c = 0.3 ended at residual
    1.70, c = 0.1 at 19.1) and where returning the densities of the best response to the
    last iterate was floored above tol (c ≤ 0.1 with T ≥ 30), checked by an independent
    best response."""
    problem = mw.TwoStateElFarol(switching_cost=switching_cost, T=T)
    res = mw.solve_two_state(problem, nt=400)
    assert res.converged and res.status == "converged" and res.residual <= 1e-8
    assert certified_residual(problem, res, 400) <= 1e-8
    assert res.iterations <= 60 and res.residual == min(res.history["residual"])
    assert res.mass_error < 1e-13 and res.M.min() >= 0.0


@pytest.mark.slow
def test_converges_over_the_cost_and_horizon_box():
    costs = np.geomspace(0.01, 100.0, 13)
    failed = []
    for c in costs:
        for T in (1.0, 10.0, 30.0, 60.0, 100.0):
            problem = mw.TwoStateElFarol(switching_cost=float(c), T=T)
            res = mw.solve_two_state(problem, nt=400)
            if not (res.converged and certified_residual(problem, res, 400) <= 1e-8):
                failed.append((float(c), T, res.residual))
    assert not failed


def test_cheap_switching_over_a_long_horizon_is_certified():
    """c = 0.01, T = 100: the patrons integrate the payoff twice over the plateau, so the
    best response is ~10⁵ times as sensitive as its input (nt = 50). The returned path is
    the Newton iterate, certified by one independent best response; the densities of that
    best response (one more Picard step, what the solve used to return) are not."""
    problem, nt = mw.TwoStateElFarol(switching_cost=0.01, T=100.0), 50
    res = mw.solve_two_state(problem, nt=nt)
    assert res.converged and res.status == "converged" and res.residual <= 1e-8
    A = res.attendance[1:]
    again = reference_best_response(problem, A, nt)
    assert np.linalg.norm(again - A) / np.linalg.norm(again) <= 1e-8
    # U is the value of the best response to the returned path, M the densities of that path
    scheme = TwoStateScheme(nt, problem.T / nt, problem.switching_cost)
    F = problem.coupling().running_cost(A)
    assert np.max(np.abs(scheme.hjb_residual(res.U, F))) < 1e-9
    assert res.mass_error < 1e-13 and res.M.min() >= 0.0
    picard = reference_best_response(problem, again, nt)
    assert np.linalg.norm(picard - again) / np.linalg.norm(picard) > 1e-7


def test_steep_payoff_from_a_full_bar_does_not_cycle():
    """ε = 0.01, Newton from a full bar: the payoff saturates along the first step, whose
    length was accepted on ½‖R‖² while the potential rose, and the next step came back: 500
    iterations between two paths at residual 0.49. Certified by an independent best
    response."""
    problem, nt = mw.TwoStateElFarol(eps=0.01, attendance0=1.0), 50
    out = newton_from(problem, nt, np.ones(nt), max_iter=500)
    assert out.converged and out.iterations <= 60
    A = out.M[1:, 1]
    again = reference_best_response(problem, A, nt)
    assert np.linalg.norm(again - A) / np.linalg.norm(again) <= 1e-8


def test_newton_starts_on_the_plateau():
    """Where the payoff vanishes the solve starts from the path where nobody switches, the
    attendance of most of a long evening: a handful of Newton steps at any switching cost."""
    for c in (0.01, 1.0, 100.0):
        res = mw.solve_two_state(mw.TwoStateElFarol(switching_cost=c, T=100.0), nt=100)
        assert res.converged and res.iterations <= 8


def test_stall_names_the_real_count_and_returns_the_best_iterate():
    """Below the rounding of the residual no step decreases it: the solve says so."""
    problem = mw.TwoStateElFarol(switching_cost=0.3)
    with pytest.warns(mw.ConvergenceWarning, match=r"stopped after (\d+) iterations "
                      r"\(stalled") as record:
        res = mw.solve_two_state(problem, nt=50, tol=1e-15)
    count = int(re.search(r"after (\d+) iterations", str(record[0].message)).group(1))
    assert not res.converged and res.status == "stalled" and count == res.iterations < 500
    assert res.residual == min(res.history["residual"]) < 1e-13
    assert certified_residual(problem, res, 50) < 1e-12


def test_failure_names_the_real_count_and_returns_the_best_iterate():
    problem = mw.TwoStateElFarol(switching_cost=0.3)
    with pytest.warns(mw.ConvergenceWarning, match=r"stopped after 2 iterations "
                      r"\(max_iter=2 reached\)"):
        res = mw.solve_two_state(problem, nt=400, max_iter=2)
    assert not res.converged and res.iterations == 2 and res.status == "max_iter"
    assert len(res.history["residual"]) == 2
    assert res.residual == min(res.history["residual"])
    assert certified_residual(problem, res, 400) == pytest.approx(res.residual, rel=1e-6)


def test_best_iterate_is_returned_not_the_last():
    """From a half-full bar with cheap switching the first steps overshoot (residual 0.5,
    then ~900, ~600): the run stopped at max_iter returns the first path, certified."""
    problem, nt = mw.TwoStateElFarol(switching_cost=0.01, T=100.0), 50
    out = newton_from(problem, nt, np.full(nt, 0.5), max_iter=3)
    history = out.history["residual"]
    assert not out.converged and out.reason == "max_iter" and len(history) == 3
    assert out.residual == history[0] < min(history[1:])
    np.testing.assert_array_equal(out.M[1:, 1], 0.5)
    A = out.M[1:, 1]
    again = reference_best_response(problem, A, nt)
    assert np.linalg.norm(again - A) / np.linalg.norm(again) == pytest.approx(out.residual,
                                                                            rel=1e-9)


def test_damped_warmup_then_newton():
    problem = mw.TwoStateElFarol(switching_cost=0.3)
    res = mw.solve_two_state(problem, nt=400, iteration="relaxation", warmup=3)
    assert res.converged and np.all(np.array(res.history["step"][:3]) == 0.0)
    with pytest.warns(mw.ConvergenceWarning, match="after 40 iterations"):
        alone = mw.solve_two_state(problem, nt=400, warmup=40, max_iter=40)
    assert not alone.converged  # the damped iteration alone does not get there


def test_jacobian_matches_central_differences():
    """D = ∂Φ/∂y from the tangent sweeps against central differences of the best response,
    at a path whose gaps are away from the kink of the rates."""
    problem = mw.TwoStateElFarol(switching_cost=0.5, T=3.0)
    nt = 30
    scheme = TwoStateScheme(nt, problem.T / nt, problem.switching_cost)
    rng = np.random.default_rng(3)
    y = rng.uniform(-6.0, 9.0, nt)

    def attendance(y):
        F = np.stack([np.zeros(nt), -y], axis=-1)
        return scheme.best_response(np.zeros(2), F, problem.initial_distribution())

    _, gap, M = attendance(y)
    assert np.min(np.abs(gap[:-1])) > 1e-3
    D = attendance_jacobian(scheme, gap, M)
    h = 1e-6
    fd = np.stack([(attendance(y + h * e)[2][1:, 1] - attendance(y - h * e)[2][1:, 1]) / (2 * h)
                   for e in np.eye(nt)], axis=1)
    np.testing.assert_allclose(D, fd, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(D, D.T, rtol=1e-12, atol=1e-15)  # the potential's Hessian
    assert np.linalg.eigvalsh(D).min() > -1e-12
    # the banded Newton step solves (D S² + I) δz = R
    a, W = tangent_coefficients(scheme, gap, M)
    s2, R = rng.uniform(0.0, 50.0, nt), rng.normal(size=nt)
    step = newton_direction(a, W, s2, R)
    np.testing.assert_allclose((D * s2[None, :] + np.eye(nt)) @ step, R, rtol=1e-9,
                               atol=1e-10)


def test_unresolvable_time_step_is_refused_before_work():
    """T = 1e18 on 50 steps used to report converged=True, residual 0, A stuck at 0.5."""
    problem = mw.TwoStateElFarol(T=1e18)
    started = time.perf_counter()
    with pytest.raises(mw.ParameterError, match=r"T=1e\+18 and nt=50 are invalid: .* at "
                       r"most 1000 .*nt ≥ 4.47e\+15 for this T, or T ≤ 1.12e\+04 for this nt"):
        mw.solve_two_state(problem, nt=50)
    assert time.perf_counter() - started < 0.1
    with pytest.raises(mw.ParameterError, match=r"good=1e\+285 is invalid"):
        mw.TwoStateElFarol(T=1e16, good=1e285, bad=-1e285)  # payoffs bounded at construction
    huge = mw.TwoStateElFarol(T=1e300, good=1e12, bad=-1e12, switching_cost=1e300)
    with pytest.raises(mw.ParameterError, match=r"T=1e\+300 and nt=10000000 are invalid"):
        mw.solve_two_state(huge, nt=10**7)
    assert mw.solve_two_state(mw.TwoStateElFarol(T=100.0), nt=50).converged  # inside


def test_best_response_moves_when_the_payoff_says_so():
    """At T = 1e18 the values reach 1e19 and their difference loses the gap of ~2 to
    rounding: rates from U said nobody moves (residual 0 at A = 0.5, where the bar pays 8.2);
    the gap carried by the sweep moves the patrons, so the residual is not 0."""
    problem = mw.TwoStateElFarol(T=1e18)
    nt = 50
    scheme = TwoStateScheme(nt, problem.T / nt, problem.switching_cost)
    A = np.full(nt, 0.5)
    F = problem.coupling().running_cost(A)
    U, gap, M = scheme.best_response(np.zeros(2), F, problem.initial_distribution())
    assert problem.payoff(0.5) > 8.0 and gap[0] < -1.0
    assert M[1, 1] > 0.99  # everybody at home goes out in the first step
    assert np.linalg.norm(M[1:, 1] - A) / np.linalg.norm(M[1:, 1]) > 0.4
    # rates from differences of U (the old evaluation) see no gap and move nobody
    assert np.all(U[:-1, 1] == U[:-1, 0])
    assert np.all(scheme.solve_fp(U, problem.initial_distribution())[:, 1] == 0.5)
