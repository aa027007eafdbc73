"""The float64 certificate floor of Newton's method on the coupling state (long horizons, little
noise): FLOOR_FACTOR · L² ε from the Lipschitz constant L of the best response, named where a
solve stops above tol (the tol that is reachable there), checked against stalled solves and
against an independent estimate of L. Such a solve stays not converged."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.backend import get_backend
from mfgwork.numerics.batch_newton import FLOOR_FACTOR, certificate_floor
from mfgwork.numerics.fdm.sweeps import FiniteDifferences

EPS = float(np.finfo(np.float64).eps)   # 2.2e-16, as Backend.eps

#: Small grids on which the float64 certificate stalls above 1e-8 (its residual measured
#: 1.3e-8 to 2.5e-7 before the floor existed: status "stalled"). Where in 0.001–0.031 L² ε a
#: stall lands is the rounding's draw: (80, 0.05, 0.5, 61, 81) stalled until HJB Newton
#: stopped without a confirming iteration at a rounding-level root, and now converges (2.2e-9);
#: (80, 0.03, 0.5, 61, 81) stalled (1.3e-8) until the NumPy iteration's sums were summed in
#: one compiled float64 pass, and now converges (7.5e-9); (100, 0.03, 0.5, 61, 81) stalls at
#: 7.8e-8, within its floor 2.0e-7
STALLING = [(100.0, 0.03, 0.5, 61, 81), (120.0, 0.03, 0.5, 61, 81), (160.0, 0.05, 0.5, 41, 81),
            (160.0, 0.03, 0.45, 81, 81)]


def _solve(T, sigma, threshold, nx, nt, **options):
    return mw.solve(mw.SantaFeBar(T=T, sigma=sigma, threshold=threshold), nx=nx, nt=nt,
                    progress=False, **options)


def _lipschitz_by_differences(res, problem, steps=12, delta=1e-8):
    """‖Φ'‖ at the result's attendance path by power iteration on difference quotients of
    whole best responses (no tangent sweeps): an estimate independent of the solver's."""
    be = get_backend("numpy", "cpu", "float64")
    nt, nx = np.shape(res.M)[0] - 1, np.shape(res.M)[1]
    grid = problem.grid(nx, nt)
    fd = FiniteDifferences(grid, problem.nu, be, hamiltonian=problem.hamiltonian)
    coupling = problem.coupling(grid, be)
    m0, U_T = problem.initial_density(grid, be), problem.terminal_cost(grid, be)

    def phi(z):
        return coupling.state(fd.solve_fp(fd.solve_hjb(U_T, coupling.running_cost(z)), m0))

    z = coupling.state(mw.to_numpy(res.M))
    base = phi(z)
    v = np.random.default_rng(0).standard_normal(z.size)
    v /= np.linalg.norm(v)
    for _ in range(steps):
        jv = (phi(z + delta * v) - base) / delta
        L = np.linalg.norm(jv)
        v = jv / L
    return L


@pytest.mark.parametrize("case", STALLING)
def test_stalled_solves_stop_below_their_predicted_floor_and_say_so(case):
    with pytest.warns(mw.ConvergenceWarning, match=r"float64 certifies to about .* at best; "
                      r"1 of 1 reached that floor"):
        res = _solve(*case)
    floor = res.extra["reachable_tol"]
    assert floor["reached"] and not res.converged and res.status == "stalled"
    assert 1e-8 < res.residual <= floor["tol"]
    # that tol is reachable: asked for, it is reached and certified
    again = _solve(*case, tol=floor["tol"])
    assert again.converged and again.residual <= floor["tol"]
    assert res.check() == pytest.approx(res.residual, rel=1e-6)
    assert floor["tol"] == pytest.approx(certificate_floor(floor["lipschitz"], EPS))
    # the floor is predicted, not read off the residual: the certificate lies well inside it
    # at the measured ratio residual / (L² ε) of at most 0.031
    assert res.residual / (floor["lipschitz"] ** 2 * EPS) < FLOOR_FACTOR


def test_the_solvers_lipschitz_constant_matches_difference_quotients():
    T, sigma, threshold, nx, nt = STALLING[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        res = _solve(T, sigma, threshold, nx, nt)
    L = _lipschitz_by_differences(res, mw.SantaFeBar(T=T, sigma=sigma, threshold=threshold))
    assert res.extra["reachable_tol"]["lipschitz"] == pytest.approx(L, rel=0.1)
    assert L > 5e4   # the amplification that makes 1e-8 unreachable here


@pytest.mark.parametrize("case", [(40.0, 0.1, 0.5, 61, 81), (80.0, 0.2, 0.45, 41, 81)])
def test_cases_predicted_fine_reach_tol_without_a_floor(case):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = _solve(*case)
    assert res.converged and res.residual <= 1e-8
    assert "reachable_tol" not in res.extra
    L = _lipschitz_by_differences(res, mw.SantaFeBar(T=case[0], sigma=case[1],
                                                     threshold=case[2]))
    assert certificate_floor(L, EPS) <= 1e-8


def test_a_solve_that_runs_out_of_iterations_gets_no_floor():
    # a max_iter too small to get near the equilibrium: its point says nothing of the
    # floor (the best response is not steep there), so none is computed or named
    with pytest.warns(mw.ConvergenceWarning) as caught:
        res = _solve(*STALLING[0], max_iter=3)
    assert not res.converged and res.status == "max_iter"
    assert "reachable_tol" not in res.extra
    assert not any("float64 certifies" in str(w.message) for w in caught)


def test_a_torch_batch_member_gets_its_own_floor():
    pytest.importorskip("torch")
    T, sigma, threshold, nx, nt = STALLING[1]
    problems = [mw.SantaFeBar(T=T, sigma=sigma, threshold=threshold),
                mw.SantaFeBar(T=T, sigma=0.3, threshold=threshold)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        steep, smooth = mw.solve(problems, nx=nx, nt=nt, backend="torch", device="cpu",
                                 progress=False)
    assert smooth.converged and "reachable_tol" not in smooth.extra
    assert smooth.residual <= 1e-8
    if steep.residual > 1e-8:   # (a batch's iterate can differ from a single solve's)
        assert not steep.converged and steep.residual <= steep.extra["reachable_tol"]["tol"]


def test_a_coarse_stage_computes_no_floor(monkeypatch):
    """The coarse stage of a batch iterates to a start's tol, not the user's: its stuck
    members get no floor (the 30 tangent products of L after the iteration are not spent
    there); it measures L once per member, with a few power iterations, for the fine solve
    (:mod:`mfgwork.float64_floor`)."""
    pytest.importorskip("torch")
    from mfgwork.fdm1d import CoarseBatch
    from mfgwork.numerics import batch_newton
    from mfgwork.pipeline import run

    calls, lipschitz = [], batch_newton.BatchNewton.lipschitz

    def counted(self, b, cur, steps=batch_newton.POWER_STEPS):
        calls.append(steps)
        return lipschitz(self, b, cur, steps)

    monkeypatch.setattr(batch_newton.BatchNewton, "lipschitz", counted)
    T, sigma, threshold, nx, nt = STALLING[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        starts = run(CoarseBatch([mw.SantaFeBar(T=T, sigma=sigma, threshold=threshold)],
                                 nx=nx, nt=nt, backend="torch", device="cpu", tol=1e-12,
                                 coarse=False, progress=False))
    assert len(starts) == 1 and starts[0].iterations > 0
    assert calls == [batch_newton.MEASURE_STEPS] and starts[0].lipschitz > 1e4


def test_a_residual_far_above_the_floor_is_not_blamed_on_rounding():
    """Power(1.1): the best response is so steep (L near 1e7) that Newton stalls at a
    residual of order 1, hundreds of times above the float64 floor: the warning says the
    iteration failed, and does not offer a tol at the floor as reachable."""
    with pytest.warns(mw.ConvergenceWarning) as caught:
        res = mw.solve(mw.SantaFeBar(hamiltonian=mw.Power(1.1)), nx=101, nt=101,
                       progress=False)
    message = " ".join(str(w.message) for w in caught)
    assert not res.converged and res.residual > 0.1
    assert "not the rounding, the iteration does not converge" in message
    assert "a tol at or above it is reachable" not in message
