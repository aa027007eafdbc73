"""Cost of a parameter scan: end to end, the machinery's share, and per point against mw.solve.

A Santa Fe scan over ``--side`` thresholds × ``--side`` noise levels (σ), at ``--nx`` ×
``--nt``, to ``--tol``, written into a zarr store:

1. end to end: ``mw.scan(..., store=...)`` (placement, layout, solve, region writes, the
   progress bar), after a warm-up scan of two points (library loading, device start-up);
2. solve only: the same blocks solved by the same calls (``solve_batch`` on torch, the NumPy
   solver point by point) with nothing written, once before and once after the scan (the
   faster of the two is kept, so a warm-up the scan paid for is not counted against it);
   the machinery's seconds are end to end − solve only, its overhead those over solve only,
   and the sum of the per-point ``wall_time`` the scan records gives a second estimate of
   the solve time from inside the same run (steadier where other work shares the machine:
   solve only runs at other moments);
3. baseline: a loop of ``mw.solve`` (NumPy, float64, on the CPU) at ``--baseline-points``
   points of the grid: seconds per point against the scan's, and the largest difference of
   the attendance A(t) between the two at those points (a check of the scan's values).

    python benchmarks/scan.py --side 8 --nx 101 --nt 101            # here: the CPU
    python benchmarks/scan.py --device cuda --dtype float32         # 32 x 32 at 201² on a GPU

``--hard``: instead, the hard box (``--side`` thresholds 0.2–0.9 × ε 0.001–0.1 at σ 0.3),
block by block as a scan solves it: the torch batch alone (converged count and time: what a
scan gave before it finished points by the single path), then :func:`finish` on the points
the batch left (warm-started from the batch's best iterate), and for comparison the same
points finished cold; and the CPU path (NumPy, point by point) cold against continuation
along ε (each point warm-started from its converged neighbour): iterations and time.

    python benchmarks/scan.py --hard --side 8 --nx 81 --nt 81 --backend torch --device cpu
    python benchmarks/scan.py --hard --finish-only --device cuda       # 32 x 32 at 201²

Prints a table and writes JSON (default benchmarks/results/scan-<device>-<dtype>.json, with
``--hard`` scan-hard-<device>-<dtype>.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

import mfgwork as mw
from mfgwork.workflows import scan as scan_module
from mfgwork.workflows.scan_check import blocks
from mfgwork.workflows.scan_solve import finish, solve_points
from mfgwork.workflows.scan_store import block_shape, region_points


def grid_spec(side: int) -> dict:
    return {"threshold": {"linspace": [0.3, 0.9, side]}, "sigma": {"linspace": [0.3, 1.0, side]}}


def solve_only(plan: scan_module.ScanPlan, be: mw.Backend, chunk: int) -> float:
    """The blocks of the scan solved by the same calls, nothing stored."""
    started = time.perf_counter()
    for region in blocks(plan.shape, block_shape(plan.shape, chunk)):
        problems = [plan.problem(i) for i in region_points(region)]
        solve_points(problems, be, plan.options)
    be.synchronize()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=32, help="points per axis (default 32)")
    parser.add_argument("--nx", type=int, default=201)
    parser.add_argument("--nt", type=int, default=201)
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--max-iter", type=int, default=400)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--backend", default=None)
    parser.add_argument("--chunk-size", type=int, default=None)
    parser.add_argument("--baseline-points", type=int, default=8)
    parser.add_argument("--out", default=None)
    parser.add_argument("--hard", action="store_true",
                        help="the hard box: the batch's fallback and continuation on the CPU")
    parser.add_argument("--finish-only", action="store_true",
                        help="with --hard: the batch and its warm finish only (no cold "
                             "finish, no CPU path)")
    args = parser.parse_args(argv)
    if args.hard:
        return hard_box(args)

    spec = grid_spec(args.side)
    opts = {"nx": args.nx, "nt": args.nt, "tol": args.tol, "max_iter": args.max_iter,
            "dtype": args.dtype, "backend": args.backend}
    plan = scan_module.make_plan(mw.SantaFeBar, spec, None, opts, ("M", "U"))
    n = int(np.prod(plan.shape))
    be, _ = scan_module.placement(args.device, args.backend, args.dtype,
                                  plan.problem((0,) * len(plan.shape)), n, args.nx, args.nt)
    chunk = args.chunk_size or scan_module.points_per_block(be, args.nx, args.nt, 2, n)
    common = {"device": args.device, "chunk_size": chunk, "progress": False} | opts

    with tempfile.TemporaryDirectory(prefix="scan-bench-") as tmp:
        mw.scan(mw.SantaFeBar, {"threshold": [0.5, 0.7]}, store=Path(tmp) / "warm.zarr",
                **common)
        solve_before = solve_only(plan, be, chunk)
        started = time.perf_counter()
        ds = mw.scan(mw.SantaFeBar, spec, store=Path(tmp) / "scan.zarr", **common)
        end_to_end = time.perf_counter() - started
        ds = ds.load()
        recorded = float(ds.wall_time.sum())
        store_bytes = sum(p.stat().st_size for p in Path(tmp, "scan.zarr").rglob("*")
                          if p.is_file())
    solve_after = solve_only(plan, be, chunk)
    solve = min(solve_before, solve_after)

    rng = np.random.default_rng(0)
    flat = rng.choice(n, size=min(args.baseline_points, n), replace=False)
    loop, diff = 0.0, 0.0
    for k in flat:
        i, j = np.unravel_index(k, plan.shape)
        problem = plan.problem((i, j))
        started = time.perf_counter()
        ref = mw.solve(problem, nx=args.nx, nt=args.nt, tol=max(args.tol, 1e-12),
                       max_iter=args.max_iter, progress=False)
        loop += time.perf_counter() - started
        diff = max(diff, float(np.max(np.abs(ds.attendance.values[i, j] - ref.attendance))))
    per_point_loop = loop / len(flat)

    status = ds.status.values.astype(str).ravel()
    rows = [
        ("points", n), ("grid", f"{args.nx} x {args.nt}"), ("tol", args.tol),
        ("backend / device / dtype", f"{be.name} / {be.device} / {be.dtype}"),
        ("points per block", chunk),
        ("converged / not / failed", "/".join(str(int(np.sum(status == s))) for s in
                                              ("converged", "not_converged", "failed"))),
        ("end to end (s)", end_to_end), ("solve only, before / after (s)",
                                          f"{solve_before:.4g} / {solve_after:.4g}"),
        ("sum of recorded wall_time (s)", recorded),
        ("machinery: end to end - solve only (s)", end_to_end - solve),
        ("machinery overhead vs solve only", (end_to_end - solve) / solve),
        ("machinery overhead vs recorded", (end_to_end - recorded) / recorded),
        ("scan s/point", end_to_end / n),
        ("mw.solve loop s/point (numpy f64, cpu)", per_point_loop),
        ("speed-up per point vs the loop", per_point_loop / (end_to_end / n)),
        ("max |A_scan - A_solve| at sampled points", diff),
        ("store size (MB)", store_bytes / 1e6),
    ]
    write(rows, args, be, f"benchmarks/results/scan-{be.device}-{be.dtype}.json")
    return 0


def write(rows: list[tuple[str, object]], args: argparse.Namespace, be: mw.Backend,
          default: str) -> None:
    """Print the table and write it as JSON with the machine and versions."""
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"{name:<{width}}  {text}")

    out = Path(args.out or default)
    out.parent.mkdir(parents=True, exist_ok=True)
    device = mw.device_info(be.device)
    out.write_text(json.dumps({
        "rows": dict(rows), "args": vars(args), "machine": platform.machine(),
        "processor": platform.processor(), "cores": os.cpu_count(),
        "device": {k: device.get(k) for k in ("name", "memory_total")},
        "load": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "versions": mw.results.provenance()["versions"]}, indent=2, default=str) + "\n")
    print(f"written: {out}")


def hard_box(args: argparse.Namespace) -> int:
    """The batch alone, then finished by the single path (warm and cold); the CPU path
    cold and with continuation along ε."""
    warnings.simplefilter("ignore", mw.ConvergenceWarning)
    spec = {"threshold": {"linspace": [0.2, 0.9, args.side]},
            "eps": {"linspace": [0.001, 0.1, args.side]}}
    opts = {"nx": args.nx, "nt": args.nt, "tol": args.tol, "max_iter": args.max_iter,
            "dtype": args.dtype, "backend": args.backend}
    plan = scan_module.make_plan(mw.SantaFeBar, spec, {"sigma": 0.3}, opts, ("M", "U"))
    n = int(np.prod(plan.shape))
    be, _ = scan_module.placement(args.device, args.backend, args.dtype,
                                  plan.problem((0,) * len(plan.shape)), n, args.nx, args.nt)
    host = mw.get_backend("numpy")
    chunk = args.chunk_size or scan_module.points_per_block(be, args.nx, args.nt, 2, n)
    regions = blocks(plan.shape, block_shape(plan.shape, chunk))
    kw = {k: plan.options[k] for k in ("nx", "nt", "tol", "max_iter", "iteration")}
    batch_time, finish_time, cold_time = 0.0, 0.0, 0.0
    batch, warm, cold = [], [], []
    for region in regions:
        problems = [plan.problem(i) for i in region_points(region)]
        started = time.perf_counter()
        results = mw.solve_batch(problems, backend=be, progress=False, **kw)
        batch_time += time.perf_counter() - started
        outcomes = [{"status": "converged" if r.converged else "not_converged",
                     "converged": r.converged, "iterations": r.iterations,
                     "residual": r.residual, "wall_time": 0.0, "message": "",
                     "finished_by": "batch"} for r in results]
        batch += outcomes
        started = time.perf_counter()
        warm += finish(problems, [dict(o) for o in outcomes], [r.M for r in results],
                       plan.options)
        finish_time += time.perf_counter() - started
        if args.finish_only:
            continue
        started = time.perf_counter()
        for p, o in zip(problems, outcomes, strict=True):
            if not o["converged"]:
                single = _point(mw.solve(p, backend=host, progress=False, **kw), "single")
                o = single | {"iterations": single["iterations"] + o["iterations"]}
            cold.append(o)
        cold_time += time.perf_counter() - started
    cpu = {}
    for name in () if args.finish_only else ("cold", "continuation"):
        started = time.perf_counter()
        cpu[name] = along_eps(plan, host, kw, warm=name == "continuation")
        cpu[name + " time"] = time.perf_counter() - started

    def count(points: list[dict]) -> int:
        return sum(bool(p["converged"]) for p in points)

    def extra(points: list[dict]) -> list[int]:
        return [p["iterations"] - b["iterations"] for p, b in zip(points, batch, strict=True)
                if b["status"] != "converged"]

    left = [b for b in batch if not b["converged"]]
    rows = [
        ("points", n), ("grid", f"{args.nx} x {args.nt}"), ("tol", args.tol),
        ("box", f"threshold 0.2-0.9 x eps 0.001-0.1 at sigma 0.3, {args.side} x {args.side}"),
        ("batch backend / device / dtype", f"{be.name} / {be.device} / {be.dtype}"),
        ("points per block", chunk), ("cores for the single path", os.cpu_count()),
        ("before: batch alone, converged", f"{count(batch)} / {n}"),
        ("before: batch alone (s)", batch_time),
        ("after: batch + single path (warm), converged", f"{count(warm)} / {n}"),
        ("after: batch + single path (warm) (s)", batch_time + finish_time),
        ("single path on the points left, warm (s)", finish_time),
        ("points left by the batch", len(left)),
        ("their single-path iterations, warm: sum / median",
         f"{sum(extra(warm))} / {np.median(extra(warm)) if left else 0:g}"),
        ("finished_by", ", ".join(f"{k} {sum(p['finished_by'] == k for p in warm)}"
                                  for k in ("batch", "single-warm", "single"))),
    ]
    if not args.finish_only:
        rows += [
            ("single path on the points left, cold, one core (s)", cold_time),
            ("their single-path iterations, cold: sum / median",
             f"{sum(extra(cold))} / {np.median(extra(cold)) if left else 0:g}"),
            ("cold converged (batch + cold single path)", f"{count(cold)} / {n}")]
    for name in ("cold", "continuation"):
        its = [p["iterations"] for p in cpu[name]]
        rows += [(f"CPU path, {name}: converged", f"{count(cpu[name])} / {n}"),
                 (f"CPU path, {name}: iterations sum / median",
                  f"{sum(its)} / {np.median(its):g}"),
                 (f"CPU path, {name} (s)", cpu[name + " time"])]
    write(rows, args, be, f"benchmarks/results/scan-hard-{be.device}-{be.dtype}.json")
    return 0


def along_eps(plan: scan_module.ScanPlan, host: mw.Backend, kw: dict, warm: bool
              ) -> list[dict]:
    """Every point by mw.solve (NumPy), along ε for each threshold; ``warm``: each point
    starts from the attendance path of the previous one when that converged."""
    out = []
    for i in range(plan.shape[0]):
        previous = None
        for j in range(plan.shape[1]):
            res = mw.solve(plan.problem((i, j)), backend=host, progress=False,
                           initial=previous if warm else None, **kw)
            previous = res if res.converged else None
            out.append(_point(res, "single-warm" if warm and j else "single"))
    return out


def _point(res: mw.Result, how: str) -> dict:
    return {"status": "converged" if res.converged else "not_converged",
            "converged": res.converged, "iterations": res.iterations, "finished_by": how}


if __name__ == "__main__":
    raise SystemExit(main())
