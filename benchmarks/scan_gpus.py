"""Scaling of a Santa Fe scan over the GPUs of one host: one Dask worker per GPU.

A 3-D scan threshold × σ × ε (``--side`` values each; 47³ ≈ 10⁵ points by default) at
``--nx`` × ``--nt`` in ``--dtype``, for each n of ``--gpus`` on a cluster of one worker per
GPU (:func:`mfgwork.workflows.dask_client.gpu_cluster`, the cluster of ``dask="gpus"``)
given to ``mw.scan`` as ``dask=client``, into a new store, after a warm-up scan of a few
points on the same cluster (the workers' start-up and the kernels' loading are not timed;
``mw.scan(..., dask="gpus")`` would start a cluster for each scan). For each n: wall
time, points per second, the speed-up over the first n of the list (measured in the same
run), converged points, and the mean GPU utilisation sampled by ``nvidia-smi`` every
``--sample`` seconds while the scan ran (per GPU in the JSON). The store keeps each point's
paths (attendance, status); ``--keep M,U`` adds the fields (331 kB a point at 201² in
float32, so writing, not solving, then sets the pace).

    python benchmarks/scan_gpus.py --gpus 1,2,4 [--side 47] [--out F]
    python benchmarks/scan_gpus.py --gpus 1 --side 4 --nx 41 --nt 41 --smoke   # no GPU: CPU
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

import mfgwork as mw
from mfgwork.core.storage import provenance
from mfgwork.workflows.dask_client import gpu_cluster, visible_gpus


def grid(side: int) -> dict:
    """The scan's axes: ``side`` thresholds, noise levels and ε each."""
    return {"threshold": {"linspace": [0.3, 0.8, side]}, "sigma": {"linspace": [0.3, 1.0, side]},
            "eps": {"linspace": [0.02, 0.1, side]}}


class Utilisation:
    """``nvidia-smi`` sampled in a thread: utilisation (%) per GPU, every ``period`` s."""

    def __init__(self, period: float) -> None:
        self.period, self.samples, self._stop = period, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                                      "--format=csv,noheader,nounits"], capture_output=True,
                                     text=True, timeout=10, check=True).stdout
                self.samples.append([float(v) for v in out.split()])
            except (OSError, subprocess.SubprocessError, ValueError):
                return
            self._stop.wait(self.period)

    def __enter__(self) -> Utilisation:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> list[float]:
        return np.mean(self.samples, axis=0).tolist() if self.samples else []


def cluster(n: int, smoke: bool) -> Any:
    """A Dask cluster of n workers: one per GPU, or n CPU processes with ``smoke``."""
    from distributed import LocalCluster

    if smoke:
        return LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                            dashboard_address=None)
    return gpu_cluster(visible_gpus(n))


def run(n: int, args: argparse.Namespace, folder: Path) -> dict:
    """One scan on n workers (GPUs, or CPU processes with ``--smoke``)."""
    from distributed import Client

    keep = tuple(k for k in args.keep.split(",") if k)
    options = dict(nx=args.nx, nt=args.nt, dtype=args.dtype, tol=args.tol, keep=keep,
                   max_points=max(args.side ** 3, 1), progress=False,
                   device="cpu" if args.smoke else "auto")
    with cluster(n, args.smoke) as workers, Client(workers) as client:
        mw.scan(mw.SantaFeBar, grid(2), store=folder / f"warm-{n}.zarr", dask=client,
                **options)
        with Utilisation(args.sample) as gpu:
            started = time.perf_counter()
            ds = mw.scan(mw.SantaFeBar, grid(args.side), store=folder / f"scan-{n}.zarr",
                         dask=client, **options)
            wall = time.perf_counter() - started
    points = args.side ** 3
    return {"workers": n, "points": points, "wall_s": wall, "points_per_s": points / wall,
            "converged": int(np.asarray(ds["converged"]).sum()),
            "gpu_utilisation_pct": gpu.mean()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="1,2,4", help="worker counts, the first the baseline")
    parser.add_argument("--side", type=int, default=47)
    parser.add_argument("--nx", type=int, default=201)
    parser.add_argument("--nt", type=int, default=201)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--keep", default="",
                        help="fields stored per point, e.g. M,U (default: none, the paths only)")
    parser.add_argument("--sample", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--smoke", action="store_true", help="CPU worker processes instead")
    parser.add_argument("--out", default="benchmarks/results/scan_gpus.json")
    args = parser.parse_args()
    counts = [int(n) for n in args.gpus.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            rows.append(run(n, args, Path(tmp)))
            base = rows[0]["points_per_s"]
            rows[-1]["speedup"] = rows[-1]["points_per_s"] / base
            r = rows[-1]
            print(f"{n} workers: {r['wall_s']:.1f} s, {r['points_per_s']:.0f} points/s, "
                  f"× {r['speedup']:.2f}, converged {r['converged']}/{r['points']}, GPU "
                  f"{r['gpu_utilisation_pct']}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "args": vars(args), "host": platform.node(),
                               "provenance": provenance()}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
