"""What each finished block of a scan store holds, and checking a store against it.

When a block is written (:func:`mfgwork.workflows.scan_store.write_region`), a digest of
each variable's values in the block (BLAKE2b of its dtype, shape and bytes; strings as
UTF-8) is recorded in the store's ``digest`` variable, after the data and before the
``done`` flag. :func:`check_store` reads the store's metadata (every array's ``zarr.json``
must be readable and agree with the ``done`` array on the scan's shape and blocks) and then
every finished block's values, and reports each block whose chunks are missing, unreadable
or differ from the record (or that is marked done without a record). A resumed scan solves
those blocks again; :func:`mfgwork.open_scan` refuses such a store.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import LoadError

#: The variable holding each point's block record (``name=hex;...``), and the flag.
DIGEST, DONE = "digest", "done"
#: Variables read whole when checking (larger ones block by block).
WHOLE_BYTES = 64 * 2**20


def value_digest(values: Any) -> str:
    """A short digest of an array's dtype, shape and values (strings compared as text)."""
    a = np.asarray(values)
    h = hashlib.blake2b(digest_size=8)
    if a.dtype.kind in "OTUS":
        h.update(f"str{a.shape}".encode())
        h.update("\x00".join(str(v) for v in a.ravel()).encode("utf-8", "surrogatepass"))
    else:
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def block_record(arrays: Mapping[str, Any]) -> str:
    """The record of a block's arrays: ``name=digest`` for each, sorted, ``;``-separated."""
    return ";".join(f"{name}={value_digest(a)}" for name, a in sorted(arrays.items())
                    if name not in (DONE, DIGEST))


def parse_record(text: Any) -> dict[str, str] | None:
    """The digests of a record (None if it is empty or malformed)."""
    out = {}
    for part in str(text).split(";"):
        name, sep, digest = part.partition("=")
        if not (sep and name and len(digest) == 16):
            return None
        out[name] = digest
    return out


def blocks(shape: Sequence[int], block: Sequence[int]) -> list[tuple[slice, ...]]:
    """The regions (tuples of slices) that tile ``shape`` with ``block``, in C order."""
    starts = [range(0, n, b) for n, b in zip(shape, block, strict=True)]
    return [tuple(slice(s, min(s + b, n)) for s, b, n in zip(combo, block, shape, strict=True))
            for combo in itertools.product(*starts)]


@dataclass
class Damage:
    """A finished block that cannot be trusted: its region, the file, and why."""

    region: tuple[slice, ...]
    file: Path
    reason: str
    dims: tuple[str, ...] = ()

    @property
    def block(self) -> str:
        """The block by index ranges, e.g. ``threshold[1:2], sigma[0:2]``."""
        return ", ".join(f"{d}[{s.start}:{s.stop}]" for d, s in zip(self.dims, self.region,
                                                                     strict=False))


@dataclass
class StoreCheck:
    """The result of :func:`check_store`: the ``done`` flags of the blocks that passed,
    the block shape, and the damaged blocks."""

    finished: np.ndarray
    block: tuple[int, ...]
    damaged: list[Damage]


def _open(path: Path, name: str) -> Any:
    import zarr

    meta = path / name / "zarr.json"
    try:
        return zarr.open_array(str(path / name), mode="r", zarr_format=3)
    except Exception as exc:  # noqa: BLE001 - any failure to read metadata is a LoadError
        raise LoadError(meta, f"is not readable array metadata ({type(exc).__name__}: "
                        f"{str(exc)[:200]})") from None


def arrays_of(path: Path) -> dict[str, Any]:
    """The store's data arrays (those that are neither a dimension nor a coordinate named
    by another array), each checked to agree with ``done`` on the scan's shape and blocks;
    a LoadError names the ``zarr.json`` that does not."""
    done = _open(path, DONE)
    if done.dtype != np.bool_:
        raise LoadError(path / DONE / "zarr.json", f"gives done the dtype {done.dtype}: "
                        "must be bool")
    found = {p.parent.name: _open(path, p.parent.name) for p in sorted(path.glob("*/zarr.json"))
             if p.parent.name != DONE}
    for dim, size in zip(done.metadata.dimension_names or (), done.shape, strict=False):
        if dim in found and found[dim].shape != (size,):
            raise LoadError(path / DONE / "zarr.json", f"gives done the shape {done.shape}, "
                            f"which does not agree with the coordinate {dim} "
                            f"({found[dim].shape[0]} values)")
    coords: set[str] = set()
    for arr in [done, *found.values()]:
        coords |= set(arr.metadata.dimension_names or ())
        coords |= set(str(arr.attrs.get("coordinates", "")).split())
    out = {DONE: done}
    lead = done.ndim
    for name, arr in found.items():
        if name in coords:
            continue
        if arr.shape[:lead] != done.shape or tuple(arr.chunks[:lead]) != tuple(done.chunks) \
                or tuple(arr.chunks[lead:]) != tuple(arr.shape[lead:]):
            raise LoadError(path / name / "zarr.json",
                            f"gives {name} the shape {arr.shape} in chunks {arr.chunks}, "
                            f"which does not agree with done ({done.shape} in blocks "
                            f"{done.chunks})")
        out[name] = arr
    if DIGEST not in out:
        raise LoadError(path / DIGEST, "is missing: the store has no record of its blocks "
                        "to check them against (written by an earlier mfgwork?); run the "
                        "scan into a new store")
    return out


def check_store(path: str | Path) -> StoreCheck:
    """Check the store at ``path``: metadata (LoadError naming the file), then each block
    (a chunk of ``done``) marked done against its record."""
    path = Path(path)
    arrays = arrays_of(path)
    done_arr = arrays.pop(DONE)
    block = tuple(int(c) for c in done_arr.chunks)
    regions = blocks(done_arr.shape, block)
    damaged: dict[int, Damage] = {}  # by the block's position in regions

    def fail(k: int, name: str, reason: str) -> None:
        if k not in damaged:
            region = regions[k]
            key = tuple(s.start // b for s, b in zip(region, block, strict=True))
            arr = done_arr if name == DONE else arrays[name]
            key += (0,) * (arr.ndim - len(key))
            damaged[k] = Damage(region, path / name / arr.metadata.encode_chunk_key(key),
                                reason, tuple(done_arr.metadata.dimension_names or ()))

    every = list(range(len(regions)))
    done = _read(done_arr, regions, every,
                 lambda k, exc: fail(k, DONE, f"has an unreadable done flag ({exc})"))
    marked = [k for k in every if k not in damaged and done[regions[k]].any()]
    records: dict[int, dict[str, str]] = {}
    digests = _read(arrays[DIGEST], regions, marked,
                    lambda k, exc: fail(k, DIGEST, f"has an unreadable record ({exc})"))
    for k in marked:
        if k in damaged:
            continue
        texts = {str(v) for v in np.asarray(digests[regions[k]]).ravel()}
        record = parse_record(texts.pop()) if len(texts) == 1 else None
        if record is None or not done[regions[k]].all():
            fail(k, DIGEST, "is marked done without a complete record of its data")
            continue
        gone = sorted(set(record) - set(arrays))
        if gone:
            raise LoadError(path / gone[0], "is missing (no zarr.json): the store's blocks "
                            f"hold values of {gone[0]}")
        records[k] = record
    for name, arr in arrays.items():
        todo = [k for k in records if k not in damaged and name in records[k]]
        if name == DIGEST or not todo:
            continue

        def unreadable(k: int, exc: str, name: str = name) -> None:
            fail(k, name, f"has an unreadable chunk of {name} ({exc})")

        for k, values in _blocks(arr, regions, todo, unreadable):
            if value_digest(values) != records[k][name]:
                fail(k, name, f"holds values of {name} that differ from its record "
                              "(a chunk missing, cut or changed)")
    finished = np.zeros(done_arr.shape, dtype=bool)
    for k in records:
        if k not in damaged:
            finished[regions[k]] = True
    return StoreCheck(finished, block, [damaged[k] for k in sorted(damaged)])


def _read(arr: Any, regions: list[tuple[slice, ...]], which: list[int], fail: Any
          ) -> np.ndarray:
    """The blocks ``which`` of a small array (the rest empty), unreadable ones reported."""
    out = np.empty(arr.shape, dtype=object if arr.dtype.kind in "OTU" else arr.dtype)
    out[...] = "" if out.dtype == object else 0
    for k, values in _blocks(arr, regions, which, fail):
        out[regions[k]] = values
    return out


def _blocks(arr: Any, regions: list[tuple[slice, ...]], which: list[int], fail: Any) -> Any:
    """``(k, values)`` of each readable block ``regions[k]`` for k in ``which``: the array
    read whole when small (block by block when that fails, to find the bad chunks), else
    block by block."""
    whole = None
    if arr.nbytes <= WHOLE_BYTES:
        try:
            whole = np.asarray(arr[...])
        except Exception:  # noqa: BLE001 - found block by block below
            whole = None
    for k in which:
        if whole is not None:
            yield k, whole[regions[k]]
            continue
        try:
            values = np.asarray(arr[regions[k]])
        except Exception as exc:  # noqa: BLE001 - a damaged chunk is reported, not raised
            fail(k, f"{type(exc).__name__}: {str(exc)[:120]}")
            continue
        yield k, values
