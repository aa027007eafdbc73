"""A scan's fields cut into slabs of chunks and written as files directly: the slabs cut each
block evenly, the files hold zarr's bytes, the scan reads back as in memory, a missing slab
is found, and a failed write leaves its block unfinished with nothing of its own behind."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.errors import LoadError
from mfgwork.workflows import scan as scan_module
from mfgwork.workflows import scan_chunks, scan_store
from mfgwork.workflows.scan_check import blocks, check_store, finished_points
from mfgwork.workflows.scan_inspect import inspect_store
from mfgwork.workflows.scan_store import ScanStore, block_shape, field_chunk, write_region

xr = pytest.importorskip("xarray")
zarr = pytest.importorskip("zarr")
pytest.importorskip("dask.array")

GRID = {"threshold": [0.4, 0.5, 0.6, 0.7, 0.8], "sigma": [0.4, 0.6, 0.8]}
SOLVE = {"nx": 21, "nt": 20, "tol": 1e-10, "max_iter": 400}


@pytest.mark.parametrize("block, points", [((32, 32), 103), ((32, 32), 5000), ((7, 47), 100),
                                           ((1000,), 100), ((97,), 50), ((3, 4, 5), 7),
                                           ((6, 5), 1), ((2, 3), 0)])
def test_field_chunks_are_the_largest_slabs_that_cut_the_block_evenly(block, points,
                                                                     monkeypatch):
    monkeypatch.setattr(scan_store, "FIELD_CHUNK_BYTES", points * 8)
    chunk = field_chunk(block, 8)
    # the slabs of the block: ones before an axis k, a divisor of its length, whole after it
    slabs = [(1,) * k + (d,) + tuple(block[k + 1:]) for k in range(len(block))
             for d in range(1, block[k] + 1) if block[k] % d == 0]
    assert chunk in slabs
    fitting = [math.prod(s) for s in slabs if math.prod(s) <= max(1, points)]
    assert math.prod(chunk) == max(fitting)


def test_the_h200_block_of_float32_points_is_cut_in_sixteen():
    assert field_chunk((32, 32), 201 * 201 * 4) == (2, 32)
    assert field_chunk((8, 8), 201 * 201 * 4) == (8, 8)   # 10 MB: one chunk


def _store(path: Path, points: int, monkeypatch, like: ScanStore | None = None
           ) -> tuple[ScanStore, list]:
    """A new store of the 5 × 3 grid in blocks of (4, 3) whose fields are cut into (2, 3):
    the last block's field chunk runs past the array's end (``like``: with that store's
    layout, its attributes to the second)."""
    plan = scan_module.make_plan(mw.SantaFeBar, GRID, None, SOLVE, ("M", "U"),
                                 build_points=False)
    if like is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            layout = scan_module.make_layout(plan, mw.get_backend("numpy", "cpu"))
    else:
        layout = like.layout
    point = (SOLVE["nt"] + 1) * SOLVE["nx"] * 8
    monkeypatch.setattr(scan_store, "FIELD_CHUNK_BYTES", points * point)
    store = ScanStore(path, layout, plan.hash(), block_shape(plan.shape, 12))
    return store, list(blocks(plan.shape, store.block))


def _arrays(store: ScanStore, region: tuple[slice, ...], seed: int) -> dict[str, np.ndarray]:
    """Values of every variable of a block (random numbers; strings and flags as a scan
    writes them)."""
    rng, layout = np.random.default_rng(seed), store.layout
    shape = tuple(s.stop - s.start for s in region)
    out = {}
    for name, (trailing, dtype, _) in layout.variables().items():
        full = shape + layout.trailing_shape(trailing)
        if dtype == "object":
            out[name] = np.full(full, "converged" if name == "status" else "", dtype=object)
        elif dtype == "bool":
            out[name] = np.ones(full, dtype=bool)
        else:
            out[name] = (rng.random(full) * 100).astype(dtype)
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_split_fields_written_directly_hold_zarrs_bytes(tmp_path, monkeypatch):
    direct, regions = _store(tmp_path / "direct.zarr", 6, monkeypatch)
    through, _ = _store(tmp_path / "zarr.zarr", 6, monkeypatch, like=direct)
    assert direct.block == (4, 3) and len(regions) == 2
    for k, region in enumerate(regions):
        write_region(direct.path, region, _arrays(direct, region, k))
    written = []
    monkeypatch.setattr(scan_store, "write_file", lambda *a: written.append(a))
    monkeypatch.setattr(scan_store, "is_raw", lambda array: False)   # zarr writes them all
    for k, region in enumerate(regions):
        write_region(through.path, region, _arrays(through, region, k))
    assert written == []
    mine, zarrs = _files(direct.path), _files(through.path)
    assert sorted(mine) == sorted(zarrs)
    for path, data in zarrs.items():
        assert mine[path] == data, path
    # three chunk files of M: two in the first block, the last one padded past the end
    chunks = sorted(p for p in mine if p.startswith("M/c/"))
    assert chunks == ["M/c/0/0/0/0", "M/c/1/0/0/0", "M/c/2/0/0/0"]
    stored = np.frombuffer(mine["M/c/2/0/0/0"], dtype="<f8").reshape(2, 3, 21, 21)
    assert np.isnan(stored[1]).all() and np.isfinite(stored[0]).all()
    check = check_store(direct.path)
    assert check.finished.all() and not check.damaged
    # every variable but the strings (and the records) is written as files
    stored = {name: zarr.open_array(direct.path / name, mode="r")
              for name in [*direct.layout.variables(), "digest"]}
    assert sorted(n for n, a in stored.items() if not scan_chunks.is_raw(a)) == \
        ["device", "digest", "finished_by", "message", "status"]


def test_a_scan_with_split_fields_reads_back_and_finds_a_missing_chunk(tmp_path, monkeypatch):
    memory = mw.scan(mw.SantaFeBar, GRID, device="cpu", progress=False, **SOLVE)
    point = (SOLVE["nt"] + 1) * SOLVE["nx"] * 8
    monkeypatch.setattr(scan_store, "FIELD_CHUNK_BYTES", 3 * point)
    path = tmp_path / "split.zarr"
    stored = mw.scan(mw.SantaFeBar, GRID, device="cpu", progress=False, store=path,
                     chunk_size=6, **SOLVE)
    assert inspect_store(path).arrays["U"].chunks[:2] == (1, 3)   # blocks (2, 3)
    xr.testing.assert_equal(stored.drop_vars("wall_time").load(),
                            memory.drop_vars("wall_time"))
    lost = path / "U" / "c" / "3" / "0" / "0" / "0"   # the second slab of the second block
    lost.unlink()
    with pytest.raises(LoadError, match="block"):
        mw.open_scan(path)
    check = check_store(path)
    assert [d.region for d in check.damaged] == [(slice(2, 4), slice(0, 3))]
    assert check.damaged[0].file == path / "U" / "c" / "2" / "0" / "0" / "0"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # (the damaged block, said)
        again = mw.scan(mw.SantaFeBar, GRID, device="cpu", progress=False, store=path,
                        chunk_size=6, **SOLVE)
    assert lost.is_file()
    xr.testing.assert_equal(again.drop_vars("wall_time").load(),
                            memory.drop_vars("wall_time"))
    xr.testing.assert_equal(mw.open_scan(path).drop_vars("wall_time").load(),
                            memory.drop_vars("wall_time"))


def test_a_failed_chunk_write_leaves_its_block_unfinished_and_no_temporary(tmp_path,
                                                                        monkeypatch):
    store, regions = _store(tmp_path / "store.zarr", 6, monkeypatch)
    calls = []
    real = scan_store.write_file

    def failing(target: Path, chunk: np.ndarray) -> None:
        calls.append(target)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(target, chunk)

    monkeypatch.setattr(scan_store, "write_file", failing)
    with pytest.raises(OSError, match="No space"):
        write_region(store.path, regions[0], _arrays(store, regions[0], 0))
    assert len(calls) >= 4 and [p.exists() for p in calls].count(False) == 1   # (done not)
    assert not finished_points(inspect_store(store.path)).any()

    def refused(src: object, dst: object) -> None:   # the rename fails: the temporary goes
        raise OSError(5, "Input/output error")

    target = store.path / "U" / "c" / "0" / "0" / "0" / "0"
    before = target.read_bytes()
    monkeypatch.setattr(scan_chunks.os, "replace", refused)
    with pytest.raises(OSError, match="Input/output"):
        scan_chunks.write_file(target, np.zeros((2, 3, 21, 21)))
    monkeypatch.undo()
    assert target.read_bytes() == before
    assert sorted(p.name for p in store.path.rglob("*.partial")) == []


def test_chunks_that_do_not_cut_a_block_evenly_are_refused(tmp_path, monkeypatch):
    store, _ = _store(tmp_path / "store.zarr", 6, monkeypatch)
    assert inspect_store(store.path).arrays["M"].chunks[:2] == (2, 3)
    chunks = scan_store.Layout.chunks

    def uneven(layout, name, block):   # M in slabs of three rows of blocks of four
        good = chunks(layout, name, block)
        return (3,) + good[1:] if name == "M" else good

    monkeypatch.setattr(scan_store.Layout, "chunks", uneven)
    bad = tmp_path / "bad.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert scan_store.create_arrays(bad, store.layout, store.block, "plan")
    with pytest.raises(LoadError, match="does not agree with done"):
        inspect_store(bad)


def test_a_store_of_compressed_block_chunks_is_resumed_through_zarr(tmp_path, monkeypatch):
    """A store whose arrays are compressed and one chunk a block (as another writer may make
    them) is resumed through zarr, and reads as the scan in memory."""
    memory = mw.scan(mw.SantaFeBar, GRID, device="cpu", progress=False, **SOLVE)
    path = tmp_path / "zstd.zarr"
    with monkeypatch.context() as m:
        m.setattr(scan_store, "RAW", {})
        m.setattr(scan_store, "FIELD_CHUNK_BYTES", 2**62)
        mw.scan(mw.SantaFeBar, GRID, device="cpu", progress=False, store=path, chunk_size=6,
                **SOLVE)
    meta = json.loads((path / "U" / "zarr.json").read_text())
    assert [c["name"] for c in meta["codecs"]] == ["bytes", "zstd"]
    assert meta["chunk_grid"]["configuration"]["chunk_shape"][:2] == [2, 3]
    (path / "done" / "c" / "1" / "0").unlink()   # the second block unfinished
    written = []
    real = scan_store.write_file
    monkeypatch.setattr(scan_store, "write_file",
                        lambda target, chunk: (written.append(target), real(target, chunk)))
    again = mw.scan(mw.SantaFeBar, GRID, device="cpu", progress=False, store=path,
                    chunk_size=6, **SOLVE)
    assert written == [] and (path / "done" / "c" / "1" / "0").is_file()
    for ds in (again, mw.open_scan(path)):
        xr.testing.assert_equal(ds.drop_vars("wall_time").load(), memory.drop_vars("wall_time"))
