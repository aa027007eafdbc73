"""Cost of a 2-D parameter scan: the two bars' thresholds, against a loop of mw.solve_2d.

A :class:`mfgwork.TwoBars` scan over ``--side`` × ``--side`` thresholds (0.4–0.8 for each bar,
spill-over ``--spill``) at ``--nx`` × ``--nx`` × ``--nt``, to ``--tol``, in memory, after a
warm-up scan of one point (compilation):

1. baseline: a loop of ``mw.solve_2d`` (NumPy, float64, ILU-BiCGStab) over the points;
2. ``mw.scan`` with its points solved one by one in this process;
3. with ``--dask``: ``mw.scan(..., dask=True)``, a LocalCluster of one single-threaded process
   per core, a block of points per worker (it pays the start of the cluster and of its
   processes).

Each scan's densities are compared with the loop's (they must agree to round-off: the same
solves). The ratios against the loop say what the scan machinery costs, and what Dask gains
on this machine.

    python benchmarks/scan_2d.py --side 3 --nx 31 --nt 30 --dask

Prints a table and writes JSON (default benchmarks/results/scan-2d-<nx>x<nt>.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

import mfgwork as mw


def timed_scan(grid: dict, fixed: dict, solve: dict, **how: object) -> tuple[float, object]:
    """One in-memory scan and its wall time."""
    started = time.perf_counter()
    ds = mw.scan(mw.TwoBars, grid, fixed=fixed, progress=False, **solve, **how)
    return time.perf_counter() - started, ds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=2, help="thresholds per bar (default 2)")
    parser.add_argument("--nx", type=int, default=31)
    parser.add_argument("--nt", type=int, default=30)
    parser.add_argument("--T", type=float, default=4.0)
    parser.add_argument("--spill", type=float, default=0.5)
    parser.add_argument("--tol", type=float, default=1e-8)
    parser.add_argument("--max-iter", type=int, default=400)
    parser.add_argument("--dask", action="store_true", help="also a scan on Dask workers")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    thresholds = [float(f"{v:.12g}") for v in np.linspace(0.4, 0.8, args.side)]
    grid = {"threshold_1": thresholds, "threshold_2": thresholds}
    fixed = {"T": args.T, "spill": args.spill}
    solve = {"nx": args.nx, "nt": args.nt, "tol": args.tol, "max_iter": args.max_iter}
    mw.scan(mw.TwoBars, {"threshold_1": [0.5]}, fixed=fixed, progress=False,
            **(solve | {"nx": 11, "nt": 10}))                           # warm-up

    started = time.perf_counter()
    loop = {(a1, a2): mw.solve_2d(mw.TwoBars(thresholds=(a1, a2), **fixed), progress=False,
                                  **solve) for a1 in thresholds for a2 in thresholds}
    t_loop = time.perf_counter() - started
    t_serial, serial = timed_scan(grid, fixed, solve)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = args.side**2
    scans = {"scan, one by one": (t_serial, serial)}
    if args.dask:
        scans["scan on Dask workers"] = timed_scan(grid, fixed, solve, dask=True, workers=cores,
                                                   chunk_size=-(-n // cores))

    def max_diff(ds: object) -> float:
        return max(float(np.max(np.abs(ds.M.sel(threshold_1=a1, threshold_2=a2).values
                                       - r.M))) for (a1, a2), r in loop.items())

    rows = {"points": n, "grid": f"{args.nx} x {args.nx} x {args.nt}", "cores": cores,
            "converged (loop / scans)": "/".join(str(int(c)) for c in (
                sum(r.converged for r in loop.values()),
                *(ds.converged.sum() for _, ds in scans.values()))),
            "iterations (sum)": int(serial.iterations.sum()),
            "loop of mw.solve_2d (s)": t_loop}
    for name, (t, ds) in scans.items():
        rows |= {f"{name} (s)": t, f"{name} / loop": t / t_loop,
                 f"{name}: max |M - M loop|": max_diff(ds)}
    width = max(map(len, rows))
    for name, value in rows.items():
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"{name:<{width}}  {shown}")
    out = Path(args.out or Path(__file__).parent / "results" / f"scan-2d-{args.nx}x{args.nt}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows, "machine": platform.node(),
                               "platform": platform.platform(),
                               "processor": platform.processor()}, indent=2, default=str))
    print("wrote", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
