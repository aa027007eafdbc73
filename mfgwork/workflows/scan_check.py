"""What a scan store holds, and checking a store against it before its values are trusted.

Nothing is read by zarr before the store is inspected
(:func:`~mfgwork.workflows.scan_inspect.inspect_store`: no link or special file anywhere,
well formed and plausible metadata of bounded size, nothing that changes values on reading).

Two records are kept, both checked by :func:`check_store`:

- the *creation record* (root attribute ``mfgwork_scan_record``, written by :func:`seal` when
  the store is created): digests of every array's metadata, of the root attributes and of the
  values of every coordinate (the scanned parameters, ``t``, ``x``, ...), none of which
  changes afterwards; a difference is a :class:`~mfgwork.LoadError` naming the array and what
  differs. A store without one (written by an earlier mfgwork) is refused;
- the *block records*: when a block is written
  (:func:`mfgwork.workflows.scan_store.write_region`), a digest of each variable's values in
  the block (BLAKE2b of its dtype, shape and the CRC-32 of its bytes' pieces, computed on
  several threads; strings as UTF-8: :data:`KINDS`) is recorded in the store's ``digest``
  variable, after the data and before the ``done`` flag. Every block whose
  ``done`` chunk file exists is read back and compared (the work grows with the files on
  disk, not with the shape the metadata declares); each block whose chunks are missing,
  unreadable or differ from the record, or that is marked done without a record naming every
  variable, is reported. A resumed scan solves those blocks again; :func:`mfgwork.open_scan`
  refuses such a store.

A point whose block is not finished (``done`` unset: never written, cut short, or its flag
lost) is pending: :func:`mfgwork.open_scan` serves fill values for it whatever its other
chunks hold (:func:`finished_points`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core import storage
from ..core.errors import LoadError
from .scan_inspect import (
    DIGEST,
    DONE,
    RECORD_ATTR,
    Inspection,
    check_metadata,
    inspect_store,
    metadata_record,
    read_record,
)

__all__ = ["DIGEST", "DONE", "Damage", "StoreCheck", "block_record", "blocks", "check_store",
           "finished_points", "parse_record", "seal", "value_digest", "verified"]

#: Variables read whole when checking (larger ones block by block), if they span at most
#: ``WHOLE_BLOCKS`` blocks or the blocks to read are a quarter of theirs at least (each
#: missing chunk costs zarr a look-up; a whole read looks them up concurrently).
WHOLE_BYTES, WHOLE_BLOCKS = 64 * 2**20, 4096


#: The kinds of value digests, by the mark that leads them in a record: ``""`` BLAKE2b of
#: the bytes (the records of early versions); ``"p"`` BLAKE2b of the BLAKE2b digests of the
#: bytes' :data:`PIECE_BYTES` pieces; ``"c"`` BLAKE2b of the CRC-32 of the bytes'
#: :data:`CRC_PIECE_BYTES` pieces, what block records are written with. Both piece sizes are
#: part of the records' format (stores hold digests made with them).
KINDS = ("", "p", "c")
PIECE_BYTES = 16 * 2**20
#: A CRC-32 misses a changed piece once in 2³² (a cut chunk or a chunk of another block
#: changes its pieces): the records guard against damage, not against a forger, who could
#: rewrite BLAKE2b records just as well. zlib's releases the GIL: on 16 cores of an H200
#: host, 333 MB took 14 ms, against 66 ms for BLAKE2b's pieces on 166 MB.
CRC_PIECE_BYTES = 4 * 2**20
#: The kind of digest new block records are written with.
RECORD_KIND = "c"


def value_digest(values: Any, kind: str = "") -> str:
    """A short digest of an array's dtype, shape and values (strings compared as text), of
    one of the :data:`KINDS` (its mark leads the digest); the bytes of a record's kinds are
    digested in pieces on several threads."""
    return value_digests([values], kind)[0]


def value_digests(arrays: Sequence[Any], kind: str = "", pool: Executor | None = None
                  ) -> list[str]:
    """:func:`value_digest` of each of ``arrays``, the pieces of all of them digested on one
    pool of threads (a block's fields keep every core busy until the last piece): ``pool``,
    else one of its own."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: not a digest kind (one of {KINDS})")
    heads, data = [], []
    for values in arrays:
        a = np.asarray(values)
        h = hashlib.blake2b(digest_size=8)
        if a.dtype.kind in "OTUS":
            h.update(f"str{a.shape}".encode())
            h.update("\x00".join(str(v) for v in a.ravel()).encode("utf-8", "surrogatepass"))
        else:
            h.update(f"{a.dtype.str}{a.shape}".encode())
            raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8)   # (no copy)
            if kind:
                data.append((h, raw))
            else:
                h.update(raw)
        heads.append(h)
    size = CRC_PIECE_BYTES if kind == "c" else PIECE_BYTES
    parts = [(h, piece) for h, raw in data for piece in _pieces(raw, size)]
    for (h, _), digest in zip(parts, _piece_digests([piece for _, piece in parts], kind, pool),
                              strict=True):
        h.update(digest)   # (in each array's order of pieces)
    return [kind + h.hexdigest() for h in heads]


def _pieces(data: np.ndarray, size: int) -> list[np.ndarray]:
    """The consecutive pieces of ``size`` bytes of ``data`` (bytes; one empty piece if it is
    empty)."""
    return [data[k: k + size] for k in range(0, data.size, size)] or [data]


def _piece_digests(parts: list[np.ndarray], kind: str, pool: Executor | None = None
                   ) -> list[bytes]:
    """The digests of ``parts`` (BLAKE2b, or CRC-32 for ``kind`` ``"c"``) on ``pool``, else
    on up to one thread per core (both release the GIL)."""
    if kind == "c":
        def digest(part: np.ndarray) -> bytes:
            return zlib.crc32(part).to_bytes(4, "little")
    else:
        def digest(part: np.ndarray) -> bytes:
            return hashlib.blake2b(part, digest_size=16).digest()

    if pool is not None:
        return list(pool.map(digest, parts))
    threads = min(len(parts), os.cpu_count() or 1)
    if threads < 2:
        return [digest(part) for part in parts]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mfgwork-digest") as pool:
        return list(pool.map(digest, parts))


def block_record(arrays: Mapping[str, Any], pool: Executor | None = None) -> str:
    """The record of a block's arrays: ``name=digest`` for each (of the
    :data:`RECORD_KIND`, see :func:`value_digest`, its pieces on ``pool`` if given), sorted,
    ``;``-separated."""
    names = [name for name in sorted(arrays) if name not in (DONE, DIGEST)]
    return ";".join(f"{name}={digest}" for name, digest in zip(
        names, value_digests([arrays[name] for name in names], RECORD_KIND, pool),
        strict=True))


def parse_record(text: Any) -> dict[str, str] | None:
    """The digests of a record (None if it is empty or malformed)."""
    out = {}
    for part in str(text).split(";"):
        name, sep, digest = part.partition("=")
        if not (sep and name and _kind(digest) is not None):
            return None
        out[name] = digest
    return out


def _kind(digest: str) -> str | None:
    """The kind of a recorded digest (its mark, :data:`KINDS`), None if it is malformed."""
    kind = digest[:-16]
    return kind if kind in KINDS and len(digest) == len(kind) + 16 else None


def blocks(shape: Sequence[int], block: Sequence[int]) -> list[tuple[slice, ...]]:
    """The regions (tuples of slices) that tile ``shape`` with ``block``, in C order."""
    starts = [range(0, n, b) for n, b in zip(shape, block, strict=True)]
    return [tuple(slice(s, min(s + b, n)) for s, b, n in zip(combo, block, shape, strict=True))
            for combo in itertools.product(*starts)]


def region_of(index: tuple[int, ...], shape: Sequence[int], block: Sequence[int]
              ) -> tuple[slice, ...]:
    """The region of the block at chunk index ``index``."""
    return tuple(slice(i * b, min((i + 1) * b, n))
                 for i, b, n in zip(index, block, shape, strict=True))


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
    the block shape, the damaged blocks and the scan's dimensions."""

    finished: np.ndarray
    block: tuple[int, ...]
    damaged: list[Damage]
    dims: tuple[str, ...] = ()


def _open(path: Path, name: str) -> Any:
    import zarr

    try:
        return zarr.open_array(str(path / name), mode="r", zarr_format=3)
    except Exception as exc:  # noqa: BLE001 - any failure to read metadata is a LoadError
        raise LoadError(path / name / "zarr.json", f"is not readable array metadata "
                        f"({type(exc).__name__}: {str(exc)[:200]})") from None


# -- the creation record -----------------------------------------------------------------------
def coordinate_digests(ins: Inspection, values: Mapping[str, Any] | None = None
                       ) -> dict[str, str]:
    """A digest of each coordinate's values, as zarr reads them (no decoding), or as
    ``values`` holds them (by name: the values written)."""
    out = {}
    for name in ins.coords:
        if values is not None and name in values:
            out[name] = value_digest(values[name])
            continue
        try:
            out[name] = value_digest(_open(ins.path, name)[...])
        except LoadError:
            raise
        except Exception as exc:  # noqa: BLE001 - a damaged chunk is a LoadError
            raise LoadError(ins.path / name, f"holds the coordinate {name}, which cannot be "
                            f"read ({type(exc).__name__}: {str(exc)[:120]})") from None
    return out


def seal(path: str | Path, values: Mapping[str, Any] | None = None) -> None:
    """Write the creation record of the new store at ``path`` (module docstring) into its
    root attributes: called once, when the store is created, before it is renamed into
    place. ``values``: the coordinates' values as they were written (by name), digested in
    place of reading them back (the same digests: zarr reads numbers as written; a store
    whose coordinate was written otherwise is then refused by its first check)."""
    path = Path(path)
    ins = inspect_store(path)
    record = metadata_record(ins) | {"values": coordinate_digests(ins, values)}
    root = storage.read_json(path / "zarr.json", follow=False)
    root["attributes"][RECORD_ATTR] = json.dumps(record, sort_keys=True)
    storage.write_json(path / "zarr.json", root, atomic=True)


def verified(path: str | Path) -> Inspection:
    """The store at ``path`` inspected and checked against its creation record (metadata,
    root attributes, coordinate values); a :class:`~mfgwork.LoadError` names what differs."""
    path = Path(path)
    ins = inspect_store(path)
    record = read_record(ins)
    if record is None:
        raise LoadError(path / "zarr.json", f"has no creation record ({RECORD_ATTR}): the "
                        "store was written by an earlier mfgwork, and its coordinates and "
                        "metadata cannot be checked; run the scan into a new store (or open "
                        "it unverified with open_scan(..., verify=False))")
    check_metadata(ins, record)
    values = coordinate_digests(ins)
    for name, digest in record["values"].items():
        if values.get(name) != digest:
            raise LoadError(path / str(name), f"holds values of the coordinate {name} that "
                            "differ from the store's creation record (rewritten, cut or "
                            "deleted after the store was written)")
    return ins


# -- the blocks --------------------------------------------------------------------------------
def finished_points(ins: Inspection) -> np.ndarray:
    """The ``done`` flag of every point, reading only the ``done`` chunk files on disk (a
    point without one, or with an unreadable one, is not finished)."""
    flags = np.zeros(ins.done.shape, dtype=bool)
    arr = _open(ins.path, DONE)
    for index, values in _chunks(arr, ins, sorted(ins.chunks[DONE]), lambda i, e: None):
        flags[region_of(index, ins.done.shape, ins.done.chunks)] = values
    return flags


def check_store(path: str | Path) -> StoreCheck:
    """Check the store at ``path``: :func:`verified`, then each block (a chunk of ``done``)
    marked done against its record."""
    path = Path(path)
    ins = verified(path)
    shape, block, dims = ins.done.shape, ins.done.chunks, ins.done.dims
    recorded = set(read_record(ins)["arrays"])  # (not arrays added beside the scan)
    arrays = {name: _open(path, name) for name in ins.data if name in recorded}
    damaged: dict[tuple[int, ...], Damage] = {}

    def fail(index: tuple[int, ...], name: str, reason: str) -> None:
        if index not in damaged:   # (the block's first chunk file of the array)
            chunks = ins.arrays[name].chunks
            key = tuple(i * b // c for i, b, c in zip(index, block, chunks, strict=False)) \
                + (0,) * (len(chunks) - len(index))
            damaged[index] = Damage(region_of(index, shape, block),
                                    path / name / "c" / "/".join(map(str, key)), reason, dims)

    done: dict[tuple[int, ...], np.ndarray] = dict(_chunks(
        arrays[DONE], ins, sorted(ins.chunks[DONE]),
        lambda i, exc: fail(i, DONE, f"has an unreadable done flag ({exc})")))
    marked = [i for i, flags in done.items() if flags.any()]
    expected = set(arrays) - {DONE, DIGEST}
    records: dict[tuple[int, ...], dict[str, str]] = {}
    for index, texts in _chunks(arrays[DIGEST], ins, marked, lambda i, exc: fail(
            i, DIGEST, f"has an unreadable record ({exc})")):
        distinct = {str(v) for v in np.asarray(texts).ravel()}
        record = parse_record(distinct.pop()) if len(distinct) == 1 else None
        if record is None or set(record) != expected or not done[index].all():
            fail(index, DIGEST, "is marked done without a complete record of its data")
            continue
        records[index] = record
    for name, arr in arrays.items():
        if name in (DONE, DIGEST):
            continue
        todo = [i for i in records if i not in damaged]

        def unreadable(i: tuple[int, ...], exc: str, name: str = name) -> None:
            fail(i, name, f"has an unreadable chunk of {name} ({exc})")

        for index, values in _chunks(arr, ins, todo, unreadable):
            recorded = records[index][name]
            if value_digest(values, _kind(recorded)) != recorded:
                fail(index, name, f"holds values of {name} that differ from its record "
                                  "(a chunk missing, cut or changed)")
    finished = np.zeros(shape, dtype=bool)
    for index in records:
        if index not in damaged:
            finished[region_of(index, shape, block)] = True
    return StoreCheck(finished, tuple(block), [damaged[i] for i in sorted(damaged)], dims)


def _chunks(arr: Any, ins: Inspection, which: list[tuple[int, ...]],
            fail: Callable[[tuple[int, ...], str], None]
            ) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """``(index, values)`` of each readable block ``index`` in ``which``: the array read
    whole when it is small and most of its blocks are wanted or there are few (block by
    block when that fails, to find the bad chunks), else block by block; unreadable blocks
    go to ``fail``."""
    shape, block = ins.done.shape, ins.done.chunks
    whole, grid = None, math.prod(ins.done.grid)
    if which and arr.nbytes <= WHOLE_BYTES and (grid <= WHOLE_BLOCKS or 4 * len(which) >= grid):
        try:
            whole = np.asarray(arr[...])
        except Exception:  # noqa: BLE001 - found block by block below
            whole = None
    for index in which:
        region = region_of(index, shape, block)
        if whole is not None:
            yield index, whole[region]
            continue
        try:
            values = np.asarray(arr[region])
        except Exception as exc:  # noqa: BLE001 - a damaged chunk is reported, not raised
            fail(index, f"{type(exc).__name__}: {str(exc)[:120]}")
            continue
        yield index, values
