"""Latency: small solves and the first solve of a process, before and after.

Rows
  seed         Santa Fe at nx = nt = 52, exactly 5 iterations (tol 1e-12), in a warm process
  default      Santa Fe at its defaults (201², tol 1e-8), in a warm process
  import       a fresh process: ``import mfgwork``
  first-cold   a fresh process: import and the first default solve, with an empty model cache
               (``MFGWORK_MODEL_CACHE``), an empty Triton cache (``TRITON_CACHE_DIR``) and the
               package's numba caches not yet written
  first-warm   the same again: every cache written by an earlier process
  model-cold   a fresh process: the first solve of a model no process has solved (Power(1.5),
               tol 1e-6), after first-cold (what the model's own kernels cost)
  model-warm   the same again
  room-cold    with ``--device cuda``: the first 101² × 100 room (``mw.solve_2d``) of a process
               whose caches hold no room kernels; room-warm: the same again

``--device cuda`` runs every solve with ``backend="torch", device="cuda"`` (float64 in 1-D);
the first-solve rows then give, beside the whole process, the first solve's own time inside
it (``solve_s``: interpreter start, ``import mfgwork`` and PyTorch's import excluded; the
last, which any PyTorch program pays, is ``torch_s``).

"after" is the working tree's ``mfgwork``, "before" the ``mfgwork`` of ``--baseline`` (a git
revision, extracted with ``git archive``); each is copied into its own temporary folder (so the
first process of each finds every cache empty) and imported from there by subprocesses
(``PYTHONPATH``, run in that folder; each checks which package it imported), the two
alternating, ``--rounds`` times. A row's time is the minimum over its runs (the machine may be
shared: the minimum is the least disturbed run); the median is recorded beside it, and the
minimum CPU time (user + system: what a shared machine's load changes less). The in-process
rows time ``mw.solve`` after one warm-up solve, with the phases of the fastest run
(``res.timings``). The first-solve rows time the whole process from the parent (interpreter
start included). Pin it to one core (on the CPU):

    taskset -c 0 python benchmarks/latency.py [--baseline REV] [--rounds 5] [--out F]
    taskset -c 1 python benchmarks/latency.py --cases seed default   # the in-process rows
    python benchmarks/latency.py --device cuda --baseline REV --rounds 3
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
        res = mw.solve(problem, progress=False, **case, **ON)
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
import json, time
import mfgwork as mw
t0 = time.perf_counter()
if ON:
    import torch
t1 = time.perf_counter()
res = SOLVE
print(json.dumps({"converged": bool(res.converged), "solve_s": time.perf_counter() - t1,
                  "torch_s": t1 - t0, "compile_s": res.timings.get("compile", 0.0)}))
"""
#: The first solves of the first-solve rows (``ON``: the device's options).
FIRST = {"first": "mw.solve(mw.SantaFeBar(), progress=False, **ON)",
         "model": "mw.solve(mw.SantaFeBar(hamiltonian=mw.Power(1.5)), tol=1e-6, progress=False, "
                  "**ON)",
         "room": "mw.solve_2d(mw.Room(), progress=False, backend='torch', device='cuda')"}
#: The options of each solve on a device.
DEVICES = {"cpu": {}, "cuda": {"backend": "torch", "device": "cuda", "dtype": "float64"}}


def _python(code: str, tree: Path, cache: Path) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds, stdout) of ``python -c code`` importing ``mfgwork`` from
    ``tree``, with the model and Triton caches in the folder ``cache``."""
    path = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = os.environ | {"PYTHONPATH": path, "MFGWORK_MODEL_CACHE": str(cache),
                        "TRITON_CACHE_DIR": str(cache / "triton")}
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


def _trees(baseline: str | Path, folder: Path) -> dict[str, Path]:
    """Fresh copies of the baseline's (a git revision, or a folder holding its ``mfgwork``)
    and of the working tree's ``mfgwork`` under ``folder``."""
    trees = {"before": folder / "before", "after": folder / "after"}
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    if isinstance(baseline, Path):
        shutil.copytree(baseline / "mfgwork", trees["before"] / "mfgwork", ignore=ignore)
    else:
        trees["before"].mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", baseline, "mfgwork"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(trees["before"])], input=archive, check=True)
    shutil.copytree(ROOT / "mfgwork", trees["after"] / "mfgwork", ignore=ignore)
    return trees


#: The groups of rows ``--cases`` chooses from: the in-process cases, ``import``, and the
#: first solves (each with its warm and cold rows).
GROUPS = (*CASES, "import", *FIRST)


def measure(baseline: str | Path, rounds: int, repeats: int, device: str = "cpu",
            cases: tuple[str, ...] = GROUPS) -> list[dict]:
    """The rows (module docstring) of the groups ``cases``, each with the runs of "before"
    and "after": wall and CPU seconds (the CPU time of a shared machine's load changes
    less)."""
    on = f"ON = {DEVICES[device]!r}\n"
    firsts = [k for k in FIRST if (k != "room" or device == "cuda") and k in cases]
    in_process = {name: case for name, case in CASES.items() if name in cases}

    def first(case: str) -> str:
        return on + _FIRST_SOLVE.replace("SOLVE", FIRST[case])

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
            for case in firsts:
                w, c, out = _python(first(case), tree, caches[label])
                record((f"{case}-cold", label), [w], [c])
                extra[(f"{case}-cold", label)] = json.loads(out)
        code = f"CASES = {in_process!r}\nREPEATS = {repeats}\n" + on + _IN_PROCESS
        for _ in range(rounds):
            for label, tree in trees.items():
                if "import" in cases:
                    w, c, _ = _python("import mfgwork", tree, caches[label])
                    record(("import", label), [w], [c])
                for case in firsts:
                    w, c, out = _python(first(case), tree, caches[label])
                    record((f"{case}-warm", label), [w], [c])
                    found = json.loads(out)
                    best = extra.get((f"{case}-warm", label))
                    if best is None or found["solve_s"] < best["solve_s"]:
                        extra[(f"{case}-warm", label)] = found
                found = json.loads(_python(code, tree, caches[label])[2]) if in_process else {}
                for case, row in found.items():
                    record((case, label), row["times"], row["cpu"])
                    best = extra.get((case, label))
                    if best is None or min(row["times"]) < best["fastest_s"]:
                        extra[(case, label)] = {k: v for k, v in row.items()
                                                if k not in ("times", "cpu")
                                                } | {"fastest_s": min(row["times"])}
    rows = []
    for case in (*in_process, *(["import"] if "import" in cases else []),
                 *(f"{case}-{state}" for case in firsts for state in ("warm", "cold"))):
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
    parser.add_argument("--before-tree", type=Path,
                        help="a folder holding the 'before' code's mfgwork (instead of "
                             "--baseline, where git is missing)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="alternating rounds of fresh processes per side")
    parser.add_argument("--repeats", type=int, default=10,
                        help="timed solves per case in each in-process round")
    parser.add_argument("--device", choices=sorted(DEVICES), default="cpu",
                        help="where every solve runs (cuda: torch, float64 in 1-D)")
    parser.add_argument("--cases", nargs="+", choices=GROUPS, default=list(GROUPS),
                        help="the rows to measure: in-process cases, import, first solves "
                             "(default: all)")
    parser.add_argument("--out", default="benchmarks/results/latency.json")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1:
        parser.error(f"--rounds={args.rounds}, --repeats={args.repeats}: both must be >= 1")
    if args.before_tree is not None:
        baseline: str | Path = args.before_tree
        revision = (args.before_tree / "REVISION").read_text().strip() if (
            args.before_tree / "REVISION").is_file() else str(args.before_tree)
    else:
        baseline = args.baseline
        revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", baseline],
                                  capture_output=True, text=True, check=True).stdout.strip()
    rows = measure(baseline, args.rounds, args.repeats, args.device, tuple(args.cases))
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    print(f"before: {baseline} ({revision}); after: the working tree; CPU cores {cores}; "
          "minimum (median) over the runs")
    print(f"{'case':<12} {'before wall':>22} {'after wall':>22} {'ratio':>6} "
          f"{'before CPU':>10} {'after CPU':>10} {'ratio':>6} {'solve before':>12} "
          f"{'solve after':>11}")
    for r in rows:
        b, a = r["before"], r["after"]
        solve = "".join(f" {_format(x['solve_s']):>11}" if "solve_s" in x else ""
                        for x in (b, a))
        print(f"{r['case']:<12} {_format(b['min_s']):>10} ({_format(b['median_s']):>9}) "
              f"{_format(a['min_s']):>10} ({_format(a['median_s']):>9}) {r['ratio']:6.2f} "
              f"{_format(b['cpu_min_s']):>10} {_format(a['cpu_min_s']):>10} "
              f"{r['cpu_ratio']:6.2f}{solve}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "baseline": str(baseline), "revision": revision,
                               "rounds": args.rounds, "repeats": args.repeats, "cores": cores,
                               "cases": {k: v for k, v in CASES.items() if k in args.cases},
                               "device": args.device,
                               "host": platform.node(),
                               "processor": platform.processor() or platform.machine(),
                               "python": platform.python_version()}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
