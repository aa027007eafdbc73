"""Scan stores that are checked before they are trusted: every finished block against the
record written with it, every array's metadata against the scan; damaged blocks solved
again (and said so), damaged stores refused by ``open_scan`` naming the file."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.__main__ import main as cli
from mfgwork.workflows import scan as scan_module

xr = pytest.importorskip("xarray")
zarr = pytest.importorskip("zarr")

GRID = {"threshold": [0.4, 0.6, 0.8], "sigma": [0.5, 0.7]}
KW = {"nx": 11, "nt": 10, "tol": 1e-8, "max_iter": 300, "device": "cpu", "progress": False,
      "chunk_size": 2}
#: The middle block (threshold=0.6, both sigmas) and its chunk key in 2-D and 4-D arrays.
BLOCK, KEY2, KEY4 = (slice(1, 2), slice(0, 2)), "c/1/0", "c/1/0/0/0"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("pristine") / "scan.zarr"
    mw.scan(mw.SantaFeBar, GRID, store=store, **KW)
    return store


@pytest.fixture
def store(pristine, tmp_path) -> Path:
    copy = tmp_path / "scan.zarr"
    shutil.copytree(pristine, copy)
    return copy


def _rewrite(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _random_same_size(path: Path) -> None:
    size = path.stat().st_size
    path.write_bytes(np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes())


def _never_written(store: Path) -> None:
    """The block's data and record gone, its done flag left set."""
    for meta in store.glob("*/zarr.json"):
        name = meta.parent.name
        if name == "done":
            continue
        for key in (KEY2, KEY4, "c/1/0/0"):  # (scalars, fields, paths over t)
            if (meta.parent / key).is_file():
                (meta.parent / key).unlink()


DAMAGE = {
    "M chunk deleted": (lambda s: (s / "M" / KEY4).unlink(), "M/" + KEY4),
    "attendance chunk deleted": (lambda s: (s / "attendance" / "c/1/0/0").unlink(),
                                 "attendance/c/1/0/0"),
    "M chunk cut": (lambda s: _rewrite(s / "M" / KEY4, (s / "M" / KEY4).read_bytes()[:100]),
                    "M/" + KEY4),
    "residual chunk garbage": (lambda s: _rewrite(s / "residual" / KEY2, b"garbage"),
                               "residual/" + KEY2),
    "U chunk random bytes of its size": (lambda s: _random_same_size(s / "U" / KEY4),
                                         "U/" + KEY4),
    "status chunk removed": (lambda s: (s / "status" / KEY2).unlink(), "status/" + KEY2),
    "digest chunk removed": (lambda s: (s / "digest" / KEY2).unlink(), "digest/" + KEY2),
    "done set on a block never written": (_never_written, "digest/" + KEY2),
    "done chunk garbage": (lambda s: _rewrite(s / "done" / KEY2, b"\x00" * 3), "done/" + KEY2),
    "digest chunk garbage": (lambda s: _random_same_size(s / "digest" / KEY2),
                             "digest/" + KEY2),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_block_is_refused_on_open_and_solved_again_on_resume(case, store, pristine):
    damage, file = DAMAGE[case]
    damage(store)
    with pytest.raises(mw.LoadError) as err:
        mw.open_scan(store)
    assert str(store / file) in str(err.value) and "1 block(s)" in str(err.value)
    assert "block threshold[1:2], sigma[0:2]" in str(err.value)
    with pytest.warns(RuntimeWarning, match=r"solving 1 finished block\(s\) again") as rec:
        ds = mw.scan(mw.SantaFeBar, GRID, store=store, **KW)
    message = str(rec[0].message)
    assert "threshold=0.6, sigma=0.5…0.7" in message and file in message
    ref = mw.open_scan(pristine).load()
    xr.testing.assert_identical(ds.load().drop_vars("wall_time"), ref.drop_vars("wall_time"))
    assert set(ds.status.values.ravel()) == {"converged"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mw.open_scan(store)  # whole again, and quiet
        again = mw.scan(mw.SantaFeBar, GRID, store=store, **KW)  # nothing to re-solve
    assert bool(again.done.all())
    assert [p for p in store.parent.rglob("*")
            if p.name.startswith(".") or p.name.endswith(".partial")] == []


def test_only_the_damaged_block_is_solved_again(store, monkeypatch):
    solved = []
    real = scan_module.solve_block

    def counting(task):
        solved.append(task.region)
        return real(task)

    monkeypatch.setattr(scan_module, "solve_block", counting)
    (store / "M" / KEY4).unlink()
    with pytest.warns(RuntimeWarning):
        mw.scan(mw.SantaFeBar, GRID, store=store, **KW)
    assert solved == [BLOCK]


def test_command_line_says_which_blocks_it_solves_again(store, capsys):
    (store / "attendance" / "c/1/0/0").unlink()
    args = ["scan", "--problem", "santa_fe", "--grid", json.dumps(GRID), "-o", str(store),
            "-p", "nx", "11", "-p", "nt", "10", "-p", "tol", "1e-8", "-p", "max_iter", "300",
            "--device", "cpu", "--chunk-size", "2", "--no-progress"]
    with pytest.warns(RuntimeWarning, match="attendance"):
        assert cli(args) == 0
    assert "6 points: 6 converged" in capsys.readouterr().out


def _edit_meta(path: Path, change) -> None:
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


METADATA = {
    "garbage array zarr.json": (lambda s: _rewrite(s / "M" / "zarr.json", b"\x00garbage{"),
                                "M/zarr.json"),
    "truncated array zarr.json": (
        lambda s: _rewrite(s / "U" / "zarr.json", (s / "U" / "zarr.json").read_bytes()[:50]),
        "U/zarr.json"),
    "done retyped": (lambda s: _edit_meta(s / "done" / "zarr.json",
                                          lambda m: m.update(data_type="int8")),
                     "done/zarr.json"),
    "done reshaped": (lambda s: _edit_meta(s / "done" / "zarr.json",
                                           lambda m: m.update(shape=[6, 2])),
                      "done/zarr.json"),
    "M rechunked": (lambda s: _edit_meta(
        s / "M" / "zarr.json",
        lambda m: m["chunk_grid"]["configuration"].update(chunk_shape=[3, 2, 11, 11])),
        "M/zarr.json"),
    "M array removed": (lambda s: shutil.rmtree(s / "M"), "M"),
    "non-UTF-8 root zarr.json": (lambda s: _rewrite(s / "zarr.json", b"\xff\xfe{}"),
                                 "zarr.json"),
    "root zarr.json a list": (lambda s: _rewrite(s / "zarr.json", b"[1, 2]"), None),
}


@pytest.mark.parametrize("case", list(METADATA))
def test_damaged_metadata_is_a_load_error_naming_the_file(case, store, capsys):
    damage, file = METADATA[case]
    damage(store)
    error = mw.ParameterError if file is None else mw.LoadError
    with pytest.raises(error) as err:
        mw.open_scan(store)
    if file is not None:
        assert str(store / file) in str(err.value)
    with pytest.raises(error):
        mw.scan(mw.SantaFeBar, GRID, store=store, **KW)
    args = ["scan", "--problem", "santa_fe", "--grid", json.dumps(GRID), "-o", str(store),
            "-p", "nx", "11", "-p", "nt", "10", "--device", "cpu", "--chunk-size", "2",
            "--no-progress"]
    assert cli(args) == 2
    err_text = capsys.readouterr().err
    assert err_text.startswith("error: ") and "Traceback" not in err_text


def test_folder_named_partial_is_left_alone_and_files_removed(store):
    (store / "M" / "c" / "x.partial").mkdir()
    (store / "M" / "c" / "1" / "0" / "0" / "0.abc.partial").write_bytes(b"half")
    ds = mw.scan(mw.SantaFeBar, GRID, store=store, **KW)
    assert bool(ds.done.all()) and (store / "M" / "c" / "x.partial").is_dir()
    assert not (store / "M" / "c" / "1" / "0" / "0" / "0.abc.partial").exists()


def test_store_is_consolidated_and_open_zarr_is_quiet(pristine):
    root = json.loads((pristine / "zarr.json").read_text())
    assert "consolidated_metadata" in root
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = xr.open_zarr(pristine)
    assert "M" in ds and "done" in ds


def test_netcdf_export_leaves_out_the_bookkeeping(pristine, tmp_path):
    for source in (pristine, mw.scan(mw.SantaFeBar, {"threshold": [0.5]}, **KW)):
        nc = scan_module.to_netcdf(source, tmp_path / "out.nc")
        back = xr.open_dataset(nc, engine="h5netcdf")
        assert "done" not in back and "digest" not in back and "status" in back
        back.close()
    assert "digest" not in mw.open_scan(pristine)


def test_record_covers_every_variable(pristine):
    from mfgwork.workflows.scan_check import check_store, parse_record

    record = parse_record(zarr.open_array(str(pristine / "digest"))[0, 0])
    data = {p.parent.name for p in pristine.glob("*/zarr.json")} - {
        "done", "digest", "threshold", "sigma", "t", "x"}
    assert set(record) == data and {"M", "U", "status", "attendance"} <= data
    check = check_store(pristine)
    assert check.finished.all() and check.damaged == []


def test_an_array_added_beside_the_scan_is_left_alone(store):
    group = zarr.open_group(str(store), mode="r+", use_consolidated=False)
    group.create_array("extra", shape=(3, 2), chunks=(1, 2), dtype="float64")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mw.open_scan(store)
        ds = mw.scan(mw.SantaFeBar, GRID, store=store, **KW)
    assert bool(ds.done.all())
