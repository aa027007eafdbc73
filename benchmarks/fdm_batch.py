"""Batched finite differences on CUDA (fused Triton sweeps) against NumPy loops on the same host.

Cases (all Santa Fe Bar at nx = nt = 201 unless said otherwise)
  sweeps   one HJB and one FP sweep for 1, ``--batch`` and ``--large`` problems (running cost
           of attendance 0.5), per dtype: median time over 5 calls after a warm-up
  batch    ``--batch`` problems (thresholds × σ, a square grid) to ``--tol`` by ``solve_batch``
           on CUDA, per dtype; the members of a strided sample are checked against NumPy
           float64 solves of the same problems (max relative error of U, M and A)
  numpy    the same sample solved one after the other by NumPy (compiled loops, one core),
           and ``--pool-sample`` problems by a process pool over all cores of the host; both
           extrapolated to the whole batch from their measured time per problem
  large    ``--large`` problems in float32 to ``--tol``: time, iterations, peak GPU memory

Batches iterate as ``solve_batch`` does by default (Newton on the coupling, from a 51² start);
``--iteration picard`` makes them Picard iterations with Anderson mixing alone (no Newton,
no Jacobians: the cost of one iteration is its two sweeps, the mixing and the stopping test).
  single   one solve at the defaults (tol 1e-8, or what the dtype resolves) on NumPy and on
           CUDA float32 / float64

Prints a table and writes JSON with the machine (GPU, CPU cores, versions). The Picard
iteration count depends on the default iteration scheme: re-run after changing it.

    python benchmarks/fdm_batch.py [--batch 1024] [--large 4096] [--tol 1e-6] [--iteration picard]
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
from mfgwork.numerics.fdm import FiniteDifferences
from mfgwork.results import provenance

NX = NT = 201


def problems(n: int) -> list[mw.SantaFeBar]:
    """A thresholds × σ grid of Santa Fe problems (n = k² members)."""
    k = round(n**0.5)
    return [mw.SantaFeBar(threshold=float(a), sigma=float(s))
            for a in np.linspace(0.3, 0.8, k) for s in np.linspace(0.4, 1.0, k)]


def _numpy_solve(args: tuple[float, float, float]) -> tuple[float, np.ndarray, np.ndarray,
                                                            np.ndarray, int]:
    threshold, sigma, tol = args
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        t0 = time.perf_counter()
        r = mw.solve(mw.SantaFeBar(threshold=threshold, sigma=sigma), nx=NX, nt=NT, tol=tol,
                     max_iter=500, progress=False)
    return time.perf_counter() - t0, r.U, r.M, np.asarray(r.attendance), r.iterations


def _rel(a: object, ref: np.ndarray) -> float:
    a = np.asarray(mw.to_numpy(a), dtype=np.float64)
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


def sweeps_case(sizes: list[int], dtypes: list[str]) -> list[dict]:
    import torch

    rows = []
    base = mw.SantaFeBar()
    for dtype in dtypes:
        be = mw.get_backend("torch", "cuda", dtype)
        grid = base.grid(NX, NT)
        for B in sizes:
            fd = FiniteDifferences(grid, np.full((B, 1), base.nu), be)
            coupling = base.coupling(grid, be)
            F = coupling.running_cost(be.asarray(np.full(NT, 0.5)))[None].expand(B, -1, -1)
            F = F.contiguous()
            U_T = be.zeros((B, NX))
            m0 = base.initial_density(grid, be)[None].expand(B, -1).contiguous()
            times = {"hjb": [], "fp": []}
            for rep in range(6):
                be.synchronize()
                t0 = time.perf_counter()
                U = fd.solve_hjb(U_T, F)
                be.synchronize()
                t1 = time.perf_counter()
                fd.solve_fp(U, m0)
                be.synchronize()
                t2 = time.perf_counter()
                if rep:
                    times["hjb"].append(t1 - t0)
                    times["fp"].append(t2 - t1)
            fd.newton_iterations = 0
            fd.check_newton()
            fd.solve_hjb(U_T, F)
            fd.check_newton()
            rows.append({"case": "sweeps", "dtype": dtype, "batch": B,
                         "hjb_s": statistics.median(times["hjb"]),
                         "fp_s": statistics.median(times["fp"]),
                         "newton_per_step": fd.newton_iterations / NT})
            del fd, F, U, m0
            torch.cuda.empty_cache()
    return rows


def batch_case(n: int, dtype: str, tol: float, sample: list[int], refs: dict,
               iteration: str) -> dict:
    import torch

    be = mw.get_backend("torch", "cuda", dtype)
    probs = problems(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        scheme = mw.Anderson(newton=False) if iteration == "picard" else None
        mw.solve_batch(probs[:32], nx=NX, nt=NT, backend=be, tol=tol, max_iter=3,
                       iteration=scheme, progress=False)  # warm-up: Triton compilation
        torch.cuda.reset_peak_memory_stats()
        be.synchronize()
        t0 = time.perf_counter()
        out = mw.solve_batch(probs, nx=NX, nt=NT, backend=be, tol=tol, max_iter=500,
                             iteration=scheme, progress=False)
        be.synchronize()
        elapsed = time.perf_counter() - t0
    errs = {"U": 0.0, "M": 0.0, "A": 0.0}
    for i in sample:
        _, U, M, A, _ = refs[i]
        errs["U"] = max(errs["U"], _rel(out[i].U, U))
        errs["M"] = max(errs["M"], _rel(out[i].M, M))
        errs["A"] = max(errs["A"], _rel(out[i].attendance, A))
    r = out[0]
    phases = {k: r.timings[k] for k in ("hjb", "fp", "coupling")}
    return {"case": "batch", "dtype": dtype, "batch": n, "time_s": elapsed,
            "hjb_s": phases["hjb"], "fp_s": phases["fp"], "coupling_s": phases["coupling"],
            "outside_iterations_s": elapsed - sum(phases.values()),
            "results_s": r.timings.get("results"),
            "iterations": len(r.history["residual"]),
            "newton_iterations": r.extra.get("newton_iterations"),
            "per_iteration_ms": {k: [round(1e3 * v, 3) for v in r.history[f"time_{k}"]]
                                 for k in ("hjb", "fp", "coupling")},
            "converged": sum(o.converged for o in out),
            "max_mass_error": max(o.mass_error for o in out),
            "min_M": float(min(mw.to_numpy(o.M).min() for o in out)),
            "peak_gpu_bytes": torch.cuda.max_memory_allocated(),
            "vs_numpy_f64_rel_err": errs}


def numpy_loop(args_list: list[tuple[float, float, float]]) -> tuple[list, float]:
    t0 = time.perf_counter()
    out = [_numpy_solve(a) for a in args_list]
    return out, time.perf_counter() - t0


def numpy_pool(args_list: list[tuple[float, float, float]], workers: int) -> float:
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        list(pool.map(_numpy_solve, [(0.6, 0.5, 1e-2)] * workers))  # start, import, compile
        t0 = time.perf_counter()
        list(pool.map(_numpy_solve, args_list))
        return time.perf_counter() - t0


def single_case(dtypes: list[str]) -> list[dict]:
    rows = []
    for name, backend, device, dtype in [("numpy", "numpy", "cpu", "float64")] + [
            (f"cuda-{d}", "torch", "cuda", d) for d in dtypes]:
        times, res = [], None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                t0 = time.perf_counter()
                res = mw.solve(mw.SantaFeBar(), backend=backend, device=device, dtype=dtype,
                               progress=False)
                times.append(time.perf_counter() - t0)
        rows.append({"case": "single", "target": name, "time_s": statistics.median(times[1:]),
                     "iterations": res.iterations, "converged": res.converged,
                     "tol": res.params["tol"], "hjb_s": res.timings["hjb"],
                     "fp_s": res.timings["fp"], "M": mw.to_numpy(res.M)})
    ref = rows[0].pop("M")
    for r in rows[1:]:
        r["vs_numpy_M_rel_err"] = _rel(r.pop("M"), ref)
        r["ratio_to_numpy"] = r["time_s"] / rows[0]["time_s"]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--large", type=int, default=4096)
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--sample", type=int, default=32,
                        help="batch members solved by the one-core NumPy loop")
    parser.add_argument("--pool-sample", type=int, default=0,
                        help="problems for the process pool (default: 4 per core)")
    parser.add_argument("--cases", default="sweeps,batch,large,single")
    parser.add_argument("--iteration", choices=("newton", "picard"), default="newton",
                        help="batches: the default (Newton on the coupling) or Picard "
                             "iterations with Anderson mixing alone")
    parser.add_argument("--out", default="benchmarks/results/fdm_batch.json")
    args = parser.parse_args(argv)
    dtypes = args.dtypes.split(",")
    cases = args.cases.split(",")
    cores = os.cpu_count() or 1
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per NumPy solve, in the pool too
    rows: list[dict] = []

    def log(msg: str) -> None:
        print(msg, rows[-1] if rows else "", file=sys.stderr, flush=True)

    if "sweeps" in cases:
        rows += sweeps_case(sorted({1, args.batch, args.large}), dtypes)
        log("sweeps done")
    probs = problems(args.batch)
    params = [(p.threshold, p.sigma, args.tol) for p in probs]
    # spread over the grid of thresholds × σ (a stride of a multiple of the side would
    # sample one σ only)
    sample = sorted({int(i) for i in np.linspace(0, len(probs) - 1, args.sample).round()})
    refs_list, loop_s = numpy_loop([params[i] for i in sample])
    refs = dict(zip(sample, refs_list, strict=True))
    per_problem = loop_s / len(sample)
    loop_row = {"case": "numpy", "target": "loop, one core", "sample": len(sample),
                "time_s": loop_s, "per_problem_s": per_problem,
                "extrapolated_batch_s": per_problem * len(probs),
                "iterations_mean": float(np.mean([r[4] for r in refs_list]))}
    rows.append(loop_row)
    log("numpy loop done")
    pool_n = args.pool_sample or 4 * cores
    pool_args = [params[int(i)] for i in np.linspace(0, len(params) - 1, pool_n).round()]
    pool_s = numpy_pool(pool_args, cores)
    pool_row = {"case": "numpy", "target": f"process pool, {cores} cores",
                "sample": len(pool_args), "time_s": pool_s,
                "per_problem_s": pool_s / len(pool_args),
                "extrapolated_batch_s": pool_s / len(pool_args) * len(probs)}
    rows.append(pool_row)
    log("numpy pool done")
    if "batch" in cases:
        for dtype in dtypes:
            row = batch_case(args.batch, dtype, args.tol, sample, refs, args.iteration)
            row["x_numpy_loop"] = loop_row["extrapolated_batch_s"] / row["time_s"]
            row["x_numpy_pool"] = pool_row["extrapolated_batch_s"] / row["time_s"]
            # per problem and Picard iteration: independent of how many iterations the
            # stopping test takes in each dtype
            per_it = row["time_s"] / (row["iterations"] * row["batch"])
            numpy_per_it = loop_row["per_problem_s"] / loop_row["iterations_mean"]
            row["x_numpy_loop_per_iteration"] = numpy_per_it / per_it
            row["x_numpy_pool_per_iteration"] = (pool_row["per_problem_s"]
                                                 / loop_row["iterations_mean"] / per_it)
            rows.append(row)
            log(f"batch {dtype} done")
    if "large" in cases:
        row = batch_case(args.large, "float32", args.tol, [], {}, args.iteration)
        rows.append(row | {"case": "large"})
        log("large done")
    if "single" in cases:
        rows += single_case(dtypes)

    print_tables(rows, args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    import torch

    machine = {"gpu": mw.device_info("cuda"), "cpu": mw.device_info("cpu"),
               "host": platform.node(), "torch": torch.__version__,
               "triton": _version("triton")}
    out.write_text(json.dumps({"rows": rows, "machine": machine, "provenance": provenance(),
                               "args": vars(args)}, indent=2, default=str) + "\n")
    print(f"wrote {out}")
    return 0


def print_tables(rows: list[dict], args: argparse.Namespace) -> None:
    print(f"Santa Fe Bar, nx = nt = {NX}; batch: {args.batch} problems (thresholds × σ) "
          f"to tol {args.tol:g} (float32: what it resolves)")
    print(f"\n{'sweep':<8} {'dtype':<8} {'problems':>8} {'HJB':>10} {'FP':>10} "
          f"{'Newton/step':>11}")
    for r in (r for r in rows if r["case"] == "sweeps"):
        print(f"{'':<8} {r['dtype']:<8} {r['batch']:>8} {_ms(r['hjb_s'])} {_ms(r['fp_s'])} "
              f"{r['newton_per_step']:11.2f}")
    print(f"\n{'NumPy baseline':<26} {'sample':>6} {'per problem':>12} {'whole batch':>12}")
    for r in (r for r in rows if r["case"] == "numpy"):
        print(f"{r['target']:<26} {r['sample']:>6} {r['per_problem_s']:11.3f}s "
              f"{r['extrapolated_batch_s']:11.1f}s")
    print(f"\n{'batch':<6} {'dtype':<8} {'problems':>8} {'time':>8} {'iters':>5} "
          f"{'conv':>5} {'per iter':>10} {'peak GPU':>9} {'x loop':>7} {'x pool':>7} "
          f"{'x loop/it':>9} {'x pool/it':>9}  rel. err vs NumPy f64 (U, M, A)")
    for r in (r for r in rows if r["case"] in ("batch", "large")):
        e = r["vs_numpy_f64_rel_err"]
        err = f"{e['U']:.1e}, {e['M']:.1e}, {e['A']:.1e}" if "x_numpy_loop" in r else "-"
        ratios = " ".join(f"{r[k]:>{w}.1f}" if k in r else f"{'-':>{w}}" for k, w in
                          (("x_numpy_loop", 7), ("x_numpy_pool", 7),
                           ("x_numpy_loop_per_iteration", 9), ("x_numpy_pool_per_iteration", 9)))
        print(f"{r['case']:<6} {r['dtype']:<8} {r['batch']:>8} {r['time_s']:7.2f}s "
              f"{r['iterations']:>5} {r['converged']:>5} "
              f"{_ms(r['time_s'] / r['iterations'])} {r['peak_gpu_bytes'] / 2**30:8.2f}G "
              f"{ratios}  {err}")
    print(f"\n{'phases':<6} {'dtype':<8} {'problems':>8} {'HJB/it':>10} {'FP/it':>10} "
          f"{'other/it':>10} {'HJB, last 10':>12} {'FP, last 10':>11} {'outside':>8} "
          f"{'Results':>8} {'Newton/step':>11}")
    for r in (r for r in rows if r["case"] in ("batch", "large")):
        its, series = r["iterations"], r["per_iteration_ms"]
        last = {k: float(np.mean(v[-10:])) for k, v in series.items()}
        newton = (r["newton_iterations"] or 0) / (its * NT)
        print(f"{r['case']:<6} {r['dtype']:<8} {r['batch']:>8} {_ms(r['hjb_s'] / its)} "
              f"{_ms(r['fp_s'] / its)} {_ms(r['coupling_s'] / its)} {last['hjb']:10.2f}ms "
              f"{last['fp']:9.2f}ms {r['outside_iterations_s']:7.2f}s "
              f"{r['results_s'] or float('nan'):7.3f}s {newton:11.2f}")
    print(f"\n{'single solve':<14} {'time':>8} {'iters':>5} {'tol':>8} {'x numpy':>8} "
          f"{'M rel. err':>10}")
    for r in (r for r in rows if r["case"] == "single"):
        print(f"{r['target']:<14} {r['time_s']:7.3f}s {r['iterations']:>5} {r['tol']:8.1e} "
              f"{r.get('ratio_to_numpy', 1.0):8.2f} {r.get('vs_numpy_M_rel_err', 0.0):10.1e}")


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:8.2f}ms"


def _version(name: str) -> str | None:
    try:
        return __import__(name).__version__
    except ImportError:
        return None


if __name__ == "__main__":
    sys.exit(main())
