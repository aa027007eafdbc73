"""The fused Picard sweeps on a device: the cooperative layout against the per-thread one.

Inputs: ``--problems`` Santa Fe problems (σ spread over 0.3–1.2) at ``--nx`` x ``--nt``, the
running cost of the attendance path A(t) = 0.5 + 0.3 sin(2πt/T), g = 0, m0 the Gaussian. For
each dtype and batch size, one HJB sweep (:func:`~mfgwork.numerics.fdm.triton_sweeps.hjb_sweep`
as the solver calls it, Newton tolerance 64 ε) and one FP sweep (transported by the thread
layout's U, for both layouts) in the ``"thread"`` layout (a problem per thread, serial Thomas
rows) and the ``"program"`` layout (a program per problem, lanes over x, parallel cyclic
reduction), the latter for each ``--lanes-per-warp``: the median time of ``--repeat`` calls
after a warm-up call (which compiles), the Newton steps per level, the largest relative error
of U and μ against the thread layout and, for the first, middle and last member, against the
compiled NumPy float64 loops.

Roofline column: the bytes a sweep must move over its time, against the card's copy bandwidth
measured in the same run (bytes read + written by cloning a 1 GiB tensor, 64 MiB on CPU). The
traffic model counts each array once: HJB reads F (nt levels) and U_T, writes U (nt + 1
levels); FP reads U (nt levels) and μ0, writes μ (nt + 1 levels); per problem,
(2 nt + 2) nx items either way. Newton iterations re-read nothing from memory in the
cooperative layout (a level's state stays in registers).

Prints a table and writes JSON (``--out``). On CPU (``--device cpu``) the kernels run under
Triton's interpreter (TRITON_INTERPRET=1 is set): a check of the script at tiny sizes, not a
timing.

    python benchmarks/kernel_picard.py --device cuda --lanes-per-warp 64,32,128
    python benchmarks/kernel_picard.py --device cpu --problems 2 --nx 17 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
from device_timing import copy_bandwidth, median_time

import mfgwork as mw
from mfgwork.numerics.fdm import kernels, numba_kernels, sweeps, triton_sweeps
from mfgwork.results import provenance


def modelled_bytes(B: int, nx: int, nt: int, itemsize: int) -> int:
    """Traffic of one sweep, each array once: (2 nt + 2) nx items per problem."""
    return B * (2 * nt + 2) * nx * itemsize


def inputs(B: int, nx: int, nt: int) -> dict:
    """Float64 NumPy inputs of B Santa Fe problems: ν (B,), F (nt, nx), μ0 (nx,), the grid."""
    base = mw.SantaFeBar()
    grid = base.grid(nx, nt)
    attendance = 0.5 + 0.3 * np.sin(2 * np.pi * grid.t[1:] / base.T)
    F = base.coupling(grid, mw.get_backend("numpy")).running_cost(attendance)
    mu0 = base.initial_density(grid, mw.get_backend("numpy")) * grid.weights
    nu = np.array([mw.SantaFeBar(sigma=s).nu for s in np.linspace(0.3, 1.2, B)])
    return {"grid": grid, "nu": nu, "F": np.asarray(F, dtype=np.float64), "mu0": mu0}


def reference(data: dict, b: int) -> tuple[np.ndarray, np.ndarray]:
    """U, μ of member b by the compiled NumPy float64 loops."""
    grid = data["grid"]
    inv_hw = 1.0 / (grid.h * grid.weights)
    U = np.zeros((grid.nt + 1, grid.nx))
    numba_kernels.hjb_sweep(U, data["F"], U, False, data["nu"][b], grid.h, grid.dt, inv_hw,
                            1.0 / grid.weights, 64 * np.finfo(float).eps, sweeps.MAX_NEWTON)
    mu = np.empty_like(U)
    mu[0] = data["mu0"]
    numba_kernels.fp_sweep(U, mu, data["nu"][b], grid.h, grid.dt, inv_hw)
    return U, mu


def _rel(a: object, ref: object) -> float:
    import torch

    a, ref = torch.as_tensor(a).double().cpu(), torch.as_tensor(ref).double().cpu()
    return float((a - ref).abs().max() / ref.abs().max())


def rows_for(data: dict, dtype: str, args: argparse.Namespace, bandwidth: float) -> list[dict]:
    """The rows of one (dtype, batch size): each layout's HJB and FP sweep."""
    import torch

    grid, B = data["grid"], len(data["nu"])
    on = {"dtype": getattr(torch, dtype), "device": args.device}
    F = torch.as_tensor(data["F"], **on)[None].expand(B, -1, -1).contiguous()
    U_T = torch.zeros((B, grid.nx), **on)
    mu0 = torch.as_tensor(data["mu0"], **on)[None].expand(B, -1).contiguous()
    nu = torch.as_tensor(data["nu"], **on)
    inv_hw = torch.as_tensor(1.0 / (grid.h * grid.weights), **on)
    inv_w = torch.as_tensor(1.0 / grid.weights, **on)
    tol = 64 * float(torch.finfo(on["dtype"]).eps)

    def hjb(layout: str) -> tuple:
        return triton_sweeps.hjb_sweep(U_T, F, None, nu, grid.h, grid.dt, inv_hw, inv_w, tol,
                                       sweeps.MAX_NEWTON, layout=layout)

    def fp(U: object, layout: str) -> object:
        return triton_sweeps.fp_sweep(U, mu0, nu, grid.h, grid.dt, inv_hw, layout=layout)

    members = sorted({0, B // 2, B - 1})
    refs = {b: reference(data, b) for b in members}
    variants = [("thread", None)] + [("program", lanes) for lanes in args.lanes_per_warp]
    rows, base, default_lanes = [], {}, triton_sweeps.LANES_PER_WARP
    U_thread = hjb("thread")[0]
    for layout, lanes in variants:
        triton_sweeps.LANES_PER_WARP = default_lanes if lanes is None else lanes
        warps = (triton_sweeps.NUM_WARPS if lanes is None
                 else triton_sweeps._program(B, grid.nx, layout)["num_warps"])
        U, status = hjb(layout)
        mu = fp(U_thread, layout)
        times = {"hjb": median_time(lambda layout=layout: hjb(layout), args.device, args.repeat),
                 "fp": median_time(lambda layout=layout: fp(U_thread, layout), args.device,
                             args.repeat)}
        bad, iterations = status.cpu().numpy()
        if layout == "thread":
            base = {"hjb": times["hjb"], "fp": times["fp"], "U": U, "mu": mu,
                    "iterations": iterations}
        errors = {"hjb": (_rel(U, base["U"]),
                          max(_rel(U[b], refs[b][0]) for b in members)),
                  "fp": (_rel(mu, base["mu"]),
                         max(_rel(mu[b], refs[b][1]) for b in members))}
        moved = modelled_bytes(B, grid.nx, grid.nt, U.element_size())
        newton = {"newton_per_level": float(iterations.sum()) / (B * grid.nt),
                  "newton_counts_equal": bool((iterations == base["iterations"]).all()),
                  "unconverged": int((bad >= 0).sum())}
        for sweep in ("hjb", "fp"):
            rows.append({"sweep": sweep, "layout": layout, "warps": warps, "dtype": dtype,
                         "problems": B, "nx": grid.nx, "nt": grid.nt,
                         "seconds": times[sweep], "x_thread": base[sweep] / times[sweep],
                         **(newton if sweep == "hjb" else {}),
                         "rel_error_vs_thread": errors[sweep][0],
                         "rel_error_vs_numpy_float64": errors[sweep][1],
                         "bytes": moved, "bytes_per_s": moved / times[sweep],
                         "roofline_fraction": moved / times[sweep] / bandwidth})
    triton_sweeps.LANES_PER_WARP = default_lanes
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"\n{'sweep':5} {'layout':8} {'warps':>5} {'dtype':8} {'B':>5} {'time':>11} "
          f"{'x thread':>8} {'Newton':>6} {'same':>5} {'err thread':>10} {'err f64':>8} "
          f"{'GB/s':>8} {'roofline':>8}")
    for r in rows:
        newton = (f"{r['newton_per_level']:6.2f} {'yes' if r['newton_counts_equal'] else 'NO':>5}"
                  if "newton_per_level" in r else f"{'':12}")
        print(f"{r['sweep']:5} {r['layout']:8} {r['warps']:5d} {r['dtype']:8} "
              f"{r['problems']:5d} {r['seconds'] * 1e3:9.3f}ms {r['x_thread']:8.2f} {newton} "
              f"{r['rel_error_vs_thread']:10.1e} {r['rel_error_vs_numpy_float64']:8.1e} "
              f"{r['bytes_per_s'] / 1e9:8.2f} {r['roofline_fraction']:8.4f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--problems", default="1,1024,4096")
    parser.add_argument("--nx", type=int, default=201)
    parser.add_argument("--nt", type=int, default=None, help="default: nx")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--lanes-per-warp", default=str(triton_sweeps.LANES_PER_WARP),
                        help="comma-separated: a program-layout row for each")
    parser.add_argument("--out", default="benchmarks/results/kernel_picard.json")
    args = parser.parse_args(argv)
    args.lanes_per_warp = [int(v) for v in args.lanes_per_warp.split(",")]
    args.nt = args.nt or args.nx
    if not kernels._triton_installed():
        print("Triton is not installed", file=sys.stderr)
        return 1
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"   # before the kernels are first imported
    import torch

    card = torch.cuda.get_device_name() if args.device == "cuda" else "cpu (interpreter)"
    bandwidth = copy_bandwidth(args.device)
    print(f"card: {card}; copy bandwidth {bandwidth / 1e9:.0f} GB/s; nx = {args.nx}, "
          f"nt = {args.nt}", flush=True)
    rows = []
    for B in (int(v) for v in args.problems.split(",")):
        data = inputs(B, args.nx, args.nt)
        for dtype in args.dtypes.split(","):
            rows += rows_for(data, dtype, args, bandwidth)
            print(rows[-1], file=sys.stderr, flush=True)
    print_table(rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"card": card, "copy_bandwidth": bandwidth, "args": vars(args),
                               "rows": rows, "provenance": provenance()}, indent=1,
                              default=str) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
