"""Benchmark of the Hamiltonians on the CPU (NumPy): Santa Fe Bar with each shipped model.

Rows (the shipped models run compiled loops (numba) for their sweeps)
  quadratic            ½|p|², Newton on the attendance path
  quadratic-generic    ½|p|² through the array-API sweeps (what a user-defined model runs)
  power-1.5            |p|^1.5/1.5: Newton on the attendance path, ∂pp H capped near p = 0
  power-1.5-anderson   the same model with ``iteration=mw.Anderson()`` (no Newton)
  power-3              |p|³/3: Newton on the attendance path
  congestion           |p|²/(2(1 + m)^0.5): outer Anderson on the density H sees (frozen),
                       Newton on the attendance path inside
  congestion-anderson  the same model with ``iteration=mw.Anderson()`` on the density path

Cases (as in ``benchmarks/fdm.py``)
  seed     nx = nt = 52, exactly 5 iterations
  default  nx = nt = 201, to tol 1e-6 (``--max-iter`` iterations at most)

For each: median wall time over ``--repeats`` runs after one warm-up, iterations (best
responses on the requested grid; those of the coarse stage of a coarse-to-fine solve apart,
``coarse_iterations``), whether it converged, the time per iteration (the median time over
the requested grid's best responses, so it includes the coarse stage) and the ratio to the
quadratic (numba) row of the same case, measured in the same run.

    python benchmarks/models.py [--repeats 3] [--cases seed,default] [--out F]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import mfgwork as mw
from mfgwork.core.storage import provenance


class GenericQuadratic(mw.Quadratic):
    """½|p|² as the scheme sees any model: not the kernels specialised for it."""


MODELS = {"quadratic": mw.Quadratic(), "quadratic-generic": GenericQuadratic(),
          "power-1.5": mw.Power(1.5), "power-1.5-anderson": (mw.Power(1.5), mw.Anderson),
          "power-3": mw.Power(3.0), "congestion": mw.Congestion(1.0, 0.5),
          "congestion-anderson": (mw.Congestion(1.0, 0.5), mw.Anderson)}
CASES = {"seed": {"nx": 52, "nt": 52, "max_iter": 5, "tol": 1e-12},
         "default": {"nx": 201, "nt": 201, "max_iter": 300, "tol": 1e-6}}


def measure(case: dict, model: mw.Hamiltonian | tuple, repeats: int) -> dict:
    H, iteration = model if isinstance(model, tuple) else (model, None)
    problem = mw.SantaFeBar(hamiltonian=H)
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            res = mw.solve(problem, progress=False,
                           iteration=None if iteration is None else iteration(), **case)
            runs.append((time.perf_counter() - t0, res))
    runs = runs[1:]
    med = statistics.median(t for t, _ in runs)
    res = runs[0][1]
    its = len(res.history["residual"])
    return {"time_s": med, "iterations": res.iterations, "evaluations": its,
            "per_iteration_s": med / max(its, 1), "converged": res.converged,
            "residual": res.residual, "mass_error": res.mass_error,
            "scheme": res.params["iteration"].get("scheme"),
            "kernels": res.extra["fdm_kernels"],
            "newton_on_coupling": res.extra.get("newton_on_coupling"),
            "outer_iterations": res.extra.get("outer_iterations"),
            "coarse_iterations": res.extra.get("coarse_iterations")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--max-iter", type=int, default=300, help="of the default case")
    parser.add_argument("--out", default="benchmarks/results/models.json")
    args = parser.parse_args(argv)
    CASES["default"]["max_iter"] = args.max_iter
    models = ["quadratic"] + [m for m in args.models.split(",") if m in MODELS
                              and m != "quadratic"]
    rows = []
    for case in [c for c in CASES if c in args.cases.split(",")]:
        base = None
        for name in models:
            row = {"case": case, "model": name} | measure(CASES[case], MODELS[name],
                                                          args.repeats)
            base = base or row["time_s"]
            row["ratio_to_quadratic"] = row["time_s"] / base
            rows.append(row)
            print(f"  measured {case} / {name}: {row['time_s']:.3f} s", file=sys.stderr)
    header = (f"{'case':<8} {'model':<20} {'median':>9} {'iters':>5} {'conv':>5} "
              f"{'residual':>9} {'per it':>9} {'scheme':>9} {'× quad':>7}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['case']:<8} {r['model']:<20} {r['time_s']:8.3f}s {r['iterations']:>5} "
              f"{str(r['converged']):>5} {r['residual']:9.1e} "
              f"{1e3 * r['per_iteration_s']:7.1f}ms {r['scheme']:>9} "
              f"{r['ratio_to_quadratic']:7.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "repeats": args.repeats, "host": platform.node(),
                               "provenance": provenance()}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
