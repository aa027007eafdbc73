"""Finite-difference MFG benchmark: Santa Fe Bar, time per phase, ratios to NumPy.

Cases
  seed     nx = nt = 52, exactly 5 Picard iterations (the seed material's experiment)
  default  nx = nt = 201, to tol 1e-6 (the defaults, all iterations)
  batch    64 (``--batch``) Santa Fe problems (thresholds × σ), nx = nt = 101, to tol 1e-6:
           ``solve_batch`` (one batched computation on torch; a loop of solves on NumPy)

For each case and backend/device/dtype: median wall time over ``--repeats`` runs after one
warm-up (compilation and first-call costs excluded), the time per phase (HJB, FP, coupling),
the iteration count, and the ratio to NumPy float64 measured in the same run.

    python benchmarks/fdm.py [--targets numpy,torch-cpu,torch-cuda] [--repeats 5] [--out F]
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

import numpy as np

import mfgwork as mw
from mfgwork.core.storage import provenance

CASES = {
    "seed-52x52-5it": {"nx": 52, "nt": 52, "max_iter": 5, "tol": 1e-12},
    "default-201x201-tol1e-6": {"nx": 201, "nt": 201, "max_iter": 300, "tol": 1e-6},
    "batch-101x101-tol1e-6": {"nx": 101, "nt": 101, "max_iter": 300, "tol": 1e-6,
                                "batch": 64},
}


def batch_problems(n: int) -> list[mw.SantaFeBar]:
    """A thresholds × σ grid of Santa Fe problems (n = k² members)."""
    k = round(n**0.5)
    return [mw.SantaFeBar(threshold=float(a), sigma=float(s))
            for a in np.linspace(0.3, 0.8, k) for s in np.linspace(0.4, 1.0, k)]

TARGETS = {  # backend, device, dtype, compile_steps
    "numpy": ("numpy", "cpu", "float64", False),
    "torch-cpu": ("torch", "cpu", "float64", False),
    "torch-cpu-f32": ("torch", "cpu", "float32", False),
    "torch-cuda": ("torch", "cuda", "float64", False),
    "torch-cuda-f32": ("torch", "cuda", "float32", False),
    "torch-cuda-compiled": ("torch", "cuda", "float64", True),
    "torch-cuda-f32-compiled": ("torch", "cuda", "float32", True),
}


def measure(case: dict, target: tuple[str, str, str, bool], repeats: int) -> dict:
    backend = mw.get_backend(*target[:3])
    case = dict(case)
    batch = case.pop("batch", None)
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            if batch:
                res = mw.solve_batch(batch_problems(batch), backend=backend, progress=False,
                                     compile_steps=target[3], **case)[0]
            else:
                res = mw.solve(mw.SantaFeBar(), backend=backend, progress=False,
                               compile_steps=target[3], **case)
            runs.append((time.perf_counter() - t0, res))
    runs = runs[1:]
    med = statistics.median(t for t, _ in runs)
    res = runs[0][1]
    return {"time_s": med, "min_s": min(t for t, _ in runs),
            "hjb_s": statistics.median(r.timings["hjb"] for _, r in runs),
            "fp_s": statistics.median(r.timings["fp"] for _, r in runs),
            "coupling_s": statistics.median(r.timings["coupling"] for _, r in runs),
            "iterations": res.iterations, "converged": res.converged, "batch": batch or 1,
            "mass_error": res.mass_error, "newton_iterations": res.extra["newton_iterations"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="numpy,torch-cpu",
                        help=f"comma-separated, from {', '.join(TARGETS)}")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cases", default=",".join(CASES),
                        help="comma-separated case names (default: all)")
    parser.add_argument("--batch", type=int, default=64,
                        help="members of the batch case (a square: 8x8 thresholds x sigmas)")
    parser.add_argument("--out", default="benchmarks/results/fdm.json")
    args = parser.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from {list(TARGETS)}")
    targets = ["numpy"] + [t for t in targets if t != "numpy"]
    cases = [c for c in CASES if c in args.cases.split(",")]
    CASES["batch-101x101-tol1e-6"]["batch"] = args.batch

    rows = []
    for case in cases:
        base = None
        for name in targets:
            row = {"case": case, "target": name}
            try:
                row |= measure(CASES[case], TARGETS[name], args.repeats)
            except Exception as exc:  # one failing target is a row, not a lost run
                print(f"  {case} / {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                rows.append(row | {"error": f"{type(exc).__name__}: {exc}"})
                continue
            base = base or row["time_s"]
            row["ratio_to_numpy"] = row["time_s"] / base
            rows.append(row)
            print(f"  measured {case} / {name}: {1e3 * row['time_s']:.1f} ms", file=sys.stderr)

    header = (f"{'case':<28} {'target':<15} {'median':>10} {'HJB':>9} {'FP':>9} "
              f"{'coupling':>9} {'iters':>5} {'mass err':>9} {'× numpy':>8}")
    print(f"(batch case: {args.batch} problems per solve; times are per solve of the batch)")
    print(header)
    print("-" * len(header))
    for r in rows:
        if "error" in r:
            print(f"{r['case']:<28} {r['target']:<15} failed: {r['error']}")
            continue
        print(f"{r['case']:<28} {r['target']:<15} {_ms(r['time_s']):>10} {_ms(r['hjb_s']):>9} "
              f"{_ms(r['fp_s']):>9} {_ms(r['coupling_s']):>9} {r['iterations']:>5} "
              f"{r['mass_error']:9.1e} {r['ratio_to_numpy']:8.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    devices = {t: mw.device_info(TARGETS[t][1]) for t in targets}
    out.write_text(json.dumps({"rows": rows, "repeats": args.repeats, "devices": devices,
                               "host": platform.node(), "provenance": provenance()},
                              indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.2f} ms"


if __name__ == "__main__":
    sys.exit(main())
