"""Equilibria of batches against single solves: certified counts, iterations and times.

Cases (Santa Fe Bar; every returned result is checked by an independent best response
computed here, NumPy float64 finite differences, not the solver's own residual):

  box    ``--points`` seeded random points of the box threshold 0.15–0.92, σ 0.08–1.8
         (log), ε 0.0008–0.15 (log), T in {4, 8, 15, 25}, payoff pairs (10, −5), (4, −12),
         (20, −2), grids ``--grids``; solved one by one (NumPy, ``mw.solve``) and as batches
         of equal (T, grid) by ``mw.solve_batch`` (torch float64 and float32 on ``--device``)
  easy   a ``--easy`` × ``--easy`` grid of thresholds 0.3–0.8 × σ 0.4–1.0 at ``--easy-n``²,
         one batch per dtype (and, with ``--pool``, NumPy solves in a process pool over all
         cores, extrapolated from a sample)
  hard   a ``--hard`` × ``--hard`` scan threshold 0.2–0.9 × ε 0.001–0.1 at σ 0.3,
         ``--hard-n``², one batch per dtype
  system the Newton system S D S + I at the first iterate and at the solution of box points,
         on one CPU core: the dense tangent Jacobian (compiled sweeps, all nt directions)
         and a Cholesky solve, against conjugate gradients with one tangent sweep of a single
         direction per product (matrix-free Newton–Krylov, to 10⁻⁶): times and CG counts

Each solver runs twice in the same process: ``after`` (the default iteration: Newton's
method on the attendance path, per problem, from a coarse solve on fine grids) and ``before``
(``iteration=mw.Anderson()`` for batches, ``iteration="anderson"`` (Anderson, then Newton when
it stalls) for single solves: the previous defaults). A member counts as *certified* when its
independent residual is ≤ tol, as a *false convergence* when the solver says converged and
the independent residual exceeds 1.1 tol. Prints a table and writes JSON with the ratios
after/before.

    python benchmarks/batch_equilibria.py --small                 # about a minute on a CPU
    python benchmarks/batch_equilibria.py --device cuda --pool    # full size, on a GPU host
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

import mfgwork as mw
from mfgwork.core.storage import provenance
from mfgwork.numerics.fdm.sweeps import FiniteDifferences

PAYOFFS = ((10.0, -5.0), (4.0, -12.0), (20.0, -2.0))
HORIZONS = (4.0, 8.0, 15.0, 25.0)
FLOAT32_TOL = 3e-4


def box_points(n: int, grids: list[int], seed: int) -> list[tuple[mw.SantaFeBar, int]]:
    """``n`` seeded random (problem, grid size) pairs of the box."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        good, bad = PAYOFFS[rng.integers(len(PAYOFFS))]
        problem = mw.SantaFeBar(threshold=float(rng.uniform(0.15, 0.92)),
                                sigma=float(np.exp(rng.uniform(np.log(0.08), np.log(1.8)))),
                                eps=float(np.exp(rng.uniform(np.log(8e-4), np.log(0.15)))),
                                T=float(HORIZONS[rng.integers(len(HORIZONS))]), good=good,
                                bad=bad)
        out.append((problem, int(grids[rng.integers(len(grids))])))
    return out


def independent_residual(problem: mw.SantaFeBar, M: object) -> float:
    """‖A(BR(A)) − A‖ / ‖A(BR(A))‖ for A the attendance path of M (NumPy float64)."""
    M = np.asarray(mw.to_numpy(M), dtype=np.float64)
    grid = problem.grid(M.shape[1], M.shape[0] - 1)
    be = mw.get_backend("numpy")
    coupling = problem.coupling(grid, be)
    fd = FiniteDifferences(grid, problem.nu, be)
    A = coupling.state(M)
    M_br = fd.solve_fp(fd.solve_hjb(problem.terminal_cost(grid, be), coupling.running_cost(A)),
                       problem.initial_density(grid, be))
    A_br = coupling.state(M_br)
    return float(np.linalg.norm(A_br - A) / np.linalg.norm(A_br))


def _summary(name: str, variant: str, problems: list, results: list, tol: float,
             seconds: float) -> dict:
    resid = [independent_residual(p, r.M) for p, r in zip(problems, results, strict=True)]
    its = [r.iterations for r in results]
    return {"case": name, "variant": variant, "problems": len(problems),
            "converged": int(sum(r.converged for r in results)),
            "certified": int(sum(x <= tol for x in resid)),
            "false_convergences": int(sum(r.converged and x > 1.1 * tol
                                          for r, x in zip(results, resid, strict=True))),
            "median_iterations": float(statistics.median(its)), "max_iterations": max(its),
            "coarse_iterations_median": _median_coarse(results),
            "time_s": seconds, "tol": tol, "worst_independent_residual": max(resid)}


def _median_coarse(results: list) -> float | None:
    values = [r.extra.get("coarse_iterations") for r in results]
    values = [v for v in values if v is not None]
    return float(statistics.median(values)) if values else None


def _quiet(fn: object, *args: object, **kw: object) -> tuple[object, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        out = fn(*args, **kw)
        return out, time.perf_counter() - t0


VARIANTS = ("after", "before")


def _variants(batch: bool, names: tuple[str, ...] = VARIANTS) -> dict[str, object]:
    every = {"after": None, "before": mw.Anderson() if batch else "anderson"}
    return {name: every[name] for name in names}


def single_rows(name: str, points: list, tol: float, max_iter: int,
                variants: tuple[str, ...] = VARIANTS) -> list[dict]:
    rows = []
    for variant, iteration in _variants(False, variants).items():
        results, seconds = [], 0.0
        for problem, n in points:
            res, dt = _quiet(mw.solve, problem, nx=n, nt=n, tol=tol, max_iter=max_iter,
                             iteration=iteration, progress=False)
            results.append(res)
            seconds += dt
        rows.append(_summary(name, variant, [p for p, _ in points], results, tol, seconds)
                    | {"solver": "mw.solve numpy float64"})
    return rows


def batch_rows(name: str, points: list, dtype: str, device: str, tol: float, max_iter: int,
               variants: tuple[str, ...] = VARIANTS) -> list[dict]:
    """``solve_batch`` over groups of equal (T, grid)."""
    groups: dict[tuple, list[int]] = {}
    for i, (p, n) in enumerate(points):
        groups.setdefault((p.T, n), []).append(i)
    be = mw.get_backend("torch", device, dtype)
    tol = max(tol, FLOAT32_TOL) if dtype == "float32" else tol
    rows = []
    for variant, iteration in _variants(True, variants).items():
        # first use in the process (CUDA context, kernel compilation or cache loads, also of
        # the float64 finish of float32 members, which only some batches need) is timed
        # apart by solving the first group once: the rows time the solves alone
        first = [points[i][0] for i in next(iter(groups.values()))]
        _, warm_up = _quiet(mw.solve_batch, first, nx=points[0][1], nt=points[0][1],
                            backend=be, tol=tol, max_iter=max_iter, iteration=iteration,
                            progress=False)
        results: list = [None] * len(points)
        seconds = 0.0
        for (_, n), members in groups.items():
            out, dt = _quiet(mw.solve_batch, [points[i][0] for i in members], nx=n, nt=n,
                             backend=be, tol=tol, max_iter=max_iter, iteration=iteration,
                             progress=False)
            be.synchronize()
            seconds += dt
            for i, r in zip(members, out, strict=True):
                results[i] = r
        rows.append(_summary(name, variant, [p for p, _ in points], results, tol, seconds)
                    | {"solver": f"solve_batch torch {device} {dtype}", "batches": len(groups),
                       "warm_up_s": warm_up})
    return rows


def system_rows(problems: list, sizes: list[int]) -> list[dict]:
    """Dense Jacobian + Cholesky against matrix-free CG for the Newton systems of
    ``problems`` at ``sizes``² (at the first iterate and at the solution of each)."""
    from mfgwork.numerics.fdm.tangent import newton_direction, spd_solve, tangent_jacobian
    from mfgwork.numerics.potential import product_operands, tangent_operands

    rows = []
    be = mw.get_backend("numpy")
    for n in sizes:
        dense, krylov, counts, gaps = [], [], [], []
        for problem in problems:
            grid = problem.grid(n, n)
            coupling = problem.coupling(grid, be)
            fd = FiniteDifferences(grid, problem.nu, be)
            m0, U_T = problem.initial_density(grid, be), problem.terminal_cost(grid, be)
            solved, _ = _quiet(mw.solve, problem, nx=n, nt=n, tol=1e-8, progress=False)
            for z in (np.full(grid.nt, float(coupling.state(np.stack([m0] * 2))[0])),
                      coupling.state(solved.M)):
                U = fd.solve_hjb(U_T, coupling.running_cost(z))
                M = fd.solve_fp(U, m0)
                R = coupling.state(M) - z
                ops = tangent_operands(U, M * grid.weights, coupling.potential().chi,
                                       problem.nu, grid)
                slope = coupling.potential().price_slope(z)
                s = np.sqrt(-slope)
                t0 = time.perf_counter()
                D = tangent_jacobian(*ops, grid.dt)
                A = s[:, None] * (0.5 * (D + D.T)) * s[None, :] + np.eye(grid.nt)
                v_dense = spd_solve(np.ascontiguousarray(A), s * R)
                dense.append(time.perf_counter() - t0)
                d_dense = np.where(s > 0, v_dense / np.where(s > 0, s, 1.0), R)
                t0 = time.perf_counter()
                d, products = newton_direction(*product_operands(ops), grid.dt, slope, R,
                                               1e-6, 4 * grid.nt)
                krylov.append(time.perf_counter() - t0)
                counts.append(products)
                gaps.append(float(np.linalg.norm(d - d_dense) / np.linalg.norm(d_dense)))
        rows.append({"case": "system", "variant": "after", "solver": f"one CPU core, {n}x{n}",
                     "problems": len(problems), "systems": len(counts),
                     "dense_median_ms": 1e3 * statistics.median(dense),
                     "krylov_median_ms": 1e3 * statistics.median(krylov),
                     "cg_products_median": float(statistics.median(counts)),
                     "cg_products_max": max(counts),
                     "max_relative_gap_of_directions": max(gaps)})
    return rows


def _pool_solve(args: tuple[float, float, int, float]) -> float:
    threshold, sigma, n, tol = args
    _, seconds = _quiet(mw.solve, mw.SantaFeBar(threshold=threshold, sigma=sigma), nx=n, nt=n,
                        tol=tol, progress=False)
    return seconds


def pool_row(name: str, points: list, tol: float, sample: int) -> dict:
    """NumPy solves (the default iteration) in a process pool over all cores, on a sample,
    extrapolated to the whole set."""
    cores = os.cpu_count() or 1
    pick = [points[int(i)] for i in np.linspace(0, len(points) - 1, sample).round()]
    args = [(p.threshold, p.sigma, n, tol) for p, n in pick]
    with ProcessPoolExecutor(cores, mp_context=get_context("spawn")) as pool:
        list(pool.map(_pool_solve, args[:cores]))   # start, import, compile
        t0 = time.perf_counter()
        list(pool.map(_pool_solve, args))
        seconds = time.perf_counter() - t0
    return {"case": name, "variant": "after", "solver": f"numpy process pool, {cores} cores",
            "problems": len(points), "sample": len(pick),
            "time_s": seconds / len(pick) * len(points)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true",
                        help="sizes that run in about a minute on a CPU")
    parser.add_argument("--points", type=int, default=30)
    parser.add_argument("--grids", default="81,121")
    parser.add_argument("--easy", type=int, default=32)
    parser.add_argument("--easy-n", type=int, default=201)
    parser.add_argument("--hard", type=int, default=32)
    parser.add_argument("--hard-n", type=int, default=201)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--max-iter", type=int, default=200)
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--cases", default="box,easy,hard,system")
    parser.add_argument("--system-sizes", default="41,81,121")
    parser.add_argument("--pool", action="store_true",
                        help="the easy box by NumPy solves in a process pool too")
    parser.add_argument("--pool-sample", type=int, default=64)
    parser.add_argument("--variants", default="after,before",
                        help="after (the default iteration), before (Anderson), or both")
    parser.add_argument("--out", default="benchmarks/results/batch_equilibria.json")
    args = parser.parse_args(argv)
    if args.small:
        args.points, args.grids = min(args.points, 10), "41,61"
        args.easy, args.easy_n, args.hard, args.hard_n = 3, 41, 3, 41
        args.system_sizes = "41,81"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    dtypes, cases = args.dtypes.split(","), args.cases.split(",")
    variants = tuple(args.variants.split(","))
    rows: list[dict] = []

    def done(what: str) -> None:
        print(f"{what} done", file=sys.stderr, flush=True)

    if "box" in cases:
        points = box_points(args.points, [int(g) for g in args.grids.split(",")], args.seed)
        rows += single_rows("box", points, args.tol, args.max_iter, variants)
        done("box single")
        for dtype in dtypes:
            rows += batch_rows("box", points, dtype, args.device, args.tol, args.max_iter, variants)
            done(f"box {dtype}")
    if "easy" in cases:
        side = np.linspace(0.0, 1.0, args.easy)
        points = [(mw.SantaFeBar(threshold=0.3 + 0.5 * a, sigma=0.4 + 0.6 * s), args.easy_n)
                  for a in side for s in side]
        for dtype in dtypes:
            rows += batch_rows("easy", points, dtype, args.device, args.tol, args.max_iter,
                               variants)
            done(f"easy {dtype}")
        if args.pool:
            rows.append(pool_row("easy", points, args.tol, min(args.pool_sample, len(points))))
            done("easy pool")
    if "hard" in cases:
        side = np.linspace(0.0, 1.0, args.hard)
        points = [(mw.SantaFeBar(threshold=0.2 + 0.7 * a, sigma=0.3,
                                 eps=float(0.001 * 100.0**e)), args.hard_n)
                  for a in side for e in side]
        for dtype in dtypes:
            rows += batch_rows("hard", points, dtype, args.device, args.tol, args.max_iter,
                               variants)
            done(f"hard {dtype}")
    if "system" in cases:
        problems = [p for p, _ in box_points(min(args.points, 6), [41], args.seed)]
        rows += system_rows(problems, [int(n) for n in args.system_sizes.split(",")])
        done("system")
    _ratios(rows)
    print_table(rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    machine = {"cpu": mw.device_info("cpu"), "host": platform.node(),
               "cores": os.cpu_count()}
    if args.device.startswith("cuda"):
        machine["gpu"] = mw.device_info(args.device)
    out.write_text(json.dumps({"rows": rows, "machine": machine, "provenance": provenance(),
                               "args": vars(args)}, indent=2, default=str) + "\n")
    print(f"wrote {out}")
    return 0


def _ratios(rows: list[dict]) -> None:
    """after/before ratios of time and median iterations, per (case, solver)."""
    before = {(r["case"], r["solver"]): r for r in rows if r["variant"] == "before"}
    for r in rows:
        b = before.get((r["case"], r["solver"]))
        if r["variant"] == "after" and b is not None:
            r["time_ratio_after_before"] = r["time_s"] / b["time_s"]
            r["iteration_ratio_after_before"] = r["median_iterations"] / b["median_iterations"]


def print_table(rows: list[dict]) -> None:
    head = (f"{'case':<5} {'solver':<32} {'variant':<7} {'n':>5} {'conv':>5} {'cert':>5} "
            f"{'false':>5} {'med it':>6} {'max it':>6} {'coarse':>6} {'time':>9} {'x before':>8}")
    print(head)
    for r in rows:
        if r["case"] == "system":
            print(f"{r['case']:<6} {r['solver']:<32} Newton system: dense Jacobian + Cholesky "
                  f"{r['dense_median_ms']:.1f} ms, conjugate gradients "
                  f"{r['krylov_median_ms']:.1f} ms ({r['cg_products_median']:.0f} products, "
                  f"at most {r['cg_products_max']}; {r['systems']} systems; directions agree to "
                  f"{r['max_relative_gap_of_directions']:.0e})")
            continue
        if "certified" not in r:
            print(f"{r['case']:<5} {r['solver']:<32} {r['variant']:<7} {r['problems']:>5} "
                  f"{'':>5} {'':>5} {'':>5} {'':>6} {'':>6} {'':>6} {r['time_s']:8.2f}s")
            continue
        coarse = r["coarse_iterations_median"]
        ratio = r.get("time_ratio_after_before")
        print(f"{r['case']:<5} {r['solver']:<32} {r['variant']:<7} {r['problems']:>5} "
              f"{r['converged']:>5} {r['certified']:>5} {r['false_convergences']:>5} "
              f"{r['median_iterations']:>6.0f} {r['max_iterations']:>6} "
              f"{'-' if coarse is None else f'{coarse:.0f}':>6} {r['time_s']:8.2f}s "
              f"{'' if ratio is None else f'{ratio:8.2f}'}")


if __name__ == "__main__":
    sys.exit(main())
