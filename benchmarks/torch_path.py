"""The generic torch path of the finite-difference sweeps: kernel launches and wall time.

The path that MPS (and CUDA without Triton) runs, measured under ``mw.mps_emulation()``
(torch on the CPU, float32, under the MPS rules) unless ``--device`` names a real device:

- kernel launches per time step of the HJB sweep (``--newton`` Newton iterations per step)
  and of the FP sweep, counted with ``torch.profiler`` (:mod:`mfgwork.core.profiling`);
- wall time of the seed case, Santa Fe at nx = nt = 52 with exactly 5 Picard iterations:
  median over ``--repeats`` solves after one warm-up, with NumPy float64 (compiled loops)
  measured in the same run as the baseline ratio, and the relative error of U, M, A against it.

``--baseline F`` reads an earlier output of this script (e.g. the measurement of the code
before the launch reduction, ``benchmarks/history/torch_path_before.json``) and prints
before/after side by side (``benchmarks/baselines/torch_path_mps_emulation.json``: the
PCR-workspace path against the code before it, measured one after the other). To measure
an older checkout with this script, put it first on ``PYTHONPATH`` (with
``mfgwork/core/profiling.py`` copied in) and pass ``--compile-steps false --commit ID``.

    python benchmarks/torch_path.py [--repeats 5] [--baseline F] [--out F]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import mfgwork as mw
from mfgwork.core.profiling import kernel_launches
from mfgwork.numerics.fdm.sweeps import FiniteDifferences
from mfgwork.results import provenance

SEED_CASE = {"nx": 52, "nt": 52, "max_iter": 5, "tol": 1e-12}


def launches_per_step(backend: mw.Backend, n: int, newton: int) -> dict:
    """Kernels per time step of one HJB sweep (fixed Newton count) and one FP sweep."""
    problem = mw.SantaFeBar()
    grid = problem.grid(n, n)
    fd = FiniteDifferences(grid, problem.nu, backend, compile_steps=False)  # eager: aten ops
    F = problem.coupling(grid, backend).running_cost(backend.asarray(np.full(grid.nt, 0.7)))
    U_T = problem.terminal_cost(grid, backend)
    fd._hjb_fixed(U_T, F, None, newton)  # first calls (compilation, caches) not counted
    (U, _), hjb = kernel_launches(fd._hjb_fixed, U_T, F, None, newton)
    m0 = problem.initial_density(grid, backend)
    fd.solve_fp(U, m0)
    _, fp = kernel_launches(fd.solve_fp, U, m0)
    return {"hjb_per_step": sum(hjb.values()) / grid.nt, "fp_per_step": sum(fp.values()) / grid.nt,
            "newton_per_step": newton, "hjb_ops": dict(hjb.most_common()),
            "fp_ops": dict(fp.most_common())}


def seed_case(backend: mw.Backend, repeats: int, compile_steps: bool | str = "auto") -> dict:
    """Median wall time of the 52 × 52, 5-iteration solve, and its errors against NumPy."""
    def timed(be: object) -> tuple[list[float], mw.Result]:
        times, res = [], None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mw.ConvergenceWarning)
            warnings.simplefilter("ignore", UserWarning)   # tol below float32's floor
            for _ in range(repeats + 1):
                t0 = time.perf_counter()
                res = mw.solve(mw.SantaFeBar(), backend=be, progress=False,
                               compile_steps=compile_steps, **SEED_CASE)
                times.append(time.perf_counter() - t0)
        return times[1:], res

    ref_times, ref = timed("numpy")
    times, res = timed(backend)

    def rel(a: object, b: object) -> float:
        a, b = mw.to_numpy(a).astype(np.float64), mw.to_numpy(b)
        return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))

    return {"time_s": statistics.median(times), "min_s": min(times),
            "numpy_time_s": statistics.median(ref_times),
            "ratio_to_numpy": statistics.median(times) / statistics.median(ref_times),
            "newton_iterations": res.extra["newton_iterations"],
            "rel_error_U": rel(res.U, ref.U), "rel_error_M": rel(res.M, ref.M),
            "rel_error_A": rel(res.attendance, ref.attendance),
            "compiled_steps": res.extra.get("compiled_steps")}


def _commit() -> str | None:
    """The commit of the mfgwork that is imported (None outside a git checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(mw.__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="mps-emulation",
                        help="'mps-emulation' (default) or a torch device ('cuda', 'mps')")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--newton", type=int, default=4,
                        help="Newton iterations per HJB time step when counting launches")
    parser.add_argument("--compile-steps", default="auto", choices=("auto", "true", "false"),
                        help="compile_steps of the timed solves (the launch count is eager)")
    parser.add_argument("--baseline", default=None, help="an earlier JSON of this script")
    parser.add_argument("--commit", default=None,
                        help="label of the measured code (default: git HEAD of mfgwork)")
    parser.add_argument("--out", default="benchmarks/results/torch_path.json")
    args = parser.parse_args(argv)
    backend = (mw.mps_emulation() if args.device == "mps-emulation"
               else mw.get_backend("torch", args.device, "float32"))
    row = {"device": args.device, "commit": args.commit or _commit(),
           "case": "santa-fe-52x52-5it"}
    row |= launches_per_step(backend, SEED_CASE["nx"], args.newton)
    compile_steps = {"true": True, "false": False}.get(args.compile_steps, "auto")
    row |= seed_case(backend, args.repeats, compile_steps)
    rows = [row]
    if args.baseline:
        before = json.loads(Path(args.baseline).read_text())["rows"][0]
        rows = [before | {"label": "before"}, row | {"label": "after"}]
    else:
        row["label"] = "this run"

    header = (f"{'':<9} {'commit':<8} {'HJB/step':>9} {'FP/step':>8} {'total/step':>10} "
              f"{'wall 52x52 5 it':>16} {'numpy':>9} {'x numpy':>8} {'rel U':>8} {'rel M':>8} "
              f"{'rel A':>8}")
    print(f"generic torch path on {args.device}: kernel launches per time step "
          f"({args.newton} Newton iterations per HJB step) and the seed case")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['label']:<9} {str(r['commit']):<8} {r['hjb_per_step']:9.1f} "
              f"{r['fp_per_step']:8.1f} {r['hjb_per_step'] + r['fp_per_step']:10.1f} "
              f"{1e3 * r['time_s']:13.1f} ms {1e3 * r['numpy_time_s']:6.2f} ms "
              f"{r['ratio_to_numpy']:8.1f} {r['rel_error_U']:8.1e} {r['rel_error_M']:8.1e} "
              f"{r['rel_error_A']:8.1e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "repeats": args.repeats,
                               "cpu": mw.device_info("cpu"), "host": platform.node(),
                               "provenance": provenance()}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
