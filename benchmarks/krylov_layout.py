"""Layouts of the one-launch BiCGStab (CUDA): seconds per iteration for a batch of rooms.

    python benchmarks/krylov_layout.py [--batch 64] [--nx 101] [--iterations 200]
                                       [--out benchmarks/results/krylov_layout.json]

The systems are those of a real sweep: the HJB Jacobians of ``benchmarks/room.py``'s batch
of ``--batch`` rooms (a square: door widths × congestion) at the middle time level of the
best response to agents who do not move, in float64. Each layout (nodes per tile, programs
per room, warps per program) runs ``--iterations`` BiCGStab iterations from x = 0 in one
launch (the tolerance set to 0 so that none stops early), timed by CUDA events (median of
five launches). The first row, the library's default layout, is the baseline of the ratios.
A layout whose programs cannot all be resident at once (their barrier would wait for
programs that never start) is skipped: the programs an SM holds follow from the compiled
kernel's registers and shared memory (:func:`fits_per_sm`), and a short launch confirms it.
Every layout's final relative residual ‖b − J x‖₂/‖b‖₂ is printed beside the default's:
the layouts differ only in the order of the inner products' partial sums.

A second table times the default layout's launches against their iterations (1, 5, 18, 50),
the L2 cache flushed before each, in float64 and in float32 (the fused steps' mixed
precision): the slope is the seconds per iteration of every problem iterating.

``GB/s``: the memory traffic an iteration needs at least, over its time. Each iteration
passes over :data:`PASSES` arrays of the batch, a neighbour's value counted once; what L2
keeps between phases lowers the traffic to DRAM below this. With the inverse diagonal
(``--preconditioner jacobi``): phase 1 reads r, p, v, D⁻¹, the five coefficients and r̂ and
writes p and v; phase 2 reads r, v, D⁻¹ and the coefficients and writes t; phase 3 reads x,
r, v, p, t, D⁻¹ and r̂ and writes x and r. With the Neumann series (the default), each
product J M⁻¹ a is two phases (w = D⁻¹ Ō D⁻¹ a, then a − Ō w: D⁻¹, the four off-diagonal
coefficients, and w written and read) and phase 3 updates z (x = x₀ + M⁻¹ z) without D⁻¹.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from room import rooms

import mfgwork as mw
from mfgwork.apps.doctor import versions
from mfgwork.numerics.fdm2d import fused_krylov
from mfgwork.numerics.fdm2d.equilibrium import build
from mfgwork.numerics.fdm2d.fused_krylov import FusedBiCGStab
from mfgwork.numerics.fdm2d.stencil import Coefficients

#: Arrays of the batch one BiCGStab iteration reads or writes (module docstring).
PASSES = {"jacobi": 30, "neumann": 42}
#: Iterations per launch of the precision series (:func:`precision_series`).
LENGTHS = (1, 5, 18, 50)
#: Bytes written between a solve's start and its launch: more than the L2 cache holds.
FLUSH_BYTES = 256 * 2**20


#: 32-bit registers of an SM (every NVIDIA GPU since Maxwell), allocated per warp in units
#: of :data:`REGISTER_UNIT`.
REGISTERS_PER_SM = 65536
REGISTER_UNIT = 256
#: Thread blocks an SM holds at most (compute capability 8.x/9.x).
BLOCKS_PER_SM = 32


def fits_per_sm(kernel: Any, warps: int) -> int:
    """How many programs of a compiled Triton ``kernel`` (its registers per thread and shared
    memory) with ``warps`` warps one SM of the current CUDA device holds at once."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    per_warp = -(-kernel.n_regs * 32 // REGISTER_UNIT) * REGISTER_UNIT
    shared = kernel.metadata.shared
    return min(REGISTERS_PER_SM // (per_warp * warps),
               props.max_threads_per_multi_processor // (32 * warps), BLOCKS_PER_SM,
               props.shared_memory_per_multiprocessor // (shared + 1024) if shared
               else BLOCKS_PER_SM)


def systems(batch: int, nx: int) -> tuple:
    """(Stencil, coefficients (diag, W, E, S, N), b) of the rooms' HJB Jacobians."""
    import torch

    be = mw.get_backend("torch", "cuda", "float64")
    setup = build(rooms(batch), nx, nx, nx - 1, be, "krylov")
    nt = setup.grids[0].nt
    M = torch.stack([setup.m0] * (nt + 1), dim=-3)
    F = setup.coupling.running_cost(setup.coupling.state(M))
    U = setup.scheme.solve_hjb(setup.U_T, F)
    stencil = setup.scheme.stencil
    c = stencil.jacobian(U[:, nt // 2], None, exits=False)
    b = stencil.active * torch.ones_like(U[:, 0])
    return stencil, tuple(a.contiguous() for a in c[:5]), b.contiguous()


def run(solver: FusedBiCGStab, coefs: tuple, b, apply, iterations: int,
        flush: Any = None) -> tuple:
    """(median seconds of one launch of ``iterations`` iterations, its CompiledKernel,
    barriers met, final relative residual); ``flush``: an array rewritten before each launch
    (larger than the L2 cache: the launch starts cold, as after an assembly)."""
    import torch

    times, kernel = [], None
    for _ in range(6):
        solver.start(coefs, b, None, apply)
        solver.set_control(0.0, iterations)
        if flush is not None:
            flush.add_(1.0)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        torch.cuda.nvtx.range_push("layout")   # for profilers: ncu --nvtx-include layout/
        kernel = solver.launch_solve()
        torch.cuda.nvtx.range_pop()
        end.record()
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end) / 1e3)
    ok = bool(solver.status[:, 2].min() >= 1.0)
    r = b - apply(solver.x)
    rel = float(((r * r).sum((-2, -1)).sqrt() / (b * b).sum((-2, -1)).sqrt()).max())
    return statistics.median(times[1:]), kernel, ok, rel


def precision_series(stencil: Any, coefs: tuple, b: Any) -> list[dict]:
    """Seconds of one launch of the default layout against its iterations (:data:`LENGTHS`),
    in float64 and in float32 (the mixed precision of the fused steps: float32 iterations on
    the float64 systems), the L2 cache flushed before each launch as an assembly would; the
    seconds per iteration are the slope between the shortest launches where every problem
    iterates and the longest (a float32 problem at its rounding floor may break down and
    stop early: a long launch alone would time fewer problems)."""
    import torch

    apply = stencil.operator(Coefficients(*coefs, None))
    flush = torch.empty(FLUSH_BYTES // 8, dtype=torch.float64, device=b.device)
    rows = []
    for dtype in (torch.float64, torch.float32):
        solver = FusedBiCGStab(b.shape, b, False, 2, False, persistent=True, dtype=dtype)
        times, everyone = [], True
        for its in LENGTHS:
            times.append(run(solver, coefs, b, apply, its, flush)[0])
            everyone &= bool((solver.status[:, 0] == its).all())
        rows.append({"dtype": str(dtype).removeprefix("torch."), "iterations": list(LENGTHS),
                     "s_per_launch": times, "every_problem_iterated": everyone,
                     "s_per_iteration": (times[-1] - times[1]) / (LENGTHS[-1] - LENGTHS[1])})
    print(f"\n{'dtype':8} " + " ".join(f"{f'{k} its':>9}" for k in LENGTHS)
          + f" {'us/it':>7} {'x_f64':>6}")
    for row in rows:
        print(f"{row['dtype']:8} " + " ".join(f"{1e6 * t:9.1f}" for t in row["s_per_launch"])
              + f" {1e6 * row['s_per_iteration']:7.2f} "
              f"{rows[0]['s_per_iteration'] / row['s_per_iteration']:6.2f}"
              + ("" if row["every_problem_iterated"] else "  (some problems stopped early)"))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--nx", type=int, default=101)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--blocks", default="256,512,1024")
    ap.add_argument("--warps", default="4,8,16,32")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                    help="the iterations' precision of the layout table (float32: the mixed "
                         "precision of the fused steps, on the float64 systems)")
    ap.add_argument("--preconditioner", choices=("neumann", "jacobi"), default="neumann",
                    help="the one-launch solve's preconditioner (:data:`.fused_krylov."
                    "NEUMANN`)")
    ap.add_argument("--out", default="benchmarks/results/krylov_layout.json")
    args = ap.parse_args(argv)
    import torch

    fused_krylov.NEUMANN = args.preconditioner == "neumann"
    dtype = getattr(torch, args.dtype)

    stencil, coefs, b = systems(args.batch, args.nx)
    apply = stencil.operator(Coefficients(*coefs, None))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    nodes = args.nx * args.nx
    default = FusedBiCGStab(b.shape, b, False, 2, False, persistent=True, dtype=dtype)
    layouts = [("default", default.one_launch["BLOCK"], default.programs,
                default.one_launch["num_warps"])]
    for block in (int(v) for v in args.blocks.split(",")):
        for warps in (int(v) for v in args.warps.split(",")):
            if block >= 32 * warps:
                layouts.append(("probe", block, 1, warps))
    rows, base = [], None
    print(f"{'layout':8} {'block':>5} {'P':>3} {'warps':>5} {'regs':>4} {'spill':>5} "
          f"{'per SM':>6} {'us/it':>8} {'x_default':>9} {'GB/s':>6} {'residual':>9}")
    for name, block, programs, warps in layouts:
        if name == "probe":   # the compiled kernel's resources decide how many programs fit
            probe = FusedBiCGStab(b.shape, b, False, 2, False, persistent=True,
                                  layout=(block, 1, warps), dtype=dtype)
            _, kernel, _, _ = run(probe, coefs, b, apply, 1)
            per_sm = fits_per_sm(kernel, warps)
            tiles = -(-nodes // block)
            programs = min(tiles, sms * per_sm // args.batch)
            if programs < 1:
                continue
        solver = FusedBiCGStab(b.shape, b, False, 2, False, persistent=True,
                               layout=(block, programs, warps), dtype=dtype)
        seconds, kernel, ok, rel = run(solver, coefs, b, apply, args.iterations)
        row = {"layout": name, "block": block, "programs": programs, "warps": warps,
               "regs": kernel.n_regs, "spills": kernel.n_spills,
               "per_sm": fits_per_sm(kernel, warps), "barriers_met": ok,
               "s_per_iteration": seconds / args.iterations, "residual": rel}
        base = base or row["s_per_iteration"]
        row["x_default"] = base / row["s_per_iteration"]
        row["GB_per_s"] = (PASSES[args.preconditioner] * b.numel() * solver.coefs.element_size()
                           / row["s_per_iteration"] / 1e9)
        rows.append(row)
        print(f"{name:8} {block:5} {programs:3} {warps:5} {row['regs']:4} {row['spills']:5} "
              f"{row['per_sm']:6} {1e6 * row['s_per_iteration']:8.2f} {row['x_default']:9.2f} "
              f"{row['GB_per_s']:6.0f} "
              f"{rel:9.2e}{'' if ok else '  barriers NOT met'}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(["benchmarks/krylov_layout.py", *(
        argv if argv is not None else sys.argv[1:])]), "device": torch.cuda.get_device_name(),
        "dtype": args.dtype, "preconditioner": args.preconditioner, "versions": versions(),
        "batch": args.batch, "nx": args.nx,
        "iterations": args.iterations, "max_tiles_per_program":
        fused_krylov.MAX_TILES_PER_PROGRAM, "rows": rows,
        "precision": precision_series(stencil, coefs, b)}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
