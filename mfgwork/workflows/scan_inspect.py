"""What a scan store holds on disk, checked before zarr reads any of it.

:func:`inspect_store` walks the store once (``os.scandir``, no link followed): every entry
must be a folder or a regular file; a symbolic link, a FIFO, a socket or a device anywhere
in it is refused with a :class:`~mfgwork.LoadError` naming it (zarr would follow the link,
or block forever reading the FIFO). Each array's ``zarr.json`` is then read as bounded JSON
and checked, from the metadata alone:

- shapes, chunk grids and data types are well formed; the scan's arrays share the ``done``
  array's shape, their chunks are its blocks or cut them evenly (a block is whole chunks of
  each), whole along ``t``, ``x`` and their other axes; coordinates are
  in at most :data:`COORD_CHUNKS` chunks; each dimension has one size in the store, ``t``
  ``nt + 1`` values and ``x`` ``nx`` (``y`` ``ny``) as the root attributes say;
- no attribute changes values on reading (``scale_factor``, ``add_offset``,
  ``missing_value``, ``_Unsigned``, ``_Encoding``, ``dtype``, or a ``_FillValue`` other than
  the NaN the writer puts on floating arrays);
- the consolidated copy of each array's metadata in the root ``zarr.json`` (what xarray
  reads) is the array's own;
- what checking and opening need fits in memory (a flag per point, one block of each array,
  the coordinates whole), and no chunk file is larger than its chunk can be encoded in.

:func:`check_metadata` then compares the metadata with the store's *creation record* (the
root attribute :data:`RECORD_ATTR`, written when the store is created,
:func:`mfgwork.workflows.scan_check.seal`): a digest of every entry of every array's
metadata (each attribute apart), of every root attribute and of every coordinate's values.
None of these changes after creation, so a shape inflated, a fill value, data type or codec
changed, an attribute added or removed is a LoadError naming the array and the entry. All of
this reads only the folder listing and the JSON metadata: refusals take milliseconds.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core import memory, storage
from ..core.errors import LoadError

#: The variable holding each point's block record (``name=hex;...``), and the flag.
DIGEST, DONE = "digest", "done"
#: Root attribute holding the store's creation record (a JSON text).
RECORD_ATTR = "mfgwork_scan_record"
#: Largest ``zarr.json`` of an array, and of the root (which holds the consolidated copies).
ARRAY_META_BYTES, ROOT_META_BYTES = 2**20, 64 * 2**20
#: Bytes a string element may take in a chunk file (messages are cut at 400 characters), and
#: in memory (a reference and a short text).
STRING_FILE_BYTES, STRING_MEMORY_BYTES = 64 * 2**10, 512
#: Bytes per point the check keeps (the done flag, the finished mask, a record's reference).
POINT_BYTES = 32
#: Attributes by which xarray would change values on reading.
VALUE_ATTRS = ("scale_factor", "add_offset", "missing_value", "_Unsigned", "_Encoding",
               "dtype")
#: Data types the writer uses (numbers, flags, variable-length strings).
DATA_TYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
              "uint64", "float32", "float64", "string"}
#: Most chunks of a coordinate (zarr cuts long ones into chunks of about 1 MB).
COORD_CHUNKS = 256
#: The only chunk key encoding the writer uses (chunk files at ``c/i/j/...``).
CHUNK_KEYS = {"name": "default", "configuration": {"separator": "/"}}


@dataclass
class Array:
    """One array's metadata, checked: its ``zarr.json``, shape, chunk shape, dtype, dims."""

    file: Path
    meta: dict[str, Any]
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    dims: tuple[str, ...]

    @property
    def itemsize(self) -> int:
        """Bytes of one element in memory (strings: about :data:`STRING_MEMORY_BYTES`)."""
        return STRING_MEMORY_BYTES if self.dtype == "string" else np.dtype(self.dtype).itemsize

    @property
    def chunk_file_bytes(self) -> int:
        """Most bytes a chunk file may hold: the raw chunk (strings: at most
        :data:`STRING_FILE_BYTES` each), a compressor's worst case and a margin."""
        raw = math.prod(self.chunks) * (STRING_FILE_BYTES if self.dtype == "string"
                                        else self.itemsize)
        return raw + raw // 64 + 64 * 2**10

    @property
    def grid(self) -> tuple[int, ...]:
        """Chunks along each axis."""
        return tuple(-(-n // c) for n, c in zip(self.shape, self.chunks, strict=True))


@dataclass
class Inspection:
    """A store's metadata, checked (:func:`inspect_store`): the root attributes, each array,
    the chunk files on disk (by chunk index, per array), the scan's data arrays (chunked by
    blocks; ``done`` and ``digest`` among them) and its coordinates."""

    path: Path
    attrs: dict[str, Any]
    consolidated: dict[str, Any] | None
    arrays: dict[str, Array]
    chunks: dict[str, set[tuple[int, ...]]] = field(default_factory=dict)
    data: tuple[str, ...] = ()
    coords: tuple[str, ...] = ()

    @property
    def done(self) -> Array:
        return self.arrays[DONE]


# -- the walk ----------------------------------------------------------------------------------
def walk(path: Path) -> tuple[set[str], dict[str, dict[tuple[int, ...], tuple[Path, int]]]]:
    """The names of the arrays with a ``zarr.json`` and, per array, its chunk files (path
    and size) by chunk index; a link or a file that is not regular anywhere is a
    LoadError."""
    _regular_or_folder(path, os.lstat(path).st_mode, folder=True)
    metas: set[str] = set()
    chunks: dict[str, dict[tuple[int, ...], tuple[Path, int]]] = {}
    stack = [path]
    while stack:
        here = stack.pop()
        with os.scandir(here) as entries:
            for e in entries:
                info = e.stat(follow_symlinks=False)
                mode = info.st_mode
                _regular_or_folder(Path(e.path), mode)
                if stat.S_ISDIR(mode):
                    stack.append(Path(e.path))
                    continue
                parts = Path(e.path).relative_to(path).parts
                if len(parts) == 2 and parts[1] == "zarr.json":
                    metas.add(parts[0])
                elif len(parts) >= 3 and parts[1] == "c" and all(
                        p.isascii() and p.isdigit() and len(p) < 19 for p in parts[2:]):
                    chunks.setdefault(parts[0], {})[tuple(int(p) for p in parts[2:])] = \
                        (Path(e.path), info.st_size)
    return metas, chunks


def _regular_or_folder(path: Path, mode: int, *, folder: bool = False) -> None:
    if stat.S_ISLNK(mode):
        raise LoadError(path, f"is a symbolic link (to {os.readlink(path)!r}): a scan store "
                        "is read only from its own files, never through a link")
    if stat.S_ISDIR(mode) or (stat.S_ISREG(mode) and not folder):
        return
    if stat.S_ISREG(mode):
        raise LoadError(path, "is a file, not a scan store (a folder)")
    raise LoadError(path, f"is {storage.special_file_kind(mode)}, not a regular file or a folder: "
                    "refused before anything is read (reading it could block forever)")


# -- the metadata ------------------------------------------------------------------------------
def inspect_store(path: str | os.PathLike) -> Inspection:
    """The store at ``path`` walked and its metadata checked (module docstring); a
    :class:`~mfgwork.LoadError` names the first file that is wrong."""
    path = Path(path)
    names, files = walk(path)
    root = storage.read_json(path / "zarr.json", max_bytes=ROOT_META_BYTES, follow=False)
    if not isinstance(root, dict) or not isinstance(root.get("attributes"), dict):
        raise LoadError(path / "zarr.json", "holds no group attributes")
    consolidated = (root.get("consolidated_metadata") or {}).get("metadata") \
        if isinstance(root.get("consolidated_metadata"), dict) else None
    if DONE not in names:
        raise LoadError(path / DONE / "zarr.json", "is missing: a scan store has a done flag")
    record = _record_of(path, root["attributes"])
    if record is not None or isinstance(consolidated, dict):
        # the scan's arrays and those xarray sees; others beside them are never read
        names &= {*(record or {}).get("arrays", ()), *(consolidated or ()), DONE}
    arrays = {name: _array(path / name / "zarr.json") for name in sorted(names)}
    ins = Inspection(path, root["attributes"], consolidated, arrays)
    _check_consolidated(ins)
    _classify(ins)
    _check_layout(ins)
    _check_attributes(ins)
    _check_sizes(ins, files)
    return ins


def _array(file: Path) -> Array:
    """An array's ``zarr.json``, read (bounded, no link) and checked to be well formed."""
    meta = storage.read_json(file, max_bytes=ARRAY_META_BYTES, follow=False)

    def bad(what: str) -> LoadError:
        return LoadError(file, f"is not the metadata of a scan store's array: {what}")

    if not isinstance(meta, dict) or meta.get("node_type") != "array":
        raise bad("no node_type 'array'")
    shape = meta.get("shape")
    grid = meta.get("chunk_grid")
    chunks = grid.get("configuration", {}).get("chunk_shape") if isinstance(grid, dict) \
        and isinstance(grid.get("configuration"), dict) else None
    dims = meta.get("dimension_names")
    if not (_ints(shape, 0) and _ints(chunks, 1) and len(chunks) == len(shape)
            and grid.get("name") == "regular"):
        raise bad(f"shape {shape!r:.80} and chunk_grid {grid!r:.120} must be lists of "
                  "integers (>= 0, chunks >= 1) of one length, on a regular grid")
    if meta.get("data_type") not in DATA_TYPES:
        raise bad(f"data_type {meta.get('data_type')!r:.60} is none of {sorted(DATA_TYPES)}")
    if not (isinstance(dims, list) and len(dims) == len(shape)
            and all(isinstance(d, str) for d in dims)):
        raise bad(f"dimension_names {dims!r:.80} must name the {len(shape)} axes")
    if meta.get("chunk_key_encoding") != CHUNK_KEYS:
        raise bad(f"chunk_key_encoding {meta.get('chunk_key_encoding')!r:.80} is not "
                  f"{CHUNK_KEYS}")
    if not isinstance(meta.get("attributes", {}), dict):
        raise bad("attributes must be an object")
    return Array(file, meta, tuple(shape), tuple(chunks), meta["data_type"], tuple(dims))


def _ints(values: Any, low: int) -> bool:
    return isinstance(values, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and low <= v < 2**53 for v in values)


def _check_consolidated(ins: Inspection) -> None:
    """The root's consolidated copy of each array's metadata (what xarray reads) must be
    the array's own ``zarr.json``, and name no array without one."""
    if ins.consolidated is None:
        return
    if not isinstance(ins.consolidated, dict):
        raise LoadError(ins.path / "zarr.json", "holds consolidated metadata that is not an "
                        "object")
    for name, copy in ins.consolidated.items():
        if name not in ins.arrays:
            raise LoadError(ins.path / str(name) / "zarr.json", "is missing, while the "
                            "store's consolidated metadata (zarr.json) lists the array")
        own = ins.arrays[name].meta
        differ = _differing(copy, own) if isinstance(copy, dict) else ["the whole entry"]
        if differ:
            raise LoadError(ins.arrays[name].file, f"differs from its copy in the store's "
                            f"consolidated metadata (zarr.json) in {', '.join(differ)}: one "
                            "of the two was changed after the store was written")


def _differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The entries (attributes by name) in which two metadata objects differ."""
    out = [k for k in sorted(set(a) | set(b)) if k != "attributes" and
           _canonical(a.get(k)) != _canonical(b.get(k))]
    attrs_a, attrs_b = a.get("attributes") or {}, b.get("attributes") or {}
    return out + [f"attribute {k!r}" for k in sorted(set(attrs_a) | set(attrs_b))
                  if _canonical(attrs_a.get(k)) != _canonical(attrs_b.get(k))]


def _classify(ins: Inspection) -> None:
    """The data arrays (neither a dimension nor a coordinate named by another array) and
    the coordinates."""
    coords: set[str] = set()
    for arr in ins.arrays.values():
        coords |= set(arr.dims)
        coords |= set(str(arr.meta.get("attributes", {}).get("coordinates", "")).split())
    ins.data = tuple(n for n in ins.arrays if n not in coords)
    ins.coords = tuple(n for n in ins.arrays if n in coords)


def _check_layout(ins: Inspection) -> None:
    """Shapes and blocks: see the module docstring."""
    done = ins.done
    if done.dtype != "bool" or done.meta.get("fill_value") is not False:
        raise LoadError(done.file, f"gives done the data type {done.dtype} and fill value "
                        f"{done.meta.get('fill_value')!r:.40}: must be bool, false")
    if DONE not in ins.data:
        raise LoadError(done.file, "makes done a coordinate: it is the scan's flag")
    lead = len(done.shape)
    sizes: dict[str, tuple[int, str]] = {}
    for name, arr in ins.arrays.items():
        for dim, size in zip(arr.dims, arr.shape, strict=True):
            seen = sizes.setdefault(dim, (size, name))
            if seen[0] != size:
                raise LoadError(arr.file, f"gives the dimension {dim} {size} values, while "
                                f"{seen[1]} gives it {seen[0]}")
        if name in ins.coords:
            if math.prod(arr.grid) > COORD_CHUNKS:
                raise LoadError(arr.file, f"splits the coordinate {name} {arr.shape} into "
                                f"{math.prod(arr.grid)} chunks {arr.chunks}: a scan's "
                                f"coordinates are in at most {COORD_CHUNKS}")
        elif (arr.shape[:lead] != done.shape or arr.dims[:lead] != done.dims
              or any(b % c for b, c in zip(done.chunks, arr.chunks[:lead], strict=True))
              or arr.chunks[lead:] != arr.shape[lead:]):
            raise LoadError(arr.file, f"gives {name} the shape {arr.shape} in chunks "
                            f"{arr.chunks} on {arr.dims}, which does not agree with done "
                            f"({done.shape} in blocks {done.chunks} on {done.dims})")
    for dim, key, extra in (("t", "nt", 1), ("x", "nx", 0), ("y", "ny", 0)):
        want = ins.attrs.get(key)
        if dim in sizes and isinstance(want, int) and sizes[dim][0] != want + extra:
            name = sizes[dim][1]
            raise LoadError(ins.arrays[name].file, f"gives the dimension {dim} "
                            f"{sizes[dim][0]} values, while the store's attribute {key}="
                            f"{want} makes it {want + extra}")


def _check_attributes(ins: Inspection) -> None:
    """No attribute that changes values on reading (module docstring)."""
    for name, arr in ins.arrays.items():
        attrs = arr.meta.get("attributes", {})
        found = [k for k in VALUE_ATTRS if k in attrs]
        if "_FillValue" in attrs and not _nan_fill(arr, attrs["_FillValue"]):
            found.append("_FillValue")
        if found:
            raise LoadError(arr.file, f"gives {name} the attribute(s) {found}, which change "
                            "its values on reading: a scan store's arrays have none (only "
                            "NaN as _FillValue of floating arrays)")


def _nan_fill(arr: Array, value: Any) -> bool:
    """True for the NaN that xarray records as ``_FillValue`` of a floating array (in the
    array's own width or, as it writes it for float32 arrays, as a float64)."""
    if not arr.dtype.startswith("float") or not isinstance(value, str):
        return False
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError:
        return False
    width = {2: "float16", 4: "float32", 8: "float64"}.get(len(raw))
    if width is None or len(raw) < arr.itemsize:
        return False
    return bool(np.isnan(np.frombuffer(raw, np.dtype(width).newbyteorder("<"))[0]))


def _check_sizes(ins: Inspection,
                 files: dict[str, dict[tuple[int, ...], tuple[Path, int]]]) -> None:
    """What checking and opening need must fit in memory, and each chunk file in what its
    chunk can be encoded in (raw bytes, a compressor's worst case and a margin)."""
    budget = memory.host_available() or storage.MAX_NPZ_BYTES
    points = math.prod(ins.done.shape)
    if points * POINT_BYTES > budget:
        raise LoadError(ins.done.file, f"declares {points} points (shape {ins.done.shape}): "
                        f"checking them needs {memory.format_bytes(points * POINT_BYTES)}, "
                        f"more than the {memory.format_bytes(budget)} available")
    lead = len(ins.done.shape)
    for name, arr in ins.arrays.items():
        need = math.prod(arr.shape) if name in ins.coords \
            else math.prod(ins.done.chunks + arr.chunks[lead:])
        need *= arr.itemsize   # (a coordinate is read whole, data a block at a time)
        if need > budget:
            raise LoadError(arr.file, f"declares {name} {arr.shape} in chunks {arr.chunks} "
                            f"of {arr.dtype}: reading it needs {memory.format_bytes(need)} "
                            f"at once, more than the {memory.format_bytes(budget)} available")
        bound, grid = arr.chunk_file_bytes, arr.grid
        ins.chunks[name] = set()
        for index, (file, size) in files.get(name, {}).items():
            if len(index) != len(grid) or any(i >= n for i, n in zip(index, grid, strict=True)):
                continue  # (outside the chunk grid: never read)
            if size > bound:
                raise LoadError(file, f"is {size} bytes, more than a chunk of {name} can "
                                f"take ({bound}): refused before reading")
            ins.chunks[name].add(index)


# -- the creation record -----------------------------------------------------------------------
def digest(value: Any) -> str:
    """A short digest of a JSON value (canonical form: sorted keys)."""
    return hashlib.blake2b(_canonical(value).encode(), digest_size=8).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True)


def metadata_record(ins: Inspection) -> dict[str, Any]:
    """The metadata part of a creation record: per array, a digest of each entry of its
    ``zarr.json`` (its attributes one by one), and of each root attribute."""
    arrays = {}
    for name, arr in ins.arrays.items():
        entries = {k: digest(v) for k, v in arr.meta.items() if k != "attributes"}
        entries["attributes"] = {k: digest(v)
                                 for k, v in arr.meta.get("attributes", {}).items()}
        arrays[name] = entries
    root = {k: digest(v) for k, v in ins.attrs.items() if k != RECORD_ATTR}
    return {"arrays": arrays, "attributes": root}


def read_record(ins: Inspection) -> dict[str, Any] | None:
    """The store's creation record (None if it has none); a malformed one is a LoadError."""
    return _record_of(ins.path, ins.attrs)


def _record_of(path: Path, attrs: dict[str, Any]) -> dict[str, Any] | None:
    text = attrs.get(RECORD_ATTR)
    if text is None:
        return None
    try:
        record = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        record = None
    if not (isinstance(record, dict) and isinstance(record.get("arrays"), dict)
            and isinstance(record.get("attributes"), dict)
            and isinstance(record.get("values"), dict)):
        raise LoadError(path / "zarr.json", f"holds a malformed creation record "
                        f"({RECORD_ATTR})")
    return record


def check_metadata(ins: Inspection, record: dict[str, Any]) -> None:
    """Every array's metadata and every root attribute as the creation record says
    (arrays added beside the scan are left alone); else a LoadError naming the array and
    the entry."""
    here = metadata_record(ins)
    for name, entries in record["arrays"].items():
        if name not in here["arrays"]:
            raise LoadError(ins.path / str(name), "is missing (no zarr.json): the store was "
                            "created with this array")
        differ = _record_differences(entries, here["arrays"][name])
        if differ:
            raise LoadError(ins.arrays[name].file, f"differs from the store's creation "
                            f"record in {', '.join(differ)}: changed after the store was "
                            "written (a changed shape, type, fill value, codec or attribute "
                            "changes what the store reads)")
    differ = _record_differences({"attributes": record["attributes"]},
                                 {"attributes": here["attributes"]})
    if differ:
        raise LoadError(ins.path / "zarr.json", f"differs from the store's creation record "
                        f"in the root {', '.join(differ)}: changed after the store was "
                        "written")


def _record_differences(recorded: Any, here: dict[str, Any]) -> list[str]:
    if not isinstance(recorded, dict):
        return ["the whole entry"]
    out = [k for k in sorted(set(recorded) | set(here)) if k != "attributes"
           and recorded.get(k) != here.get(k)]
    attrs_r, attrs_h = recorded.get("attributes") or {}, here.get("attributes", {})
    for k in sorted(set(attrs_r) | set(attrs_h)):
        if attrs_r.get(k) != attrs_h.get(k):
            how = "added" if k not in attrs_r else "removed" if k not in attrs_h else "changed"
            out.append(f"attribute {k!r} ({how})")
    return out
