"""Common noise (``mw.CommonNoise``): the conditional equilibrium on the scenario tree against
the model's own equilibrium, measured in the same run.

Rows: Santa Fe whose payoff ``good`` switches between 12 and 8 (persistence 0.8) on trees of
depth ``--depths`` (2^depth scenarios) at ``--nx`` × nt (nt: ``--nx`` rounded up to whole
epochs), tol 1e-8, each the fastest of ``--repeats`` end-to-end ``mw.solve`` calls; beside it
the model's equilibrium on the same grid and backend (the baseline), their ratio, the nodes,
the best responses and tangent products, the certified residual and the one ``res.check()``
recomputes, the estimate made before the solve, and the largest gap to the model's
equilibrium where every state is alike (``--depths``' largest, the noiseless limit), and on a
device the largest gap to NumPy's solve of the deepest tree. On the CPU pin one core
(target: depth 6 at 201² ≤ 5 s); ``--device cuda`` runs every solve on torch on that
device (target ≤ 1 s).

    taskset -c 0 python benchmarks/common_noise.py [--nx 201] [--depths 2,4,6] [--out F]
    python benchmarks/common_noise.py --device cuda --out F
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from device_timing import fastest_solve

import mfgwork as mw
from mfgwork.core.storage import provenance

PERSISTENCE = 0.8


def noise(depth: int, values: tuple[float, float] = (12.0, 8.0)) -> mw.CommonNoise:
    p = PERSISTENCE
    return mw.CommonNoise(mw.SantaFeBar(), "good", list(values),
                          transition=[[p, 1 - p], [1 - p, p]], depth=depth)



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nx", type=int, default=201)
    parser.add_argument("--depths", default="2,4,6")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="benchmarks/results/common_noise.json")
    args = parser.parse_args()
    on = {} if args.device == "cpu" else {"backend": "torch", "device": args.device}
    depths = [int(d) for d in args.depths.split(",")]
    mw.solve(noise(2), nx=41, nt=40, **on)   # kernels compiled once
    rows = []
    print(f"{'depth':>5} {'scenarios':>9} {'tree s':>7} {'model s':>7} {'ratio':>6} "
          f"{'estimate s':>10} {'evals':>5} {'products':>8} {'residual':>9} {'check':>9}")
    for depth in depths:
        shock = noise(depth)
        nt = shock.steps(args.nx)
        t_tree, res = fastest_solve(shock, args.repeats, nx=args.nx, nt=nt, **on)
        t_model, _ = fastest_solve(mw.SantaFeBar(), args.repeats, nx=args.nx, nt=nt,
                             progress=False, **on)
        row = {"depth": depth, "scenarios": shock.scenarios, "nodes": shock.tree.nodes,
               "nx": args.nx, "nt": nt, "tree_s": t_tree, "model_s": t_model,
               "ratio": t_tree / t_model, "estimate_s": shock.estimate(args.nx, nt)["seconds"],
               "best_responses": int(res.iterations),
               "tangent_products": int(res.extra["tangent_products"]),
               "converged": bool(res.converged), "residual": float(res.residual),
               "check": float(res.check()), "timings": dict(res.timings)}
        rows.append(row)
        print(f"{depth:5d} {row['scenarios']:9d} {t_tree:7.3f} {t_model:7.3f} "
              f"{row['ratio']:6.1f} {row['estimate_s']:10.2f} {row['best_responses']:5d} "
              f"{row['tangent_products']:8d} {row['residual']:9.1e} {row['check']:9.1e}")
    flat = mw.solve(noise(depths[-1], (10.0, 10.0)), nx=args.nx, nt=nt, tol=1e-12, **on)
    model = mw.solve(mw.SantaFeBar(), nx=args.nx, nt=nt, tol=1e-12, progress=False, **on)
    gap = float(np.max(np.abs(mw.to_numpy(flat.M) - mw.to_numpy(model.M)[None])))
    print(f"noiseless limit (depth {depths[-1]}): max |M - M_model| = {gap:.1e}")
    backend_gap = None
    if on:   # the device's tree against NumPy's, float64
        host = mw.solve(noise(depths[-1]), nx=args.nx, nt=nt, tol=1e-12)
        device = mw.solve(noise(depths[-1]), nx=args.nx, nt=nt, tol=1e-12, **on)
        backend_gap = float(np.max(np.abs(mw.to_numpy(device.M) - host.M)))
        print(f"{args.device} against NumPy (depth {depths[-1]}, tol 1e-12): max |ΔM| = "
              f"{backend_gap:.1e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "noiseless_gap": gap, "backend_gap": backend_gap,
                               "device": args.device,
                               "persistence": PERSISTENCE, "provenance": provenance()},
                              indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
