"""The long run (``mw.solve(problem, stationary=True)``) against the finite horizon.

Rows, NumPy on the CPU (the threads of ``OMP_NUM_THREADS``): for Santa Fe at ``--nx`` (201)
with the default Hamiltonian, |p|^1.5/1.5 and congestion, the stationary solve and the
finite-horizon equilibrium at nx × nx (T = 10, tol 1e-8), each the fastest of ``--repeats``,
their ratio (target ≤ 2), Newton steps, the certified residual and the stationary attendance;
then, checked independently, the middle of finite horizons T (``--horizons``, 5 steps per unit
time, at ``--nx-horizon``) against the stationary attendance, and the observed order of the
errors of m, v and λ against the exact ergodic solution
(:class:`mfgwork.problems.verification.ErgodicProblem`).

    python benchmarks/long_run.py [--nx 201] [--repeats 5] [--out F]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from device_timing import fastest_solve

import mfgwork as mw
from mfgwork.analysis.studies import ergodic_refinement, fitted_order
from mfgwork.core.storage import provenance
from mfgwork.problems.verification import ErgodicProblem

MODELS = {"quadratic": None, "power 1.5": mw.Power(1.5), "congestion": mw.Congestion()}



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nx", type=int, default=201)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--horizons", default="30,60,120")
    parser.add_argument("--nx-horizon", type=int, default=101)
    parser.add_argument("--out", default="benchmarks/results/long_run.json")
    args = parser.parse_args()
    rows = []
    print(f"{'model':>11} {'stationary':>10} {'finite T':>9} {'ratio':>5} {'steps':>5} "
          f"{'residual':>9} {'attendance':>10}")
    for name, hamiltonian in MODELS.items():
        bar = mw.SantaFeBar(hamiltonian=hamiltonian)
        mw.solve(bar, nx=41, stationary=True)   # the model's kernels, compiled once
        mw.solve(bar, nx=41, nt=40, progress=False)
        t_long, long_run = fastest_solve(bar, args.repeats, nx=args.nx, stationary=True,
                                       progress=False)
        t_finite, _ = fastest_solve(bar, args.repeats, nx=args.nx, nt=args.nx, progress=False)
        row = {"model": name, "stationary_s": t_long, "finite_s": t_finite,
               "ratio": t_long / t_finite, "newton_steps": int(long_run.iterations),
               "residual": float(long_run.residual), "check": float(long_run.check()),
               "attendance": long_run.summary["mean_attendance"],
               "ergodic_constant": long_run.summary["ergodic_constant"]}
        rows.append(row)
        print(f"{name:>11} {t_long:10.3f} {t_finite:9.3f} {row['ratio']:5.2f} "
              f"{row['newton_steps']:5d} {row['residual']:9.1e} {row['attendance']:10.6f}")
    bar, n = mw.SantaFeBar(), args.nx_horizon
    level = mw.solve(bar, nx=n, stationary=True).summary["mean_attendance"]
    horizons = []
    for T in map(float, args.horizons.split(",")):
        nt = int(5 * T)
        res = mw.solve(mw.SantaFeBar(T=T), nx=n, nt=nt, progress=False, max_iter=400)
        horizons.append({"T": T, "nx": n, "nt": nt,
                         "gap_at_T/2": float(res.attendance[nt // 2]) - level})
    print("finite horizons, A(T/2) − stationary attendance:",
          {h["T"]: f"{h['gap_at_T/2']:.2e}" for h in horizons})
    errors = ergodic_refinement(ErgodicProblem(), (41, 81, 161, 321), tol=1e-11)
    orders = {k: fitted_order(errors, f"error_{k}") for k in ("m", "v", "lambda")}
    print("observed orders against the exact ergodic solution:",
          {k: round(v, 3) for k, v in orders.items()})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "horizons": horizons, "exact": errors,
                               "orders": orders, "args": vars(args),
                               "provenance": provenance()}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
