"""Scan stores that are checked before they are trusted: every finished block against the
record written with it, every array's metadata against the scan; damaged blocks solved
again (and said so), damaged stores refused by ``open_scan`` naming the file."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import threading
import time
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

    def counting(task, *write):
        solved.append(task.region)
        return real(task, *write)

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


def test_a_resume_removes_the_chunk_writes_cut_short_and_nothing_else(store):
    """A chunk's temporary file (``<chunk>.<32 hex>.partial`` in its array's chunk folder)
    is removed on a resume; a folder, or files of other names or places, are left alone."""
    cut = store / "M" / "c" / "1" / "0" / "0" / f"0.{'ab' * 16}.partial"
    cut.write_bytes(b"half")
    kept = [store / "M" / "c" / "0.abc.partial", store / "notes.partial",
            store / "M" / f"0.{'ab' * 16}.partial", store / "M" / "c" / f"x.{'ab' * 16}.partial"]
    for path in kept:
        path.write_bytes(b"mine")
    (store / "M" / "c" / "x.partial").mkdir()
    ds = mw.scan(mw.SantaFeBar, GRID, store=store, **KW)
    assert bool(ds.done.all()) and (store / "M" / "c" / "x.partial").is_dir()
    assert not cut.exists()
    assert [path.read_bytes() for path in kept] == [b"mine"] * len(kept)


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


# -- hostile files and metadata: refused before zarr reads anything -----------------------------
def within(seconds: float, call, fifo: Path | None = None):
    """``call()`` in a thread, failing instead of hanging when it still runs after
    ``seconds`` (a FIFO read blocks until a writer comes: ``fifo`` is then opened for
    writing, to end the read)."""
    outcome = {}

    def target():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - raised again in the test
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if fifo is not None and stat.S_ISFIFO(os.lstat(fifo).st_mode):
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"{call} ran for more than {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _replace_by_fifo(path: Path) -> Path:
    path.unlink()
    os.mkfifo(path)
    return path


def _replace_by_socket(path: Path) -> Path:
    path.unlink()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
    except OSError as exc:  # (a path longer than a socket's name may be)
        pytest.skip(f"cannot bind a socket there: {exc}")
    finally:
        sock.close()
    return path


def _replace_by_link(path: Path) -> Path:
    copy = path.parent.parent / f"{path.name}-copy"
    shutil.copyfile(path, copy)
    path.unlink()
    path.symlink_to(copy)
    return path


SPECIAL = {
    "FIFO done chunk": (_replace_by_fifo, "done/" + KEY2, "FIFO"),
    "FIFO M chunk": (_replace_by_fifo, "M/" + KEY4, "FIFO"),
    "FIFO digest chunk": (_replace_by_fifo, "digest/" + KEY2, "FIFO"),
    "FIFO coordinate zarr.json": (_replace_by_fifo, "threshold/zarr.json", "FIFO"),
    "FIFO t chunk": (_replace_by_fifo, "t/c/0", "FIFO"),
    "FIFO beside the arrays": (lambda p: (os.mkfifo(p), p)[1], "notes", "FIFO"),
    "socket status chunk": (_replace_by_socket, "status/" + KEY2, "socket"),
    "link as M chunk": (_replace_by_link, "M/" + KEY4, "symbolic link"),
    "link as sigma zarr.json": (_replace_by_link, "sigma/zarr.json", "symbolic link"),
}


@pytest.mark.parametrize("case", list(SPECIAL))
def test_special_file_anywhere_is_refused_without_blocking(case, store):
    make, where, word = SPECIAL[case]
    bad = make(store / where)
    for verify in (True, False):
        with pytest.raises(mw.LoadError, match=word) as err:
            within(20, lambda verify=verify: mw.open_scan(store, verify=verify), bad)
        assert str(bad) in str(err.value)
    with pytest.raises((mw.LoadError, mw.ParameterError)) as err:  # the resume
        within(20, lambda: mw.scan(mw.SantaFeBar, GRID, store=store, **KW), bad)
    assert where.split("/")[0] in str(err.value)


def _edit_all_meta(store: Path, change) -> None:
    """``change(name, meta)`` applied to every array's zarr.json and to its consolidated
    copy in the root zarr.json (a consistent edit)."""
    root = json.loads((store / "zarr.json").read_text())
    for name, meta in root["consolidated_metadata"]["metadata"].items():
        change(name, meta)
        _edit_meta(store / name / "zarr.json", lambda m, name=name: change(name, m))
    (store / "zarr.json").write_text(json.dumps(root))


def _inflate(points: int, whole_coordinate: bool = True):
    """The first scanned axis grown to ``points`` points in every array's metadata."""
    def change(name, meta):
        if meta["dimension_names"][:1] == ["threshold"]:
            meta["shape"][0] = points
            if name == "threshold" and whole_coordinate:
                meta["chunk_grid"]["configuration"]["chunk_shape"] = [points]
    return lambda store: _edit_all_meta(store, change)


def _inflate_grid(store: Path) -> None:
    """t and x of 10^6 values each in every array's metadata, nt and nx to match."""
    sizes = {"t": 10**6 + 1, "x": 10**6}

    def change(name, meta):
        grid = meta["chunk_grid"]["configuration"]
        for key, values in (("shape", meta), ("chunk_shape", grid)):
            values[key] = [sizes.get(d, n) for d, n in zip(meta["dimension_names"],
                                                            values[key], strict=True)]

    _edit_all_meta(store, change)
    _edit_meta(store / "zarr.json", lambda m: m["attributes"].update(nt=10**6, nx=10**6))


def _drop_record(store: Path) -> None:
    _edit_meta(store / "zarr.json", lambda m: m["attributes"].pop("mfgwork_scan_record"))


#: case -> (change, drop the record, message with verify, message without)
INFLATED = {
    "10^6 points": (_inflate(500_000), False, "zarr.json: differs .* in shape",
                    "zarr.json: differs .* in shape"),
    "10^6 points, no record": (_inflate(500_000), True, "no creation record",
                               "not a readable zarr store .*reshape"),
    "10^15 points": (_inflate(10**15), False, "declares 2000000000000000 points",
                     "declares 2000000000000000 points"),
    "10^6 coordinate chunks": (_inflate(10**6, whole_coordinate=False), True,
                               "threshold/zarr.json: splits the coordinate",
                               "threshold/zarr.json: splits the coordinate"),
    "grid of 10^6 x 10^6": (_inflate_grid, True, "M/zarr.json: declares M .* needs",
                            "M/zarr.json: declares M .* needs"),
}


@pytest.mark.parametrize("case", list(INFLATED))
def test_inflated_metadata_is_refused_fast(case, store):
    change, no_record, *messages = INFLATED[case]
    change(store)
    if no_record:
        _drop_record(store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (no record: "not verified")
        for verify, message in zip((True, False), messages, strict=True):
            start = time.perf_counter()
            with pytest.raises(mw.LoadError, match=message):
                within(20, lambda verify=verify: mw.open_scan(store, verify=verify))
            assert time.perf_counter() - start < 1.0


def test_store_of_a_million_points_opens_fast_reading_only_its_files(store):
    """Metadata grown to 10^6 points and sealed again (a record that agrees): the check
    reads only the chunk files on disk, the Dataset groups blocks for Dask, and the points
    without files are pending (this hung for minutes)."""
    from mfgwork.workflows.scan_check import seal

    _inflate(500_000)(store)
    zarr.open_array(str(store / "threshold"), mode="r+")[...] = np.linspace(0, 1, 500_000)
    _drop_record(store)
    seal(store)
    start = time.perf_counter()
    ds = within(60, lambda: mw.open_scan(store))
    head = ds.isel(threshold=slice(0, 4)).load()
    assert time.perf_counter() - start < 20
    assert ds.sizes["threshold"] == 500_000 and len(ds.M.chunks[0]) <= 4096
    assert list(head.status.values[:, 0]) == ["converged"] * 3 + ["pending"]


def test_sparse_giant_chunk_is_refused_before_reading(store):
    with open(store / "M" / KEY4, "r+b") as fh:
        fh.truncate(8 * 2**30)
    start = time.perf_counter()
    with pytest.raises(mw.LoadError, match=r"M/c/1/0/0/0: is 8589934592 bytes, more than"):
        within(20, lambda: mw.open_scan(store, verify=False))
    assert time.perf_counter() - start < 1.0


# -- coordinates and value-changing metadata: covered by the creation record ---------------------
def _set_values(store: Path, name: str, change) -> None:
    arr = zarr.open_array(str(store / name), mode="r+")
    arr[...] = change(arr[...])


COORDINATES = {
    "threshold rewritten": (lambda s: _set_values(s, "threshold", lambda v: v + 0.05),
                            "threshold"),
    "threshold deleted": (lambda s: (s / "threshold" / "c" / "0").unlink(), "threshold"),
    "sigma rewritten": (lambda s: _set_values(s, "sigma", lambda v: v[::-1]), "sigma"),
    "t rescaled": (lambda s: _set_values(s, "t", lambda v: 2 * v), "t"),
    "x deleted": (lambda s: (s / "x" / "c" / "0").unlink(), "x"),
}


@pytest.mark.parametrize("case", list(COORDINATES))
def test_changed_coordinate_is_a_load_error_naming_it(case, store):
    damage, name = COORDINATES[case]
    damage(store)
    with pytest.raises(mw.LoadError, match=f"coordinate {name} that differ") as err:
        mw.open_scan(store)
    assert str(store / name) in str(err.value)
    with pytest.raises(mw.LoadError, match=f"coordinate {name}"):
        mw.scan(mw.SantaFeBar, GRID, store=store, **KW)


def _attr(name: str, key: str, value, consolidate: bool):
    def change(store: Path) -> None:
        zarr.open_array(str(store / name), mode="r+").attrs[key] = value
        if consolidate:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                zarr.consolidate_metadata(str(store))
    return change


METADATA_CHANGES = {
    "scale_factor on M": (_attr("M", "scale_factor", 3.0, False), "M/zarr.json"),
    "scale_factor on residual, consolidated": (_attr("residual", "scale_factor", 3.0, True),
                                               "scale_factor"),
    "add_offset on M, consolidated": (_attr("M", "add_offset", 1.0, True), "add_offset"),
    "_FillValue 0 on residual, consolidated": (
        _attr("residual", "_FillValue", "AAAAAAAAAAA=", True), "_FillValue"),
    "time units on t, consolidated": (_attr("t", "units", "days since 2000-01-01", True),
                                      r"attribute 'units' \(added\)"),
    "long_name of M changed, consolidated": (_attr("M", "long_name", "other", True),
                                             r"attribute 'long_name' \(changed\)"),
    "fill value of M": (lambda s: _edit_all_meta(s, lambda n, m: m.update(fill_value=0.0)
                                                 if n == "M" else None), "fill_value"),
    "M retyped float32": (lambda s: _edit_all_meta(s, lambda n, m: m.update(
        data_type="float32") if n == "M" else None), "M/zarr.json: .*(data_type|_FillValue)"),
    "codec of residual": (lambda s: _edit_all_meta(s, lambda n, m: m.update(codecs=[
        {"name": "bytes", "configuration": {"endian": "big"}}]) if n == "residual"
        else None), "residual/zarr.json: differs .* codecs"),
    "root attribute tol": (lambda s: _edit_meta(s / "zarr.json", lambda m: m["attributes"]
                                                .update(tol=1.0)), r"attribute 'tol'"),
}


@pytest.mark.parametrize("case", list(METADATA_CHANGES))
def test_metadata_changed_after_creation_is_a_load_error_naming_it(case, store):
    damage, message = METADATA_CHANGES[case]
    damage(store)
    for verify in (True, False):
        with pytest.raises(mw.LoadError, match=message):
            mw.open_scan(store, verify=verify)


def test_lost_done_flag_makes_points_pending_whatever_the_data(store):
    """The probe: a block's done chunk deleted and its M chunk altered read back as
    converged. A point without its flag is pending: none of its stored values is served."""
    m = zarr.open_array(str(store / "M"), mode="r+")
    m[BLOCK] = 3 * m[BLOCK]
    (store / "done" / KEY2).unlink()
    for verify in (True, False):
        ds = mw.open_scan(store, verify=verify).load()
        block = ds.isel(threshold=BLOCK[0])
        assert set(block.status.values.ravel()) == {"pending"}
        assert not block.converged.any() and not block.done.any()
        assert np.isnan(block.M.values).all() and np.isnan(block.residual.values).all()
        assert set(ds.isel(threshold=[0, 2]).status.values.ravel()) == {"converged"}
    again = mw.scan(mw.SantaFeBar, GRID, store=store, **KW)
    assert bool(again.done.all()) and set(again.status.values.ravel()) == {"converged"}


def test_record_without_an_array_is_not_a_record(store):
    """A block record edited to leave out M (with M changed) does not vouch for the block."""
    digest = zarr.open_array(str(store / "digest"), mode="r+")
    text = str(digest[1, 0])
    digest[BLOCK] = ";".join(p for p in text.split(";") if not p.startswith("M="))
    m = zarr.open_array(str(store / "M"), mode="r+")
    m[BLOCK] = -m[BLOCK]
    with pytest.raises(mw.LoadError, match="without a complete record"):
        mw.open_scan(store)


def test_store_without_creation_record_opens_only_unverified(store):
    _drop_record(store)
    with pytest.raises(mw.LoadError, match="no creation record"):
        mw.open_scan(store)
    with pytest.warns(RuntimeWarning, match="not verified"):
        ds = mw.open_scan(store, verify=False)
    assert bool(ds.done.all())
    with pytest.raises(mw.LoadError, match="no creation record"):
        mw.scan(mw.SantaFeBar, GRID, store=store, **KW)


def test_creation_record_covers_every_array_and_coordinate(pristine):
    from mfgwork.workflows.scan_inspect import RECORD_ATTR

    record = json.loads(json.loads((pristine / "zarr.json").read_text())
                        ["attributes"][RECORD_ATTR])
    arrays = {p.parent.name for p in pristine.glob("*/zarr.json")}
    assert set(record["arrays"]) == arrays
    assert set(record["values"]) == {"threshold", "sigma", "t", "x"}
    assert RECORD_ATTR not in mw.open_scan(pristine).attrs


def test_a_float32_scan_writes_and_opens_its_store(tmp_path):
    """A float32 scan's M and U carry the NaN _FillValue that xarray writes as a float64
    (8 bytes over 4-byte values): the store opens, its values are the solves'."""
    grid = {"threshold": [0.4, 0.7]}
    ds = mw.scan(mw.SantaFeBar, grid, nx=21, nt=21, tol=1e-3, dtype="float32", device="cpu",
                 store=tmp_path / "f32.zarr", progress=False)
    assert str(ds["M"].dtype) == "float32" and bool(np.asarray(ds["converged"]).all())
    again = mw.open_scan(tmp_path / "f32.zarr")
    single = mw.solve(mw.SantaFeBar(threshold=0.7), nx=21, nt=21, tol=1e-8)
    assert np.abs(np.asarray(again["M"][1]) - single.M).max() < 1e-2 * single.M.max()


def test_block_record_digests_pieces_in_parallel_and_earlier_records_still_verify(
        store, monkeypatch):
    """A block record holds BLAKE2b of each array's dtype and shape and of its pieces'
    CRC-32 (computed on several threads); records of the earlier kinds (plain BLAKE2b, and
    BLAKE2b of the pieces' BLAKE2b) are still checked as such, and a changed value fails
    each kind."""
    import hashlib
    import zlib

    from mfgwork.workflows import scan_check
    from mfgwork.workflows.scan_check import block_record, check_store, parse_record

    def plain(a):
        a = np.ascontiguousarray(a)
        return hashlib.blake2b(f"{a.dtype.str}{a.shape}".encode() + a.tobytes(),
                               digest_size=8).hexdigest()

    a = np.random.default_rng(5).random((3, 7, 5)).astype(np.float32)   # 420 bytes
    raw, head = a.tobytes(), f"{a.dtype.str}{a.shape}".encode()
    crcs = b"".join(zlib.crc32(raw[k: k + 64]).to_bytes(4, "little")
                    for k in range(0, len(raw), 64))
    blakes = b"".join(hashlib.blake2b(raw[k: k + 64], digest_size=16).digest()
                      for k in range(0, len(raw), 64))
    with monkeypatch.context() as patched:   # many pieces, several threads
        patched.setattr(scan_check, "CRC_PIECE_BYTES", 64)
        patched.setattr(scan_check, "PIECE_BYTES", 64)
        assert parse_record(block_record({"M": a}))["M"] == \
            "c" + hashlib.blake2b(head + crcs, digest_size=8).hexdigest()
        assert scan_check.value_digest(a, "p") == \
            "p" + hashlib.blake2b(head + blakes, digest_size=8).hexdigest()
    with pytest.raises(ValueError, match="kind='x'"):
        scan_check.value_digest(a, "x")

    mw.scan(mw.SantaFeBar, GRID, store=store, **KW)
    group = zarr.open_group(str(store), mode="r+")
    names = set(parse_record(group["digest"][BLOCK][0, 0]))
    assert scan_check.value_digest(group["M"][BLOCK]) == plain(group["M"][BLOCK])
    M = group["M"][BLOCK]
    for kind in ("", "p"):
        group["M"][BLOCK] = M
        earlier = ";".join(f"{name}={scan_check.value_digest(group[name][BLOCK], kind)}"
                           for name in sorted(names))
        group["digest"][BLOCK] = np.full((1, 2), earlier, dtype=object)
        check = check_store(store)
        assert check.finished.all() and check.damaged == [], kind
        group["M"][BLOCK] = M * 1.0001
        assert [d.region for d in check_store(store).damaged] == [BLOCK], kind


def test_a_write_leaves_zarr_configuration_as_it_was(store):
    before = zarr.config.get("array.write_empty_chunks")
    mw.scan(mw.SantaFeBar, GRID, store=store, **KW)
    assert zarr.config.get("array.write_empty_chunks") == before
