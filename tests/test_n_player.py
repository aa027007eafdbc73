"""N patrons playing the equilibrium feedback: exact counts, policy evaluation, the ε-Nash gap
and the N^(−1/2) approach to the mean field."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.analysis.n_player import _gaps, fitted_slope, n_player, n_player_study
from mfgwork.core.backend import torch_installed
from mfgwork.numerics.fdm.policy import evaluate_policy
from mfgwork.numerics.fdm.sweeps import FiniteDifferences
from mfgwork.numerics.particles.counting import count_above, sample_seeds
from mfgwork.numerics.particles.numba_kernels import sample_offsets
from mfgwork.numerics.particles.paths import nodal_drift
from mfgwork.problems.santa_fe import AttendanceCoupling

HOST = mw.get_backend("numpy")


@pytest.fixture(scope="module")
def coarse():
    problem = mw.SantaFeBar()
    return problem, mw.solve(problem, nx=41, nt=40, tol=1e-7, progress=False)


@pytest.fixture(scope="module")
def medium():
    problem = mw.SantaFeBar()
    return problem, mw.solve(problem, nx=81, nt=80, tol=1e-6, progress=False)


def _inputs(problem, result):
    levels, nx = np.shape(result.U)
    grid = problem.grid(nx, levels - 1)
    return grid, np.asarray(result.U), problem.initial_density(grid, HOST)


def test_counts_are_those_of_the_particle_solver(coarse):
    """Sample s with seed SeedSequence(seed)[s] moves exactly as ParticleFP with that seed."""
    problem, result = coarse
    grid, U, m0 = _inputs(problem, result)
    counts = count_above(U, m0, grid, problem.sigma, HOST, 1000, 3, seed=5)
    assert counts.shape == (3, grid.nt + 1) and counts.dtype == np.int64
    fp = mw.ParticleFP(grid, problem.sigma, HOST, n_particles=1000, seed=sample_seeds(5, 3)[2])
    fp.solve_fp(U, m0)
    assert counts[2, -1] == np.count_nonzero(fp.positions > 0)
    assert len({tuple(c) for c in counts}) == 3  # the samples are independent draws


@pytest.mark.skipif(not torch_installed(), reason="torch not installed")
def test_torch_counts_are_those_of_the_particle_solver(coarse):
    problem, result = coarse
    grid, U, m0 = _inputs(problem, result)
    be = mw.get_backend("torch")
    counts = count_above(be.asarray(U), be.asarray(m0), grid, problem.sigma, be, 500, 1, seed=3)
    fp = mw.ParticleFP(grid, problem.sigma, be, n_particles=500, seed=sample_seeds(3, 1)[0])
    fp.solve_fp(be.asarray(U), be.asarray(m0))
    assert counts[0, -1] == int((fp.positions > 0).sum())


@pytest.mark.skipif(not torch_installed(), reason="torch not installed")
def test_torch_and_numpy_agree_in_distribution(coarse):
    problem, result = coarse
    a = n_player(problem, result, 2000, 16, seed=1, gap=False)
    b = n_player(problem, result, 2000, 16, seed=1, backend="torch", gap=False)
    assert b.attendance.shape == a.attendance.shape
    mean_a, mean_b = a.attendance.mean(axis=0), b.attendance.mean(axis=0)
    se = np.sqrt(a.attendance.var(axis=0, ddof=1) / 16 + b.attendance.var(axis=0, ddof=1) / 16)
    assert np.all(np.abs(mean_a - mean_b) < 5 * se + 1e-12)


@pytest.mark.skipif(not torch_installed(), reason="torch not installed")
def test_torch_batches_samples_in_chunks(coarse, monkeypatch):
    from mfgwork.numerics.particles import counting

    problem, result = coarse
    grid, U, m0 = _inputs(problem, result)
    be = mw.get_backend("torch")
    monkeypatch.setattr(counting, "CHUNK_PARTICLES", 1000)  # 2 samples of 500 per batch
    args = (be.asarray(U), be.asarray(m0), grid, problem.sigma, be, 500, 3)
    counts = count_above(*args, seed=4)
    assert counts.shape == (3, grid.nt + 1)
    np.testing.assert_array_equal(counts, count_above(*args, seed=4))
    assert np.all(counts[:, 0] > 150) and np.all(counts <= 500)


def test_mps_path_in_float32(coarse, mps_emulation):
    problem, result = coarse
    a = n_player(problem, result, 1000, 8, seed=2, gap=False)
    b = n_player(problem, result, 1000, 8, seed=2, backend=mps_emulation, gap=False)
    assert b.metrics()["dtype"] == "float32" and b.attendance.shape == a.attendance.shape
    se = np.sqrt(a.attendance.var(axis=0, ddof=1) / 8 + b.attendance.var(axis=0, ddof=1) / 8)
    assert np.all(np.abs(a.attendance.mean(axis=0) - b.attendance.mean(axis=0))
                  < 5 * se + 1e-12)


def test_reproducible_with_a_seed(coarse):
    problem, result = coarse
    a = n_player(problem, result, 300, 3, seed=11, gap=False)
    b = n_player(problem, result, 300, 3, seed=11, gap=False)
    c = n_player(problem, result, 300, 3, seed=12, gap=False)
    np.testing.assert_array_equal(a.attendance, b.attendance)
    assert not np.array_equal(a.attendance, c.attendance)
    assert np.all((a.attendance >= 0) & (a.attendance <= 1))
    assert np.allclose(a.attendance * 300, np.round(a.attendance * 300), rtol=0, atol=1e-9)


def test_the_status_is_that_of_the_mean_field_played_and_the_result_is_frozen(coarse):
    problem, result = coarse
    out = n_player(problem, result, 50, 2, seed=1, gap=False)
    assert out.status is result.status is mw.Status.CONVERGED
    short = dataclasses.replace(result, converged=False, status="max_iter")
    assert n_player(problem, short, 50, 2, seed=1, gap=False).status is mw.Status.MAX_ITER
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.seed = 3


def test_policy_evaluation_of_the_optimal_feedback_is_the_value(coarse):
    """v = u when the running cost is the one U was solved with; any other cost: v ≥ u_BR."""
    problem, _ = coarse
    grid = problem.grid(41, 40)
    coupling = AttendanceCoupling(problem, grid, HOST)
    U_T = problem.terminal_cost(grid, HOST)
    F = coupling.running_cost(0.6 + 0.2 * np.sin(grid.t[1:]))
    U = FiniteDifferences(grid, problem.nu, HOST).solve_hjb(U_T, F)
    V = evaluate_policy(U, F[None], U_T, grid, problem.nu, HOST)[0]
    assert np.max(np.abs(V - U)) < 1e-10 * np.max(np.abs(U))
    F_other = coupling.running_cost(0.5 + 0.0 * grid.t[1:])
    V_other = evaluate_policy(U, F_other, U_T, grid, problem.nu, HOST)
    best = FiniteDifferences(grid, problem.nu, HOST).solve_hjb(U_T, F_other)
    assert np.all(V_other >= best - 1e-10) and np.max(V_other - best) > 1e-3


def test_policy_evaluation_against_monte_carlo(medium):
    """∫ m0 v(0) of the PDE against the mean realised cost of 50 000 simulated agents who
    follow −∂θ u against a given attendance path (an independent Monte Carlo computation;
    they differ by the O(h + Δt) discretization error, 0.7 % here)."""
    problem, result = medium
    grid, U, m0 = _inputs(problem, result)
    path = 0.55 + 0.1 * np.sin(grid.t)
    F = AttendanceCoupling(problem, grid, HOST).running_cost(path[1:])
    pde = evaluate_policy(U, F, 0.0 * m0, grid, problem.nu, HOST)[0] @ (grid.weights * m0)
    rng = np.random.default_rng(0)
    n, length = 50_000, grid.x_max - grid.x_min
    y = sample_offsets(m0, rng.random(n), grid.h)
    drift = nodal_drift(U[:-1], grid.h)
    cost = np.zeros(n)
    for k in range(grid.nt):
        b = np.interp(y, grid.x - grid.x_min, drift[k])
        y = y + b * grid.dt + problem.sigma * np.sqrt(grid.dt) * rng.standard_normal(n)
        y = np.abs(y) % (2 * length)
        y = np.where(y > length, 2 * length - y, y)
        cost += (0.5 * b**2 - problem.payoff(path[k + 1]) * (y > length / 2)) * grid.dt
    assert abs(cost.mean() - pde) < 0.02 * abs(pde), (pde, cost.mean())


def test_gap_vanishes_on_the_mean_field_path_and_is_positive_otherwise(coarse):
    problem, result = coarse
    grid, U, m0 = _inputs(problem, result)
    A = np.asarray(result.attendance)
    gap, cost = _gaps(problem, grid, HOST, U, m0, np.stack([A, A + 0.02]))
    # on A itself only the Picard tolerance is left (the result's U answers its last iterate)
    assert abs(gap[0]) < 1e-6 and abs(cost[0]) < 1e-4
    assert gap[1] > 1e-3 and cost[1] > 0.1  # a crowded path lowers the payoff: costs rise


def test_distance_and_gap_fall_with_n(medium):
    """Over N = 10², 10³, 10⁴: the distance to A(t) falls like N^(−1/2) (slope in
    [−0.7, −0.3]) and the ε-Nash gap falls."""
    problem, result = medium
    sizes = [100, 1000, 10000]
    study = n_player_study(problem, result, sizes, n_samples=16, seed=0)
    rows = [r.metrics() for r in study]
    slope = fitted_slope(sizes, [r["distance"] for r in rows])
    assert -0.7 <= slope <= -0.3, rows
    gaps = [r["gap"] for r in rows]
    assert gaps[0] > gaps[1] > gaps[2] > 0, rows
    assert all(np.all(r.gap >= -1e-8) for r in study)
    assert all(r["distance_se"] < 0.5 * r["distance"] for r in rows)


def test_bad_input(coarse):
    problem, result = coarse
    with pytest.raises(mw.ParameterError, match="n_players=0 is invalid"):
        n_player(problem, result, 0)
    with pytest.raises(mw.ParameterError, match="n_samples=1 is invalid"):
        n_player(problem, result, 10, 1)
    with pytest.raises(mw.ParameterError, match="parameters differ"):
        n_player(mw.SantaFeBar(threshold=0.5), result, 10)
    with pytest.raises(mw.ParameterError, match="must be an mfgwork.SantaFeBar"):
        n_player(object(), result, 10)
    with pytest.raises(mw.ParameterError, match="gap="):
        n_player(problem, result, 10, gap="yes")
    with pytest.raises(mw.ParameterError, match=r"sizes=\[\] is invalid"):
        n_player_study(problem, result, [])
    with pytest.raises(mw.ParameterError, match="at least two points"):
        fitted_slope([10], [1.0])


def test_repr_is_a_summary_and_summary_is_an_attribute_as_for_every_result(coarse):
    problem, result = coarse
    res = n_player(problem, result, 200, n_samples=4, seed=2)
    text = repr(res)
    assert len(text) < 400 and "\n" not in text and "array" not in text
    assert "n_players=200" in text and f"distance={res.distance_rms[0]:.3g}" in text
    two_state = mw.solve_two_state(mw.TwoStateElFarol(), nt=40)
    for r in (result, two_state, res):   # one kind of summary: a dict of numbers
        assert isinstance(r.summary, dict) and r.summary
        assert all(isinstance(v, float) for v in r.summary.values()), type(r).__name__
    assert res.metrics()["n_players"] == 200 and res.summary.items() <= res.metrics().items()
