"""Time outside the iterations: 1024-point batches and scans end to end, before and after.

Rows, each a 32 × 32 Santa Fe box at ``--n``² solved in float32 (tol 1e-6) and float64
(tol 1e-8) on ``--device`` (torch):

  batch   ``mw.solve_batch`` (what ``mw.solve(list)`` calls, and the only batch call of trees
          before it, e.g. ffaf094): the whole call and its phases (``res.timings``: setup, the
          coarse start, the iterations' HJB, FP and coupling, building the results, the
          float64 certificate and finish of float32 members)
  scan    ``mw.scan`` of the same points into a new zarr store, end to end; ``machinery`` is
          scan / batch − 1 (what the store, the checks and the transfers add)

Boxes: ``easy`` threshold 0.3–0.9 × σ 0.3–1.0; ``hard`` threshold 0.2–0.9 × ε 0.001–0.1 at
σ 0.3 (steep prices: more iterations, float32 members finished in float64).

"before" is the ``mfgwork`` of ``--baseline`` (a git revision) or of ``--before-tree`` (a
folder holding it), "after" the working tree's; each side runs in its own process
(``PYTHONPATH``), the two alternating ``--rounds`` times; a row's time is the minimum over
its ``--repeats`` runs in each round (after one warm-up, whose leftovers each process then
freezes, ``gc.freeze()``, as the accelerators guide advises: a full collection walking
PyTorch's objects took 0.24–0.31 s on an H200 host, and struck timed runs at random). On a
GPU host:

    python benchmarks/outside_loop.py --device cuda --baseline 2fa2e7d \\
        --out benchmarks/baselines/outside_loop_h200.json
    python benchmarks/outside_loop.py --device cpu --n 41 --side 4 --rounds 1   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import gc, json, sys, tempfile, time, warnings
from pathlib import Path
import numpy as np
import mfgwork as mw
assert mw.__file__.startswith(TREE), mw.__file__
warnings.simplefilter("ignore")
SPECS = {"easy": ({"threshold": np.linspace(0.3, 0.9, SIDE).tolist(),
                   "sigma": np.linspace(0.3, 1.0, SIDE).tolist()}, {}),
         "hard": ({"threshold": np.linspace(0.2, 0.9, SIDE).tolist(),
                   "eps": np.linspace(0.001, 0.1, SIDE).tolist()}, {"sigma": 0.3})}
rows = {}
with tempfile.TemporaryDirectory() as tmp:
    for box, (spec, fixed) in SPECS.items():
        (a, av), (b, bv) = spec.items()
        problems = [mw.SantaFeBar(**fixed, **{a: x, b: y}) for x in av for y in bv]
        for dtype, tol in (("float32", 1e-6), ("float64", 1e-8)):
            opts = dict(nx=N, nt=N, tol=tol, dtype=dtype, progress=False)
            best = {}
            for k in range(REPEATS + 1):
                t0 = time.perf_counter()
                res = mw.solve_batch(problems, backend="torch", device=DEVICE, **opts)
                batch = time.perf_counter() - t0
                t0 = time.perf_counter()
                ds = mw.scan(mw.SantaFeBar, spec, fixed=fixed, device=DEVICE,
                             store=Path(tmp) / f"{box}-{dtype}-{k}.zarr", **opts)
                scan = time.perf_counter() - t0
                if k == 0:   # a warm-up; what it leaves is frozen out of later collections
                    gc.collect()
                    gc.freeze()
                    continue
                if batch < best.get("batch_s", np.inf):
                    best |= {"batch_s": batch, "phases": dict(res[0].timings),
                             "converged": sum(bool(r.converged) for r in res),
                             "iterations_max": max(int(r.iterations) for r in res)}
                if scan < best.get("scan_s", np.inf):
                    status = ds.status.values.astype(str).ravel()
                    best |= {"scan_s": scan,
                             "scan_converged": int((status == "converged").sum())}
            rows[f"{box}-{dtype}"] = best | {"points": len(problems)}
print(json.dumps({"rows": rows, "card": mw.device_info(DEVICE).get("name")}))
"""


def _trees(baseline: str | None, before_tree: Path | None, folder: Path) -> dict[str, Path]:
    """Fresh copies of the "before" (a git revision, or a folder holding its ``mfgwork``)
    and of the working tree's ``mfgwork`` under ``folder``."""
    trees = {"before": folder / "before", "after": folder / "after"}
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    if before_tree is not None:
        shutil.copytree(before_tree / "mfgwork", trees["before"] / "mfgwork", ignore=ignore)
    else:
        trees["before"].mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", str(baseline), "mfgwork"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(trees["before"])], input=archive, check=True)
    shutil.copytree(ROOT / "mfgwork", trees["after"] / "mfgwork", ignore=ignore)
    return trees


def _side(tree: Path, args: argparse.Namespace) -> dict:
    """The rows measured by a process importing ``mfgwork`` from ``tree``, and the name of
    the device (``card``)."""
    code = (f"TREE, DEVICE, N, SIDE, REPEATS = {str(tree)!r}, {args.device!r}, {args.n}, "
            f"{args.side}, {args.repeats}\n" + _CHILD)
    path = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-c", code], env=os.environ | {"PYTHONPATH": path},
                          cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"a measuring process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace) -> tuple[dict[str, dict[str, dict]], str]:
    """({row: {"before": ..., "after": ...}}, the device's name): each side's batch and scan
    the best of its rounds."""
    keys = {"batch_s": ("phases", "converged", "iterations_max", "points"),
            "scan_s": ("scan_converged",)}
    out: dict[str, dict[str, dict]] = {}
    card = ""
    with tempfile.TemporaryDirectory(prefix="mfgwork-outside-") as tmp:
        trees = _trees(args.baseline, args.before_tree, Path(tmp))
        for _ in range(args.rounds):
            for label, tree in trees.items():
                side = _side(tree, args)
                card = side["card"]
                for row, found in side["rows"].items():
                    kept = out.setdefault(row, {}).setdefault(label, {})
                    for key, along in keys.items():
                        if found[key] < kept.get(key, float("inf")):
                            kept |= {k: found[k] for k in (key, *along)}
    return out, card


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD", help="git revision of the 'before' code")
    parser.add_argument("--before-tree", type=Path,
                        help="a folder holding the 'before' code's mfgwork (where git is "
                             "missing)")
    parser.add_argument("--device", default="cuda", help="cuda, cpu, ... (torch)")
    parser.add_argument("--n", type=int, default=201, help="grid points in x and t")
    parser.add_argument("--side", type=int, default=32, help="points per axis of each box")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/outside_loop.json")
    args = parser.parse_args(argv)
    for name in ("n", "side", "rounds", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)}: must be >= 1")
    rows, card = measure(args)
    print(f"before: {args.before_tree or args.baseline}; after: the working tree; "
          f"{args.side}² points at {args.n}² on {args.device}; minimum over the runs")
    print(f"{'row':<14} {'batch before':>12} {'after':>7} {'ratio':>6} {'scan before':>12} "
          f"{'after':>7} {'ratio':>6} {'machinery before':>16} {'after':>6}  phases after")
    for name, sides in rows.items():
        b, a = sides["before"], sides["after"]
        phases = " ".join(f"{k} {v:.3f}" for k, v in a["phases"].items()
                          if k not in ("compile", "total") and v >= 5e-4)
        print(f"{name:<14} {b['batch_s']:12.3f} {a['batch_s']:7.3f} "
              f"{a['batch_s'] / b['batch_s']:6.2f} {b['scan_s']:12.3f} {a['scan_s']:7.3f} "
              f"{a['scan_s'] / b['scan_s']:6.2f} {b['scan_s'] / b['batch_s'] - 1:16.2f} "
              f"{a['scan_s'] / a['batch_s'] - 1:6.2f}  {phases}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "args": {k: str(v) for k, v in vars(args).items()},
                               "card": card, "host": platform.node(),
                               "processor": platform.processor() or platform.machine(),
                               "python": platform.python_version()}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
