"""Cost of the sweep machinery, and what a second worker buys.

1. Per-run overhead: a sweep of a few runs with one worker; for each run, its wall time
   (kernel start, papermill, the notebook's solve, figures and run folder, as papermill
   records it) minus the solve time the notebook measured. The median is the overhead;
   the sweep's whole wall time spread over its runs, minus the solve, is shown beside it,
   and so is the same solve called in this process (the baseline).
2. Scaling: the same 24-run grid (12 thresholds x 2 noise levels) with 1 worker, then with
   ``--workers`` workers; the ratio of wall times (ideal: 1 / workers).

    python benchmarks/sweep.py                                   # NumPy on the CPU
    python benchmarks/sweep.py --backend torch --device cuda     # runs on the GPU

Prints a table and writes JSON (default benchmarks/results/sweep-<backend>-<device>.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import mfgwork as mw

ROOT = Path(__file__).resolve().parents[1]


def _load() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def timed_sweep(notebook: Path, grid: dict, fixed: dict, workers: int,
                folder: Path) -> tuple[float, mw.SweepIndex]:
    started = time.perf_counter()
    index = mw.sweep(notebook, grid, folder, fixed, workers=workers, progress=False)
    elapsed = time.perf_counter() - started
    failed = index.where(status="failed")
    if failed:
        raise SystemExit(f"{len(failed)} run(s) failed, e.g. {failed[0]['error']}")
    return elapsed, index


def direct_solve(params: dict, repeat: int = 3) -> float:
    """Median wall time of the same solve called in this process (after one warm-up)."""
    problem = mw.SantaFeBar(threshold=params["threshold"], sigma=params["sigma"])
    kw = {k: params[k] for k in ("nx", "nt", "backend", "device")}
    mw.solve(problem, **kw)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        res = mw.solve(problem, **kw)
        mw.to_numpy(res.M)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notebook", type=Path, default=ROOT / "notebooks" / "01_santa_fe_bar.ipynb")
    ap.add_argument("--backend", default="numpy")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--nx", type=int, default=101, help="grid points (nt = nx)")
    ap.add_argument("--overhead-runs", type=int, default=6)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    fixed = {"nx": args.nx, "nt": args.nx, "backend": args.backend, "device": args.device}
    thresholds = [round(0.3 + 0.05 * k, 2) for k in range(12)]
    load_before = _load()

    with tempfile.TemporaryDirectory(prefix="mfgwork-bench-sweep-") as tmp:
        tmp = Path(tmp)
        grid = {"threshold": thresholds[: args.overhead_runs], "sigma": [0.5]}
        total, index = timed_sweep(args.notebook, grid, fixed, 1, tmp / "overhead")
        walls = [r["wall_time"] for r in index]
        solves = [r["solve_time"] for r in index]
        overhead = statistics.median(w - s for w, s in zip(walls, solves, strict=True))
        amortized = (total - sum(solves)) / len(index)
        baseline = direct_solve(index[0] | fixed)

        grid = {"threshold": thresholds, "sigma": [0.4, 0.6]}
        t1, _ = timed_sweep(args.notebook, grid, fixed, 1, tmp / "one")
        tn, idx = timed_sweep(args.notebook, grid, fixed, args.workers, tmp / "many")
    load_after = _load()

    ratio = tn / t1
    report = {
        "notebook": str(args.notebook.relative_to(ROOT) if args.notebook.is_relative_to(ROOT)
                        else args.notebook),
        "backend": args.backend, "device": args.device, "nx": args.nx, "nt": args.nx,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_before": load_before, "load_after": load_after,
                    "run_device": idx[0]["device"]},
        "overhead": {"runs": len(walls), "wall_per_run_s": walls, "solve_per_run_s": solves,
                     "median_overhead_s": overhead, "amortized_overhead_s": amortized,
                     "sweep_wall_s": total, "direct_solve_s": baseline},
        "scaling": {"runs": len(idx), "workers": args.workers, "wall_1_worker_s": t1,
                    f"wall_{args.workers}_workers_s": tn, "ratio": ratio,
                    "ideal_ratio": 1 / args.workers},
    }
    rows = [
        ("runs for the overhead (1 worker)", f"{len(walls)}"),
        ("median wall per run [s]", f"{statistics.median(walls):.2f}"),
        ("median solve in the notebook [s]", f"{statistics.median(solves):.2f}"),
        ("same solve in this process [s]", f"{baseline:.2f}"),
        ("median overhead per run [s]", f"{overhead:.2f}"),
        ("amortized overhead per run [s]", f"{amortized:.2f}"),
        (f"{len(idx)}-run sweep, 1 worker [s]", f"{t1:.1f}"),
        (f"{len(idx)}-run sweep, {args.workers} workers [s]", f"{tn:.1f}"),
        (f"ratio {args.workers} workers / 1 worker", f"{ratio:.2f} (ideal {1 / args.workers:.2f})"),
        ("load average before / after", f"{load_before} / {load_after}"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"sweep benchmark: {report['notebook']}, {args.backend}/{args.device}, "
          f"{args.nx} x {args.nx}")
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    out = args.json or ROOT / "benchmarks" / "results" / f"sweep-{args.backend}-{args.device}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
