"""Benchmark of the Hamiltonians on the CPU (NumPy): Santa Fe Bar with each shipped model.

Rows (every model whose value can be traced runs the one compiled scheme (numba) with its
generated functions; a user's model included)
  quadratic            ½|p|², Newton on the attendance path
  quadratic-generic    a subclass of ½|p|² (the scheme of its traced expression)
  user-half-square     ½|p|² written by a user (``value`` only)
  current              notebook 09's ``Current`` model (a user's, with hand-written dp, dpp)
  power-1.5            |p|^1.5/1.5: Newton on the attendance path, ∂pp H capped near p = 0
  power-1.5-anderson   the same model with ``iteration=mw.Anderson()`` (no Newton)
  power-3              |p|³/3: Newton on the attendance path
  congestion           |p|²/(2(1 + m)^0.5): outer Anderson on the density H sees (frozen),
                       Newton on the attendance path inside
  congestion-anderson  the same model with ``iteration=mw.Anderson()`` on the density path

Cases (as in ``benchmarks/fdm.py``)
  seed     nx = nt = 52, exactly 5 iterations
  default  nx = nt = 201, to tol 1e-6 (``--max-iter`` iterations at most)

For each: median wall time over ``--repeats`` runs after one warm-up, iterations (best
responses on the requested grid; those of the coarse stage of a coarse-to-fine solve apart,
``coarse_iterations``), whether it converged, the time per iteration (the median time over
the requested grid's best responses, so it includes the coarse stage) and the ratio to the
quadratic (numba) row of the same case, measured in the same run: of the total time
(``× quad``), of the time per iteration (``×/it``) and of the CPU time per iteration
(``cpu ×/it``: what a shared machine's load does not change). Pin it to one core for the record:
``taskset -c 0 python benchmarks/models.py``.

``--compile``: the first solve of a new model (notebook 09's) in a fresh process, twice with
one new (temporary) model cache: ``timings["compile"]`` and the wall time with an empty cache,
then with a warm one.

    python benchmarks/models.py [--repeats 3] [--cases seed,default] [--out F] [--compile]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import mfgwork as mw
from mfgwork.core.storage import provenance


class GenericQuadratic(mw.Quadratic):
    """A subclass of ½|p|²."""


class UserHalfSquare(mw.Hamiltonian):
    """½|p|² as a user writes it: ``value`` only."""

    def value(self, x, p, m, xp):
        return 0.5 * p * p


@dataclass(frozen=True)
class Current(mw.Hamiltonian):
    """Notebook 09's model: H(p) = ½ (right·(p₋)² + left·(p₊)²)."""

    right: float = 2.0
    left: float = 0.5
    name = "current"

    def value(self, x, p, m, xp):
        return 0.5 * (self.right * xp.minimum(p, 0.0 * p) ** 2
                      + self.left * xp.maximum(p, 0.0 * p) ** 2)

    def dp(self, x, p, m, xp):
        return self.right * xp.minimum(p, 0.0 * p) + self.left * xp.maximum(p, 0.0 * p)

    def dpp(self, x, p, m, xp):  # right for p < 0, left for p > 0
        return 0.5 * (self.right + self.left) - 0.5 * (self.right - self.left) * xp.sign(p)


MODELS = {"quadratic": mw.Quadratic(), "quadratic-generic": GenericQuadratic(),
          "user-half-square": UserHalfSquare(), "current": Current(),
          "power-1.5": mw.Power(1.5), "power-1.5-anderson": (mw.Power(1.5), mw.Anderson),
          "power-3": mw.Power(3.0), "congestion": mw.Congestion(1.0, 0.5),
          "congestion-anderson": (mw.Congestion(1.0, 0.5), mw.Anderson)}
CASES = {"seed": {"nx": 52, "nt": 52, "max_iter": 5, "tol": 1e-12},
         "default": {"nx": 201, "nt": 201, "max_iter": 300, "tol": 1e-6}}


def measure(case: dict, model: mw.Hamiltonian | tuple, repeats: int) -> dict:
    H, iteration = model if isinstance(model, tuple) else (model, None)
    problem = mw.SantaFeBar(hamiltonian=H)
    runs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        for _ in range(repeats + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            res = mw.solve(problem, progress=False,
                           iteration=None if iteration is None else iteration(), **case)
            runs.append((time.perf_counter() - t0, time.process_time() - c0, res))
    runs = runs[1:]
    med = statistics.median(t for t, _, _ in runs)
    cpu = statistics.median(c for _, c, _ in runs)
    res = runs[0][2]
    its = len(res.history["residual"])
    return {"time_s": med, "cpu_s": cpu, "iterations": res.iterations, "evaluations": its,
            "per_iteration_s": med / max(its, 1), "per_iteration_cpu_s": cpu / max(its, 1),
            "converged": res.converged,
            "residual": res.residual, "mass_error": res.mass_error,
            "scheme": res.params["iteration"].get("scheme"),
            "kernels": res.extra["fdm_kernels"],
            "newton_on_coupling": res.extra.get("newton_on_coupling"),
            "outer_iterations": res.extra.get("outer_iterations"),
            "coarse_iterations": res.extra.get("coarse_iterations")}


_FIRST_SOLVE = """
import json, sys, time
started = time.perf_counter()
sys.path.insert(0, {here!r})
import mfgwork as mw
from models import Current
res = mw.solve(mw.SantaFeBar(hamiltonian=Current()), nx=201, nt=201, tol=1e-6,
               progress=False)
print(json.dumps({{"compile_s": res.timings["compile"], "wall_s": time.perf_counter() - started,
                  "cpu_s": time.process_time(), "converged": res.converged}}))
"""


def compile_times() -> list[dict]:
    """The first solve of notebook 09's model in two fresh processes sharing one new model
    cache (a temporary folder): with the cache empty, then warm."""
    code = _FIRST_SOLVE.format(here=str(Path(__file__).resolve().parent))
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        env = os.environ | {"MFGWORK_MODEL_CACHE": cache}
        for state in ("empty", "warm"):
            out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                 capture_output=True, text=True).stdout
            rows.append({"cache": state} | json.loads(out.splitlines()[-1]))
            print(f"  first solve, {state} cache: {rows[-1]}", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--max-iter", type=int, default=300, help="of the default case")
    parser.add_argument("--out", default="benchmarks/results/models.json")
    parser.add_argument("--compile", action="store_true",
                        help="also time the first solve of a new model in fresh processes")
    args = parser.parse_args(argv)
    CASES["default"]["max_iter"] = args.max_iter
    models = ["quadratic"] + [m for m in args.models.split(",") if m in MODELS
                              and m != "quadratic"]
    rows = []
    for case in [c for c in CASES if c in args.cases.split(",")]:
        base = None
        for name in models:
            row = {"case": case, "model": name} | measure(CASES[case], MODELS[name],
                                                          args.repeats)
            base = base or row
            row["ratio_to_quadratic"] = row["time_s"] / base["time_s"]
            row["per_iteration_ratio"] = row["per_iteration_s"] / base["per_iteration_s"]
            row["per_iteration_cpu_ratio"] = (row["per_iteration_cpu_s"]
                                              / base["per_iteration_cpu_s"])
            rows.append(row)
            print(f"  measured {case} / {name}: {row['time_s']:.3f} s", file=sys.stderr)
    header = (f"{'case':<8} {'model':<20} {'median':>9} {'iters':>5} {'conv':>5} "
              f"{'residual':>9} {'per it':>9} {'scheme':>9} {'× quad':>7} {'×/it':>6} "
              f"{'cpu ×/it':>8}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['case']:<8} {r['model']:<20} {r['time_s']:8.3f}s {r['iterations']:>5} "
              f"{str(r['converged']):>5} {r['residual']:9.1e} "
              f"{1e3 * r['per_iteration_s']:7.1f}ms {r['scheme']:>9} "
              f"{r['ratio_to_quadratic']:7.2f} {r['per_iteration_ratio']:6.2f} "
              f"{r['per_iteration_cpu_ratio']:8.2f}")
    first = compile_times() if args.compile else None
    for r in first or []:
        print(f"first solve of a new model, {r['cache']} cache: compile "
              f"{r['compile_s']:.2f} s, process {r['wall_s']:.2f} s (CPU {r['cpu_s']:.2f} s)")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "first_solve": first, "repeats": args.repeats,
                               "host": platform.node(),
                               "provenance": provenance()}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
