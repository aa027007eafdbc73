"""Several populations: Santa Fe with K = 1, 2, 4 groups against one population, same run.

Cases (``--n``: nx = nt, default 201; to ``--tol``, default 1e-8, from cold starts)
  single     mw.solve(SantaFeBar(threshold=0.6, sigma=0.5)): Newton on the attendance path
  K=1        the same model as one population of solve_populations
  K=2        regulars (A* 0.5, σ 0.3, share 0.6) and newcomers (A* 0.7, σ 0.8, share 0.4)
  K=4        thresholds 0.4 … 0.7, σ 0.3 … 0.9, shares 0.1, 0.2, 0.3, 0.4

Each populations case runs with the Newton system solved by GMRES (matrix-free tangent
products) and from the dense tangent Jacobians, so the table says which is faster, and with
Anderson mixing alone (no Newton, no coarse stage) for comparison. For each:
the median wall time over ``--repeats`` runs after one warm-up (compilation excluded), the
time in HJB, FP and the rest (the coupling, including the Newton systems), the time in the
Newton systems alone, the iterations (best responses of the fine grid; the coarse 51 × 51
stage in brackets), Newton steps, tangent products, the certified residual and the ratio to
the single solve.

    python benchmarks/populations.py [--backend numpy] [--n 201] [--repeats 3] [--out F]
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

SINGLE = mw.SantaFeBar(threshold=0.6, sigma=0.5)


def groups(k: int) -> mw.SantaFePopulations:
    if k == 1:
        return mw.SantaFePopulations([mw.Population("all", 1.0, SINGLE)])
    if k == 2:
        return mw.SantaFePopulations([
            mw.Population("regulars", 0.6, mw.SantaFeBar(threshold=0.5, sigma=0.3)),
            mw.Population("newcomers", 0.4, mw.SantaFeBar(threshold=0.7, sigma=0.8))])
    return mw.SantaFePopulations([
        mw.Population(f"g{i}", share, mw.SantaFeBar(threshold=a, sigma=s))
        for i, (share, a, s) in enumerate(zip((0.1, 0.2, 0.3, 0.4), (0.4, 0.5, 0.6, 0.7),
                                              (0.3, 0.5, 0.7, 0.9), strict=True))])


def measure(solve, repeats: int) -> dict:
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            res = solve()
            runs.append((time.perf_counter() - t0, res))
    runs = runs[1:]
    res = runs[0][1]
    med = {k: statistics.median(r.timings[k] for _, r in runs) for k in ("hjb", "fp", "coupling")}
    return {"time_s": statistics.median(t for t, _ in runs), "min_s": min(t for t, _ in runs),
            "hjb_s": med["hjb"], "fp_s": med["fp"], "coupling_s": med["coupling"],
            "system_s": statistics.median(r.extra.get("system_seconds", 0.0) for _, r in runs),
            "iterations": res.iterations, "coarse_iterations": res.extra.get("coarse_iterations"),
            "newton_steps": res.extra.get("newton_steps"),
            "krylov_products": res.extra.get("krylov_products"),
            "residual": res.residual, "converged": res.converged,
            "mass_error": res.mass_error}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="numpy", choices=("numpy", "torch"))
    parser.add_argument("--n", type=int, default=201)
    parser.add_argument("--tol", type=float, default=1e-8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/populations.json")
    args = parser.parse_args(argv)
    grid = {"nx": args.n, "nt": args.n, "tol": args.tol, "backend": args.backend,
            "progress": False}

    rows = [{"case": "single", "system": "cg (potential)"}
            | measure(lambda: mw.solve(SINGLE, **grid), args.repeats)]
    base = rows[0]["time_s"]
    for k in (1, 2, 4):
        problem = groups(k)
        for system in ("gmres", "dense", "anderson"):
            options = ({"iteration": "anderson"} if system == "anderson"
                       else {"newton_system": system})
            row = {"case": f"K={k}", "system": system} | measure(
                lambda p=problem, o=options: mw.solve_populations(p, **o, **grid), args.repeats)
            rows.append(row)
            print(f"  measured K={k} / {system}: {1e3 * row['time_s']:.1f} ms", file=sys.stderr)
    for r in rows:
        r["ratio_to_single"] = r["time_s"] / base

    header = (f"{'case':<7} {'system':<15} {'median':>10} {'HJB':>9} {'FP':>9} {'coupling':>10} "
              f"{'systems':>10} {'iters':>8} {'steps':>5} {'products':>8} {'residual':>9} "
              f"{'× single':>8}")
    print(f"(nx = nt = {args.n}, tol = {args.tol:g}, backend {args.backend}; median of "
          f"{args.repeats})")
    print(header)
    print("-" * len(header))
    for r in rows:
        iters = f"{r['iterations']}" + (f" ({r['coarse_iterations']})"
                                         if r["coarse_iterations"] is not None else "")
        print(f"{r['case']:<7} {r['system']:<15} {_ms(r['time_s']):>10} {_ms(r['hjb_s']):>9} "
              f"{_ms(r['fp_s']):>9} {_ms(r['coupling_s']):>10} {_ms(r['system_s']):>10} "
              f"{iters:>8} {r['newton_steps'] or 0:>5} {r['krylov_products'] or 0:>8} "
              f"{r['residual']:9.1e} {r['ratio_to_single']:8.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "repeats": args.repeats, "n": args.n,
                               "tol": args.tol, "backend": args.backend,
                               "host": platform.node(), "provenance": provenance()},
                              indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.1f} ms"


if __name__ == "__main__":
    sys.exit(main())
