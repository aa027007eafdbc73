"""A block's uncompressed arrays written as their chunk files directly, several at once.

A scan's numbers are stored raw (zarr's ``bytes`` codec alone, little-endian): a chunk file is
the chunk's values in C order, padded with the fill value where the chunk runs past the
array's end. Written through zarr, each chunk is copied into a new buffer and written by one
thread; the page cache takes one file's writes one at a time, so a block's fields go no
faster than one file. :func:`raw_chunk_files` gives the block's chunk files of such an array
(views of the block's array, no copy where the chunk lies inside the array) and
:func:`write_file` writes one as zarr's local store does: a new ``<chunk>.<hex>.partial``
beside it, renamed over the chunk. On an H200 host, two fields of 166 MB took 44 ms as one
file each on two threads and 13 ms as 16 files each on 16 threads; a block's whole write
(record and ``done`` included), 37 ms as files in slabs against 58 ms through zarr in one
chunk a field (``benchmarks/scan_reads.py``).
"""

from __future__ import annotations

import itertools
import os
import re
import uuid
from pathlib import Path
from typing import Any

import numpy as np

#: The name of a chunk write's temporary file, as :func:`write_file` and zarr's local store
#: name it: ``<chunk>.<32 hex digits>.partial`` beside the chunk.
PARTIAL_WRITE = re.compile(r"[0-9]+\.[0-9a-f]{32}\.partial")


def is_raw(array: Any) -> bool:
    """Whether the zarr (v3) ``array`` stores its chunks raw: the ``bytes`` codec alone, of
    a numeric or boolean data type, little-endian (no endianness for one-byte types)."""
    from zarr.codecs import BytesCodec

    codecs = array.metadata.codecs
    if len(codecs) != 1 or not isinstance(codecs[0], BytesCodec) or \
            array.dtype.kind not in "biuf":
        return False
    endian = getattr(codecs[0].endian, "value", codecs[0].endian)
    return endian == "little" or (endian is None and array.dtype.itemsize == 1)


def raw_chunk_files(folder: Path, array: Any, region: tuple[slice, ...], values: np.ndarray
                    ) -> list[tuple[Path, np.ndarray]] | None:
    """``(file, chunk)`` of each chunk of the raw ``array`` (stored in ``folder``) that
    ``values`` fill at ``region`` (its leading axes; the array's trailing axes whole), or
    None where the region is not made of whole chunks (it starts or ends inside one that
    lies inside the array): each chunk a C-contiguous array in the stored dtype."""
    chunks = array.metadata.chunk_grid.chunk_shape
    lead = len(region)
    if chunks[lead:] != array.shape[lead:] or values.shape != tuple(
            s.stop - s.start for s in region) + array.shape[lead:]:
        return None
    if any(s.start % c or (s.stop % c and s.stop != n)
           for s, c, n in zip(region, chunks, array.shape, strict=False)):
        return None
    dtype = array.dtype.newbyteorder("<")
    out = []
    ranges = [range(s.start // c, -(-s.stop // c)) for s, c in zip(region, chunks, strict=False)]
    for index in itertools.product(*ranges):
        part = values[tuple(slice(i * c - s.start, min((i + 1) * c, s.stop) - s.start)
                            for i, c, s in zip(index, chunks, region, strict=False))]
        if part.shape[:lead] != chunks[:lead]:   # past the array's end: padded as zarr pads
            chunk = np.full(chunks, array.metadata.fill_value, dtype=dtype)
            chunk[tuple(slice(0, n) for n in part.shape)] = part
        else:
            chunk = np.ascontiguousarray(part, dtype=dtype)
        key = array.metadata.encode_chunk_key(index + (0,) * (len(chunks) - lead))
        out.append((folder.joinpath(*key.split("/")), chunk))
    return out


def write_file(target: Path, chunk: np.ndarray) -> None:
    """Write ``chunk``'s bytes at ``target`` atomically: into a new temporary file beside it
    (:data:`PARTIAL_WRITE`, created exclusively: never over a file this did not make),
    then renamed over it; the temporary file is removed if the write fails."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{uuid.uuid4().hex}.partial")
    try:
        with open(tmp, "xb") as fh:
            fh.write(chunk.reshape(-1).view(np.uint8))
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
