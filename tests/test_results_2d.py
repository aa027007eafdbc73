"""2-D results are Results: one save (``Result.save``), one ``mw.load``, one ``to_xarray``; a
folder that does not hold a 2-D result's layout is refused with a LoadError naming what."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core import storage
from mfgwork.results import FIELDS


@pytest.fixture(scope="module")
def room() -> mw.Result2D:
    return mw.solve_2d(mw.Room(), nx=11, nt=6, progress=False)


@pytest.fixture(scope="module")
def bars() -> mw.Result2D:
    return mw.solve_2d(mw.TwoBars(T=1.0), nx=9, nt=4, progress=False)


def test_a_2d_result_is_a_result_with_labelled_axes(room, bars):
    for r in (room, bars):
        assert isinstance(r, mw.Result) and r.dims == ("t", "y", "x")
        assert r.converged and r.status == "converged" and r.residual <= r.params["tol"]
        assert r.U.shape == r.M.shape == (r.t.size, r.y.size, r.x.size)
    assert room.doors == room.labels["door"] == tuple(e.label for e in mw.Room().exits)
    assert room.door_outflow.shape == (7, 2) and room.observable_dims("mass") == ("t",)
    assert bars.labels["bar"] == ("1", "2") and bars.doors == ()
    assert bars.observable_dims("attendance") == ("t", "bar") and bars.attendance.shape == (5, 2)
    # the mass path is Σ V m on the control volumes of the result's own coordinates
    grid = mw.Room().grid(11, 11, 6)
    np.testing.assert_allclose(room.weights, grid.volumes, rtol=1e-14, atol=0)
    np.testing.assert_allclose((room.M * room.weights).sum(axis=(1, 2)), room.mass,
                               rtol=1e-14, atol=0)


@pytest.mark.parametrize("name", ["room", "bars"])
def test_mw_load_gives_back_the_2d_result_exactly(name, request, tmp_path):
    r = request.getfixturevalue(name)
    r.save(tmp_path / "run")
    back = mw.load(tmp_path / "run")
    assert type(back) is mw.Result2D and back.problem is None
    assert (back.dims, back.labels, back.status, back.residual, back.iterations) == (
        r.dims, r.labels, r.status, r.residual, r.iterations)
    assert back.observables.keys() == r.observables.keys() and back.arrays.keys() == r.arrays.keys()
    for key, value in ({k: getattr(r, k) for k in FIELDS} | r.observables | r.arrays).items():
        np.testing.assert_array_equal(getattr(back, key), value)
        assert getattr(back, key).dtype == np.asarray(value).dtype, key
    assert back.mass_error == r.mass_error and back.metrics()["ny"] == r.y.size
    # the certificate from the saved arrays: the problem is passed (it is not saved)
    assert back.check(r.problem) == pytest.approx(r.check(), rel=1e-12, abs=0)
    with pytest.raises(mw.ParameterError, match="pass the problem that was solved"):
        back.check()


def test_to_xarray_has_the_axes_t_y_x_and_their_coordinates(room, bars):
    ds = room.to_xarray()
    for name in ("U", "M", "velocity_x", "velocity_y"):
        assert ds[name].dims == ("t", "y", "x")
    for axis in ("t", "y", "x"):
        np.testing.assert_array_equal(ds[axis].values, getattr(room, axis))
    n, j, i = 3, 4, 9
    assert ds["M"].sel(t=room.t[n], y=room.y[j], x=room.x[i]).item() == room.M[n, j, i]
    assert ds["door_outflow"].dims == ("t", "door") and list(ds["door"].values) == list(room.doors)
    assert ds["obstacle"].dims == ("y", "x") and ds["obstacle"].dtype == bool
    assert ds["mass"].dims == ("t",) and ds.attrs["status"] == "converged"
    np.testing.assert_array_equal(bars.to_xarray()["attendance"].sel(bar="2").values,
                                  bars.attendance[:, 1])


def test_to_xarray_of_1d_and_named_state_results():
    res = mw.solve(mw.SantaFeBar(), nx=21, nt=20, progress=False)
    ds = res.to_xarray()
    assert ds["M"].dims == res.dims == ("t", "θ") and ds["attendance"].dims == ("t",)
    np.testing.assert_array_equal(ds["θ"].values, res.x)
    two = mw.solve_two_state(mw.TwoStateElFarol(), nt=20).to_xarray()
    assert two["M"].dims == ("t", "state") and list(two["state"].values) == ["home", "bar"]
    assert two["gap"].dims == ("t",)


def _tamper(folder, *, metrics=None, drop=None):
    """Change ``metrics.json`` by ``metrics(dict)`` and drop the array ``drop``."""
    data = json.loads((folder / "metrics.json").read_text())
    if metrics is not None:
        metrics(data)
    if drop is not None:
        data["arrays"].remove(drop)
        data["array_dims"].pop(drop)
        with np.load(folder / "arrays.npz") as npz:
            kept = {k: npz[k] for k in npz.files if k != drop}
        np.savez(folder / "arrays.npz", **kept)
    (folder / "metrics.json").write_text(json.dumps(data))


@pytest.mark.parametrize(("change", "match"), [
    ({"drop": "velocity_x"}, r"does not hold a Result2D: .*needs \['velocity_x'\]"),
    ({"drop": "y"}, r"does not hold a Result2D: .*needs \['y'\]"),
    ({"metrics": lambda m: m["array_dims"].update(door_outflow=["t"])},
     r"arrays.npz.*door_outflow"),
    ({"metrics": lambda m: m["labels"].update(door=["one door"])},
     r"arrays.npz.*door_outflow"),
    ({"metrics": lambda m: m.update(dims=["t", "x"])}, r"array_dims=.*distinct axes of"),
    ({"metrics": lambda m: m.update(dims=["t", "x", "y"])},
     r"does not hold a Result2D: dims=\('t', 'x', 'y'\)"),
    ({"metrics": lambda m: m.update(result="Result3D")}, r"result='Result3D'"),
    ({"metrics": lambda m: m["array_dims"].update(obstacle=["y", "z"])},
     r"array_dims=.*must map names to distinct axes"),
])
def test_a_tampered_2d_folder_is_refused(room, tmp_path, change, match):
    folder = room.save(tmp_path / "run")
    _tamper(folder, **change)
    with pytest.raises(mw.LoadError, match=match):
        mw.load(folder)


@pytest.mark.parametrize(("scale", "digests", "match"), [
    (3.0, True, "'M' differs from the SHA-256"),
    (-1.0, True, "'M' differs from the SHA-256"),
    (1.001, False, "mass off by 0.001"),     # Σ V m against the mass path
    (-1.0, False, "'M' has the value -"),
])
def test_a_2d_density_changed_after_saving_is_refused(room, tmp_path, scale, digests, match):
    folder = room.save(tmp_path / "run")
    with np.load(folder / "arrays.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    np.savez(folder / "arrays.npz", **arrays | {"M": scale * arrays["M"]})
    if not digests:
        _tamper(folder, metrics=lambda m: m.pop("array_sha256"))
    with pytest.raises(mw.LoadError, match=match), pytest.warns(RuntimeWarning) \
            if not digests else contextlib.nullcontext():
        mw.load(folder)


def test_a_folder_of_the_former_2d_layout_is_refused(room, tmp_path):
    folder = room.save(tmp_path / "run")
    storage.write_marker(folder, "result2d")   # the kind of 2-D folders before they were runs
    with pytest.raises(mw.LoadError, match="is a 'result2d' folder, not a run folder"):
        mw.load(folder)
