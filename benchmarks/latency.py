"""Latency on one CPU core: small solves and the first solve of a process, before and after.

Rows
  seed         Santa Fe at nx = nt = 52, exactly 5 iterations (tol 1e-12), in a warm process
  default      Santa Fe at its defaults (201², tol 1e-8), in a warm process
  import       a fresh process: ``import mfgwork``
  first-cold   a fresh process: import and the first default solve, with an empty model cache
               (``MFGWORK_MODEL_CACHE``) and the package's numba caches not yet written
  first-warm   the same again: every cache written by an earlier process

"after" is the working tree's ``mfgwork``, "before" the ``mfgwork`` of ``--baseline`` (a git
revision, extracted with ``git archive``); each is copied into its own temporary folder (so the
first process of each finds every cache empty) and imported from there by subprocesses
(``PYTHONPATH``, run in that folder; each checks which package it imported), the two
alternating, ``--rounds`` times. A row's time is the minimum over its runs (the machine may be
shared: the minimum is the least disturbed run); the median is recorded beside it, and the
minimum CPU time (user + system: what a shared machine's load changes less). The in-process
rows time ``mw.solve`` after one warm-up solve, with the phases of the fastest run
(``res.timings``). The first-solve rows time the whole process from the parent (interpreter
start included). Pin it to one core:

    taskset -c 0 python benchmarks/latency.py [--baseline REV] [--rounds 5] [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {"seed": {"nx": 52, "nt": 52, "max_iter": 5, "tol": 1e-12},
         "default": {"nx": 201, "nt": 201, "tol": 1e-8}}

_IN_PROCESS = """
import json, time, warnings
import mfgwork as mw
warnings.simplefilter("ignore")
problem, out = mw.SantaFeBar(), {}
for name, case in CASES.items():
    runs = []
    for _ in range(REPEATS + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        res = mw.solve(problem, progress=False, **case)
        runs.append((time.perf_counter() - t0, time.process_time() - c0, res))
    runs = runs[1:]
    fastest, _, res = min(runs, key=lambda r: r[0])
    out[name] = {"times": [t for t, _, _ in runs], "cpu": [c for _, c, _ in runs],
                 "timings": dict(res.timings),
                 "iterations": int(res.iterations), "converged": bool(res.converged),
                 "residual": float(res.residual)}
print(json.dumps(out))
"""

_FIRST_SOLVE = """
import json
import mfgwork as mw
res = mw.solve(mw.SantaFeBar(), progress=False)
print(json.dumps({"converged": bool(res.converged), "compile_s": res.timings["compile"]}))
"""


def _python(code: str, tree: Path, cache: Path) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds, stdout) of ``python -c code`` importing ``mfgwork`` from
    ``tree``."""
    env = os.environ | {"PYTHONPATH": str(tree), "MFGWORK_MODEL_CACHE": str(cache)}
    check = (f"\nimport mfgwork\nassert mfgwork.__file__.startswith({str(tree)!r}), "
             "mfgwork.__file__")   # the tree's package, not one found first elsewhere
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code + check], env=env, cwd=tree,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"a measuring process failed:\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def _trees(baseline: str, folder: Path) -> dict[str, Path]:
    """Fresh copies of the baseline's and of the working tree's ``mfgwork`` under ``folder``."""
    trees = {"before": folder / "before", "after": folder / "after"}
    trees["before"].mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", baseline, "mfgwork"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(trees["before"])], input=archive, check=True)
    shutil.copytree(ROOT / "mfgwork", trees["after"] / "mfgwork",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc"))
    return trees


def measure(baseline: str, rounds: int, repeats: int) -> list[dict]:
    """The rows (module docstring), each with the runs of "before" and "after": wall and CPU
    seconds (the CPU time of a shared machine's load changes less)."""
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    extra: dict[tuple[str, str], dict] = {}

    def record(key: tuple[str, str], walls: list[float], cpus: list[float]) -> None:
        wall.setdefault(key, []).extend(walls)
        cpu.setdefault(key, []).extend(cpus)

    with tempfile.TemporaryDirectory(prefix="mfgwork-latency-") as tmp:
        folder = Path(tmp)
        trees = _trees(baseline, folder)
        caches = {label: folder / f"cache-{label}" for label in trees}
        for label, tree in trees.items():   # cold: nothing compiled or written yet
            w, c, out = _python(_FIRST_SOLVE, tree, caches[label])
            record(("first-cold", label), [w], [c])
            extra[("first-cold", label)] = json.loads(out)
        in_process = f"CASES = {CASES!r}\nREPEATS = {repeats}\n" + _IN_PROCESS
        for _ in range(rounds):
            for label, tree in trees.items():
                w, c, _ = _python("import mfgwork", tree, caches[label])
                record(("import", label), [w], [c])
                w, c, out = _python(_FIRST_SOLVE, tree, caches[label])
                record(("first-warm", label), [w], [c])
                extra[("first-warm", label)] = json.loads(out)
                found = json.loads(_python(in_process, tree, caches[label])[2])
                for case, row in found.items():
                    record((case, label), row["times"], row["cpu"])
                    best = extra.get((case, label))
                    if best is None or min(row["times"]) < best["fastest_s"]:
                        extra[(case, label)] = {k: v for k, v in row.items()
                                                if k not in ("times", "cpu")
                                                } | {"fastest_s": min(row["times"])}
    rows = []
    for case in ("seed", "default", "import", "first-warm", "first-cold"):
        row: dict = {"case": case}
        for label in ("before", "after"):
            key = (case, label)
            info = {k: v for k, v in extra.get(key, {}).items() if k != "fastest_s"}
            row[label] = {"min_s": min(wall[key]), "median_s": statistics.median(wall[key]),
                          "cpu_min_s": min(cpu[key]), "runs": len(wall[key])} | info
        row["ratio"] = row["after"]["min_s"] / row["before"]["min_s"]
        row["cpu_ratio"] = row["after"]["cpu_min_s"] / row["before"]["cpu_min_s"]
        rows.append(row)
    return rows


def _format(seconds: float) -> str:
    return f"{1e3 * seconds:.2f} ms" if seconds < 1 else f"{seconds:.3f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD",
                        help="git revision of the 'before' code (default: HEAD, against the "
                             "working tree)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="alternating rounds of fresh processes per side")
    parser.add_argument("--repeats", type=int, default=10,
                        help="timed solves per case in each in-process round")
    parser.add_argument("--out", default="benchmarks/results/latency.json")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1:
        parser.error(f"--rounds={args.rounds}, --repeats={args.repeats}: both must be >= 1")
    revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline],
                              capture_output=True, text=True, check=True).stdout.strip()
    rows = measure(args.baseline, args.rounds, args.repeats)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print(f"before: {args.baseline} ({revision}); after: the working tree; CPU cores {cores}; "
          "minimum (median) over the runs")
    print(f"{'case':<12} {'before wall':>22} {'after wall':>22} {'ratio':>6} "
          f"{'before CPU':>10} {'after CPU':>10} {'ratio':>6}")
    for r in rows:
        b, a = r["before"], r["after"]
        print(f"{r['case']:<12} {_format(b['min_s']):>10} ({_format(b['median_s']):>9}) "
              f"{_format(a['min_s']):>10} ({_format(a['median_s']):>9}) {r['ratio']:6.2f} "
              f"{_format(b['cpu_min_s']):>10} {_format(a['cpu_min_s']):>10} "
              f"{r['cpu_ratio']:6.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "baseline": args.baseline, "revision": revision,
                               "rounds": args.rounds, "repeats": args.repeats, "cores": cores,
                               "cases": CASES, "host": platform.node(),
                               "processor": platform.processor() or platform.machine(),
                               "python": platform.python_version()}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
