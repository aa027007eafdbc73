"""Converged means the fixed point is reached: the certified residual, its independent check,
honest failure, batches, particles and stored results."""

import re
import warnings

import numpy as np
import pytest
from helpers import independent_residual
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mfgwork as mw
from mfgwork.numerics.fdm.sweeps import FiniteDifferences


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(threshold=st.floats(0.2, 0.9), sigma=st.floats(0.1, 1.5),
       log_eps=st.floats(np.log(1e-3), np.log(1e-1)), T=st.floats(2.0, 20.0))
def test_converged_implies_residual_below_tol_and_check_agrees(threshold, sigma, log_eps, T):
    problem = mw.SantaFeBar(threshold=threshold, sigma=sigma, eps=float(np.exp(log_eps)), T=T)
    tol = 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        res = mw.solve(problem, nx=25, nt=24, tol=tol, max_iter=60, progress=False)
    r = independent_residual(problem, res.M)
    # two best responses agree to Newton's tolerance, 64 ε (1 + max|u|), which the map
    # amplifies by up to about 1/eps (10³ here): residuals agree to about 1e-11 absolute
    assert r == pytest.approx(res.residual, rel=1e-5, abs=1e-10)
    if res.converged:
        assert res.residual <= tol and r <= tol * (1 + 1e-5)
    else:
        assert res.residual > tol


def test_saturated_payoff_is_not_a_two_iteration_convergence():
    """ε = 0.005 at the defaults: the changes of U and M between the first iterates vanish
    (the payoff saturates) though A ≈ 1 is no equilibrium; the equilibrium sits near
    A* + ε log(G/−B)."""
    problem = mw.SantaFeBar(eps=0.005)
    res = mw.solve(problem, nx=41, nt=40, tol=1e-6, max_iter=600, progress=False)
    A = mw.to_numpy(res.attendance)
    assert res.converged and res.iterations > 2
    assert res.residual <= 1e-6 and independent_residual(problem, res.M) <= 1e-6
    assert A[20] == pytest.approx(0.6 + 0.005 * np.log(2.0), abs=0.01)


def test_small_residual_is_recognised_as_converged():
    """ε = 0.02: the iterates reach residuals far below tol (changes of U and M between
    iterates used to stall above it), and the solve stops there."""
    problem = mw.SantaFeBar(eps=0.02)
    res = mw.solve(problem, nx=41, nt=40, tol=1e-9, max_iter=500, progress=False)
    assert res.converged and res.residual <= 1e-9
    assert independent_residual(problem, res.M) <= 1e-9 * (1 + 1e-5)


def test_max_iter_returns_best_iterate_with_its_residual():
    problem = mw.SantaFeBar(threshold=0.2, sigma=0.1, eps=0.001)
    with pytest.warns(mw.ConvergenceWarning, match="final residual"):
        res = mw.solve(problem, nx=25, nt=24, tol=1e-6, max_iter=5, progress=False)
    assert not res.converged and res.iterations == 5
    assert res.residual == pytest.approx(independent_residual(problem, res.M), rel=1e-6)
    assert res.residual <= max(res.history["residual"][0], res.residual)


def test_batch_with_easy_and_hard_members_reports_each():
    """Under plain Anderson mixing (no Newton) the hard member fails, and says so."""
    easy, hard = mw.SantaFeBar(), mw.SantaFeBar(threshold=0.2, sigma=0.1, eps=0.001)
    with pytest.warns(mw.ConvergenceWarning, match="1 of 2 problems"):
        out = mw.solve_batch([easy, hard], nx=25, nt=24, tol=1e-6, max_iter=120,
                             backend="torch", progress=False, iteration=mw.Anderson())
    assert out[0].converged and out[0].residual <= 1e-6
    assert not out[1].converged and out[1].residual > 1e-6
    # the stuck member gives up (refused certificates, no progress) instead of holding the
    # batch to max_iter
    assert out[0].iterations <= out[1].iterations < 120
    for p, res in zip((easy, hard), out, strict=True):
        assert res.check() == pytest.approx(res.residual, rel=1e-6)
        assert independent_residual(p, res.M) == pytest.approx(res.residual, rel=1e-5)
    one = mw.solve(easy, nx=25, nt=24, tol=1e-6, max_iter=120, progress=False)
    assert np.max(np.abs(mw.to_numpy(out[0].attendance) - mw.to_numpy(one.attendance))) < 1e-5


def test_generic_problem_residual_is_that_of_the_density_path():
    crowd = mw.MFGProblem(x_min=-1.0, x_max=1.0, T=1.0, sigma=0.4,
                          m0=lambda x: np.exp(-8 * x**2), g=lambda x: x**2,
                          f=lambda t, x, m: 2.0 * m)
    res = mw.solve(crowd, nx=31, nt=30, tol=1e-8, progress=False)
    assert res.converged and res.residual <= 1e-8
    assert res.check(crowd) == pytest.approx(res.residual, rel=1e-6)
    with pytest.raises(mw.ParameterError, match="pass the problem"):
        res.check()


def test_loaded_santa_fe_result_can_be_checked(tmp_path):
    res = mw.solve(mw.SantaFeBar(threshold=0.5), nx=25, nt=24, tol=1e-7, progress=False)
    back = mw.load(res.save(tmp_path / "run"))
    assert back.residual == res.residual <= 1e-7
    assert back.check() == pytest.approx(res.residual, rel=1e-6)


def test_particle_tol_below_noise_floor_is_raised_with_a_warning():
    with pytest.warns(UserWarning, match="noise floor"):
        res = mw.solve(mw.SantaFeBar(), nx=25, nt=24, method="particles", n_particles=2500,
                       seed=3, tol=1e-6, max_iter=100, progress=False)
    assert res.params["tol"] == pytest.approx(0.02)
    assert res.converged and res.residual <= 0.02
    assert res.check() == pytest.approx(res.residual, rel=1e-6)


def test_tangent_jacobian_of_the_scheme_matches_finite_differences():
    """DΦ̃ from the tangent linear HJB–FP sweeps equals central differences of the best
    response in the payoff path, and is symmetric (the Hessian of the potential)."""
    from mfgwork.numerics.potential import observed_path_jacobian

    problem = mw.SantaFeBar(threshold=0.4, sigma=0.3, eps=0.01)
    grid = problem.grid(21, 16)
    be = mw.get_backend("numpy")
    chi = grid.cell_fraction_above(0.0)
    fd = FiniteDifferences(grid, problem.nu, be)
    m0 = problem.initial_density(grid, be)

    def respond(y):
        U = fd.solve_hjb(np.zeros(grid.nx), -y[:, None] * chi[None, :])
        return U, fd.solve_fp(U, m0) * grid.weights

    y = np.random.default_rng(1).uniform(-2.0, 2.0, grid.nt)
    U, mu = respond(y)
    D = observed_path_jacobian(U, mu, chi, problem.nu, grid)
    h = 1e-6
    D_fd = np.stack([(respond(y + h * e)[1][1:] @ chi - respond(y - h * e)[1][1:] @ chi)
                     / (2 * h) for e in np.eye(grid.nt)], axis=1)
    assert np.max(np.abs(D - D_fd)) < 1e-7 * np.max(np.abs(D))
    assert np.max(np.abs(D - D.T)) < 1e-12 * np.max(np.abs(D))
    assert np.min(np.linalg.eigvalsh(0.5 * (D + D.T))) > -1e-12


@pytest.mark.parametrize(("threshold", "sigma", "eps"), [(0.2, 0.1, 0.001), (0.9, 0.1, 0.001)])
def test_steep_corner_is_reached_by_newton_on_the_potential(threshold, sigma, eps):
    """Anderson alone stalls at these corners of the parameter box; the default iteration
    switches to Newton's method on the potential and certifies the equilibrium."""
    problem = mw.SantaFeBar(threshold=threshold, sigma=sigma, eps=eps)
    with pytest.warns(mw.ConvergenceWarning):
        plain = mw.solve(problem, nx=41, nt=40, tol=1e-6, max_iter=150, progress=False,
                         iteration=mw.Anderson(newton=False))
    res = mw.solve(problem, nx=41, nt=40, tol=1e-6, max_iter=150, progress=False)
    assert not plain.converged
    assert res.converged and res.residual <= 1e-6
    assert res.check() == pytest.approx(res.residual, rel=1e-6, abs=1e-12)
    assert independent_residual(problem, res.M) <= 1e-6 * (1 + 1e-5)
    assert len(res.history["residual"]) == res.iterations == len(res.history["time_hjb"])
    assert np.all(np.isfinite(res.history["change_M"]))


def test_slow_progress_hands_over_to_newton_within_the_budget():
    """Anderson's residual keeps falling here, too slowly to stall, and would use up max_iter;
    after half the budget the default iteration continues by Newton's method and certifies."""
    problem = mw.SantaFeBar(threshold=0.3, sigma=0.1)
    kw = {"nx": 41, "nt": 41, "tol": 1e-8, "max_iter": 50, "progress": False}
    with pytest.warns(mw.ConvergenceWarning):
        plain = mw.solve(problem, iteration=mw.Anderson(newton=False), **kw)
    res = mw.solve(problem, **kw)
    assert not plain.converged
    assert res.converged and res.iterations <= 50 and res.residual <= 1e-8
    assert independent_residual(problem, res.M) <= 1e-8 * (1 + 1e-5)


def test_give_up_message_names_the_real_count_and_the_reason():
    """The warning of an iteration that stops unconverged says after how many iterations and
    why: the budget, or a residual that stopped halving with refused certificates (before,
    both read "in max_iter=N iterations")."""
    with pytest.warns(mw.ConvergenceWarning,
                      match=r"stopped after 3 iterations \(max_iter=3 reached"):
        res = mw.solve(mw.SantaFeBar(), nx=21, nt=20, max_iter=3, iteration=mw.Anderson(),
                       progress=False)
    assert not res.converged and res.iterations == 3
    hard = mw.SantaFeBar(threshold=0.2, sigma=0.1, eps=0.001)
    with pytest.warns(mw.ConvergenceWarning, match=r"stopped after (\d+) iterations "
                      r"\(stalled: the residual stopped halving") as caught:
        out = mw.solve_batch([mw.SantaFeBar(threshold=0.4), hard], backend="torch", nx=41,
                             nt=40, tol=1e-6, max_iter=400, iteration=mw.Anderson(),
                             progress=False)
    assert out[0].converged and not out[1].converged
    said = re.search(r"stopped after (\d+) iterations", str(caught[-1].message))
    assert int(said.group(1)) == out[1].iterations < 400
