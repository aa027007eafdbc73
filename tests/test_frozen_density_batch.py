"""Batches of games whose Hamiltonian depends on m (congestion): the frozen-density iteration
runs per problem side by side, Newton's method on the observed paths inside as one batch."""

from __future__ import annotations

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.backend import get_backend, mps_emulation
from mfgwork.problems.base import BatchCoupling, batch_coupling
from mfgwork.warm_start import densities_on

CONGESTION = mw.Congestion(1.0, 0.5)


def _members() -> list[mw.SantaFeBar]:
    return [mw.SantaFeBar(hamiltonian=CONGESTION, threshold=a, eps=e)
            for a, e in [(0.5, 0.05), (0.62, 0.1), (0.7, 0.02)]]


def test_the_stacked_density_coupling_is_each_member_s():
    """The batch's running cost (through the stacked attendance couplings) equals each
    member's f evaluated on its own density path, and the frozen density is the state."""
    be = get_backend("torch", "cpu", "float64")
    problems = _members()
    grid = problems[0].grid(41, 31)
    couplings = [p.coupling(grid, be) for p in problems]
    stacked, looped = batch_coupling(couplings, be), BatchCoupling(couplings, be)
    assert type(stacked).__name__ == "StackedDensityCoupling"
    z = be.asarray(np.random.default_rng(0).random((3, 31, 41)))
    assert float(abs(stacked.running_cost(z) - looped.running_cost(z)).max()) < 1e-14
    assert stacked.frozen_density(z) is z


def test_a_congested_batch_is_its_single_solves():
    """Every member of a torch batch converges, by the frozen-density iteration (not the
    Anderson fallback), to the equilibrium of its own single NumPy solve."""
    problems = _members()
    batch = mw.solve_batch(problems, nx=31, nt=31, backend="torch", tol=1e-8, progress=False)
    for p, res in zip(problems, batch, strict=True):
        assert res.converged and res.residual <= 1e-8
        assert res.extra["newton_on_coupling"].startswith("outer Anderson on the density")
        single = mw.solve(p, nx=31, nt=31, tol=1e-10)
        assert np.abs(np.asarray(res.M) - single.M).max() < 1e-5 * np.abs(single.M).max()


def test_an_emulated_mps_batch_sees_each_member_s_density():
    """The dense tangent Jacobians (the device path) take each member's own frozen density:
    members with different thresholds reach their single solves' equilibria."""
    problems = _members()[:2]
    batch = mw.solve_batch(problems, nx=11, nt=11, backend=mps_emulation(), tol=1e-3,
                           progress=False)
    for p, res in zip(problems, batch, strict=True):
        assert res.converged
        single = mw.solve(p, nx=11, nt=11, tol=1e-10)
        assert np.abs(np.asarray(res.M, dtype=np.float64) - single.M).max() < (
            2e-2 * np.abs(single.M).max())


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_coarse_densities_are_interpolated_on_the_fine_grid(backend):
    """The coarse start of a batch: bilinear interpolation in (t, x) of each coarse density
    (checked against np.interp, node by node), renormalised to unit mass per level."""
    be = get_backend(backend, "cpu", "float64")
    p = mw.SantaFeBar()
    coarse, fine = p.grid(11, 7), p.grid(23, 15)
    rng = np.random.default_rng(1)
    Ms = [rng.random((8, 11)) for _ in range(2)]

    class _R:  # what densities_on reads of a Result
        def __init__(self, M):
            self.M = M

    out = np.asarray(densities_on([_R(M) for M in Ms], [p, p], fine, be))
    for M, got in zip(Ms, out, strict=True):
        in_t = np.stack([np.interp(fine.t, coarse.t, M[:, i]) for i in range(11)], axis=1)
        ref = np.stack([np.interp(fine.x, coarse.x, row) for row in in_t])
        ref /= (ref @ fine.weights)[:, None]
        assert np.abs(got - ref).max() < 1e-13
        assert np.allclose(got @ fine.weights, 1.0, atol=1e-14)


def test_only_the_coupled_certificates_are_marked_as_certificates():
    """The history of a congested solve marks as certificates the best responses of the
    fully coupled system only (one per outer iteration), not the inner Newton's."""
    res = mw.solve(_members()[0], nx=31, nt=31, tol=1e-8)
    marks = res.history["certificate"]
    assert len(marks) == len(res.history["residual"])
    assert sum(marks) == res.extra["outer_iterations"] and marks[-1]
    assert min(r for r, c in zip(res.history["residual"], marks, strict=True) if c) == (
        pytest.approx(res.residual))
