"""Parameter scans: values against mw.solve, the Dataset's labels, zarr/NetCDF, resume after
SIGKILL, failures recorded as data, Dask, and bad input refused before any solve."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.__main__ import main as cli
from mfgwork.workflows import scan as scan_module
from mfgwork.workflows.scan_check import blocks
from mfgwork.workflows.scan_store import block_shape

xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")

GRID = {"threshold": [0.4, 0.6, 0.8], "sigma": [0.4, 0.7]}
SOLVE = {"nx": 31, "nt": 30, "tol": 1e-10, "max_iter": 400}
POINTS = [(0, 0), (1, 1), (2, 0)]


@pytest.fixture(scope="module")
def in_memory():
    return mw.scan(mw.SantaFeBar, GRID, fixed={"T": 5.0}, device="cpu", progress=False,
                   **SOLVE)


def test_values_equal_mw_solve_at_sampled_points(in_memory):
    ds = in_memory
    for i, j in POINTS:
        thr, sig = ds.threshold.values[i], ds.sigma.values[j]
        ref = mw.solve(mw.SantaFeBar(threshold=thr, sigma=sig, T=5.0), progress=False, **SOLVE)
        point = ds.sel(threshold=thr, sigma=sig)
        assert np.max(np.abs(point.M.values - ref.M)) <= 1e-10
        assert np.max(np.abs(point.U.values - ref.U)) <= 1e-10
        for name, path in ref.observables.items():
            assert np.max(np.abs(point[name].values - mw.to_numpy(path))) <= 1e-10
        for name, value in ref.summary.items():
            assert point[name].item() == pytest.approx(value, abs=1e-10)
        assert point.iterations.item() == ref.iterations
        assert bool(point.converged) and point.status.item() == "converged"
        assert point.residual.item() == ref.residual <= SOLVE["tol"]
        assert point.mass_error.item() == pytest.approx(ref.mass_error, abs=1e-15)
        assert point.mass_error.item() <= 1e-12
    assert bool(ds.done.all()) and np.all(ds.wall_time.values > 0)


def test_dims_coords_and_attributes(in_memory):
    ds = in_memory
    assert ds.M.dims == ("threshold", "sigma", "t", "x") and ds.U.shape == (3, 2, 31, 31)
    assert list(ds.threshold.values) == GRID["threshold"]
    assert list(ds.sigma.values) == GRID["sigma"]
    np.testing.assert_allclose(ds.t.values, np.linspace(0, 5.0, 31))
    np.testing.assert_allclose(ds.x.values, np.linspace(-5, 5, 31))
    assert ds.converged.dims == ("threshold", "sigma") and ds.device.item(0) == "cpu"
    a = ds.attrs
    assert (a["T"], a["theta_max"], a["eps"], a["problem"]) == (5.0, 5.0, 0.05, "santa_fe_bar")
    assert "threshold" not in a and "sigma" not in a and a["scanned"] == "threshold, sigma"
    assert (a["nx"], a["nt"], a["tol"], a["max_iter"], a["dtype"]) == (31, 30, 1e-10, 400,
                                                                       "float64")
    assert a["version_mfgwork"] and a["version_numpy"] == np.__version__ and a["commit"]
    # the problem's observables, by the problem's own names, over time and summarized
    first = mw.SantaFeBar(threshold=0.4, sigma=0.4, T=5.0)
    for name in mw.solve(first, nx=11, nt=5, tol=1e-3, progress=False).observables:
        assert ds[name].dims == ("threshold", "sigma", "t")


def test_zipped_axis_keep_and_generic_factory():
    def crowd(strength: float, sigma: float = 0.5) -> mw.MFGProblem:
        return mw.MFGProblem(x_min=-1, x_max=1, T=1, sigma=sigma,
                             m0=lambda x: 1.0 + 0.5 * x, g=lambda x: x**2,
                             f=lambda t, x, m: strength * m)

    ds = mw.scan(crowd, {"strength": [0.0, 1.0], "sigma": [0.4, 0.6], "zip": [["strength",
                 "sigma"]]}, keep=("M",), nx=21, nt=10, tol=1e-9, device="cpu",
                 progress=False)
    assert ds.M.dims == ("strength", "t", "x") and "U" not in ds
    with pytest.raises(mw.ParameterError, match="cannot be built.*strength"):
        mw.scan(crowd, {"sigma": [0.4]}, nx=21, nt=10, device="cpu", progress=False)
    assert list(ds.sigma.values) == [0.4, 0.6] and ds.sigma.dims == ("strength",)
    ref = mw.solve(crowd(1.0, 0.6), nx=21, nt=10, tol=1e-9, progress=False)
    assert np.max(np.abs(ds.M.sel(strength=1.0).values - ref.M)) <= 1e-10


def fragile(strength: float) -> mw.MFGProblem:
    """A crowd-averse problem whose running cost is NaN from strength 2 on."""
    return mw.MFGProblem(x_min=-1, x_max=1, T=1, sigma=0.5, m0=lambda x: 1.0 + 0 * x,
                         g=lambda x: 0 * x,
                         f=lambda t, x, m: strength * m if strength < 2 else np.nan * m)


def test_failures_and_non_convergence_are_data():
    ds = mw.scan(fragile, {"strength": [0.5, 3.0, 1.0]}, nx=21, nt=10, tol=1e-9,
                 device="cpu", progress=False)
    assert list(ds.status.values) == ["converged", "failed", "converged"]
    failed = ds.sel(strength=3.0)
    assert "non-finite" in failed.message.item() and not bool(failed.converged)
    assert np.isnan(failed.M.values).all() and np.isnan(failed.residual.item())
    assert np.isfinite(ds.M.sel(strength=1.0).values).all()

    slow = mw.scan(mw.SantaFeBar, {"threshold": [0.5, 0.7]}, nx=21, nt=20, tol=1e-10,
                   max_iter=3, device="cpu", progress=False)
    assert list(slow.status.values) == ["not_converged"] * 2
    with pytest.warns(mw.ConvergenceWarning):
        ref = mw.solve(mw.SantaFeBar(threshold=0.7), nx=21, nt=20, tol=1e-10, max_iter=3,
                       progress=False)
    assert slow.residual.values[1] == ref.residual > 1e-10
    assert "did not reach tol=1e-10" in slow.message.values[1]
    assert slow.iterations.values.tolist() == [3, 3]


def test_torch_batches_agree_and_isolate_a_failing_point():
    pytest.importorskip("torch")
    opts = {"nx": 21, "nt": 10, "tol": 1e-12, "max_iter": 400, "progress": False}
    ds = mw.scan(mw.SantaFeBar, {"threshold": [0.45, 0.7]}, device="cpu", backend="torch",
                 **opts)
    for thr in (0.45, 0.7):
        ref = mw.solve(mw.SantaFeBar(threshold=thr), **opts)
        assert np.max(np.abs(ds.M.sel(threshold=thr).values - ref.M)) <= 1e-9
        assert np.max(np.abs(ds.U.sel(threshold=thr).values - ref.U)) <= 1e-9
        # the batch's mass errors, computed at once where it ran, are each point's own
        mass = ds.M.sel(threshold=thr).values @ ref.weights
        assert ds.mass_error.sel(threshold=thr).item() == pytest.approx(
            np.max(np.abs(mass - 1.0)), abs=1e-15)
    assert set(ds.status.values) == {"converged"}
    # the batch raises on the NaN point; its block is solved again point by point
    hurt = mw.scan(fragile, {"strength": [0.5, 3.0]}, device="cpu", backend="torch",
                   **(opts | {"tol": 1e-9}))
    assert list(hurt.status.values) == ["converged", "failed"]
    ref = mw.solve(fragile(0.5), **(opts | {"tol": 1e-9}))
    assert np.max(np.abs(hurt.M.values[0] - ref.M)) <= 1e-8


def test_block_tiling_covers_every_point_once():
    for shape, points in [((32, 32), 256), ((5, 3, 4), 7), ((7,), 3), ((2, 9), 100)]:
        block = block_shape(shape, points)
        assert int(np.prod(block)) <= max(points, 1)
        count = np.zeros(shape, dtype=int)
        for region in blocks(shape, block):
            count[region] += 1
        assert (count == 1).all()
    assert block_shape((32, 32), 256) == (8, 32)


# -- the store ---------------------------------------------------------------------------------
def test_store_roundtrips_and_rerun_skips_finished_blocks(in_memory, tmp_path):
    store = tmp_path / "scan.zarr"
    ds = mw.scan(mw.SantaFeBar, GRID, fixed={"T": 5.0}, device="cpu", progress=False,
                 store=store, chunk_size=2, **SOLVE)
    assert ds.M.chunks[:2] == ((1, 1, 1), (2,))      # lazy, one zarr chunk per block
    xr.testing.assert_equal(ds.drop_vars("wall_time").load(),
                            in_memory.drop_vars("wall_time"))
    stamps = _stamps(store)
    again = mw.scan(mw.SantaFeBar, GRID, fixed={"T": 5.0}, device="cpu", progress=False,
                    store=store, **SOLVE)
    assert _stamps(store) == stamps                  # nothing solved or written again
    xr.testing.assert_identical(again.load(), ds.load())
    nc = scan_module.to_netcdf(store, tmp_path / "scan.nc")
    back = xr.open_dataset(nc, engine="h5netcdf")
    assert "done" not in back and "digest" not in back   # the store's bookkeeping
    assert back.attrs.pop(scan_module.EXPORT_ATTR)         # and the export's own mark
    xr.testing.assert_identical(back.load(), mw.open_scan(store).drop_vars("done").load())
    assert _leftovers(tmp_path) == []


def test_store_refuses_other_paths(tmp_path):
    other = tmp_path / "folder"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    small = {"nx": 11, "nt": 5, "tol": 1e-6, "device": "cpu", "progress": False}
    with pytest.raises(mw.ParameterError, match="not a scan store"):
        mw.scan(mw.SantaFeBar, {"threshold": [0.5]}, store=other, **small)
    assert (other / "keep.txt").read_text() == "mine"
    store = tmp_path / "a.zarr"
    mw.scan(mw.SantaFeBar, {"threshold": [0.5]}, store=store, **small)
    with pytest.raises(mw.ParameterError, match="holds a different scan"):
        mw.scan(mw.SantaFeBar, {"threshold": [0.6]}, store=store, **small)
    with pytest.raises(mw.ParameterError, match="not a scan store"):
        mw.open_scan(other)


def test_store_is_made_in_an_empty_folder(tmp_path, monkeypatch):
    small = {"nx": 11, "nt": 5, "tol": 1e-6, "device": "cpu", "progress": False}
    empty = tmp_path / "empty"
    empty.mkdir()
    ds = mw.scan(mw.SantaFeBar, {"threshold": [0.4, 0.5]}, store=empty, **small)
    assert (ds.status.values == "converged").all()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]   # no temporaries left
    again = mw.scan(mw.SantaFeBar, {"threshold": [0.4, 0.5]}, store=empty, **small)
    xr.testing.assert_identical(again.load(), ds.load())            # resumed, nothing new
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    with pytest.raises(mw.ParameterError, match="store"):            # the current directory
        mw.scan(mw.SantaFeBar, {"threshold": [0.4]}, store=".", **small)
    assert list(here.iterdir()) == []


def test_a_point_converged_at_the_float32_floor_says_so(tmp_path):
    with pytest.warns(UserWarning, match="tol=1e-08"):
        ds = mw.scan(mw.SantaFeBar, {"sigma": [0.2, 0.5]}, nx=41, nt=41, dtype="float32",
                     tol=1e-8, device="cpu", progress=False)
    assert ds.attrs["tol"] == 1e-8 and ds.converged.values.all()
    residual, message = ds.residual.values, ds.message.values.astype(str)
    assert (residual > 1e-8).all() and (residual <= 3e-4).all()
    for text in message:
        assert "converged to tol=3.0e-04, the floor of what float32 resolves" in text
        assert "above tol=1e-08" in text


KILLED_SCAN = textwrap.dedent("""
    import sys
    import mfgwork as mw
    mw.scan(mw.SantaFeBar, {"threshold": [0.3, 0.45, 0.6, 0.75], "sigma": [0.4, 0.6, 0.8]},
            nx=61, nt=60, tol=1e-10, max_iter=400, device="cpu", store=sys.argv[1],
            chunk_size=1, progress=False)
""")


@pytest.mark.slow
def test_resume_after_sigkill(tmp_path):
    store = tmp_path / "killed.zarr"
    env = os.environ | {"PYTHONPATH": os.pathsep.join(
        [str(Path(mw.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_SCAN, str(store)], env=env)
    deadline = time.monotonic() + 120
    while not _done_chunks(store) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = {p.relative_to(store / "done" / "c").parts for p in _done_chunks(store)}
    assert 0 < len(done) < 12, "the scan must be killed before its end"
    finished = {k: v for k, v in _stamps(store).items() if tuple(k.split("/")[2:4]) in done}
    ds = mw.scan(mw.SantaFeBar, {"threshold": [0.3, 0.45, 0.6, 0.75],
                                 "sigma": [0.4, 0.6, 0.8]},
                 nx=61, nt=60, tol=1e-10, max_iter=400, device="cpu", store=store,
                 progress=False)
    after = _stamps(store)
    assert {k: after[k] for k in finished} == finished  # finished blocks kept, not redone
    assert len(_done_chunks(store)) == 12 and bool(ds.done.all())
    assert set(ds.status.values.ravel()) == {"converged"}
    ref = mw.solve(mw.SantaFeBar(threshold=0.75, sigma=0.8), nx=61, nt=60, tol=1e-10,
                   max_iter=400, progress=False)
    assert np.max(np.abs(ds.M.values[3, 2] - ref.M)) <= 1e-10
    assert _leftovers(tmp_path) == []


def _done_chunks(store: Path) -> list[Path]:
    """The chunk files of the ``done`` array (not a write cut off by a kill: zarr writes
    ``<chunk>.<hex>.partial`` and renames it; a resume removes it)."""
    return sorted(p for p in (store / "done" / "c").rglob("*")
                  if p.is_file() and not p.name.endswith(".partial")) \
        if (store / "done" / "c").is_dir() else []


def _stamps(store: Path) -> dict[str, tuple[int, int]]:
    """Inode and mtime of every chunk file: a rewritten chunk gets a new inode (zarr writes a
    temporary file and renames it)."""
    return {str(p.relative_to(store)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in store.rglob("c/**/*") if p.is_file() and not p.name.endswith(".partial")}


def _leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.name.startswith(".") or p.suffix == ".partial")


# -- Dask ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_dask_cluster_writes_the_same_scan(in_memory, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        ds = mw.scan(mw.SantaFeBar, GRID, fixed={"T": 5.0}, device="cpu", progress=False,
                     store=tmp_path / "dask.zarr", chunk_size=2,
                     scheduler=cluster.scheduler_address, **SOLVE)
        back = mw.scan(mw.SantaFeBar, GRID, fixed={"T": 5.0}, device="cpu", progress=False,
                       chunk_size=4, scheduler=cluster.scheduler_address, **SOLVE)
    xr.testing.assert_equal(ds.drop_vars("wall_time").load(),
                            in_memory.drop_vars("wall_time"))
    xr.testing.assert_equal(back.drop_vars("wall_time"), in_memory.drop_vars("wall_time"))
    assert _leftovers(tmp_path) == []


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("grid", "kwargs", "words"), [
    ({"temperature": [1, 2]}, {}, ["unknown parameter", "temperature", "threshold"]),
    ({"threshold": [0.5, "high"]}, {}, ["threshold", "'high'", "float"]),
    ({"threshold": []}, {}, ["threshold", "empty list"]),
    ("threshold: [0.5]\nthreshold: [0.6]", {}, ["duplicate key 'threshold'"]),
    ({"threshold": [0.5, 1.5]}, {}, ["threshold=1.5", "< 1"]),
    ({"theta_max": [3.0, 4.0]}, {}, ["x_min", "one grid"]),
    ({"threshold": 0.5}, {}, ["no axis to scan"]),
    ({"threshold": [0.5]}, {"keep": ("M", "V")}, ["keep"]),
    ({"threshold": [0.5]}, {"nx": 2}, ["nx=2"]),
    ({"threshold": [0.5]}, {"device": "tpu"}, ["device='tpu'"]),
    ({"threshold": [0.5]}, {"fixed": {"sigma": "wide"}}, ["sigma", "'wide'"]),
])
def test_bad_input_is_refused_before_any_solve(grid, kwargs, words, tmp_path, monkeypatch):
    def no_solve(task, *write):
        raise AssertionError("a block was solved")

    monkeypatch.setattr(scan_module, "solve_block", no_solve)
    store = tmp_path / "never.zarr"
    with pytest.raises((mw.ParameterError, mw.BackendError)) as err:
        mw.scan("santa_fe", grid, store=store, progress=False, **kwargs)
    for w in words:
        assert w in str(err.value)
    assert not store.exists() and _leftovers(tmp_path) == []


def test_command_line(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text("threshold: {linspace: [0.4, 0.8, 3]}\nsigma: [0.5]\n")
    store, nc = tmp_path / "cli.zarr", tmp_path / "cli.nc"
    args = ["scan", "--problem", "santa_fe", "--grid", str(grid), "-o", str(store),
            "-p", "nx", "21", "-p", "nt", "20", "-p", "T", "4", "--device", "cpu",
            "--no-progress"]
    assert cli([*args, "--netcdf", str(nc)]) == 0
    out = capsys.readouterr().out
    assert "3 points: 3 converged" in out and nc.is_file()
    ds = mw.open_scan(store)
    assert ds.attrs["T"] == 4.0 and ds.attrs["nx"] == 21 and ds.M.shape == (3, 1, 21, 21)
    for bad, word in ((["-p", "speed", "1"], "speed"), (["-p", "nt", "2.5"], "nt=2.5"),
                      (["--problem", "nowhere"], "nowhere")):
        assert cli([*args, *bad]) == 2
        assert word in capsys.readouterr().err
    grid.write_text("threshold: [0.4]\nsigma: [0.5]\nsigma: [0.6]\n")
    assert cli([*args[:6], str(tmp_path / "other.zarr")]) == 2
    assert "duplicate key 'sigma'" in capsys.readouterr().err
    assert not (tmp_path / "other.zarr").exists()


def test_notebook_writes_its_figures_and_table(notebook_runs):
    import json

    # 3 thresholds × 2 noise levels, 21 × 20, on the CPU, the slice at sigma 0.3
    out = notebook_runs("05_parameter_scan.ipynb").folder
    assert {p.stem for p in (out / "figures").glob("*.png")} == {
        "scan_heatmaps", "attendance_slice", "density_point"}
    executed = json.loads((out / "05_parameter_scan.ipynb").read_text())
    images = [sum("image/png" in o.get("data", {}) for o in c.get("outputs", []))
              for c in executed["cells"] if c["cell_type"] == "code"]
    assert sum(images) == 3 and max(images) == 1   # each figure shown once
    rows = json.loads((out / "points.json").read_text())
    assert [(r["threshold"], r["sigma"]) for r in rows] == [
        (a, s) for a in (0.3, 0.6, 0.9) for s in (0.3, 1.0)]
    assert {r["status"] for r in rows} == {"converged"}
    row = next(r for r in rows if r["threshold"] == 0.6 and r["sigma"] == 1.0)
    ref = mw.solve(mw.SantaFeBar(threshold=0.6, sigma=1.0), nx=21, nt=20, tol=1e-8,
                   max_iter=300, progress=False)
    assert row["mean_attendance"] == pytest.approx(ref.summary["mean_attendance"], abs=1e-12)
    assert row["iterations"] == ref.iterations

