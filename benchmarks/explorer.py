"""Explorer update time: threshold slider change → new figures (solve + draw), per grid.

For each grid (nx = nt) the explorer is built, warmed up with two updates, then the threshold
slider is moved ``--updates`` times to values not seen before (no cached results): the
median wall time of one update (the slider's observer: solve, three figures drawn and
encoded as PNG, status line) with its min and max, its solve and draw parts, its CPU time
(process time: a check on a machine shared with other work), and, as the baseline measured
in the same run, a bare ``mw.solve`` at the same settings. "A(t) shown": when the attendance
image, drawn first, is sent (the others follow). The explorer's default grid is 101 × 101.

    python benchmarks/explorer.py [--backend numpy --device cpu] [--method fdm]
                                  [--grids 52,101,151,201] [--updates 20] [--out F]
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
from mfgwork.apps.explorer import GRIDS, SantaFeExplorer
from mfgwork.core.storage import provenance

TARGET_S = 0.3  # slider change → new figure, at the default grid, method fdm


def measure(nx: int, method: str, backend: str, device: str, updates: int) -> dict:
    ex = SantaFeExplorer(nx=nx, method=method, backend=backend, device=device,
                         devices=[(backend, device)], mode="inline")
    slider = ex.controls["threshold"]
    shown: list[float] = []  # when the attendance image (drawn first) arrives
    ex.views["attendance"].observe(lambda _: shown.append(time.perf_counter()), names="value")
    for v in (0.70, 0.71):  # warm-up: first draws load fonts, first solves compile
        slider.value = v
    thresholds = [round(0.40 + 0.01 * k, 2) for k in range(updates)]
    wall, first, cpu, solve_s, draw_s, bare, iters = [], [], [], [], [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        for v in thresholds:
            t0, c0 = time.perf_counter(), time.process_time()
            slider.value = v
            wall.append(time.perf_counter() - t0)
            first.append(shown[-1] - t0)
            cpu.append(time.process_time() - c0)
            if ex.error:
                raise SystemExit(f"update at threshold={v} failed: {ex.error}")
            assert ex.result.params["threshold"] == v
            solve_s.append(ex.timings["solve"])
            draw_s.append(ex.timings["draw"])
            iters.append(ex.result.iterations)
            s = ex.settings()
            t0 = time.perf_counter()
            mw.solve(mw.SantaFeBar(**{k: s[k] for k in ("threshold", "sigma", "good", "bad",
                                                          "eps", "T")}),
                     nx=nx, nt=nx, method=method, backend=backend, device=device, tol=ex.tol,
                     max_iter=ex.max_iter, progress=False,
                     **({"n_particles": ex.n_particles, "seed": 0}
                        if method == "particles" else {}))
            bare.append(time.perf_counter() - t0)
    ex.close()
    med = statistics.median
    return {"nx": nx, "nt": nx, "method": method, "backend": backend, "device": device,
            "updates": updates, "update_s": med(wall), "update_min_s": min(wall),
            "update_max_s": max(wall), "update_cpu_s": med(cpu), "first_figure_s": med(first),
            "solve_s": med(solve_s), "draw_s": med(draw_s),
            "bare_solve_s": med(bare), "update_over_bare_solve": med(wall) / med(bare),
            "iterations": med(iters)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="numpy")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--method", default="fdm")
    parser.add_argument("--grids", default=",".join(map(str, GRIDS)),
                        help=f"comma-separated nx (= nt), from {GRIDS}")
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--out", default="benchmarks/results/explorer.json")
    args = parser.parse_args(argv)
    grids = [int(g) for g in args.grids.split(",") if g]
    if any(g not in GRIDS for g in grids):
        parser.error(f"--grids {args.grids!r}: each must be one of {GRIDS}")

    rows = []
    for nx in grids:
        rows.append(measure(nx, args.method, args.backend, args.device, args.updates))
        print(f"  measured {nx}x{nx}: {1e3 * rows[-1]['update_s']:.0f} ms", file=sys.stderr)

    header = (f"{'grid':<9} {'method':<9} {'device':<12} {'update':>9} {'solve':>9} "
              f"{'draw':>9} {'bare solve':>10} {'× bare':>7} {'iters':>5} {'min':>7} {'max':>7} "
              f"{'CPU':>7} {'A(t) shown':>10}")
    print(f"median of {args.updates} threshold changes each; target at 101 x 101 (fdm): "
          f"<= {1e3 * TARGET_S:.0f} ms")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['nx']}x{r['nt']:<5} {r['method']:<9} {r['backend'] + '/' + r['device']:<12} "
              f"{_ms(r['update_s']):>9} {_ms(r['solve_s']):>9} {_ms(r['draw_s']):>9} "
              f"{_ms(r['bare_solve_s']):>10} {r['update_over_bare_solve']:7.2f} "
              f"{r['iterations']:>5.0f} {_ms(r['update_min_s']):>7} {_ms(r['update_max_s']):>7} "
              f"{_ms(r['update_cpu_s']):>7} "
              f"{_ms(r['first_figure_s']):>10}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "target_s": TARGET_S,
                               "device": mw.device_info(args.device), "host": platform.node(),
                               "cpu_count": _cpus(), "provenance": provenance()},
                              indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def _cpus() -> int | None:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.0f} ms"


if __name__ == "__main__":
    sys.exit(main())
