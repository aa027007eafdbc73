"""Float64 Santa Fe solves over long horizons and little noise: status, residual, iterations.

Rows, NumPy on the CPU (the threads of ``OMP_NUM_THREADS``): for each T (``--horizons``) × σ
(``--sigmas``) × threshold (``--thresholds``), ``mw.solve`` at ``--nx`` × nt (nt = ``--nt``,
or 10 T with ``--nt 0``) to tol 1e-8: its status, certified residual, iterations, seconds, and
the float64 certificate floor FLOOR_FACTOR · L² ε from the Lipschitz constant L of its best
response (``res.extra["reachable_tol"]``) where it lies above 1e-8: named before the fine
iteration (``said`` "before": L from the coarse stage, and the solve iterates to that floor;
:mod:`mfgwork.float64_floor`) or, where the solve still stopped above its tol, after it
("after": L at its last point).

    python benchmarks/certificate_floor.py [--nx 201] [--nt 201] [--out F]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import mfgwork as mw
from mfgwork.core.storage import provenance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nx", type=int, default=201)
    parser.add_argument("--nt", type=int, default=201, help="0: 10 steps per unit time")
    parser.add_argument("--horizons", default="10,20,40,80")
    parser.add_argument("--sigmas", default="0.05,0.1,0.2,0.3")
    parser.add_argument("--thresholds", default="0.45,0.5,0.6")
    parser.add_argument("--out", default="benchmarks/results/certificate_floor.json")
    args = parser.parse_args()
    mw.solve(mw.SantaFeBar(), nx=41, nt=40, progress=False)   # compiled once, not timed
    rows = []
    print(f"{'T':>4} {'sigma':>5} {'thr':>5} {'nt':>4} {'status':>9} {'residual':>9} "
          f"{'it':>3} {'seconds':>7} {'floor':>8} {'L':>8} {'said':>6}")
    for T in (float(v) for v in args.horizons.split(",")):
        for sigma in (float(v) for v in args.sigmas.split(",")):
            for threshold in (float(v) for v in args.thresholds.split(",")):
                nt = args.nt or int(10 * T)
                started = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = mw.solve(mw.SantaFeBar(T=T, sigma=sigma, threshold=threshold),
                                   nx=args.nx, nt=nt, progress=False)
                seconds = time.perf_counter() - started
                floor = res.extra.get("reachable_tol")
                row = {"T": T, "sigma": sigma, "threshold": threshold, "nx": args.nx, "nt": nt,
                       "status": res.status.value, "residual": float(res.residual),
                       "iterations": int(res.iterations), "seconds": seconds,
                       "floor": None if floor is None else floor["tol"],
                       "lipschitz": None if floor is None else floor["lipschitz"],
                       "said": None if floor is None
                       else "before" if floor.get("predicted") else "after"}
                rows.append(row)
                print(f"{T:4g} {sigma:5g} {threshold:5g} {nt:4d} {row['status']:>9} "
                      f"{row['residual']:9.2e} {row['iterations']:3d} {seconds:7.2f} "
                      + ("       -        -      -" if floor is None
                         else f"{floor['tol']:8.1e} {floor['lipschitz']:8.1e} "
                              f"{row['said']:>6}"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "provenance": provenance()}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
