"""Scans complete: points a torch batch does not bring in are finished by the single path
(warm-started, in parallel), certified by an independent best response; continuation on the
CPU; the status says how each point was solved."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import independent_residual

import mfgwork as mw

xr = pytest.importorskip("xarray")
pytest.importorskip("torch")

SOLVE = {"nx": 31, "nt": 30, "tol": 1e-8, "max_iter": 200}
FIXED = {"threshold": 0.6, "sigma": 0.3, "T": 5.0}


def test_a_point_the_batch_cannot_bring_in_is_finished_by_the_single_path(monkeypatch):
    """ε = 0.001 at σ = 0.3: a torch batch without Newton's method (Anderson mixing alone,
    as batches had before) gives up on it, while its neighbour ε = 0.05 converges in the
    batch; the scan finishes the first by mw.solve."""
    import importlib

    solve_module = importlib.import_module("mfgwork.solve")
    newton = solve_module._batch_newton
    monkeypatch.setattr(solve_module, "_batch_newton", lambda couplings, *a:
                        None if len(couplings) > 1 else newton(couplings, *a))
    ds = mw.scan(mw.SantaFeBar, {"eps": [0.001, 0.05]}, fixed=FIXED, backend="torch",
                 device="cpu", progress=False, **SOLVE)
    assert list(ds.finished_by.values) == ["single-warm", "batch"]
    assert list(ds.status.values) == ["converged", "converged"] and bool(ds.converged.all())
    for k, eps in enumerate(ds.eps.values):
        r = independent_residual(mw.SantaFeBar(eps=float(eps), **FIXED), ds.M.values[k])
        assert r <= SOLVE["tol"] * (1 + 1e-3)
        assert r == pytest.approx(ds.residual.values[k], rel=1e-3, abs=1e-13)
    assert ds.message.values[0] == "" and ds.device.values[0] == "cpu"
    assert ds.iterations.values[0] > ds.iterations.values[1] / 2  # the batch's count + its own


def test_a_point_neither_path_brings_in_stays_not_converged_where_mw_solve_does():
    """max_iter = 2: neither the batch nor the single path (warm, then cold) converges;
    mw.solve does not either; the point keeps the better solution and says why."""
    opts = SOLVE | {"max_iter": 2}
    ds = mw.scan(mw.SantaFeBar, {"eps": [0.001, 0.002]}, fixed=FIXED, backend="torch",
                 device="cpu", progress=False, **opts)
    with pytest.warns(mw.ConvergenceWarning):
        ref = mw.solve(mw.SantaFeBar(eps=0.001, **FIXED), progress=False, **opts)
    assert not ref.converged
    assert list(ds.status.values) == ["not_converged"] * 2 and not bool(ds.converged.any())
    for k in range(2):
        assert "did not reach tol" in ds.message.values[k]
        assert ds.finished_by.values[k] in ("batch", "single", "single-warm")
        if ds.finished_by.values[k] == "batch":
            assert "nor did the single path" in ds.message.values[k]
        assert np.isfinite(ds.residual.values[k]) and ds.residual.values[k] > opts["tol"]


def test_the_single_path_runs_over_the_cpu_cores(monkeypatch):
    """Enough points to finish go to a pool of processes, one per core; one point, one
    core, little work, or a daemon process (a Dask worker) stay in this process."""
    import os

    from mfgwork.workflows import scan_solve

    monkeypatch.setattr(scan_solve, "_cores", lambda: 2)
    pids = scan_solve._map(os.getpid, [(), (), ()], parallel=True)
    assert len(pids) == 3 and os.getpid() not in pids
    assert scan_solve._map(os.getpid, [()], parallel=True) == [os.getpid()]
    assert scan_solve._map(os.getpid, [(), ()], parallel=False) == [os.getpid()] * 2
    monkeypatch.setattr(scan_solve, "_cores", lambda: 1)
    assert scan_solve._map(os.getpid, [(), ()], parallel=True) == [os.getpid()] * 2
