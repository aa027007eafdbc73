"""The crossover table for ``device="auto"``: where batches and particles start paying off.

Times on this machine, medians over ``--repeats`` runs after a warm-up run:

- FDM batches: ``mw.solve_batch`` of B Santa Fe problems (thresholds × σ) at 101 × 101 with 3
  Picard iterations: on the CPU a loop of compiled NumPy solves, on each accelerator present
  (CUDA, MPS) one batched torch computation (its default dtype);
- particles: one particle Fokker–Planck solve of N particles (101 × 100) on the CPU (NumPy,
  compiled) and on each accelerator;
- with ``--emulation-batches``/``--emulation-particles``, the same under MPS emulation
  (torch on this CPU in float32): information on the batching effect, never used for
  placement.

B* and N* are the smallest sizes from which the accelerator is at least as fast as the CPU at
every larger size measured. Accelerators absent here are written as not measured, and
placement then falls back to a fixed rule and says so. The table prints, and is written as
JSON to ``--out`` (``--package`` writes ``mfgwork/data/crossover.json``, the table shipped
with the package; commit it with the machine it names).

    python benchmarks/crossover.py [--batches 1,2,4,...] [--particles 1e3,...] [--package]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mfgwork.analysis.crossover import measure_table, table_frame
from mfgwork.results import provenance

PACKAGE_TABLE = Path(__file__).resolve().parent.parent / "mfgwork" / "data" / "crossover.json"


def _sizes(text: str) -> list[int]:
    return [int(float(v)) for v in text.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,2,4,8,16,32,64,128,256")
    parser.add_argument("--particles", default="1e3,1e4,1e5,1e6")
    parser.add_argument("--emulation-batches", default="1,2,4,8,16")
    parser.add_argument("--emulation-particles", default="1e3,1e4,1e5")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/crossover.json")
    parser.add_argument("--package", action="store_true",
                        help=f"write the packaged table {PACKAGE_TABLE}")
    args = parser.parse_args(argv)
    table = measure_table(_sizes(args.batches), _sizes(args.particles),
                          emulation_batch_sizes=_sizes(args.emulation_batches),
                          emulation_particle_sizes=_sizes(args.emulation_particles),
                          repeats=args.repeats,
                          progress=lambda m: print(f"  measuring {m}", file=sys.stderr))
    table["provenance"] = provenance()

    print(f"crossover table, measured on {table['cpu']['machine']['host']} "
          f"({table['cpu']['machine']['name']}, {table['cpu']['machine']['cores']} cores)")
    print(f"{'target':<16} {'method':<10} {'size':>10} {'seconds':>10}")
    for r in table_frame(table):
        print(f"{r['target']:<16} {r['method']:<10} {r['size']:>10} {r['seconds']:10.4f}")
    for kind, entry in table["accelerators"].items():
        if not entry["measured"]:
            print(f"{kind}: not measured ({entry['note']})")
            continue
        for method in ("fdm_batch", "particles"):
            if entry.get(method):
                print(f"{kind} {method}: crossover {entry[method]['crossover']}")
    outs = [Path(args.out)] + ([PACKAGE_TABLE] if args.package else [])
    for out in outs:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(table, indent=1) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
