"""Equilibrium benchmark: does the default iteration reach the Santa Fe equilibrium?

Over a threshold × σ × ε grid covering the box users explore (thresholds 0.2–0.9,
σ 0.1–1.5, ε 0.001–0.1; T = 10 and T = 20), each problem is solved with the defaults to
``--tol`` (1e-6) in at most ``--max-iter`` iterations, and every returned result is checked
independently: one best response to its attendance path, computed here from the finite-
difference solvers (not through the solver's own residual),

    r(M) = ‖A(BR(A(M))) − A(M)‖₂ / ‖A(BR(A(M)))‖₂      (levels 1..nt)

A point counts as *converged* when the solver says so, as *reached* when r ≤ tol, and as a
*false convergence* when the solver says converged but r > tol. For each set: the share
reached, the false convergences, median and largest iteration counts, the median and largest
time per solve (one run each, after a warm-up).

    python benchmarks/convergence.py [--sets main,long,fine] [--tol 1e-6] [--out F]
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import mfgwork as mw
from mfgwork.core.storage import provenance
from mfgwork.numerics.fdm.sweeps import FiniteDifferences

THRESHOLDS = np.linspace(0.2, 0.9, 4)
SIGMAS = np.linspace(0.1, 1.5, 4)
EPSILONS = np.geomspace(0.001, 0.1, 4)

SETS = {  # name: (n, T, thresholds, sigmas, epsilons)
    "main": (101, 10.0, THRESHOLDS, SIGMAS, EPSILONS),
    "long": (101, 20.0, THRESHOLDS[[0, 3]], SIGMAS[[0, 2]], EPSILONS),
    "fine": (201, 10.0, THRESHOLDS[[0, 2]], SIGMAS[[0, 3]], EPSILONS),
}


def best_response_residual(problem: mw.SantaFeBar, M: np.ndarray, n: int) -> float:
    """r(M) from one best response to the attendance path of M (NumPy float64)."""
    grid = problem.grid(n, n)
    be = mw.get_backend("numpy")
    coupling = problem.coupling(grid, be)
    fd = FiniteDifferences(grid, problem.nu, be)
    A = coupling.state(M)
    M_br = fd.solve_fp(fd.solve_hjb(problem.terminal_cost(grid, be),
                                    coupling.running_cost(A)), problem.initial_density(grid, be))
    A_br = coupling.state(M_br)
    return float(np.linalg.norm(A_br - A) / np.linalg.norm(A_br))


def measure(name: str, tol: float, max_iter: int) -> list[dict]:
    n, T, thresholds, sigmas, epsilons = SETS[name]
    rows = []
    mw.solve(mw.SantaFeBar(), nx=n, nt=n, progress=False)  # warm-up (compilation)
    for a, s, e in itertools.product(thresholds, sigmas, epsilons):
        problem = mw.SantaFeBar(threshold=float(a), sigma=float(s), eps=float(e), T=T)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            res = mw.solve(problem, nx=n, nt=n, tol=tol, max_iter=max_iter, progress=False)
            elapsed = time.perf_counter() - t0
        r = best_response_residual(problem, np.asarray(res.M), n)
        reported = getattr(res, "residual", None)
        rows.append({"set": name, "n": n, "T": T, "threshold": float(a), "sigma": float(s),
                     "eps": float(e), "converged": bool(res.converged),
                     "iterations": int(res.iterations), "time_s": elapsed,
                     "check_residual": r, "reported_residual": reported,
                     "reached": r <= tol, "false_convergence": bool(res.converged) and r > tol,
                     "A_mid": float(np.asarray(res.attendance)[n // 2])})
        print(f"  {name} A*={a:.2f} σ={s:.2f} ε={e:.4f}: converged={res.converged} "
              f"it={res.iterations} r={r:.2e} ({elapsed:.2f} s)", file=sys.stderr)
    return rows


def summary(rows: list[dict]) -> dict:
    its = [r["iterations"] for r in rows]
    times = [r["time_s"] for r in rows]
    return {"points": len(rows), "reached": sum(r["reached"] for r in rows),
            "converged": sum(r["converged"] for r in rows),
            "false_convergences": sum(r["false_convergence"] for r in rows),
            "share_reached": sum(r["reached"] for r in rows) / len(rows),
            "median_iterations": statistics.median(its), "max_iterations": max(its),
            "median_time_s": statistics.median(times), "max_time_s": max(times)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(SETS), help=f"from {', '.join(SETS)}")
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--max-iter", type=int, default=500)
    parser.add_argument("--out", default="benchmarks/results/convergence.json")
    args = parser.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        parser.error(f"unknown sets {unknown}; choose from {list(SETS)}")
    rows = {s: measure(s, args.tol, args.max_iter) for s in sets}
    summaries = {s: summary(r) for s, r in rows.items()}

    header = (f"{'set':<6} {'grid':>8} {'T':>4} {'points':>6} {'reached':>8} {'false conv':>10} "
              f"{'it med':>6} {'it max':>6} {'t med':>8} {'t max':>8}")
    print(f"tol {args.tol:g}, max_iter {args.max_iter}; reached: one best response to the "
          "returned path has r <= tol")
    print(header)
    print("-" * len(header))
    for s, m in summaries.items():
        n, T = SETS[s][:2]
        print(f"{s:<6} {f'{n}x{n}':>8} {T:4g} {m['points']:6d} "
              f"{100 * m['share_reached']:7.1f}% {m['false_convergences']:10d} "
              f"{m['median_iterations']:6g} {m['max_iterations']:6d} "
              f"{m['median_time_s']:7.3f}s {m['max_time_s']:7.3f}s")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"tol": args.tol, "max_iter": args.max_iter,
                               "summaries": summaries, "rows": rows, "host": platform.node(),
                               "provenance": provenance()}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
