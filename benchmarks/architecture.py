"""The shape of the code: the counts of the one-pipeline issue, for a revision or the tree.

Printed and written as JSON, for the working tree (or ``--tree`` a folder holding an
``mfgwork`` package, e.g. one extracted with ``git archive REV mfgwork | tar -x -C DIR``):

  front doors      public names of ``mw.__all__`` that solve (``solve``, ``solve_*``)
  pipelines        modules whose functions sequence the solves of the front door's tables
                   (``mfgwork.pipeline`` for the entries that are discretizations run by
                   ``pipeline.run``, the module of each entry that is a function of its own)
  discretizations  the kinds of the tables that are :class:`~mfgwork.pipeline.Discretization`
  private imports  names with a leading underscore imported from another module
  longest          the longest functions (lines), in the package and in ``numerics``
  over 80          functions of ``numerics`` longer than 80 lines
  device "auto"    modules that compare a device with "auto" (placement decided there)
  problem walk     ``solve_continuous(SantaFeBar(), nx=41, nt=40)`` traced: the calls of
                   the package's functions that receive the problem object (an argument
                   or ``self`` holding it), the files they are in, and how often the walk
                   comes back into a file it had left

    python benchmarks/architecture.py [--tree DIR] [--out F]
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_TABLES = """
import json, mfgwork as mw
from mfgwork.solve import SOLVERS, BATCH_SOLVERS
try:
    from mfgwork.pipeline import Discretization
except ImportError:   # (revisions before the pipeline)
    Discretization = None
entries = [*SOLVERS.values(), *BATCH_SOLVERS.values()]
kinds = [f.__wrapped__ for f in entries if Discretization is not None
         and isinstance(getattr(f, "__wrapped__", None), type)
         and issubclass(f.__wrapped__, Discretization)]
print(json.dumps({
    "doors": [n for n in mw.__all__ if n == "solve" or n.startswith("solve_")],
    "pipelines": sorted({"mfgwork.pipeline" if getattr(f, "__wrapped__", None) in kinds
                         else f.__module__ for f in entries}),
    "discretizations": sorted(f"{k.__module__}.{k.__name__}" for k in kinds)}))
"""

_WALK = """
import json, sys
import mfgwork as mw
from mfgwork.solve import solve_continuous
package = mw.__file__.rsplit("/", 1)[0]
problem = mw.SantaFeBar()
solve_continuous(problem, nx=41, nt=40)
files = []
def holds(frame):
    values = list(frame.f_locals.values())
    return any(v is problem or getattr(v, "problem", None) is problem for v in values)
def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_filename.startswith(package) and holds(frame):
        files.append(frame.f_code.co_filename[len(package) + 1:])
sys.setprofile(profile)
solve_continuous(problem, nx=41, nt=40)
sys.setprofile(None)
left, back = set(), 0
for before, after in zip(files, files[1:]):
    if after != before:
        back += after in left
        left.add(before)
print(json.dumps({"steps": len(files), "files": len(set(files)), "returns": back}))
"""


def functions(package: Path) -> list[tuple[int, str]]:
    """(lines, "module:function") of every function of the package."""
    out = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out.append((node.end_lineno - node.lineno + 1,
                            f"{path.relative_to(package.parent)}:{node.name}"))
    return sorted(out, reverse=True)


def private_imports(package: Path) -> list[str]:
    """``module:name`` of each private name imported from another module of the package."""
    found = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "")
                                                     .startswith("mfgwork")):
                found += [f"{path.relative_to(package)}:{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def auto_sites(package: Path) -> list[str]:
    """Modules with a comparison against the string "auto" next to a device."""
    sites = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(
                    isinstance(c, ast.Constant) and c.value == "auto" for c in node.comparators) \
                    and "device" in ast.unparse(node.left):
                sites.append(str(path.relative_to(package)))
    return sorted(set(sites))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--out", default="benchmarks/results/architecture.json")
    args = parser.parse_args()
    package = args.tree / "mfgwork"
    env_path = str(args.tree)
    listed = subprocess.run(
        [sys.executable, "-c", _TABLES],
        capture_output=True, text=True, check=True, cwd=env_path,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
    tables = json.loads(listed.stdout)
    walk = json.loads(subprocess.run([sys.executable, "-c", _WALK], capture_output=True,
                                     text=True, check=True, cwd=env_path,
                                     env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}
                                     ).stdout.splitlines()[-1])
    every = functions(package)
    numerics = [f for f in every if f[1].startswith("mfgwork/numerics")]
    counts = {"front_doors": tables["doors"], "pipelines": tables["pipelines"],
              "discretizations": tables.get("discretizations", []),
              "private_imports": private_imports(package),
              "longest": every[:5], "longest_numerics": numerics[:5],
              "numerics_over_80": [f for f in numerics if f[0] > 80],
              "device_auto_sites": auto_sites(package), "problem_walk": walk}
    for key, value in counts.items():
        shown = len(value) if isinstance(value, list) and key not in (
            "longest", "longest_numerics") else value
        print(f"{key:>18}: {shown}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(counts, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
