"""The layout of a scan Dataset and its zarr store: blocks, creation, region writes, resume.

A scan over axes of shape ``(n_1, ..., n_k)`` is cut into rectangular *blocks* of points
(the last axes whole, then a slab of the next one), solved one block at a time. In the store
every variable is chunked by that block shape along the scan dimensions (and whole along
``t`` and ``x``), so a block is exactly one zarr chunk of each variable, except the fields,
whose blocks are cut into slabs of whole chunks (:func:`field_chunk`: files written on
several threads, points read without their whole block): blocks written by different
processes or machines never touch the same file, and each chunk file is written atomically
(a temporary file renamed into place, by zarr or :mod:`.scan_chunks`).

A block is *finished* when its chunk of the ``done`` variable is True. That chunk is written
last, after every other variable of the block and after the block's record (a digest of each
variable's values, in the ``digest`` variable, :mod:`mfgwork.workflows.scan_check`), so a
process killed at any moment leaves the block either finished (all its data on disk) or not
finished (it is solved again on the next run, overwriting whatever part of it had been
written). A rerun checks every finished block against its record and solves again those
whose chunks are missing or damaged. The store is created whole (with consolidated
metadata) under a temporary name beside its path, sealed with its creation record (digests
of its metadata and coordinates, :func:`~mfgwork.workflows.scan_check.seal`) and renamed
into place; its root attributes carry the plan's hash (``mfgwork_scan_plan``), by which a
rerun recognizes its own store and refuses any other existing path.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import math
import os
import stat
import struct
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core import storage
from ..core.errors import LoadError, ParameterError
from .differences import plan_differences
from .scan_check import (
    DIGEST,
    DONE,
    RECORD_ATTR,
    StoreCheck,
    block_record,
    check_store,
    seal,
)
from .scan_chunks import PARTIAL_WRITE, is_raw, raw_chunk_files, write_file
from .scan_inspect import inspect_store

#: Root attribute naming the plan a store was made for (its hash).
PLAN_ATTR = storage.SCAN_ATTR
#: Attributes that record where and when a scan ran, not what it computes.
PROVENANCE = {"platform", "machine", "host", "commit", "created"}
#: Attributes of what a scan computes that are not part of its identity
#: (:meth:`~mfgwork.workflows.scan_plan.ScanPlan.identity`): where ``device="auto"`` put it.
NOT_IDENTITY = {"placement"}
#: Per-point metrics: name -> (dtype, fill value for points not solved); strings are stored
#: with zarr's variable-length UTF-8 type.
METRICS: dict[str, tuple[str, Any]] = {
    "converged": ("bool", False), "status": ("object", "pending"), "iterations": ("int32", 0),
    "residual": ("float64", np.nan), "mass_error": ("float64", np.nan),
    "wall_time": ("float64", np.nan), "device": ("object", ""), "message": ("object", ""),
    "finished_by": ("object", ""), "done": ("bool", False)}
STATUSES = ("converged", "not_converged", "failed")
ATTRS = {
    "M": {"long_name": "density m(t, x)"}, "U": {"long_name": "value function u(t, x)"},
    "converged": {"long_name": "the certified residual reached tol"},
    "status": {"long_name": "converged, not_converged, failed, or pending until solved"},
    "iterations": {"long_name": "iterations: best responses (of the batch and the single "
                                "path, for a point the single path finished)"},
    "residual": {"long_name": "relative fixed-point residual of the solution"},
    "mass_error": {"long_name": "max_t |∫ m(t) dx − 1|"},
    "wall_time": {"long_name": "solve time per point (a batch's, shared among its points)",
                  "units": "s"},
    "device": {"long_name": "device that solved the point"},
    "message": {"long_name": "why a point failed or did not converge (or converged within "
                             "its float64 floor, above tol)"},
    "finished_by": {"long_name": "the solve that gave the point's values: batch, single, or "
                                 "single-warm (the single path from a warm start)"},
    "done": {"long_name": "the point's block is solved and written"},
    DIGEST: {"long_name": "digests of the values of the point's block (checked on reading)"},
    "t": {"long_name": "time"},
}


# -- blocks ------------------------------------------------------------------------------------
def block_shape(shape: Sequence[int], points: int) -> tuple[int, ...]:
    """The largest block of at most ``points`` points (at least one) that takes the last
    axes whole, then a slab of the next axis: e.g. (32, 32) with 256 points -> (8, 32)."""
    block, left = [], max(1, int(points))
    for n in reversed(shape):
        b = max(1, min(n, left))
        block.append(b)
        left = left // n if b == n else 1
    return tuple(reversed(block))


#: Bytes a field's chunk aims at: a block's field is cut into slabs of about this size, each
#: its own file, so that its files are written on several threads at once (:mod:`.scan_chunks`)
#: and a point is read with its slab rather than its whole block.
FIELD_CHUNK_BYTES = 16 * 2**20


def field_chunk(block: Sequence[int], point_bytes: int) -> tuple[int, ...]:
    """The chunk of a field along the scan axes in blocks ``block``: the largest slab of at
    most :data:`FIELD_CHUNK_BYTES` (at least one point; ``point_bytes`` a point's) that takes
    the block's last axes whole, then a divisor of the next axis's length, so that a block is
    whole chunks and each chunk is contiguous in the block's array: e.g. (32, 32) of 161 kB
    points -> (2, 32)."""
    chunk, left = [], max(1, FIELD_CHUNK_BYTES // max(1, int(point_bytes)))
    for n in reversed(block):
        c = n if n <= left else max(d for d in range(1, left + 1) if n % d == 0)
        chunk.append(c)
        left = left // n if c == n else 1
    return tuple(reversed(chunk))


def region_points(region: Sequence[slice]) -> list[tuple[int, ...]]:
    """Grid indices of the points of ``region``, in C order."""
    return list(itertools.product(*(range(s.start, s.stop) for s in region)))


# -- layout ------------------------------------------------------------------------------------
@dataclass
class Layout:
    """Dimensions, coordinates and variables of a scan Dataset.

    ``dims``/``shape``: the scan axes; ``coords``: name -> (dim, values) for every scanned
    parameter (a zipped parameter lies along its group's first name); ``t``, ``x``: the grid,
    and ``y`` for a 2-D state space (the fields are then (t, y, x)); ``fields``: the kept
    fields with their dtype; ``paths``: observables over time, name -> trailing dims
    (``("t",)``, or with a named axis such as ``("t", "bar")``); ``axes``: the values of
    such further axes; ``scalars``: per-point summaries of the observables; ``attrs``: the
    Dataset's attributes (str, int or float values only, so NetCDF can hold them).
    """

    dims: tuple[str, ...]
    shape: tuple[int, ...]
    coords: dict[str, tuple[str, list[Any]]]
    t: np.ndarray
    x: np.ndarray
    fields: dict[str, str]
    paths: dict[str, tuple[str, ...]]
    scalars: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    y: np.ndarray | None = None
    axes: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def state(self) -> tuple[str, ...]:
        """The state dimensions of the fields: ``("x",)``, or ``("y", "x")`` in 2-D."""
        return ("x",) if self.y is None else ("y", "x")

    def variables(self) -> dict[str, tuple[tuple[str, ...], str, Any]]:
        """name -> (trailing dims after the scan dims, dtype, fill value)."""
        out: dict[str, tuple[tuple[str, ...], str, Any]] = {}
        for name, dtype in self.fields.items():
            out[name] = (("t", *self.state), dtype, np.nan)
        for name, trailing in self.paths.items():
            out[name] = (trailing, "float64", np.nan)
        for name in self.scalars:
            out[name] = ((), "float64", np.nan)
        for name, (dtype, fill) in METRICS.items():
            out[name] = ((), dtype, fill)
        return out

    def grid_coords(self) -> dict[str, np.ndarray]:
        """The values of every trailing dimension: t, (y,) x and the paths' further axes."""
        return {"t": self.t, **({} if self.y is None else {"y": self.y}), "x": self.x,
                **self.axes}

    def trailing_shape(self, trailing: tuple[str, ...]) -> tuple[int, ...]:
        sizes = {name: len(values) for name, values in self.grid_coords().items()}
        return tuple(sizes[d] for d in trailing)

    def chunks(self, name: str, block: tuple[int, ...]) -> tuple[int, ...]:
        """The chunk shape of variable ``name`` in a store of blocks ``block``: the block
        (the trailing axes whole), a field's cut into slabs (:func:`field_chunk`)."""
        trailing, dtype, _ = self.variables()[name]
        rest = self.trailing_shape(trailing)
        if name in self.fields:
            return field_chunk(block, math.prod(rest) * np.dtype(dtype).itemsize) + rest
        return tuple(block) + rest

    def dataset(self, block: tuple[int, ...] | None = None) -> Any:
        """The Dataset: in memory (NumPy, every point at its fill value), or with ``block``
        a lazy template of Dask arrays chunked by blocks, to create a store from."""
        import xarray as xr

        data = {}
        for name, (trailing, dtype, fill) in self.variables().items():
            full = self.shape + self.trailing_shape(trailing)
            if block is None or dtype == "object":  # (strings: small, written at creation)
                arr = np.full(full, fill, dtype=dtype)
            else:
                import dask.array as da

                arr = da.full(full, fill, dtype=dtype,
                              chunks=tuple(block) + self.trailing_shape(trailing))
            data[name] = xr.Variable(self.dims + trailing, arr, ATTRS.get(name, {}))
        coords = {name: xr.Variable(dims, values, attrs)
                  for name, (dims, values, attrs) in self.coordinates().items()}
        return xr.Dataset(data, coords=coords, attrs=dict(self.attrs))

    def coordinates(self) -> dict[str, tuple[tuple[str, ...], np.ndarray, dict[str, Any]]]:
        """name -> (dims, values, attributes) of every coordinate: the scanned parameters,
        then t, (y,) x and the paths' further axes."""
        coords = {name: ((dim,), np.asarray(values), {})
                  for name, (dim, values) in self.coords.items()}
        # the state's symbols (``state_name``: "θ", or "θ1, θ2" for x and y in 2-D)
        labels = dict(zip(("x", "y"), str(self.attrs.get("state_name", "x")).split(", "),
                          strict=False))
        for dim, values in self.grid_coords().items():
            attrs = {"long_name": labels[dim]} if dim in labels else ATTRS.get(dim, {})
            coords[dim] = ((dim,), np.asarray(values), dict(attrs))
        return coords


# -- the store ---------------------------------------------------------------------------------
class ScanStore:
    """A scan's zarr store at ``path``: created whole (at a new path, or renamed over an
    empty folder) or reopened for the same plan."""

    def __init__(self, path: str | os.PathLike, layout: Layout, plan_hash: str,
                 block: tuple[int, ...]) -> None:
        self.path = Path(path).absolute()
        self.layout, self.plan_hash = layout, plan_hash
        #: The check of the store when it was opened: finished points, damaged blocks.
        self.check: StoreCheck
        if self.path.exists() and not _empty_folder(self.path):
            self.block = self._reopen()
        else:
            self._create(block)
            self.block = tuple(block)
            self.check = StoreCheck(np.zeros(layout.shape, dtype=bool), self.block, [])

    # creation and recognition
    def _create(self, block: tuple[int, ...]) -> None:
        tmp = storage.temporary_sibling(self.path, "tmp")
        try:
            with warnings.catch_warnings():  # (zarr: consolidated metadata is not in v3 spec)
                warnings.filterwarnings("ignore", "Consolidated metadata", UserWarning)
                written = create_arrays(tmp, self.layout, block, self.plan_hash)
                if written is None:
                    write_template(tmp, self.layout, block, self.plan_hash)
            seal(tmp, written)
            os.chmod(tmp, 0o755)
            os.rename(tmp, self.path)   # (over an empty folder: refused if it filled since)
        finally:
            storage.discard_temporary(tmp)  # (after the rename: only its owner record)

    def _reopen(self) -> tuple[int, ...]:
        storage.check_links(self.path, name="store")
        attrs = read_attrs(self.path)
        if attrs is None:
            raise ParameterError(f"store={str(self.path)!r} exists and is not a scan store: "
                                 "refusing to write into it (choose a new path or an empty "
                                 "folder)")
        inspect_store(self.path)  # (no FIFO, link or implausible size before zarr reads)
        if attrs.get(PLAN_ATTR) != self.plan_hash:
            differences = self._differences(attrs) or \
                "another problem, grid or solver settings"
            raise ParameterError(
                f"store={str(self.path)!r} holds a different scan (there → here: "
                f"{differences}): a scan resumes only its own store; choose a new path or "
                "remove that one")
        self._remove_partial_writes()
        for name in [*self.layout.variables(), DIGEST]:
            if not (self.path / name / "zarr.json").is_file():
                raise LoadError(self.path / name / "zarr.json", f"is missing: the store has "
                                f"no array {name}, which this scan writes")
        self.check = check_store(self.path)
        if self.check.finished.shape != self.layout.shape:
            raise LoadError(self.path / DONE / "zarr.json", f"gives the scan the shape "
                            f"{self.check.finished.shape}, not {self.layout.shape}")
        return self.check.block

    def _differences(self, attrs: Mapping[str, Any]) -> str:
        """The parameters, grid values and kept fields that differ between the stored scan
        and this one ("" where these agree and the difference lies elsewhere). The
        ``placement`` attribute (where ``device="auto"`` put the points) is not part of a
        scan's identity (:meth:`ScanPlan.identity`) and is left out."""
        import zarr

        from .scan_plan import FIELDS

        def stored(name: str) -> Any:
            with contextlib.suppress(Exception):
                return np.asarray(zarr.open_array(self.path / name, mode="r")[...]).tolist()
            return None

        def kept(names: Any) -> str:
            return ",".join(f for f in FIELDS if f in names) or "none"

        def compared(k: str) -> bool:
            return k not in PROVENANCE and k not in NOT_IDENTITY and not k.startswith("version_")

        here = {k: v for k, v in self.layout.attrs.items() if compared(k)}
        there = {k: v for k, v in attrs.items() if compared(k)
                 and (k in here or k not in (PLAN_ATTR, RECORD_ATTR))}
        grid_here = {name: np.asarray(values).tolist()
                     for name, (_, values) in self.layout.coords.items()}
        grid_there = {name: values for name in [*str(attrs.get("scanned", "")).split(", "),
                                                *grid_here]
                      if name and (values := stored(name)) is not None}
        keep_there = [f for f in FIELDS if (self.path / f / "zarr.json").is_file()]
        return plan_differences(
            {"parameters": there, "grid": grid_there, "keep": kept(keep_there)},
            {"parameters": here, "grid": grid_here, "keep": kept(self.layout.fields)})

    def _remove_partial_writes(self) -> None:
        """Temporary files of chunk writes cut short by a killed process: zarr's local store
        and :func:`.scan_chunks.write_file` write ``<chunk>.<32 hex digits>.partial`` in an
        array's chunk folder (``<array>/c/...``) and rename it. Nothing else is removed
        (another file or a folder of a like name, or one elsewhere in the store)."""
        for root, _, files in os.walk(self.path):
            parts = Path(root).relative_to(self.path).parts
            if len(parts) < 2 or parts[1] != "c":
                continue
            for name in files:
                if PARTIAL_WRITE.fullmatch(name):
                    Path(root, name).unlink(missing_ok=True)

    # state
    def finished(self) -> np.ndarray:
        """The points of blocks that are finished and hold what their record says."""
        return self.check.finished

    # writing
    def write_block(self, region: tuple[slice, ...], arrays: Mapping[str, np.ndarray]) -> None:
        """Write a block's arrays into its region, ``done`` last (see the module docstring)."""
        write_region(self.path, region, arrays)


# -- creating a store ---------------------------------------------------------------------------
def write_template(path: str | os.PathLike, layout: Layout, block: tuple[int, ...],
                   plan_hash: str) -> None:
    """Write a new store at ``path``: xarray's ``to_zarr`` of the layout's lazy template
    (:meth:`Layout.dataset`), nothing computed but the coordinates and the strings, chunked
    by ``block``, the numbers uncompressed (:data:`RAW`), with consolidated metadata."""
    template = layout.dataset(block)
    template.attrs[PLAN_ATTR] = plan_hash
    encoding = {name: {"chunks": layout.chunks(name, block)}
                for name in template.data_vars}
    for name, var in template.data_vars.items():
        if var.dtype != object:
            encoding[name] |= RAW
    template[DIGEST] = digest_variable(layout.dims, layout.shape)
    encoding[DIGEST] = {"chunks": tuple(block)}
    template.to_zarr(path, mode="w", compute=False, consolidated=True, encoding=encoding)


#: The encoding of a store's numeric variables: raw bytes, written as files by
#: :mod:`.scan_chunks` (the fields are float noise that zstd shrinks by less than 10 %; the
#: per-point numbers are a few kB a block, each of whose writes through zarr took about 1 ms).
RAW: dict[str, Any] = {"compressors": None}

#: The dtypes of the coordinates that :func:`create_arrays` writes itself (the values of
#: numeric axes); any other (e.g. strings) leaves the store to :func:`write_template`.
DIRECT_COORDINATES = ("float64", "int64")


def create_arrays(path: str | os.PathLike, layout: Layout, block: tuple[int, ...],
                  plan_hash: str) -> dict[str, np.ndarray] | None:
    """Write the new store at ``path`` (a new or empty folder) that :func:`write_template`
    writes, by zarr directly: the same arrays with the same metadata (what xarray's encoding
    gives them: NaN fill values recorded as ``_FillValue``, the ``coordinates`` of zipped
    parameters), the coordinates and strings written, in three passes on zarr's event loop
    (the arrays created, the values written, the metadata consolidated) instead of xarray's
    one call per array and Dask's graph of the writes it leaves uncomputed. Returns the
    coordinates' values written (by name), or None (nothing written) where a coordinate is
    not one of :data:`DIRECT_COORDINATES`."""
    coords = layout.coordinates()
    if any(values.dtype.name not in DIRECT_COORDINATES or " " in name
           for name, (_, values, _) in coords.items()):
        return None
    from zarr.core.sync import sync

    # non-index coordinates (zipped parameters) are named by the variables along their dim
    aside = {name: dims for name, (dims, _, _) in coords.items() if dims != (name,)}
    arrays = {}
    variables = layout.variables() | {DIGEST: ((), "object", "")}
    for name, (trailing, dtype, fill) in variables.items():
        dims = layout.dims + trailing
        shape = layout.shape + layout.trailing_shape(trailing)
        attrs = dict(ATTRS.get(name, {}))
        on = sorted(c for c, along in aside.items() if set(along) <= set(dims))
        if on:
            attrs["coordinates"] = " ".join(on)
        options: dict[str, Any] = {"chunks": tuple(block) if name == DIGEST
                                   else layout.chunks(name, block)}
        if dtype != "object":
            options |= RAW
        # strings are written (zarr's fill value for them is "": a chunk of "" is not)
        values = np.full(shape, fill, dtype=object) if dtype == "object" and fill != "" \
            else None
        arrays[name] = _array(dims, shape, np.dtype(dtype), attrs, options, values)
    for name, (dims, values, attrs) in coords.items():
        arrays[name] = _array(dims, values.shape, values.dtype, attrs, {"chunks": "auto"},
                              values)
    sync(_create_arrays(str(path), layout.attrs | {PLAN_ATTR: plan_hash}, arrays))
    return {name: values for name, (_, values, _) in coords.items()}


def _array(dims: tuple[str, ...], shape: tuple[int, ...], dtype: np.dtype,
           attrs: dict[str, Any], options: dict[str, Any], values: np.ndarray | None
           ) -> tuple[dict[str, Any], np.ndarray | None]:
    """The arguments of zarr's ``create_array`` for one variable as xarray gives them (its
    fill value NaN, recorded in ``_FillValue``, for floats; zarr's own for the others;
    strings of zarr's variable-length type), and the values to write (None: none)."""
    if dtype.kind == "f":
        attrs = attrs | {"_FillValue": base64.standard_b64encode(
            struct.pack("<d", np.nan)).decode()}
    return {"shape": shape, "dtype": str if dtype.kind == "O" else dtype,
            "fill_value": np.nan if dtype.kind == "f" else None, "dimension_names": dims,
            "attributes": attrs, "overwrite": True,
            "config": {"write_empty_chunks": False}} | options, values   # (xarray's default)


async def _create_arrays(path: str, attrs: Mapping[str, Any],
                         arrays: Mapping[str, tuple[dict[str, Any], np.ndarray | None]]
                         ) -> None:
    """Make the store in memory (zarr's ``MemoryStore``), then write its files into the new
    empty folder ``path``, each created anew: the same bytes as zarr's local store writes,
    without its look-ups and deletions of what each array's path held (about 2 ms an array:
    the store of a 32 × 32 scan took 75 ms on the CPU of the tests that way, 32 ms this
    way)."""
    import asyncio

    from zarr.api.asynchronous import consolidate_metadata, open_group
    from zarr.storage import MemoryStore

    files: dict[str, Any] = {}
    store = MemoryStore(files)
    group = await open_group(store, mode="w", zarr_format=3, attributes=dict(attrs))
    names = list(arrays)
    made = await asyncio.gather(*(group.create_array(name, **arrays[name][0])
                                  for name in names))
    await asyncio.gather(*(array.setitem(slice(None), arrays[name][1])
                           for name, array in zip(names, made, strict=True)
                           if arrays[name][1] is not None))
    await consolidate_metadata(store)
    root = Path(path)
    for key, buffer in files.items():   # (zarr refuses names that would leave the store)
        target = root.joinpath(*key.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as fh:   # (never over a file this did not write)
            fh.write(buffer.to_bytes())


#: Held while zarr's configuration is changed for a write (it is global to the process).
_WRITING = threading.Lock()


def write_region(path: str | os.PathLike, region: tuple[slice, ...],
                 arrays: Mapping[str, np.ndarray]) -> None:
    """Region write of one block into the store at ``path``: the data and the block's record
    (:func:`~mfgwork.workflows.scan_check.block_record`, digested beside the writes)
    together, ``done`` last. The chunk files of the raw arrays (the numbers, :data:`RAW`) are
    written directly, on one thread per file (:mod:`.scan_chunks`), the strings through
    zarr."""
    import zarr
    from zarr.core.sync import sync

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mfgwork-record") as pool, \
            ThreadPoolExecutor(max_workers=min(FILE_THREADS, os.cpu_count() or 1),
                               thread_name_prefix="mfgwork-chunks") as files:
        record = pool.submit(block_record, arrays, files)   # (one pool: no core shared)
        with _WRITING, zarr.config.set({"array.write_empty_chunks": True}):
            # (every chunk is written: zarr's comparison of each with the fill value, to
            # skip it, costs more than writing it)
            sync(_write_block(str(path), region, arrays, record, files))


#: Threads that write a block's raw chunk files at most.
FILE_THREADS = 16


async def _write_block(path: str, region: tuple[slice, ...], arrays: Mapping[str, np.ndarray],
                       record: Future, files: ThreadPoolExecutor) -> None:
    """The writes of :func:`write_region`, on zarr's event loop: every variable but ``done``
    and the record at once (the raw arrays' chunk files on the threads of ``files``, the
    others through zarr), then ``done``. A write that fails is raised once the others have
    ended, before ``done``."""
    import asyncio

    from zarr.api.asynchronous import open_group

    group = await open_group(path, mode="r+", zarr_format=3)
    names = [name for name in arrays if name != DONE]
    stored = await asyncio.gather(*(group.getitem(n) for n in names))

    def write(name: str, array: Any) -> list[Any]:
        """The writes of ``arrays[name]`` into ``array``: its chunk files where it is raw and
        the region whole chunks, else zarr's."""
        chunks = raw_chunk_files(Path(path, name), array, region, arrays[name]) \
            if is_raw(array) else None
        if chunks is None:
            return [array.setitem(region, arrays[name])]
        return [asyncio.wrap_future(files.submit(write_file, target, chunk))
                for target, chunk in chunks]

    async def put_record() -> None:
        text = await asyncio.wrap_future(record)
        digest = await group.getitem(DIGEST)
        await digest.setitem(region, np.full(tuple(s.stop - s.start for s in region), text,
                                             dtype=object))

    writes = [w for name, array in zip(names, stored, strict=True) for w in write(name, array)]
    outcomes = await asyncio.gather(*writes, put_record(), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    await asyncio.gather(*write(DONE, await group.getitem(DONE)))


def digest_variable(dims: tuple[str, ...], shape: tuple[int, ...]) -> object:
    """The ``digest`` variable of a new store: an empty record at every point."""
    import xarray as xr

    return xr.Variable(dims, np.full(shape, "", dtype=object), ATTRS[DIGEST])


def read_attrs(path: str | os.PathLike) -> dict[str, Any] | None:
    """The root attributes of a scan store at ``path``, or None if it is not one (no
    ``zarr.json``, or one without a scan plan); a ``zarr.json`` that cannot be read as a
    JSON object raises :class:`~mfgwork.LoadError` naming it."""
    meta = Path(path) / "zarr.json"
    if not (meta.exists() or meta.is_symlink()):
        return None
    root = storage.read_json(meta)
    attrs = root.get("attributes") if isinstance(root, dict) else None
    if isinstance(attrs, dict) and PLAN_ATTR in attrs:
        return attrs
    return None


def _empty_folder(path: Path) -> bool:
    """Whether ``path`` is a folder (not a link to one) with nothing in it."""
    if path.is_symlink() or not path.is_dir():
        return False
    with os.scandir(path) as entries:
        return next(entries, None) is None


def check_store_target(path: str | os.PathLike) -> Path:
    """``path`` as an absolute path if a scan may create or resume a store there (the rule
    of :func:`mfgwork.core.storage.check_target`: new, empty, or a zarr store, which
    :class:`ScanStore` then checks for its plan); else :class:`ParameterError`."""
    return storage.check_target(path, "scan", name="store", legacy=["zarr.json"],
                                what="scan store", forceable=False)


@contextlib.contextmanager
def store_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold ``.<name>.lock`` beside the store while a scan writes it: a second scan of the
    same store is refused instead of racing the first (the lock file is removed after)."""
    from filelock import FileLock, Timeout

    path = check_store_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_file = path.with_name(f".{path.name}.lock")
    if os.path.lexists(lock_file) and not stat.S_ISREG(os.lstat(lock_file).st_mode):
        raise ParameterError(f"store={str(path)!r} is refused: its lock {lock_file} is not a "
                             "regular file (a link, a folder or a FIFO); remove it")
    lock = FileLock(lock_file, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise ParameterError(f"store={str(path)!r} is being written by another scan") from None
    try:
        # temporaries of creations killed earlier (their owner records prove it)
        storage.remove_stale(path)
        yield
    finally:
        lock_file.unlink(missing_ok=True)  # (while held: no other scan can have taken it)
        lock.release()
