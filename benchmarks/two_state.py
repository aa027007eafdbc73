"""Two-state El Farol benchmark: does `mw.solve_two_state` reach a certified equilibrium?

Over switching costs c (log-spaced in [0.01, 100]) × horizons T at ``--nt`` steps (400), each
problem is solved at the defaults (tol 1e-8) and its result checked independently: one best
response to the returned attendance path A, computed here by the scheme's plain sweeps
(``TwoStateScheme.solve_hjb`` then ``solve_fp``, rates from differences of U — not the
solver's own evaluation),

    r = ‖A(BR(A)) − A‖₂ / ‖A(BR(A))‖₂      (levels 1..nt).

With ``--before`` the same points also run the Anderson fixed-point iteration on the
attendance path that the solver used before Newton (``fixed_point``, max_iter 500); with
``--opening`` the solver's Newton iteration started from the opening attendance A ≡ A_0 (its
start before the plateau path), certified the same way, and the ratio of the total times.
Prints a table (converged, iterations, residual, time per point) and writes JSON.

    python benchmarks/two_state.py [--costs 9] [--horizons 1,10,30,60,100] [--before]
                                   [--opening] [--out F]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import mfgwork as mw
from mfgwork.core.backend import get_backend
from mfgwork.core.storage import provenance
from mfgwork.numerics.attendance_newton import AttendanceNewton
from mfgwork.numerics.finite_state import TwoStateScheme
from mfgwork.numerics.iteration import Anderson, fixed_point


def independent_residual(problem: mw.TwoStateElFarol, M: np.ndarray, nt: int) -> float:
    """r of the attendance path of M from one best response by the plain sweeps."""
    scheme = TwoStateScheme(nt, problem.T / nt, problem.switching_cost)
    A = M[1:, 1]
    F = problem.coupling().running_cost(A)
    A_br = scheme.solve_fp(scheme.solve_hjb(problem.terminal_cost(), F),
                           problem.initial_distribution())[1:, 1]
    return float(np.linalg.norm(A_br - A) / np.linalg.norm(A_br))


def solve_before(problem: mw.TwoStateElFarol, nt: int) -> dict:
    """The Anderson fixed-point iteration on the attendance path (max_iter 500)."""
    sweeps = TwoStateScheme(nt, problem.T / nt, problem.switching_cost)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fixed_point(problem.coupling(), sweeps.solve_hjb, sweeps.solve_fp,
                          m0=problem.initial_distribution(), U_T=problem.terminal_cost(),
                          nt=nt, backend=get_backend("numpy"), scheme=Anderson(), tol=1e-8,
                          max_iter=500)
    return {"converged": bool(out.converged[0]), "iterations": int(out.iterations[0]),
            "residual": float(out.residual[0]), "time_s": time.perf_counter() - started}


def solve_from_opening(problem: mw.TwoStateElFarol, nt: int) -> dict:
    """The solver's Newton iteration (tol 1e-8, max_iter 500) from A ≡ A_0."""
    sweeps = TwoStateScheme(nt, problem.T / nt, problem.switching_cost)
    newton = AttendanceNewton(sweeps, problem.payoff, problem.payoff_slope,
                              problem.payoff_integral, m0=problem.initial_distribution(),
                              U_T=problem.terminal_cost(), tol=1e-8, max_iter=500)
    started = time.perf_counter()
    out = newton.run(np.full(nt, problem.attendance0))
    elapsed = time.perf_counter() - started
    return {"converged": bool(out.converged), "iterations": out.iterations,
            "independent_residual": independent_residual(problem, out.M, nt),
            "time_s": elapsed}


def measure(costs: np.ndarray, horizons: list[float], nt: int, before: bool,
            opening: bool) -> list[dict]:
    rows = []
    mw.solve_two_state(mw.TwoStateElFarol(), nt=nt)  # compile the sweeps
    for c in costs:
        for T in horizons:
            problem = mw.TwoStateElFarol(switching_cost=float(c), T=T)
            started = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = mw.solve_two_state(problem, nt=nt)
            row = {"switching_cost": float(c), "T": T, "converged": bool(res.converged),
                   "iterations": res.iterations, "evaluations": res.extra["evaluations"],
                   "stopped": res.status, "residual": res.residual,
                   "independent_residual": independent_residual(problem, res.M, nt),
                   "time_s": time.perf_counter() - started}
            if before:
                row["before"] = solve_before(problem, nt)
            if opening:
                row["opening"] = solve_from_opening(problem, nt)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", type=int, default=9, help="log-spaced in [0.01, 100]")
    parser.add_argument("--horizons", default="1,10,30,60,100")
    parser.add_argument("--nt", type=int, default=400)
    parser.add_argument("--before", action="store_true")
    parser.add_argument("--opening", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/two_state.json")
    args = parser.parse_args(argv)
    horizons = [float(h) for h in args.horizons.split(",") if h]
    rows = measure(np.geomspace(0.01, 100.0, args.costs), horizons, args.nt, args.before,
                   args.opening)
    header = (f"{'c':>8} {'T':>5} {'conv':>5} {'it':>4} {'evals':>5} {'residual':>9} "
              f"{'indep.':>9} {'time':>8} {'stopped':>9}")
    if args.before:
        header += f" | {'before: conv':>12} {'it':>4} {'residual':>9} {'time':>8}"
    if args.opening:
        header += f" | {'opening: conv':>13} {'it':>4} {'indep.':>9} {'time':>8}"
    print(f"nt {args.nt}, tol 1e-8; indep.: one best response by the plain sweeps")
    print(header)
    print("-" * len(header))
    for r in rows:
        line = (f"{r['switching_cost']:8.3g} {r['T']:5g} {str(r['converged']):>5} "
                f"{r['iterations']:4d} {r['evaluations']:5d} {r['residual']:9.2e} "
                f"{r['independent_residual']:9.2e} {r['time_s']:7.3f}s {r['stopped']:>9}")
        if args.before:
            b = r["before"]
            line += (f" | {str(b['converged']):>12} {b['iterations']:4d} "
                     f"{b['residual']:9.2e} {b['time_s']:7.3f}s")
        if args.opening:
            o = r["opening"]
            line += (f" | {str(o['converged']):>13} {o['iterations']:4d} "
                     f"{o['independent_residual']:9.2e} {o['time_s']:7.3f}s")
        print(line)
    converged = sum(r["converged"] for r in rows)
    print(f"converged {converged} / {len(rows)}; false convergences "
          f"{sum(r['converged'] and r['independent_residual'] > 1e-8 for r in rows)}")
    if args.opening:
        total = sum(r["time_s"] for r in rows)
        slow = sum(r["opening"]["time_s"] for r in rows)
        print(f"from the opening attendance: converged "
              f"{sum(r['opening']['converged'] for r in rows)} / {len(rows)}, "
              f"{slow:.3f}s in all against {total:.3f}s from the plateau ({slow / total:.1f}×)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"nt": args.nt, "rows": rows, "host": platform.node(),
                               "provenance": provenance()}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
