"""A scan's blocks written on its writer thread: no solve overlaps a write (one block's
arrays in memory at a time), the result is opened while the last block is written, and a
write that fails is raised by the scan, its block left to the next run."""

from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.workflows import scan as scan_module
from mfgwork.workflows import scan_solve
from mfgwork.workflows.scan_check import check_store

xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")

GRID = {"threshold": [0.4, 0.5, 0.6, 0.7], "sigma": [0.4, 0.6]}
SOLVE = {"nx": 21, "nt": 20, "tol": 1e-10, "max_iter": 400}


@pytest.fixture(scope="module")
def memory():
    return mw.scan(mw.SantaFeBar, GRID, device="cpu", progress=False, **SOLVE)


def test_blocks_are_written_between_solves_and_the_last_beside_the_opening(tmp_path, memory,
                                                                          monkeypatch):
    events: list[tuple[str, object, str]] = []
    real_solve, real_write = scan_solve._solve, scan_solve.write_region
    real_open = scan_module._dataset

    def solve(problems, be, opts):
        events.append(("solve", len(problems), threading.current_thread().name))
        return real_solve(problems, be, opts)

    def write(store, region, arrays):
        events.append(("write", region, threading.current_thread().name))
        time.sleep(0.2)   # (a slow disk: the opening happens meanwhile)
        real_write(store, region, arrays)
        events.append(("written", region, threading.current_thread().name))

    def open_(*args):
        events.append(("open", None, threading.current_thread().name))
        return real_open(*args)

    monkeypatch.setattr(scan_solve, "_solve", solve)
    monkeypatch.setattr(scan_solve, "write_region", write)
    monkeypatch.setattr(scan_module, "_dataset", open_)
    ds = mw.scan(mw.SantaFeBar, GRID, device="cpu", progress=False, chunk_size=4,
                 store=tmp_path / "s.zarr", **SOLVE)
    kinds = [e[0] for e in events]
    assert sorted(kinds) == sorted(["solve", "write", "written"] * 2 + ["open"])
    solves = [i for i, k in enumerate(kinds) if k == "solve"]
    written = [i for i, k in enumerate(kinds) if k == "written"]
    assert written[0] < solves[1]                  # the first block written before the next
    assert solves[1] < kinds.index("open") < written[1]   # opened while the last is written
    main = threading.main_thread().name
    assert all((e[2] == main) == (e[0] in ("solve", "open")) for e in events)
    xr.testing.assert_equal(ds.drop_vars("wall_time").load(), memory.drop_vars("wall_time"))
    check = check_store(tmp_path / "s.zarr")
    assert check.finished.all() and not check.damaged


def test_a_write_that_fails_on_the_writer_thread_is_raised_and_its_block_solved_again(
        tmp_path, memory, monkeypatch):
    real_write = scan_solve.write_region
    calls = []

    def failing(store, region, arrays):
        calls.append(region)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_write(store, region, arrays)

    monkeypatch.setattr(scan_solve, "write_region", failing)
    path = tmp_path / "s.zarr"
    with pytest.raises(OSError, match="No space"):
        mw.scan(mw.SantaFeBar, GRID, device="cpu", progress=False, chunk_size=4, store=path,
                **SOLVE)
    check = check_store(path)
    assert check.finished[:2].all() and not check.finished[2:].any()
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (nothing damaged: the block was not finished)
        again = mw.scan(mw.SantaFeBar, GRID, device="cpu", progress=False, chunk_size=4,
                        store=path, **SOLVE)
    xr.testing.assert_equal(again.drop_vars("wall_time").load(),
                            memory.drop_vars("wall_time"))
    assert np.asarray(again.done).all()
