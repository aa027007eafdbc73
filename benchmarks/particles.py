"""Particle FP benchmark: per-step and full-solve times per N, backend, device and dtype.

    python benchmarks/particles.py [--backend numpy|torch] [--device cpu|cuda]
        [--sizes 1e4,1e5,1e6,1e7] [--dtypes float32,float64] [--out results.json]

The drift is the Santa Fe equilibrium U on the default 201 × 201 grid (FDM, NumPy). Every row
is one FP solve (sampling + nt = 201 steps + deposits): ``step_us`` = solve time / nt. The
NumPy backend (compiled kernel + PCG64 normals, one core) is always measured in the same run
and is the baseline of the ``x_numpy`` ratios; ``x_plain`` compares with a plain vectorized
NumPy step (``mfgwork.numerics.particles.self_checks`` references +
``Generator.standard_normal``). On torch
the table also gives the eager ``step`` and ``deposit`` kernels alone (on the fused path: the
normals and the fused step + deposit kernel). On CUDA the modes are: the fused Triton step
replayed as a CUDA graph (``fused``, the default of ``mw.solve``) and launched eagerly
(``fused-eager``), and the plain torch ops as a graph (``graph``) and eagerly (``eager``), for
each ``--copies`` (private deposit copies); with ``--compile`` also the plain step fused by
``torch.compile``. Columns k_step_us and k_dep_us hold those kernel times (on fused rows:
the normals and the fused kernel). Finally one hybrid Picard iteration (FDM HJB +
particle FP, Santa Fe, N = 1e6 unless --hybrid-n) per backend. Times are taken with
``backend.timer()`` (device synchronized) after a warm-up solve; on the CPU a solve longer than
``--budget`` is timed once (the compiled kernels are loaded by then).

Before and after a change, on one machine: run this script from each revision's tree, then
``--compare BEFORE.json AFTER.json --out F`` prints and writes the two side by side.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import mfgwork as mw
from mfgwork.apps.doctor import versions
from mfgwork.numerics.particles import ParticleFP
from mfgwork.numerics.particles.self_checks import reference_deposit, reference_step

NX = NT = 201


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=["numpy", "torch"], default="numpy")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps")
    ap.add_argument("--sizes", default="1e4,1e5,1e6",
                    help="particle counts, e.g. 1e4,1e5,1e6,1e7 (empty: only the hybrid "
                         "iteration)")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--copies", default=None,
                    help="private deposit copies to compare on torch (default: 1 on CPU, 1,64 "
                         "on CUDA)")
    ap.add_argument("--compile", action="store_true",
                    help="also time the step fused by torch.compile (mode compile / "
                         "graph+compile; compiles once per N and dtype)")
    ap.add_argument("--modes", default=None,
                    help="CUDA modes to time (default: fused,fused-eager,graph,eager)")
    ap.add_argument("--numpy-max", type=float, default=None,
                    help="largest N of the NumPy baseline rows (default: every size)")
    ap.add_argument("--hybrid-n", type=float, default=1e6, help="N of the hybrid Picard timing")
    ap.add_argument("--budget", type=float, default=2.0,
                    help="seconds of repeats per measurement after the warm-up")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (torch.set_num_threads); default: torch's choice")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                    help="instead of measuring: join two outputs of this script (e.g. of two "
                         "revisions, run one after the other on one machine) into a before/after "
                         "table of the accelerator rows, written to --out")
    ap.add_argument("--out", default="particles_benchmark.json")
    return ap.parse_args(argv)


def equilibrium_U() -> tuple[np.ndarray, np.ndarray]:
    res = mw.solve(mw.SantaFeBar(), nx=NX, nt=NT, progress=False)
    return res.U, res.M[0]


def timed(be: mw.Backend, fn: Any, budget: float, warm_up: bool = True) -> float:
    """Seconds per call: one warm-up call, then the best of repeats filling about ``budget``
    seconds (the minimum is the least disturbed by other work on the machine).

    Without ``warm_up`` a call longer than ``budget`` is itself the measurement (long CPU
    runs, whose compiled kernels were already loaded by smaller sizes).
    """
    t0 = be.timer()
    fn()
    first = be.timer() - t0
    if not warm_up and first > budget:
        return first
    reps = int(max(1, min(20, budget / max(first, 1e-9))))
    best = float("inf")
    for _ in range(reps):
        t0 = be.timer()
        fn()
        best = min(best, be.timer() - t0)
    return best


def solve_row(be: mw.Backend, n: int, U: np.ndarray, m0: np.ndarray, budget: float,
              mode: str = "-", copies: int | None = None) -> dict[str, Any]:
    p = mw.SantaFeBar()
    grid = p.grid(NX, NT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        on_cuda = be.kind == "cuda"
        solver = ParticleFP(grid, p.sigma, be, n_particles=n, seed=0, deposit_copies=copies,
                            cuda_graph=not mode.endswith("eager") if on_cuda else None,
                            compile_step=mode.endswith("compile"),
                            fused=mode.startswith("fused") if on_cuda else None)
        U_be, m0_be = be.asarray(U), be.asarray(m0)
        seconds = timed(be, lambda: solver.solve_fp(U_be, m0_be), budget,
                        warm_up=be.kind != "cpu" or solver.compile_step)
    row = {"backend": be.name, "device": be.device, "dtype": be.dtype, "n": n, "mode": mode,
           "copies": solver.deposit_copies, "solve_ms": 1e3 * seconds,
           "step_us": 1e6 * seconds / NT, "memory_estimate_MiB": solver.memory_estimate / 2**20}
    if be.kind == "cuda":
        row["cuda_graph_used"] = solver.use_cuda_graph
        row["warnings"] = [str(w.message) for w in caught]
    if be.name == "torch":
        row["compiled"] = solver._advance is not solver.kernels.advance
        row["fused"] = solver.fused
        row |= kernel_times(be, solver, U_be, m0_be, budget / 4)
    return row


def kernel_times(be: mw.Backend, solver: ParticleFP, U: Any, m0: Any,
                 budget: float) -> dict[str, float]:
    """Eager kernels alone, microseconds per call: step and locate + deposit of the plain
    path, or the fused step + deposit (its normals drawn inside) of the fused path, with
    torch's normals of the plain path for comparison."""
    import torch

    k, n = solver.kernels, solver.n_particles
    y = k.sample(m0, torch.rand(n, dtype=be.native_dtype, device=be.native_device))
    b0, db = k.drift_tables(U)
    xi = torch.randn(n, dtype=be.native_dtype, device=be.native_device)
    g = solver.grid
    fused = solver._fused_kernels
    if fused is not None:
        row = fused.mass_buffer(1)[0]

        def normals() -> None:
            torch.randn(n, generator=solver.generator, out=xi)

        def step_deposit() -> None:
            fused.step_deposit(y, b0[0], db[0], row, 0)

        return {"kernel_randn_us": 1e6 * timed(be, normals, budget),
                "kernel_fused_us": 1e6 * timed(be, step_deposit, budget)}
    masses = k.mass_buffer(2)
    i, f = k.locate(y)

    def step() -> None:
        k.step(y, xi, b0[0], db[0], i, f, g.dt, solver.noise)

    def deposit() -> None:
        k.deposit(*k.locate(y), masses[1])

    return {"kernel_step_us": 1e6 * timed(be, step, budget),
            "kernel_locate_deposit_us": 1e6 * timed(be, deposit, budget)}


def plain_numpy_step_us(n: int, dtype: str, U: np.ndarray, budget: float) -> float:
    """A plain vectorized NumPy step (normals, interpolate, move, fold, bincount deposit)."""
    grid = mw.SantaFeBar().grid(NX, NT)
    rng = np.random.default_rng(0)
    y = rng.uniform(0, grid.x_max - grid.x_min, n).astype(dtype)
    b = np.zeros(NX)
    b[1:-1] = -(U[0, 2:] - U[0, :-2]) / (2 * grid.h)
    noise = 0.5 * grid.dt**0.5
    cpu = mw.get_backend()

    def step() -> None:
        xi = rng.standard_normal(n, dtype=np.dtype(dtype))
        reference_deposit(reference_step(y, xi, b, grid, grid.dt, noise), grid)

    return 1e6 * timed(cpu, step, budget, warm_up=False)


def hybrid_iteration(be: mw.Backend, n: int, budget: float) -> dict[str, Any]:
    """One Picard iteration of ``mw.solve(method="particles")`` on the Santa Fe defaults
    (running cost, FDM HJB, particle FP, mixing): the best and the median of the iterations
    after the first (which records the CUDA graph), from the solve's own per-phase timings,
    after a warm-up solve of three iterations (first-use costs of the libraries)."""
    iterations = max(5, min(12, int(budget) + 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        warnings.filterwarnings("ignore", message="tol=")  # a fixed number of iterations
        for max_iter in (3, iterations):
            res = mw.solve(mw.SantaFeBar(), nx=NX, nt=NT, method="particles", n_particles=n,
                           seed=0, backend=be, tol=1e-12, max_iter=max_iter, progress=False)
    h = res.history
    per_iteration = [(a + b + c, a, b, c) for a, b, c in
                     zip(h["time_hjb"], h["time_fp"], h["time_coupling"], strict=True)][1:]
    total, hjb, fp, coupling = min(per_iteration)
    return {"backend": be.name, "device": be.device, "dtype": be.dtype, "n": n,
            "iteration_ms": 1e3 * total, "hjb_ms": 1e3 * hjb, "fp_ms": 1e3 * fp,
            "coupling_ms": 1e3 * coupling,
            "median_iteration_ms": 1e3 * float(np.median([p[0] for p in per_iteration])),
            "iterations_timed": len(per_iteration)}


def compare(before_path: str, after_path: str, out: str) -> dict[str, Any]:
    """Rows (dtype, N, mode) of both files' accelerator rows: step time before and after and
    their ratio; the hybrid iteration likewise."""
    before, after = (json.loads(Path(p).read_text(encoding="utf-8"))
                     for p in (before_path, after_path))

    def keyed(data: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
        return {(r["dtype"], r["n"], r["mode"]): r for r in data["rows"] if r["device"] != "cpu"}

    old, new = keyed(before), keyed(after)
    rows = [{"dtype": k[0], "n": k[1], "mode": k[2], "before_step_s": old[k]["step_us"] / 1e6,
             "after_step_s": new[k]["step_us"] / 1e6,
             "ratio": old[k]["step_us"] / new[k]["step_us"]} for k in new if k in old]
    print(f"{'dtype':<8} {'N':>9} {'mode':<12} {'step before':>11} {'after':>8} {'ratio':>6}")
    for r in rows:
        print(f"{r['dtype']:<8} {r['n']:>9.0e} {r['mode']:<12} {1e6 * r['before_step_s']:8.1f} "
              f"µs {1e6 * r['after_step_s']:5.1f} µs {r['ratio']:6.2f}")
    result = {"benchmark": "particles", "card": after["device"], "rows": rows,
              "before": before, "after": after}
    Path(out).write_text(json.dumps(result, indent=2, default=str))
    print(f"wrote {out}")
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compare:
        compare(*args.compare, args.out)
        return 0
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    dtypes = args.dtypes.split(",")
    if args.threads is not None and args.backend == "torch":
        import torch

        torch.set_num_threads(args.threads)
    U, m0 = equilibrium_U()
    target = args.backend != "numpy" or args.device != "cpu"
    on_cuda = args.device.startswith("cuda")
    copies = ([int(c) for c in args.copies.split(",")] if args.copies
              else ([1, 64] if on_cuda else [None]))
    modes = (args.modes.split(",") if args.modes else ["fused", "fused-eager", "graph", "eager"]
             ) if on_cuda else ["-"]
    if args.compile:
        modes.append("graph+compile" if on_cuda else "compile")
    rows, hybrid = [], []
    for dtype in dtypes:
        base = mw.get_backend("numpy", "cpu", dtype)
        be = mw.get_backend(args.backend, args.device, dtype) if target else None
        for n in sizes:
            ref = None
            if args.numpy_max is None or n <= args.numpy_max:
                ref = solve_row(base, n, U, m0, args.budget)
                ref["plain_step_us"] = plain_numpy_step_us(n, dtype, U, args.budget / 2)
                ref["x_numpy"], ref["x_plain"] = 1.0, ref["plain_step_us"] / ref["step_us"]
                rows.append(ref)
                _print_row(ref)
            if be is None:
                continue
            for mode in modes:
                for c in ([None] if mode.startswith("fused") else copies):
                    row = solve_row(be, n, U, m0, args.budget, mode, c)
                    if ref is not None:
                        row["x_numpy"] = ref["step_us"] / row["step_us"]
                        row["x_plain"] = ref["plain_step_us"] / row["step_us"]
                    rows.append(row)
                    _print_row(row)
    hybrid_n = int(args.hybrid_n)
    for be in [mw.get_backend("numpy", "cpu", dtypes[-1])] + (
            [mw.get_backend(args.backend, args.device, dt) for dt in dtypes] if target else []):
        hybrid.append(hybrid_iteration(be, hybrid_n, args.budget))
        h = hybrid[-1]
        print(f"hybrid Picard iteration {h['backend']}/{h['device']}/{h['dtype']} N={hybrid_n:.0e}"
              f": {h['iteration_ms']:.1f} ms (HJB {h['hjb_ms']:.1f} ms, FP {h['fp_ms']:.1f} ms, "
              f"coupling {h['coupling_ms']:.1f} ms; median of {h['iterations_timed']} "
              f"iterations {h['median_iteration_ms']:.1f} ms)")
    device = mw.device_info(args.device if target else "cpu")
    out = {"benchmark": "particles", "nx": NX, "nt": NT, "args": vars(args),
           "device": device, "host": mw.device_info("cpu"), "versions": versions(),
           "rows": rows, "hybrid": hybrid, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    Path(args.out).write_text(json.dumps(out, indent=2, default=str))
    print(f"wrote {args.out}")
    return 0


_HEADER = False


def _print_row(r: dict[str, Any]) -> None:
    global _HEADER
    if not _HEADER:
        print(f"{'backend':<7} {'device':<6} {'dtype':<8} {'N':>9} {'mode':<13} {'copies':>6} "
              f"{'step_us':>10} {'solve_ms':>10} {'x_numpy':>8} {'x_plain':>8} "
              f"{'k_step_us':>9} {'k_dep_us':>9}")
        _HEADER = True
    def cell(key: str, width: int, fmt: str) -> str:
        return format(r[key], f"{width}{fmt}") if key in r else f"{'-':>{width}}"

    fused = "kernel_fused_us" in r
    ks = cell("kernel_randn_us" if fused else "kernel_step_us", 9, ".1f")
    kd = cell("kernel_fused_us" if fused else "kernel_locate_deposit_us", 9, ".1f")
    print(f"{r['backend']:<7} {r['device']:<6} {r['dtype']:<8} {r['n']:>9.0e} {r['mode']:<13} "
          f"{r['copies']:>6} {r['step_us']:10.1f} {r['solve_ms']:10.1f} "
          f"{cell('x_numpy', 8, '.2f')} {cell('x_plain', 8, '.2f')} {ks} {kd}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
