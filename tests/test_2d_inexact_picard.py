"""Inexact Picard on the 2-D scheme: the sweeps resolve what the fixed point needs (their
tolerances follow the iterate's residual), the FP steps keep the mass balance whatever
their tolerance, and the certificate is made at the accuracy of ``tol``."""

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.numerics.fdm2d import equilibrium as eq
from mfgwork.numerics.fdm2d import sweeps

ROOM = {"nx": 25, "nt": 24, "tol": 1e-7, "progress": False}


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_inexact_picard_certifies_the_equilibrium_with_fewer_krylov_iterations(
        monkeypatch, backend):
    room = mw.Room(congestion=2.0)
    calls = []
    resolve = sweeps.Scheme2D.resolve

    def recorded(self, residual):
        calls.append(residual)
        resolve(self, residual)

    monkeypatch.setattr(sweeps.Scheme2D, "resolve", recorded)
    inexact = mw.solve_2d(room, **ROOM, backend=backend)
    monkeypatch.setattr(sweeps, "INEXACT", 0.0)
    exact = mw.solve_2d(room, **ROOM, backend=backend)
    for r in (inexact, exact):
        assert r.converged and r.residual <= 1e-7 and r.mass_error <= 1e-13
    # the independent best response (NumPy, sparse direct solves) certifies the inexact one
    assert inexact.check() <= 1e-7
    assert np.max(np.abs(inexact.M - exact.M)) <= 1e-5 * np.max(exact.M)
    assert inexact.extra["krylov_iterations"] < 0.6 * exact.extra["krylov_iterations"]
    assert inexact.extra["newton_iterations"] < 0.7 * exact.extra["newton_iterations"]
    # the accuracy asked for: 1 first, never looser than before nor finer than tol, then
    # the exact solves again
    scales = calls[:calls.index(None)]
    assert scales[0] == 1.0 and min(scales) >= 1e-7
    assert all(b <= a for a, b in zip(scales, scales[1:], strict=False))
    assert calls[-1] is None


def test_a_loose_fp_sweep_keeps_the_mass_balance_to_round_off():
    setup = eq.build(mw.Room(congestion=1.0), 21, 21, 20, mw.get_backend("numpy"), "ilu")
    M0 = np.stack([setup.m0] * 21, axis=-3)
    sch = setup.scheme
    U = sch.solve_hjb(setup.U_T, setup.coupling.running_cost(setup.coupling.state(M0)))
    exact = sch.solve_fp(U, setup.m0)
    sch._last_masses = None
    sch.resolve(1.0)                      # FP solves to a relative residual 1e-3
    M = sch.solve_fp(U, setup.m0)
    assert sch.krylov_rtol == pytest.approx(1e-3)
    V = sch.stencil.volumes
    mass = (M * V).sum(axis=(-2, -1))
    out = sch.outflow(U, M).sum(axis=-1)
    assert np.max(np.abs(mass + np.cumsum(out) - mass[0])) <= 1e-14
    assert (M >= 0).all()
    gap = np.max(np.abs(M - exact)) / np.max(exact)
    assert 1e-12 < gap <= 1e-2   # a different, looser solution, balanced all the same


def test_a_residual_that_falls_faster_than_the_accuracy_is_evaluated_again():
    """Without congestion the map barely depends on the iterate: the second residual falls
    by four decades, below what its evaluation resolved. That evaluation is made again at
    a finer accuracy (else Anderson's history keeps its error, and the iteration stalls at
    the first evaluations' accuracy)."""
    r = mw.solve_2d(mw.Room(congestion=0.0), nx=17, nt=16, tol=1e-8, progress=False)
    assert r.converged and r.extra["reevaluations"] >= 1
    assert r.check() <= 1e-8


def test_a_batch_resolves_each_problem_at_its_own_accuracy(monkeypatch):
    """In a batch each problem's evaluations follow its own residual: the room without
    congestion, whose residual falls fast, asks a finer accuracy than the congested one
    (which is not solved to it), and both are certified by an independent best response."""
    pytest.importorskip("torch")
    rooms = [mw.Room(congestion=0.0), mw.Room(congestion=3.0, door_widths=(0.2, 0.2))]
    calls = []
    resolve = sweeps.Scheme2D.resolve

    def recorded(self, residual):
        calls.append(None if residual is None else np.array(residual, dtype=float, ndmin=1))
        resolve(self, residual)

    monkeypatch.setattr(sweeps.Scheme2D, "resolve", recorded)
    batch = mw.solve_2d_batch(rooms, nx=21, nt=20, tol=1e-7, progress=False,
                              backend="torch", dtype="float64")
    asked = np.array([c for c in calls if c is not None and c.size == 2])
    assert (asked >= 1e-7).all() and (asked[0] == 1.0).all()
    assert (asked[:, 0] < 1e-2 * asked[:, 1]).any()   # each at its own accuracy
    assert len(batch) == len(rooms)
    for res in batch:
        assert res.converged and res.residual <= 1e-7
        assert res.check() <= 1e-7
