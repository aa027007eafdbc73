"""N-patron benchmark: one sample of N patrons (attendance simulation) per N, backend and device.

    python benchmarks/n_player.py [--backend numpy|torch] [--device cpu|cuda]
        [--sizes 1e4,1e5,1e6] [--dtype float64] [--samples 1] [--out n_player.json]

The feedback is the Santa Fe equilibrium U on a 201 × 201 grid (201 time steps; FDM, NumPy).
Each row times the simulation of ``--samples`` groups of N patrons (sampling from m0, 201
Euler–Maruyama steps, the exact count of θ > 0 at every level) after a warm-up call, as the
best of repeats: ``count_above`` on NumPy; on torch a ``TorchCounter`` (on CUDA the warm-up
records the CUDA graph that the timed calls replay, ``sim_ms``; ``eager_ms`` the same
without the graph). The same row gives, in the same run: one particle FP solve of N
particles on that backend
(``fp_ms``: the same steps with a CIC deposit instead of the count) and the NumPy simulation
(``x_numpy``: NumPy time / this time, the NumPy rows up to ``--numpy-max``). ``target_ms`` is
the goal for one sample of N = 10⁶ on a GPU (50 ms); ``gap_ms`` the host time of the ε-Nash
gap of one sample (one HJB and one policy-evaluation sweep, NumPy). No assert: a table and
JSON.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import mfgwork as mw
from mfgwork.analysis.n_player import _gaps
from mfgwork.apps.doctor import versions
from mfgwork.numerics.particles.counting import TorchCounter, count_above

NX = NT = 201
TARGET_MS = 50.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["numpy", "torch"], default="numpy")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps")
    ap.add_argument("--sizes", default="1e4,1e5,1e6", help="numbers of patrons N")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--samples", type=int, default=1, help="groups of N patrons per call")
    ap.add_argument("--numpy-max", type=float, default=1e6,
                    help="largest N of the NumPy baseline")
    ap.add_argument("--budget", type=float, default=2.0,
                    help="seconds of repeats per measurement after the warm-up")
    ap.add_argument("--out", default="n_player_benchmark.json")
    return ap.parse_args(argv)


def timed(be: mw.Backend, fn: Any, budget: float) -> float:
    """Seconds per call: a warm-up call, then the best of repeats filling ``budget``."""
    fn()
    be.synchronize()
    best, spent = np.inf, 0.0
    while spent < budget:
        t0 = be.timer()
        fn()
        dt = be.timer() - t0
        best, spent = min(best, dt), spent + dt
    return best


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    problem = mw.SantaFeBar()
    result = mw.solve(problem, nx=NX, nt=NT, progress=False)
    grid = problem.grid(NX, NT)
    host = mw.get_backend("numpy", dtype=args.dtype)
    be = mw.get_backend(args.backend, args.device, args.dtype)
    U_np, m0_np = np.asarray(mw.to_numpy(result.U)), problem.initial_density(grid, host)
    U, m0 = be.asarray(U_np), be.asarray(m0_np)
    A = np.asarray(mw.to_numpy(result.attendance))[None]
    gap_s = timed(host, lambda: _gaps(problem, grid, host, U_np, m0_np, A), args.budget)
    rows = []
    for n in sizes:
        fp = mw.ParticleFP(grid, problem.sigma, be, n_particles=n, seed=1)
        eager_s = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            if be.name == "numpy":
                sim_s = timed(be, lambda n=n: count_above(U, m0, grid, problem.sigma, be, n,
                                                          args.samples, seed=1), args.budget)
            else:
                counters = [TorchCounter(grid, problem.sigma, be, n, args.samples,
                                         cuda_graph=graph) for graph in (True, False)]
                sim_s, eager_s = (timed(be, lambda c=c: c.run(U, m0, 1), args.budget)
                                  for c in counters)
            fp_s = timed(be, lambda fp=fp: fp.solve_fp(U, m0), args.budget)
        row = {"n": n, "samples": args.samples, "backend": be.name, "device": be.device,
               "dtype": be.dtype, "sim_ms": 1e3 * sim_s,
               "eager_ms": None if eager_s is None else 1e3 * eager_s, "fp_ms": 1e3 * fp_s,
               "warnings": [str(w.message) for w in caught],
               "ns_per_patron_step": 1e9 * sim_s / (n * args.samples * NT),
               "gap_ms": 1e3 * gap_s, "target_ms": TARGET_MS}
        if be.name != "numpy" and n <= args.numpy_max:
            np_s = timed(host, lambda n=n: count_above(U_np, m0_np, grid, problem.sigma, host,
                                                       n, args.samples, seed=1), args.budget)
            row["numpy_ms"], row["x_numpy"] = 1e3 * np_s, np_s / sim_s
        rows.append(row)
        print(format_row(row), flush=True)
    report = {"rows": rows, "grid": {"nx": NX, "nt": NT}, "versions": versions(),
              "device_info": mw.device_info(be.device), "date": time.strftime("%Y-%m-%d")}
    Path(args.out).write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return rows


def format_row(row: dict[str, Any]) -> str:
    extra = (f"  numpy {row['numpy_ms']:9.2f} ms  x{row['x_numpy']:.1f}"
             if "x_numpy" in row else "")
    eager = f" (eager {row['eager_ms']:.2f})" if row["eager_ms"] is not None else ""
    return (f"N={row['n']:>9,}  {row['backend']}/{row['device']} {row['dtype']}  "
            f"simulation {row['sim_ms']:9.2f} ms{eager}  FP solve {row['fp_ms']:9.2f} ms  "
            f"{row['ns_per_patron_step']:6.2f} ns/patron-step  gap {row['gap_ms']:.1f} ms"
            f"{extra}  (target {row['target_ms']:.0f} ms at N=1e6 on a GPU)")


if __name__ == "__main__":
    main()
