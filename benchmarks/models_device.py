"""Benchmark of the Hamiltonians on a device: Santa Fe Bar with each model, in one run.

Every model whose value can be traced runs the same fused Triton kernels on CUDA (templates
joined with the model's generated ``@triton.jit`` functions); the rows measure what that costs
against ½|p|² in the same process.

Models
  quadratic    ½|p|² (the reference row of each case)
  power-1.5    |p|^1.5/1.5 (∂pp H capped near p = 0 in Newton's tangent)
  power-3      |p|³/3
  congestion   |p|²/(2(1 + m)^0.5): H depends on m (the coupling state is the density path)
  current      notebook 09's ``Current`` model (a user's, with hand-written dp, dpp)

Cases (nx = nt = ``--nx``, default 201; to ``--tol``, default 1e-6)
  single   one solve in float64: median wall time over ``--repeats`` runs after a warm-up
  batch    ``--batch`` problems (default 1024; thresholds × σ, a square grid) by
           ``solve_batch``, in float32 and in float64: one timed run after a warm-up

For each row: the wall time, the first call's time (compilation or cache load included),
iterations, whether every problem converged, the kernels that ran, and the ratio of the time
(and of the time per iteration) to the quadratic row of the same case and dtype.

    python benchmarks/models_device.py --device cuda [--batch 1024] [--nx 201] [--out F]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import Current  # noqa: E402 - the benchmarks folder is not a package

MODELS = {"quadratic": mw.Quadratic(), "power-1.5": mw.Power(1.5), "power-3": mw.Power(3.0),
          "congestion": mw.Congestion(1.0, 0.5), "current": Current()}


def problems(n: int, H: mw.Hamiltonian) -> list[mw.SantaFeBar]:
    """A thresholds × σ grid of Santa Fe problems with the Hamiltonian H (n members: the
    smallest square grid of at least n, cut to n)."""
    k = int(np.ceil(n**0.5))
    grid = [mw.SantaFeBar(threshold=float(a), sigma=float(s), hamiltonian=H)
            for a in np.linspace(0.3, 0.8, k) for s in np.linspace(0.4, 1.0, k)]
    return grid[:n]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def single(H: mw.Hamiltonian, device: str, nx: int, tol: float, repeats: int) -> dict:
    """One float64 solve: the first call's time, then the median of ``repeats``."""
    kw = {"nx": nx, "nt": nx, "tol": tol, "backend": "torch", "device": device,
          "dtype": "float64", "progress": False}
    times = []
    for _ in range(repeats + 1):
        _sync(device)
        t0 = time.perf_counter()
        res = mw.solve(mw.SantaFeBar(hamiltonian=H), **kw)
        _sync(device)
        times.append(time.perf_counter() - t0)
    return {"first_call_s": times[0], "time_s": statistics.median(times[1:]),
            "iterations": res.iterations, "all_converged": bool(res.converged),
            "residual": res.residual, "kernels": res.extra.get("fdm_kernels"),
            "compile_s": res.timings.get("compile")}


def batch(H: mw.Hamiltonian, device: str, nx: int, tol: float, n: int, dtype: str) -> dict:
    """``n`` problems by ``solve_batch``: a warm-up on 32 of them (3 iterations), then one
    timed run."""
    kw = {"nx": nx, "nt": nx, "tol": tol, "backend": "torch", "device": device,
          "dtype": dtype, "progress": False}
    probs = problems(n, H)
    _sync(device)
    t0 = time.perf_counter()
    mw.solve_batch(probs[:32], max_iter=3, **kw)
    _sync(device)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = mw.solve_batch(probs, max_iter=500, **kw)
    _sync(device)
    elapsed = time.perf_counter() - t0
    return {"first_call_s": first, "time_s": elapsed,
            "iterations": max(len(o.history["residual"]) for o in out),
            "all_converged": all(o.converged for o in out),
            "converged": sum(bool(o.converged) for o in out), "batch": n,
            "max_residual": max(float(o.residual) for o in out),
            "kernels": out[0].extra.get("fdm_kernels")}


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row's ratios to the quadratic row of its case and dtype (same run)."""
    base = {(r["case"], r["dtype"]): r for r in rows if r["model"] == "quadratic"}
    for r in rows:
        q = base.get((r["case"], r["dtype"]))
        if q is not None:
            r["ratio_to_quadratic"] = r["time_s"] / q["time_s"]
            r["per_iteration_ratio"] = ((r["time_s"] / max(r["iterations"], 1))
                                        / (q["time_s"] / max(q["iterations"], 1)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="torch device (cuda; cpu to smoke-test)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--cases", default="single,batch")
    parser.add_argument("--dtypes", default="float32,float64", help="of the batch case")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--nx", type=int, default=201)
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/models_device.json")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown or args.batch < 1 or args.nx < 8:
        parser.error(f"--models {unknown} unknown (known: {', '.join(MODELS)}), or --batch "
                     f"{args.batch} < 1, or --nx {args.nx} < 8")
    names = ["quadratic"] + [m for m in args.models.split(",") if m != "quadratic"]
    cases = args.cases.split(",")
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        for name in names:
            H = MODELS[name]
            if "single" in cases:
                rows.append({"case": "single", "model": name, "dtype": "float64"}
                            | single(H, args.device, args.nx, args.tol, args.repeats))
                print(f"  single {name}: {rows[-1]['time_s']:.3f} s", file=sys.stderr)
            for dtype in args.dtypes.split(",") if "batch" in cases else []:
                rows.append({"case": "batch", "model": name, "dtype": dtype}
                            | batch(H, args.device, args.nx, args.tol, args.batch, dtype))
                print(f"  batch {dtype} {name}: {rows[-1]['time_s']:.3f} s", file=sys.stderr)
    with_ratios(rows)
    header = (f"{'case':<7} {'dtype':<8} {'model':<11} {'time':>9} {'first':>8} {'its':>4} "
              f"{'all conv':>8} {'× quad':>7} {'×/it':>6}  kernels")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['case']:<7} {r['dtype']:<8} {r['model']:<11} {r['time_s']:8.3f}s "
              f"{r['first_call_s']:7.2f}s {r['iterations']:>4} {str(r['all_converged']):>8} "
              f"{r.get('ratio_to_quadratic', float('nan')):7.2f} "
              f"{r.get('per_iteration_ratio', float('nan')):6.2f}  {r['kernels']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "args": vars(args), "host": platform.node(),
                               "device": mw.device_info(args.device),
                               "provenance": provenance()}, indent=2, default=str) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
