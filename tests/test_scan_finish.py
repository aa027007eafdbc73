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

    solve_module = importlib.import_module("mfgwork.fdm1d")
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
    """Points to finish go to threads, one per core; one point, one core or a daemon process
    (a Dask worker, already one of several) stay in the calling thread."""
    import threading

    from mfgwork.workflows import scan_solve

    here = threading.get_ident()
    monkeypatch.setattr(scan_solve, "_cores", lambda: 2)
    idents = scan_solve._map(threading.get_ident, [(), (), ()], parallel=True)
    assert len(idents) == 3 and here not in idents
    assert scan_solve._map(threading.get_ident, [()], parallel=True) == [here]
    assert scan_solve._map(threading.get_ident, [(), ()], parallel=False) == [here] * 2
    monkeypatch.setattr(scan_solve, "_cores", lambda: 1)
    assert scan_solve._map(threading.get_ident, [(), ()], parallel=True) == [here] * 2


def test_the_threads_leave_the_callers_warning_filters_as_they_were(monkeypatch):
    """The solves enter ``warnings.catch_warnings`` from several threads at once, which is
    not thread-safe; the filters the caller had are restored when the threads are done."""
    import threading
    import warnings

    from mfgwork.workflows import scan_solve

    monkeypatch.setattr(scan_solve, "_cores", lambda: 2)
    entered = threading.Barrier(2, timeout=10)

    def leaky() -> None:
        """Thread _0 enters first and leaves first, the other enters second and leaves last:
        it saved the first's filter and puts it back for good."""
        first = threading.current_thread().name.endswith("_0")
        context = warnings.catch_warnings()
        for step in range(3):
            if step == (0 if first else 1):
                context.__enter__()
                warnings.simplefilter("ignore", mw.ConvergenceWarning)
            if first and step == 2:
                context.__exit__(None, None, None)
            entered.wait()
        if not first:
            context.__exit__(None, None, None)

    with warnings.catch_warnings():
        before = list(warnings.filters)
        scan_solve._map(leaky, [(), ()], parallel=True)
        assert warnings.filters == before
