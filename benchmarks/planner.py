"""The planner's optimum against the equilibrium: time, iterations and welfare per point.

Over thresholds × ε (σ ``--sigma``) at ``--nx`` × ``--nt`` (201², tol 1e-8), one warm process
on the CPU (NumPy, the threads of ``OMP_NUM_THREADS``): each point's equilibrium
(``mw.solve(bar)``) and the planner's problem alone (``mw.solve(bar.for_objective("social"))``),
each the fastest of ``--repeats``, their ratio (the target: ≤ 2), iterations, residuals, and
the welfare of both with the price of anarchy. Every planner's result is checked
independently: its welfare from the values (the adjoint identity) against that from the
controls (``mw.welfare``), and the welfare of the best response to its own prices
(``mw.price_welfare``); the largest differences are printed.

    python benchmarks/planner.py [--thresholds 0.3,0.6,0.9] [--eps 0.02,0.05,0.1]
                                 [--repeats 3] [--out F]

``--batch-side K --device cuda`` times batches instead: the K × K box threshold 0.3–0.9 × ε
0.03–0.1 as one batch of equilibria, one of planners and one ``objective="social"`` call (both
and their welfares), in float32 (tol 1e-6) and float64 (tol 1e-8), the second of two runs
each, with the converged counts and the largest iteration counts; and first the agreement of
four planners on the device with NumPy in float64 (101²).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from device_timing import fastest_solve

import mfgwork as mw
from mfgwork.core.storage import provenance
from mfgwork.problems.santa_fe import attendance_weights
from mfgwork.welfare import value_welfare


def row(threshold: float, eps: float, args: argparse.Namespace) -> dict:
    bar = mw.SantaFeBar(threshold=threshold, eps=eps, sigma=args.sigma)
    planner = bar.for_objective("social")
    options = {"nx": args.nx, "nt": args.nt, "tol": args.tol}
    t_eq, eq = fastest_solve(bar, args.repeats, progress=False, **options)
    t_opt, opt = fastest_solve(planner, args.repeats, progress=False, **options)
    w_opt, w_eq = mw.welfare(opt, planner), mw.welfare(eq, bar)
    A = np.asarray(opt.M)[1:] @ attendance_weights(bar.grid(args.nx, args.nt))[1]
    again = mw.price_welfare(bar, planner.price(A), args.nx)
    return {"threshold": threshold, "eps": eps, "equilibrium_s": t_eq, "planner_s": t_opt,
            "ratio": t_opt / t_eq, "equilibrium_iterations": int(eq.iterations),
            "planner_iterations": int(opt.iterations), "planner_converged": bool(opt.converged),
            "planner_residual": float(opt.residual), "welfare": w_opt,
            "equilibrium_welfare": w_eq, "welfare_loss": w_opt - w_eq,
            "price_of_anarchy": w_opt / w_eq if w_opt > 0 and w_eq > 0 else None,
            "values_minus_controls": abs(value_welfare(opt, planner) - w_opt),
            "price_path_minus_controls": abs(again - w_opt)}


def batch_rows(args: argparse.Namespace) -> dict:
    """The batch rows of ``--batch-side`` on ``--device`` (module docstring)."""
    bars = [mw.SantaFeBar(threshold=a, eps=e) for a in (0.4, 0.7) for e in (0.03, 0.1)]
    ref = mw.solve(bars, objective="social", nx=101, nt=100, progress=False)
    got = mw.solve(bars, objective="social", nx=101, nt=100, backend="torch",
                   device=args.device, dtype="float64", progress=False)
    out = {"agreement": {
        "max_dM": max(float(np.max(np.abs(mw.to_numpy(a.M) - mw.to_numpy(b.M))))
                      for a, b in zip(ref, got, strict=True)),
        "max_dW": max(abs(a.summary["welfare"] - b.summary["welfare"])
                      for a, b in zip(ref, got, strict=True))}}
    print(out["agreement"], flush=True)
    side = args.batch_side
    box = [mw.SantaFeBar(threshold=a, eps=e) for a in np.linspace(0.3, 0.9, side)
           for e in np.linspace(0.03, 0.1, side)]
    for dtype, tol in (("float32", 1e-6), ("float64", 1e-8)):
        opts = {"nx": args.nx, "nt": args.nt, "tol": tol, "backend": "torch",
                "device": args.device, "dtype": dtype, "progress": False}
        for _ in range(2):   # the second run of each counts (the first compiles)
            times = {}
            for name, problems, extra in (
                    ("equilibrium", box, {}),
                    ("planner", [b.for_objective("social") for b in box], {}),
                    ("objective_social", box, {"objective": "social"})):
                started = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", mw.ConvergenceWarning)
                    results = mw.solve(problems, **opts, **extra)
                times[name] = (time.perf_counter() - started, results)
        row = {f"{k}_s": t for k, (t, _) in times.items()}
        row |= {f"{k}_converged": sum(bool(r.converged) for r in res)
                for k, (_, res) in times.items()}
        row |= {f"{k}_max_iterations": max(int(r.iterations) for r in res)
                for k, (_, res) in times.items() if k != "objective_social"}
        row["planner_over_equilibrium"] = row["planner_s"] / row["equilibrium_s"]
        out[dtype] = row
        print(dtype, {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()},
              flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thresholds", default="0.3,0.6,0.9")
    parser.add_argument("--eps", default="0.02,0.05,0.1")
    parser.add_argument("--sigma", type=float, default=0.5)
    parser.add_argument("--nx", type=int, default=201)
    parser.add_argument("--nt", type=int, default=201)
    parser.add_argument("--tol", type=float, default=1e-8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-side", type=int, default=0,
                        help="time K × K batches on --device instead (module docstring)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default="benchmarks/results/planner.json")
    args = parser.parse_args()
    if args.batch_side:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(batch_rows(args) | {"args": vars(args),
                                                      "provenance": provenance()}, indent=1))
        print(f"wrote {out}")
        return
    mw.solve(mw.SantaFeBar(objective="social"), nx=41, nt=40, progress=False)  # warm-up
    rows = []
    print(f"{'threshold':>9} {'eps':>5} {'eq s':>7} {'opt s':>7} {'ratio':>5} {'its':>7} "
          f"{'residual':>9} {'W_opt':>8} {'W_eq':>8} {'PoA':>6}")
    for threshold in map(float, args.thresholds.split(",")):
        for eps in map(float, args.eps.split(",")):
            r = row(threshold, eps, args)
            rows.append(r)
            poa = "–" if r["price_of_anarchy"] is None else f"{r['price_of_anarchy']:.1f}"
            print(f"{threshold:9.2f} {eps:5.2f} {r['equilibrium_s']:7.3f} "
                  f"{r['planner_s']:7.3f} {r['ratio']:5.2f} "
                  f"{r['equilibrium_iterations']:>3}/{r['planner_iterations']:<3} "
                  f"{r['planner_residual']:9.1e} {r['welfare']:8.2f} "
                  f"{r['equilibrium_welfare']:8.2f} {poa:>6}", flush=True)
    print(f"largest |values − controls| {max(r['values_minus_controls'] for r in rows):.1e}, "
          f"|price path − controls| {max(r['price_path_minus_controls'] for r in rows):.1e}; "
          f"largest time ratio {max(r['ratio'] for r in rows):.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "args": vars(args), "provenance": provenance()},
                              indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
