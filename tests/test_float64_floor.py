"""The float64 certificate floor named before the fine iteration (:mod:`mfgwork.float64_floor`).

A long horizon with little noise (T 80, σ 0.05, threshold 0.6, 201²) stalled at 1.2e-8 above
tol 1e-8; its floor is now predicted from the coarse stage and said before iterating, and the
solve is converged within it. Checked against the Lipschitz constant of the fine equilibrium
itself and against one more best response computed apart (``Result.check``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import mfgwork as mw
from mfgwork.core.backend import get_backend
from mfgwork.fdm1d import CoarseSingle
from mfgwork.float64_floor import COARSE_MARGIN
from mfgwork.numerics.batch_newton import POWER_STEPS, BatchNewton, member_potentials
from mfgwork.pipeline import run
from mfgwork.problems.base import batch_coupling

STEEP = {"T": 80.0, "sigma": 0.05, "threshold": 0.6}
FLAT = {"T": 80.0, "sigma": 0.3, "threshold": 0.5}
FINE = {"nx": 201, "nt": 201, "progress": False}


def _at(problems: list, results: list, be) -> tuple[BatchNewton, dict]:
    """A BatchNewton of ``problems`` on the grid of ``results`` and the point (z, U, M) of
    their densities, to measure L there apart from any solve."""
    M = be.xp.stack([be.asarray(r.M) for r in results])
    U = be.xp.stack([be.asarray(r.U) for r in results])
    grid = problems[0].grid(M.shape[-1], M.shape[-2] - 1)
    couplings = [p.coupling(grid, be) for p in problems]
    newton = BatchNewton(member_potentials([c.potential() for c in couplings]), grid=grid,
                         nu=np.array([p.nu for p in problems]), backend=be, tol=1e-8,
                         hamiltonian=problems[0].hamiltonian)
    return newton, {"z": batch_coupling(couplings, be).state(M), "U": U, "M": M}


@pytest.fixture(scope="module")
def steep():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = mw.solve(mw.SantaFeBar(**STEEP), **FINE)
    return res, caught


def test_floor_is_said_before_iterating_and_reached(steep) -> None:
    res, caught = steep
    said = [w for w in caught if "may be below what float64 resolves" in str(w.message)]
    assert len(said) == 1 and said[0].category is UserWarning
    assert not [w for w in caught if issubclass(w.category, mw.ConvergenceWarning)]
    floor = res.extra["reachable_tol"]
    assert floor["predicted"] == "51 x 51" and floor["reached"] and 1e-8 < floor["tol"] < 1e-6
    assert res.converged and res.status == "converged" and res.residual <= floor["tol"]
    # the tol it was converged to: the user's where reached, else the floor said before
    assert res.params["tol"] == (floor["tol"] if res.residual > 1e-8 else 1e-8)
    # the densities certified apart: one more float64 best response, computed again
    assert res.check() == pytest.approx(res.residual, rel=1e-3)


def test_predicted_lipschitz_bounds_the_fine_one(steep) -> None:
    """The prediction's L (COARSE_MARGIN × L at the 51² equilibrium) is at least L at the
    201² equilibrium, and not far above it."""
    res, _ = steep
    newton, point = _at([mw.SantaFeBar(**STEEP)], [res], get_backend("numpy"))
    fine = newton.lipschitz_all(point)[0]
    predicted = res.extra["reachable_tol"]["lipschitz"]
    assert fine <= predicted <= COARSE_MARGIN * fine


def test_no_floor_where_it_lies_below_tol() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = mw.solve(mw.SantaFeBar(**FLAT), **FINE)
    assert res.converged and res.residual <= 1e-8 and res.params["tol"] == 1e-8
    assert "reachable_tol" not in res.extra


def test_batch_raises_only_its_steep_member() -> None:
    problems = [mw.SantaFeBar(**STEEP), mw.SantaFeBar(**FLAT)]
    with pytest.warns(UserWarning, match="for 1 of 2 problems"):
        steep, flat = mw.solve(problems, backend="torch", **FINE)
    floor = steep.extra["reachable_tol"]
    assert steep.converged and steep.residual <= floor["tol"] and floor["tol"] > 1e-8
    assert steep.params["tol"] == (floor["tol"] if steep.residual > 1e-8 else 1e-8)
    assert flat.converged and flat.residual <= 1e-8 and flat.params["tol"] == 1e-8
    assert "reachable_tol" not in flat.extra


def test_dense_lipschitz_matches_the_host_power_iteration() -> None:
    """The devices' path (dense tangent Jacobians, one batched product per step) against the
    host's (matrix-free tangent products), on the CPU."""
    problems = [mw.SantaFeBar(**STEEP), mw.SantaFeBar(**FLAT)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = [mw.solve(p, nx=51, nt=51, progress=False) for p in problems]
    newton, point = _at(problems, results, get_backend("torch", "cpu", "float64"))
    assert newton.matrix_free
    host = newton.lipschitz_all(point)
    dense = newton._lipschitz_dense(point, POWER_STEPS)
    np.testing.assert_allclose(dense, host, rtol=1e-10)
    assert host[0] > 5 * host[1]   # the steep member's best response is the steeper


def test_the_coarse_stage_measures_l_at_its_equilibrium() -> None:
    """The L a float64 coarse stage hands on (a few power iterations at its last point) is
    L at its densities, measured apart with the full power iteration; float32 measures
    none."""
    problem = mw.SantaFeBar(**STEEP)
    options = {"nx": 51, "nt": 51, "tol": 1e-5, "progress": False, "coarse": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (start,) = run(CoarseSingle(problem, **options))
        (start32,) = run(CoarseSingle(problem, backend="torch", dtype="float32", **options))
    newton, point = _at([problem], [start], get_backend("numpy"))
    assert start.lipschitz == pytest.approx(newton.lipschitz_all(point)[0], rel=1e-3)
    assert start32.lipschitz is None


def test_float32_keeps_its_own_floor() -> None:
    """No float64 prediction in float32 (its floor is raised before iterating, and its
    results are certified in float64)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = mw.solve(mw.SantaFeBar(**STEEP), backend="torch", dtype="float32", tol=1e-6,
                       **FINE)
    assert "predicted" not in res.extra.get("reachable_tol", {})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_batch_predicts_the_floors_of_the_cpu() -> None:
    """On CUDA the floors come from the dense (float32) tangent Jacobians of the coarse stage:
    the same L as the CPU's matrix-free power iteration, and the same members said."""
    problems = [mw.SantaFeBar(**STEEP), mw.SantaFeBar(**FLAT)]
    with pytest.warns(UserWarning, match="for 1 of 2 problems"):
        cuda = mw.solve(problems, backend="torch", device="cuda", dtype="float64", **FINE)
    with pytest.warns(UserWarning, match="for 1 of 2 problems"):
        cpu = mw.solve(problems, backend="torch", **FINE)
    assert cuda[0].extra["reachable_tol"]["lipschitz"] == pytest.approx(
        cpu[0].extra["reachable_tol"]["lipschitz"], rel=1e-3)
    assert all(r.converged for r in cuda) and "reachable_tol" not in cuda[1].extra


def test_a_scan_says_which_points_converged_within_their_floor() -> None:
    """A scan point converged within its predicted float64 floor, above tol, says so in its
    message; one that reached tol says nothing."""
    with pytest.warns(UserWarning, match="may be below what float64 resolves"):
        ds = mw.scan(mw.SantaFeBar, {"threshold": [0.6]}, fixed={"T": 80.0, "sigma": 0.05},
                     device="cpu", **FINE)
    point = ds.isel(threshold=0)
    assert point.status.item() == "converged" and point.residual.item() < 1e-6
    message = point.message.item()
    if point.residual.item() > 1e-8:
        assert message.startswith("converged within its float64 floor") and "tol=1e-08" in message
    else:
        assert message == ""


def test_a_member_certified_within_its_floor_stops_searching_sooner(steep, monkeypatch) -> None:
    """Once certified within its floor, a member is stuck after FLOOR_HALVINGS refused trials
    rather than max_halvings: the steep case ends sooner, still within its floor."""
    from mfgwork.numerics import batch_newton

    res, _ = steep
    monkeypatch.setattr(batch_newton, "FLOOR_HALVINGS", 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        searched = mw.solve(mw.SantaFeBar(**STEEP), **FINE)
    assert res.residual <= res.extra["reachable_tol"]["tol"] and res.converged
    if res.residual > 1e-8:   # (it ended within its floor, the rounding's draw here)
        assert res.iterations < searched.iterations
    else:
        assert res.iterations <= searched.iterations
