"""Cost of the sweep machinery, and what a second worker buys.

1. Per-run overhead: a sweep of a few runs with one worker; for each run, its wall time
   (kernel start, papermill, the notebook's solve, figures and run folder, as papermill
   records it) minus the solve time the notebook measured. The median is the overhead;
   the sweep's whole wall time spread over its runs, minus the solve, is shown beside it,
   and so is the same solve called in this process (the baseline). Measured twice: on a
   notebook that only solves and writes the run folder (the machinery's own cost), and on
   the main notebook (which also draws and saves six figures).
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

import nbformat

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


def minimal_notebook(folder: Path) -> Path:
    """A notebook that only solves and writes the run folder."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    params = nbformat.v4.new_code_cell("threshold = 0.6\nsigma = 0.5\nnx = 201\nnt = 201\n"
                                       "backend = 'numpy'\ndevice = 'cpu'\nout_dir = ''")
    params.metadata["tags"] = ["parameters"]
    body = nbformat.v4.new_code_cell(
        "import mfgwork as mw\n"
        "res = mw.solve(mw.SantaFeBar(threshold=threshold, sigma=sigma), nx=nx, nt=nt,"
        " backend=backend, device=device)\n"
        "mw.save_run(out_dir, res)")
    nb.cells = [params, body]
    path = folder / "solve_and_save.ipynb"
    nbformat.write(nb, path)
    return path


def overhead(notebook: Path, fixed: dict, thresholds: list[float], folder: Path) -> dict:
    """Per-run wall, solve and overhead of a 1-worker sweep over ``thresholds``."""
    total, index = timed_sweep(notebook, {"threshold": thresholds, "sigma": [0.5]}, fixed, 1,
                               folder)
    walls = [r["wall_time"] for r in index]
    solves = [r["solve_time"] for r in index]
    return {"runs": len(walls), "wall_per_run_s": walls, "solve_per_run_s": solves,
            "median_wall_s": statistics.median(walls),
            "median_solve_s": statistics.median(solves),
            "median_overhead_s": statistics.median(w - s for w, s in zip(walls, solves,
                                                                         strict=True)),
            "amortized_overhead_s": (total - sum(solves)) / len(index), "sweep_wall_s": total}


def direct_solve(params: dict, repeat: int = 3) -> float:
    """Median wall time of the same solve called in this process (after one warm-up)."""
    problem = mw.SantaFeBar(threshold=params["threshold"], sigma=params["sigma"])
    kw = {k: params[k] for k in ("nx", "nt", "backend", "device")}
    mw.solve(problem, **kw, progress=False)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        res = mw.solve(problem, **kw, progress=False)
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
    ap.add_argument("--thresholds", type=int, default=12,
                    help="thresholds in the scaling sweep (x 2 noise levels)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    fixed = {"nx": args.nx, "nt": args.nx, "backend": args.backend, "device": args.device}
    thresholds = [round(0.3 + 0.05 * k, 2) for k in range(max(args.thresholds,
                                                                args.overhead_runs))]
    load_before = _load()

    with tempfile.TemporaryDirectory(prefix="mfgwork-bench-sweep-") as tmp:
        tmp = Path(tmp)
        some = thresholds[: args.overhead_runs]
        machinery = overhead(minimal_notebook(tmp), fixed, some, tmp / "minimal")
        main_nb = overhead(args.notebook, fixed, some, tmp / "main")
        baseline = direct_solve({"threshold": some[0], "sigma": 0.5} | fixed)

        grid = {"threshold": thresholds[: args.thresholds], "sigma": [0.4, 0.6]}
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
        "direct_solve_s": baseline,
        "overhead_solve_and_save": machinery,
        "overhead_main_notebook": main_nb,
        "scaling": {"runs": len(idx), "workers": args.workers, "wall_1_worker_s": t1,
                    f"wall_{args.workers}_workers_s": tn, "ratio": ratio,
                    "ideal_ratio": 1 / args.workers},
    }
    rows = [("same solve in this process (warm) [s]", f"{baseline:.2f}")]
    for label, o in (("solve+save notebook", machinery), ("main notebook", main_nb)):
        rows += [(f"{label}: runs (1 worker)", f"{o['runs']}"),
                 (f"{label}: median wall per run [s]", f"{o['median_wall_s']:.2f}"),
                 (f"{label}: median solve in the kernel [s]", f"{o['median_solve_s']:.2f}"),
                 (f"{label}: median overhead per run [s]", f"{o['median_overhead_s']:.2f}"),
                 (f"{label}: amortized overhead per run [s]",
                  f"{o['amortized_overhead_s']:.2f}")]
    rows += [
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
