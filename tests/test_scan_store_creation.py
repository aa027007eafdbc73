"""A scan store created by zarr directly (``create_arrays``) is the store xarray's ``to_zarr``
of the layout's template writes (``write_template``), file for file and byte for byte; a
layout that the direct path does not write (a coordinate of strings) is left to xarray."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pytest

import mfgwork as mw
from mfgwork.workflows import scan as scan_module
from mfgwork.workflows.scan_check import seal, verified
from mfgwork.workflows.scan_inspect import RECORD_ATTR
from mfgwork.workflows.scan_store import block_shape, create_arrays, read_attrs, write_template

pytest.importorskip("xarray")
pytest.importorskip("zarr")
pytest.importorskip("dask.array")

LAYOUTS = {
    "santa-fe-zip": (mw.SantaFeBar, {"threshold": [0.5, 0.6, 0.7], "eps": [0.04, 0.05, 0.06],
                                     "zip": [["threshold", "eps"]], "sigma": [0.4, 0.5]},
                     None, {"nx": 21, "nt": 20}, ("M", "U"), 4),
    "santa-fe-social-m-only": (mw.SantaFeBar, {"threshold": [0.4, 0.6]}, None,
                               {"nx": 11, "nt": 10, "objective": "social"}, ("M",), 1),
    "santa-fe-float32": (mw.SantaFeBar, {"threshold": [0.4, 0.6], "sigma": [0.5, 0.7]}, None,
                         {"nx": 11, "nt": 10, "dtype": "float32"}, ("M", "U"), 4),
    "long-x-coordinate": (mw.SantaFeBar, {"sigma": [0.5, 0.6, 0.7]}, None,
                          {"nx": 60001, "nt": 1}, (), 2),
    "two-bars-axis": (mw.TwoBars, {"threshold_1": [0.4, 0.5]}, {"spill": 0.5},
                      {"nx": 11, "nt": 10}, ("M", "U"), 2),
    "integer-axis": (None, {"step": [0, 1, 2], "sigma": [0.4, 0.5]}, None,
                     {"nx": 11, "nt": 10}, ("M",), 3),
}


def santa_fe_by_step(step: int = 1, sigma: float = 0.5) -> mw.SantaFeBar:
    """A bar whose threshold is set by an integer (an integer coordinate)."""
    return mw.SantaFeBar(threshold=0.4 + 0.1 * step, sigma=sigma)


def _layout(name: str):
    problem, grid, fixed, options, keep, chunk = LAYOUTS[name]
    plan = scan_module.make_plan(problem or santa_fe_by_step, grid, fixed, options, keep,
                                 build_points=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layout = scan_module.make_layout(plan, mw.get_backend("numpy", "cpu",
                                                             options.get("dtype")))
    return layout, block_shape(plan.shape, chunk), plan.hash()


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_the_direct_store_is_xarrays_template(name, tmp_path):
    layout, block, plan_hash = _layout(name)
    direct, template = tmp_path / "direct.zarr", tmp_path / "template.zarr"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
        assert create_arrays(direct, layout, block, plan_hash) is not None
        write_template(template, layout, block, plan_hash)
    written, expected = _files(direct), _files(template)
    assert sorted(written) == sorted(expected)
    for path, data in expected.items():
        assert written[path] == data, path


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_the_record_of_the_values_written_is_the_record_read_back(name, tmp_path):
    """A new store is sealed with the digests of the coordinates' values as written: the
    same creation record as the one made by reading them back, and a verified store."""
    layout, block, plan_hash = _layout(name)
    records = []
    for values in ("written", None):
        path = tmp_path / f"{values}.zarr"
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
            written = create_arrays(path, layout, block, plan_hash)
        assert written is not None and set(written) == set(layout.coordinates())
        seal(path, written if values else None)
        records.append(json.loads(read_attrs(path)[RECORD_ATTR]))
        assert set(verified(path).coords) <= set(written)
    assert records[0] == records[1]
    assert records[0]["values"] and set(records[0]["values"]) <= set(written)


def test_a_changed_coordinate_value_is_not_sealed_as_written(tmp_path):
    """A value given for a coordinate that differs from what is on disk makes a record
    that the store's own check refuses (nothing is sealed unverified)."""
    layout, block, plan_hash = _layout("santa-fe-float32")
    path = tmp_path / "s.zarr"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
        written = create_arrays(path, layout, block, plan_hash)
    seal(path, written | {"threshold": written["threshold"] + 1e-12})
    with pytest.raises(mw.LoadError, match="coordinate threshold"):
        verified(path)


def test_a_coordinate_of_strings_is_left_to_xarray(tmp_path):
    layout, block, plan_hash = _layout("two-bars-axis")
    named = dataclasses.replace(layout, coords={"threshold_1": ("threshold_1", ["a", "b"])})
    assert create_arrays(tmp_path / "direct.zarr", named, block, plan_hash) is None
    assert not (tmp_path / "direct.zarr").exists()


class _Named(mw.SantaFeBar):
    """A bar with one more observable, of a name the test picks."""

    extra_name = "spare"

    def observables(self, grid, M, backend):
        out = super().observables(grid, M, backend)
        return out | {self.extra_name: out["attendance"]}


@pytest.mark.parametrize("name", ["../away", "a/b", "..", "", "__meta", "a\\b"])
def test_an_observable_that_cannot_name_an_array_is_refused_before_any_store(name, tmp_path,
                                                                             monkeypatch):
    """A scan refuses an observable whose name would leave the store or break zarr's rules,
    naming it, before anything is written; a name zarr takes is stored as any other."""
    monkeypatch.setattr(_Named, "extra_name", name)
    with pytest.raises(mw.ParameterError, match="cannot name a variable of a scan"):
        mw.scan(_Named, {"threshold": [0.4, 0.6]}, nx=11, nt=10, device="cpu",
                store=tmp_path / "s.zarr", progress=False)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(_Named, "extra_name", "spare.1")
    ds = mw.scan(_Named, {"threshold": [0.4, 0.6]}, nx=11, nt=10, tol=1e-6, device="cpu",
                 store=tmp_path / "s.zarr", progress=False)
    assert (ds["spare.1"] == ds["attendance"]).all()

