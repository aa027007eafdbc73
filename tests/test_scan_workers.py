"""Scans on Dask workers: a worker killed in the middle of a scan loses no point; one worker
per GPU, each pinned by CUDA_VISIBLE_DEVICES (specs checked with a mocked GPU count, and
refused with one line where no GPU is visible); progress as blocks finish."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

import mfgwork as mw

xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")
distributed = pytest.importorskip("distributed")

GRID = {"threshold": [0.4, 0.6, 0.8], "sigma": [0.4, 0.7]}
SOLVE = {"nx": 31, "nt": 30, "tol": 1e-10, "max_iter": 400}
#: The point whose block kills its worker (the scan's last block, so others finish first).
KILL_AT = (0.8, 0.7)
#: Environment variable naming the marker file of the kill (inherited by spawned workers).
MARKER = "MFGWORK_TEST_KILL_MARKER"


def santa_fe_killing_its_worker_once(threshold: float, sigma: float, T: float = 5.0):
    """``mw.SantaFeBar``; building the point :data:`KILL_AT` on a Dask worker kills that
    worker's process (SIGKILL) the first time, after recording how many points of the store
    were finished then; anywhere else (the scan's own process) it only builds the problem."""
    marker = os.environ.get(MARKER)
    if marker and (threshold, sigma) == KILL_AT and _on_a_dask_worker():
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.write(fd, str(_finished_points(Path(marker).parent / "scan.zarr")).encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)
    return mw.SantaFeBar(threshold=threshold, sigma=sigma, T=T)


def _on_a_dask_worker() -> bool:
    try:
        distributed.get_worker()
    except ValueError:
        return False
    return True


def _finished_points(store: Path) -> int:
    import zarr

    return int(np.asarray(zarr.open_array(store / "done", mode="r")[...]).sum())


@pytest.fixture
def by_value():
    """This module's functions pickled by value (the workers cannot import a test module)."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.mark.slow
def test_a_worker_killed_mid_scan_loses_no_point(tmp_path, monkeypatch, by_value):
    """Two worker processes, a block a point; the worker that takes the last block is killed
    (SIGKILL) after other blocks are written: Dask solves that block again on a worker, and
    the store holds every point, equal to an uninterrupted scan in one process."""
    marker = tmp_path / "killed"
    monkeypatch.setenv(MARKER, str(marker))
    kw = {"fixed": {"T": 5.0}, "device": "cpu", "progress": False, **SOLVE}
    ds = mw.scan(santa_fe_killing_its_worker_once, GRID, store=tmp_path / "scan.zarr",
                 chunk_size=1, dask=True, workers=2, **kw).load()
    assert marker.exists(), "no worker was killed"
    assert int(marker.read_text()) >= 1, "the worker was killed before any block was written"
    reference = mw.scan(santa_fe_killing_its_worker_once, GRID, **kw)
    assert bool(ds["done"].all()) and set(ds["status"].values.ravel()) == {"converged"}
    xr.testing.assert_equal(ds.drop_vars("wall_time"), reference.drop_vars("wall_time"))
