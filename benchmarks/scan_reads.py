"""Writing a scan block's store and reading one point back: the fields' chunks and writers.

A block of ``--side`` × ``--side`` Santa Fe points at ``--nx`` × ``--nt`` (random values in
the layout's dtype: the solve is not timed) is written into a new store by
:func:`~mfgwork.workflows.scan_store.write_region`, record and ``done`` included, three ways
(alternating, ``--rounds`` times, each into a new store; a row's time is the minimum):

- ``zarr, block chunks``: every variable one chunk a block, written through zarr (the
  store of earlier versions, the baseline);
- ``files, block chunks``: the same chunks, the raw ones written as files directly
  (:mod:`mfgwork.workflows.scan_chunks`);
- ``files, slabs``: the fields cut into slabs (:func:`~mfgwork.workflows.scan_store.
  field_chunk`), as stores are made now.

Then one point's ``U`` is read from each store through :func:`mfgwork.open_scan` (from the
page cache: the store was just written), five different points, the minimum. Ratios are
against the baseline of the same run.

    python benchmarks/scan_reads.py                                  # 32 x 32 at 201², float32
    python benchmarks/scan_reads.py --side 16 --nx 101 --nt 100 --rounds 5

Prints a table and writes JSON (default benchmarks/results/scan-reads.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

import mfgwork as mw
from mfgwork.workflows import scan as scan_module
from mfgwork.workflows import scan_store

WAYS = {"zarr, block chunks": (2**62, False), "files, block chunks": (2**62, True),
        "files, slabs": (scan_store.FIELD_CHUNK_BYTES, True)}


def layout_and_arrays(side: int, nx: int, nt: int, dtype: str) -> tuple:
    """The scan's plan, layout and one block's arrays (the whole grid: one block)."""
    grid = {"threshold": list(np.linspace(0.3, 0.9, side)),
            "sigma": list(np.linspace(0.3, 1.0, side))}
    plan = scan_module.make_plan(mw.SantaFeBar, grid, None,
                                 {"nx": nx, "nt": nt, "tol": 1e-6, "dtype": dtype}, ("M", "U"),
                                 build_points=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layout = scan_module.make_layout(plan, mw.get_backend("numpy", "cpu", dtype))
    rng = np.random.default_rng(0)
    arrays = {}
    for name, (trailing, kind, _) in layout.variables().items():
        shape = plan.shape + layout.trailing_shape(trailing)
        arrays[name] = (np.full(shape, "converged", dtype=object) if kind == "object"
                        else rng.random(shape).astype(kind))
    return plan, layout, arrays


def write_once(folder: Path, plan, layout, arrays, way: str) -> tuple[float, Path]:
    """Seconds to write the block into a new store made the ``way`` asked."""
    chunk_bytes, direct = WAYS[way]
    real_is_raw, real_bytes = scan_store.is_raw, scan_store.FIELD_CHUNK_BYTES
    scan_store.FIELD_CHUNK_BYTES = chunk_bytes
    if not direct:
        scan_store.is_raw = lambda array: False
    try:
        store = scan_store.ScanStore(folder / f"{way.replace(', ', '-')}.zarr", layout,
                                     plan.hash(), plan.shape)
        region = tuple(slice(0, n) for n in plan.shape)
        started = time.perf_counter()
        scan_store.write_region(store.path, region, arrays)
        return time.perf_counter() - started, store.path
    finally:
        scan_store.is_raw, scan_store.FIELD_CHUNK_BYTES = real_is_raw, real_bytes


def read_point(path: Path, arrays: dict, points: int = 5) -> float:
    """The fastest of ``points`` reads of one point's U (checked against what was written)."""
    ds = mw.open_scan(path, verify=False)
    best = float("inf")
    for k in range(points):
        started = time.perf_counter()
        values = ds.U.isel(threshold=k, sigma=k + 1).values
        best = min(best, time.perf_counter() - started)
        if not np.array_equal(values, arrays["U"][k, k + 1]):
            raise AssertionError(f"point ({k}, {k + 1}) of {path.name} reads other values")
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=32)
    ap.add_argument("--nx", type=int, default=201)
    ap.add_argument("--nt", type=int, default=200)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/scan-reads.json")
    args = ap.parse_args()
    plan, layout, arrays = layout_and_arrays(args.side, args.nx, args.nt, args.dtype)
    fields = sum(arrays[name].nbytes for name in layout.fields)
    times: dict[str, dict[str, list[float]]] = {w: {"write": [], "read": []} for w in WAYS}
    for r in range(args.rounds):
        order = list(WAYS) if r % 2 == 0 else list(reversed(WAYS))
        for way in order:
            folder = Path(tempfile.mkdtemp(prefix="mfgwork-reads-"))
            try:
                seconds, path = write_once(folder, plan, layout, arrays, way)
                times[way]["write"].append(seconds)
                times[way]["read"].append(read_point(path, arrays))
            finally:
                shutil.rmtree(folder)
    rows = {w: {k: min(v) for k, v in t.items()} for w, t in times.items()}
    base = rows["zarr, block chunks"]
    print(f"{args.side}² points at {args.nx} x {args.nt + 1}, {args.dtype}: fields "
          f"{fields / 1e6:.0f} MB; {os.cpu_count()} cores; minimum of {args.rounds} rounds")
    print(f"{'way':22s} {'write s':>8s} {'ratio':>6s} {'read one point s':>17s} {'ratio':>6s}")
    for way, row in rows.items():
        print(f"{way:22s} {row['write']:8.3f} {row['write'] / base['write']:6.2f} "
              f"{row['read']:17.4f} {row['read'] / base['read']:6.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "machine": platform.node(),
                               "cores": os.cpu_count(), "field_bytes": fields, "rows": rows,
                               "runs": times}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
