"""Parameter scans of 2-D problems: the two bars' thresholds against direct mw.solve_2d
solves and an independent best response, the Dataset's labels, a zarr store resumed, and bad
input refused before any solve."""

from __future__ import annotations

import functools
import importlib
from types import SimpleNamespace

import numpy as np
import pytest

import mfgwork as mw
import mfgwork.solve2d
from mfgwork.__main__ import main as cli
from mfgwork.best_response import best_response_residual_2d
from mfgwork.workflows import scan as scan_module

xr = pytest.importorskip("xarray")
zarr = pytest.importorskip("zarr")

GRID = {"threshold_1": [0.4, 0.6], "threshold_2": [0.4, 0.6]}
FIXED = {"T": 2.0, "spill": 0.5}
SOLVE = {"nx": 11, "nt": 10, "tol": 1e-8, "max_iter": 400}


@pytest.fixture(scope="module")
def bars():
    return mw.scan(mw.TwoBars, GRID, fixed=FIXED, progress=False, **SOLVE)


def test_threshold_components_replace_the_pair():
    assert mw.TwoBars(thresholds=(0.3, 0.4), threshold_2=0.7).thresholds == (0.3, 0.7)
    assert mw.TwoBars(threshold_1=0.5).thresholds == (0.5, 0.6)
    with pytest.raises(mw.ParameterError, match="threshold_1"):
        mw.TwoBars(threshold_1=1.5)


def test_every_point_is_the_direct_solve_and_a_certified_equilibrium(bars):
    ds = bars
    for a1 in GRID["threshold_1"]:
        for a2 in GRID["threshold_2"]:
            problem = mw.TwoBars(thresholds=(a1, a2), **FIXED)
            ref = mw.solve_2d(problem, progress=False, **SOLVE)
            point = ds.sel(threshold_1=a1, threshold_2=a2)
            assert np.max(np.abs(point.M.values - ref.M)) <= 1e-12
            assert np.max(np.abs(point.U.values - ref.U)) <= 1e-12
            assert np.max(np.abs(point.attendance.values - ref.attendance)) <= 1e-12
            np.testing.assert_allclose(point.mass.values, ref.mass, rtol=0, atol=1e-12)
            assert point.iterations.item() == ref.iterations
            assert point.residual.item() == ref.residual <= SOLVE["tol"]
            assert bool(point.converged) == ref.converged and point.status == "converged"
            assert point.mass_error.item() <= 1e-12
            # one best response, recomputed with another linear solver (SuperLU), certifies
            solution = SimpleNamespace(M=point.M.values, U=point.U.values, x=ds.x.values,
                                       y=ds.y.values)
            assert best_response_residual_2d(solution, problem) <= 2 * SOLVE["tol"]
    # the game is symmetric: swapping the thresholds swaps the bars
    a = ds.attendance
    np.testing.assert_allclose(a.sel(threshold_1=0.4, threshold_2=0.6, bar=1),
                               a.sel(threshold_1=0.6, threshold_2=0.4, bar=2), atol=1e-6)
    np.testing.assert_allclose(a.sel(threshold_1=0.6, threshold_2=0.6, bar=1),
                               a.sel(threshold_1=0.6, threshold_2=0.6, bar=2), atol=1e-6)
    assert float(abs(a.sel(threshold_1=0.4, threshold_2=0.6, bar=1)
                     - a.sel(threshold_1=0.4, threshold_2=0.6, bar=2)).max()) > 1e-2
    assert bool(ds.done.all()) and np.all(ds.wall_time.values > 0)


def test_dims_coords_and_attributes(bars):
    ds = bars
    assert ds.M.dims == ("threshold_1", "threshold_2", "t", "y", "x")
    assert ds.M.shape == (2, 2, 11, 11, 11)
    assert ds.attendance.dims == ("threshold_1", "threshold_2", "t", "bar")
    assert ds.mass.dims == ("threshold_1", "threshold_2", "t")
    assert list(ds.bar.values) == [1, 2] and list(ds.threshold_2.values) == [0.4, 0.6]
    np.testing.assert_allclose(ds.y.values, np.linspace(-5, 5, 11))
    assert (ds.x.attrs["long_name"], ds.y.attrs["long_name"]) == ("θ1", "θ2")
    assert ds.converged.dims == ("threshold_1", "threshold_2")
    a = ds.attrs
    assert (a["nx"], a["ny"], a["nt"], a["T"], a["spill"]) == (11, 11, 10, 2.0, 0.5)
    assert "thresholds" not in a and a["scanned"] == "threshold_1, threshold_2"
    assert "one by one with mw.solve" in a["placement"]


def test_unconverged_points_say_so(bars):
    ds = mw.scan(mw.TwoBars, {"threshold_1": [0.4, 0.6]}, fixed=FIXED, progress=False,
                 **(SOLVE | {"max_iter": 3}))
    assert list(ds.status.values) == ["not_converged"] * 2
    assert not ds.converged.any() and np.all(ds.residual.values > SOLVE["tol"])
    assert np.all(ds.iterations.values == 3)
    assert all("did not reach tol=1e-08" in m for m in ds.message.values)


def test_store_resumes_only_the_unfinished_block(bars, tmp_path, monkeypatch):
    store = tmp_path / "bars.zarr"
    ds = mw.scan(mw.TwoBars, GRID, fixed=FIXED, store=store, chunk_size=2, progress=False,
                 **SOLVE)
    assert ds.M.chunks[:2] == ((1, 1), (2,))
    xr.testing.assert_equal(ds.drop_vars("wall_time").load(), bars.drop_vars("wall_time"))
    zarr.open_array(store / "done", mode="r+")[1:2, :] = False   # as if killed in block 2
    solved = []
    solve_2d = mfgwork.solve2d.solve_2d

    @functools.wraps(solve_2d)   # (its options, which the front door checks)
    def counting(problem, **kw):
        solved.append(problem.thresholds)
        return solve_2d(problem, **kw)

    # the scan solves through mw.solve, which finds the 2-D solver in its table
    monkeypatch.setitem(importlib.import_module("mfgwork.solve").SOLVERS, mw.MFGProblem2D,
                        counting)
    again = mw.scan(mw.TwoBars, GRID, fixed=FIXED, store=store, progress=False, **SOLVE)
    assert sorted(solved) == [(0.6, 0.4), (0.6, 0.6)]
    xr.testing.assert_equal(again.drop_vars("wall_time").load(),
                            bars.drop_vars("wall_time"))
    with pytest.raises(mw.ParameterError, match="different scan"):
        mw.scan(mw.TwoBars, GRID, fixed=FIXED, store=store, progress=False,
                **(SOLVE | {"ny": 13}))
    # checked on opening (every block against its digest), and exported as NetCDF
    opened = mw.open_scan(store).load()
    xr.testing.assert_identical(opened, again.load())
    back = xr.open_dataset(scan_module.to_netcdf(store, tmp_path / "bars.nc"),
                           engine="h5netcdf").load()
    assert back.attrs.pop(scan_module.EXPORT_ATTR)  # the export's own mark
    xr.testing.assert_identical(back, opened.drop_vars("done"))


def test_command_line(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text("threshold_1: [0.4, 0.6]\n")
    store = tmp_path / "cli.zarr"
    args = ["scan", "--problem", "two_bars", "--grid", str(grid), "-o", str(store),
            "-p", "nx", "11", "-p", "ny", "9", "-p", "nt", "10", "-p", "T", "2",
            "-p", "spill", "0.5", "-p", "tol", "1e-8", "-p", "max_iter", "400", "--no-progress"]
    assert cli(args) == 0
    assert "2 points: 2 converged" in capsys.readouterr().out
    ds = mw.open_scan(store)
    assert ds.M.shape == (2, 11, 9, 11) and ds.attrs["problem_factory"] == "two_bars"
    assert ds.attrs["ny"] == 9 and ds.attrs["spill"] == 0.5


def test_room_scans_too():
    ds = mw.scan(mw.Room, {"congestion": [0.0, 4.0]}, nx=11, ny=9, nt=8, tol=1e-8,
                 progress=False)
    assert ds.M.dims == ("congestion", "t", "y", "x") and ds.M.shape == (2, 9, 9, 11)
    assert bool(ds.converged.all())
    ref = mw.solve_2d(mw.Room(congestion=4.0), nx=11, ny=9, nt=8, tol=1e-8, progress=False)
    assert np.max(np.abs(ds.M.values[1] - ref.M)) <= 1e-12
    np.testing.assert_allclose(ds.mass.values[1], ref.mass, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("grid", "kwargs", "words"), [
    ({"threshold_3": [0.4, 0.6]}, {}, ["unknown parameter", "threshold_3", "threshold_1"]),
    ({"threshold_1": [0.4, 1.5]}, {}, ["threshold_1=1.5", "< 1"]),
    ({"threshold_1": [0.4, "high"]}, {}, ["threshold_1", "'high'"]),
    ({"theta_max": [3.0, 4.0]}, {}, ["x_min", "one grid"]),
    ({"threshold_1": [0.4]}, {"ny": 2}, ["ny=2"]),
    ({"threshold_1": [0.4]}, {"nx": 4001, "nt": 4000}, ["nx, ny and nt"]),
    ({"threshold_1": [0.4] * 2}, {}, ["more than once"]),
])
def test_bad_input_is_refused_before_any_solve(grid, kwargs, words, tmp_path, monkeypatch):
    def no_solve(task, *write):
        raise AssertionError("a block was solved")

    monkeypatch.setattr(scan_module, "solve_block", no_solve)
    store = tmp_path / "never.zarr"
    with pytest.raises(mw.ParameterError) as err:
        mw.scan(mw.TwoBars, grid, store=store, progress=False, **({"nx": 11} | kwargs))
    for w in words:
        assert w in str(err.value)
    assert not store.exists()


def test_ny_is_refused_for_a_1d_problem():
    with pytest.raises(mw.ParameterError, match="ny=9 is invalid"):
        mw.scan(mw.SantaFeBar, {"threshold": [0.5]}, nx=11, ny=9, nt=5, progress=False)


def test_torch_points_agree_with_numpy(bars):
    pytest.importorskip("torch")
    grid = {"threshold_1": [0.4, 0.6], "threshold_2": [0.6]}
    ds = mw.scan(mw.TwoBars, grid, fixed=FIXED, backend="torch", device="cpu",
                 dtype="float64", progress=False, **(SOLVE | {"tol": 1e-10}))
    assert ds.attrs["backend"] == "torch" and bool(ds.converged.all())
    ref = bars.sel(threshold_2=[0.6])
    assert float(abs(ds.M - ref.M).max()) <= 1e-7      # two linear solvers, one scheme
    assert float(abs(ds.attendance - ref.attendance).max()) <= 1e-7
