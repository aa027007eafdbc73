"""The tangent linear sweeps on a device: fused Triton kernels against the generic torch path.

Inputs: best responses (U, μ) of ``--batch`` Santa Fe problems (σ spread over 0.3–1.2) to
random payoff paths at ``--n``², computed on the device by the fused Picard sweeps. For each
dtype: D (B, nt, nt) by :func:`~mfgwork.numerics.fdm.triton_tangent.tangent_jacobian_triton`
and by :func:`~mfgwork.numerics.fdm.tangent_torch.tangent_jacobian_torch`, both in the chunks
that Newton's method uses (a quarter of the free memory); the relative error of a few members
against the compiled NumPy float64 tangent (:mod:`mfgwork.numerics.fdm.tangent`); median
times (CUDA events); and a roofline column: the modelled bytes of the fused kernels
(:func:`modelled_bytes`) over the time, against the card's measured device-to-device copy
bandwidth (bytes read + written). ``--layouts``: ``thread`` (a thread per direction, Thomas)
and/or ``program`` (a program per problem and block of directions, chunks of x across the
lanes, parallel cyclic reduction), side by side with the same columns. ``--programs``,
``--shapes``: the thread layout's sweep programs per multiprocessor and (directions x warps)
per program to compare (the first of each: the default's row); ``--dirs``: the program
layout's directions per program, each ``D`` or ``DxW`` (W warps; default one per 8
directions). A phases row per layout times its two parts apart on one chunk.

``--end-to-end``: after the kernel rows (which compile the kernels), the easy box
(``--easy``² thresholds 0.3–0.8 × σ 0.4–1.0 at ``--n``², ``mw.solve_batch``) with each
tangent path (each of ``--layouts`` as the default layout; torch unless ``--skip-torch``):
total time, time in the Jacobians and time building the Results.

    python benchmarks/kernel_tangent.py --device cuda --end-to-end
    python benchmarks/kernel_tangent.py --device cuda --layouts thread,program \
        --programs 16 --shapes 32x1 --dirs 4,8,16x2,16 --skip-torch
    TRITON_INTERPRET=1 python benchmarks/kernel_tangent.py --device cpu --batch 2 --n 9 \
        --repeat 1 --skip-torch
"""

from __future__ import annotations

import argparse
import functools
import importlib
import itertools
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from device_timing import copy_bandwidth, median_time, sync

import mfgwork as mw
from mfgwork.numerics import batch_newton
from mfgwork.numerics.fdm import kernels, tangent_torch, triton_tangent
from mfgwork.numerics.fdm.sweeps import FiniteDifferences
from mfgwork.numerics.potential import observed_path_jacobian


def modelled_bytes(B: int, nx: int, nt: int, itemsize: int,
                   directions: int = triton_tangent.DIRECTIONS, layout: str = "thread") -> int:
    """Memory traffic of the fused kernels with their scratch in L2 and a problem's bands read
    from memory once: δu written to the history by the backward sweep and read by the
    forward sweep (the active directions of each level, block granularity; the program
    layout stores whole direction blocks of P·2^LOG_C rows) and D written; then the thread
    layout's bands (4 planes) and factors (8 planes) written and read once, or the program
    layout's U and μ read and its 7 chunk-major planes written and read once."""
    if layout == "thread":
        rows, blocks, planes = nx, [min(nt, k + directions) - k for k in range(0, nt,
                                                                                directions)], 8
    else:
        P, log_c = triton_tangent.chunking(nx)
        rows, blocks, planes = P << log_c, [directions] * (-(-nt // directions)), 7
    items = 0
    for n in range(nt):
        items += 2 * rows * sum(width for k, width in zip(range(0, nt, directions), blocks,
                                                          strict=True)
                                if min(nt, k + directions) - 1 >= n)
    items += (8 * nx * nt if layout == "thread" else 2 * nx * (nt + 1)) \
        + 2 * planes * rows * nt + nt * nt
    return B * items * itemsize


def fused_variants(args: argparse.Namespace, nx: int, nt: int, sms: int) -> dict:
    """name -> (D of a chunk, array elements per member, directions, layout) of each fused
    variant that ``args`` asks for."""
    variants = {}
    layouts = args.layouts.split(",")
    if "thread" in layouts:
        programs = [int(p) for p in args.programs.split(",")]
        shapes = [tuple(map(int, v.split("x"))) for v in args.shapes.split(",")]
        for p, (d, w) in ([(p, shapes[0]) for p in programs]
                          + [(programs[0], shape) for shape in shapes[1:]]):
            variants[f"thread, {p}/SM, {d} directions x {w} warps"] = (
                functools.partial(triton_tangent.tangent_jacobian_triton, programs=p * sms,
                                  directions=d, warps=w, layout="thread"),
                triton_tangent.workspace_items(nx, nt, d, "thread"), d, "thread")
    if "program" in layouts:
        P, log_c = triton_tangent.chunking(nx)
        for v in args.dirs.split(","):
            d, w = (int(v), max(1, int(v) // 8)) if "x" not in v else map(int, v.split("x"))
            variants[f"program, {1 << log_c} chunks of {P}, {d} directions x {w} warps"] = (
                functools.partial(triton_tangent.tangent_jacobian_triton, directions=d,
                                  warps=w, layout="program"),
                triton_tangent.workspace_items(nx, nt, d, "program"), d, "program")
    return variants


def inputs(B: int, n: int, dtype: str, device: str) -> tuple:
    """Best responses U, cell masses μ (device tensors), χ, ν and the grid."""
    import torch

    problems = [mw.SantaFeBar(sigma=s) for s in np.linspace(0.3, 1.2, B)]
    grid = problems[0].grid(n, n)
    be = mw.get_backend("torch", device, dtype)
    nu = np.array([p.nu for p in problems])
    chi = grid.cell_fraction_above(0.0)
    rng = np.random.default_rng(5)
    y = rng.uniform(-4.0, 8.0, (B, grid.nt))
    fd = FiniteDifferences(grid, nu[:, None], be)
    U = fd.solve_hjb(be.asarray(np.zeros((B, grid.nx))), be.asarray(-y[:, :, None] * chi))
    m0 = problems[0].initial_density(grid, mw.get_backend("numpy"))
    M = fd.solve_fp(U, be.asarray(np.broadcast_to(m0, (B, grid.nx)).copy()))
    on = {"dtype": getattr(torch, dtype), "device": device}
    mu = M * torch.as_tensor(grid.weights, **on)
    return U, mu, torch.as_tensor(chi, **on), torch.as_tensor(nu, **on), grid


def chunked(jacobian: object, U: object, mu: object, chi: object, nu: object, grid: object,
            per_member: int, share: float = 0.25) -> object:
    """D of the whole batch in chunks of ``share`` of the free memory (Newton's method: a
    quarter)."""
    import torch

    budget = 4 * share * batch_newton._quarter_of_free_memory(
        mw.get_backend("torch", U.device.type))
    chunk = max(1, int(budget // (per_member * U.element_size())))
    inv_hw = torch.as_tensor(1.0 / (grid.h * grid.weights), dtype=U.dtype, device=U.device)
    return torch.cat([jacobian(U[i:i + chunk], mu[i:i + chunk], chi, nu[i:i + chunk],
                               grid.h, grid.dt, inv_hw) for i in range(0, U.shape[0], chunk)])


def kernel_rows(args: argparse.Namespace, bandwidth: float) -> list[dict]:
    import torch

    rows = []
    for dtype in args.dtypes.split(","):
        U, mu, chi, nu, grid = inputs(args.batch, args.n, dtype, args.device)
        B, nx, nt = U.shape[0], grid.nx, grid.nt
        sms = (torch.cuda.get_device_properties(U.device).multi_processor_count
               if U.is_cuda else 1)
        sizes = fused_variants(args, nx, nt, sms)
        if not args.skip_torch:
            sizes["torch (PCR)"] = (tangent_torch.tangent_jacobian_torch,
                                    nx * nt * (nt + 40), None, None)
        members = sorted({0, B // 3, (2 * B) // 3, B - 1})
        refs = {b: observed_path_jacobian(U[b].double().cpu().numpy(),
                                          mu[b].double().cpu().numpy(),
                                          chi.double().cpu().numpy(), float(nu[b]), grid)
                for b in members}
        for name, (jacobian, per_member, directions, layout) in sizes.items():
            def fn(jacobian=jacobian, per_member=per_member, U=U, mu=mu, chi=chi, nu=nu,
                   grid=grid):
                return chunked(jacobian, U, mu, chi, nu, grid, per_member, args.share)

            D = fn().double().cpu().numpy()
            err = max(float(np.max(np.abs(D[b] - ref)) / np.max(np.abs(ref)))
                      for b, ref in refs.items())
            seconds = median_time(fn, args.device, args.repeat)
            row = {"case": "tangent", "variant": name, "dtype": dtype, "batch": B, "n": args.n,
                   "seconds": seconds, "max_rel_error_vs_float64": err,
                   "finite": bool(np.isfinite(D).all())}
            if layout is not None:
                moved = modelled_bytes(B, nx, nt, U.element_size(), directions, layout)
                row["modelled_bytes"] = moved
                row["bytes_per_s"] = moved / seconds
                row["roofline_fraction"] = moved / seconds / bandwidth
            rows.append(row)
            print(row, flush=True)
        for layout in args.layouts.split(","):
            rows.append(phase_row(U, mu, chi, nu, grid, dtype, args, layout))
            print(rows[-1], flush=True)
        del U, mu
    return rows


def phase_row(U: object, mu: object, chi: object, nu: object, grid: object, dtype: str,
              args: argparse.Namespace, layout: str) -> dict:
    """The two parts of a fused path (default directions) timed apart, on one chunk of the
    batch. Thread layout: bands and factors (torch ops and the factor kernel), then the sweep
    kernel; program layout: the planes launch, then the sweep launch."""
    import torch

    per_member = triton_tangent.workspace_items(grid.nx, grid.nt, layout=layout) \
        * U.element_size()
    budget = 4 * args.share * batch_newton._quarter_of_free_memory(
        mw.get_backend("torch", U.device.type))
    chunk = max(1, min(U.shape[0], int(budget // per_member)))
    Uc, muc, nuc = U[:chunk], mu[:chunk], nu[:chunk]
    inv_hw = torch.as_tensor(1.0 / (grid.h * grid.weights), dtype=U.dtype, device=U.device)
    if layout == "thread":
        def prepare():
            return triton_tangent.factorisations(Uc, muc, nuc, grid.h, grid.dt, inv_hw)

        def sweep(bands, factors):
            return triton_tangent.sweeps(bands, factors, chi, grid.dt, chunk)
    else:
        P, log_c = triton_tangent.chunking(grid.nx)

        def prepare():
            return (triton_tangent.chunk_planes(Uc, muc, nuc, grid.h, grid.dt, inv_hw, P,
                                                log_c), triton_tangent.chunk_rows(chi, P, log_c))

        def sweep(planes, chi_rows):
            return triton_tangent.program_kernel(planes, chi_rows, grid.dt, chunk, P, log_c)
    factor_s = median_time(prepare, args.device, args.repeat)
    prepared = prepare()
    sweep_s = median_time(lambda: sweep(*prepared), args.device, args.repeat)
    return {"case": "phases", "variant": f"{layout}, one chunk of {chunk}", "dtype": dtype,
            "batch": chunk, "n": args.n, "seconds": factor_s + sweep_s,
            "factor_s": factor_s, "sweep_s": sweep_s}


def end_to_end_rows(args: argparse.Namespace) -> list[dict]:
    """The easy box with each tangent path: total time, time in the Jacobians and time
    building the Results."""
    problems = [mw.SantaFeBar(threshold=a, sigma=s)
                for a in np.linspace(0.3, 0.8, args.easy) for s in np.linspace(0.4, 1.0,
                                                                                args.easy)]
    rows = []
    original = batch_newton.BatchNewton._jacobians
    front = importlib.import_module("mfgwork.fdm1d")
    build = front._results
    spent = [0.0]
    building = [0.0]

    def timed_results(*a, **k):
        t0 = time.perf_counter()
        out = build(*a, **k)
        building[0] += time.perf_counter() - t0
        return out

    def timed(self, *a, **k):
        sync(args.device)
        t0 = time.perf_counter()
        out = original(self, *a, **k)
        sync(args.device)
        spent[0] += time.perf_counter() - t0
        return out

    default_layout = triton_tangent.LAYOUT
    batch_newton.BatchNewton._jacobians = timed
    front._results = timed_results
    try:
        paths = [("fused Triton tangent sweeps", layout) for layout in args.layouts.split(",")]
        if not args.skip_torch:
            paths.append(("torch tangent sweeps (parallel cyclic reduction)", None))
        for dtype, (name, layout) in itertools.product(args.dtypes.split(","), paths):
            batch_newton.BatchNewton.jacobian_kernels = property(lambda self, n=name: n)
            triton_tangent.LAYOUT = layout or default_layout
            spent[0] = building[0] = 0.0
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = mw.solve_batch(problems, nx=args.n, nt=args.n, backend="torch",
                                     device=args.device, dtype=dtype,
                                     tol=1e-6 if dtype == "float64" else 3e-4, progress=False)
            total = time.perf_counter() - t0
            row = {"case": "easy box", "variant": name + (f", {layout}" if layout else ""),
                   "dtype": dtype, "batch": len(problems), "n": args.n, "seconds": total,
                   "jacobian_s": spent[0], "results_s": building[0],
                   "converged": sum(r.converged for r in out),
                   "median_iterations": float(np.median([r.iterations for r in out]))}
            rows.append(row)
            print(row, flush=True)
    finally:
        batch_newton.BatchNewton._jacobians = original
        front._results = build
        triton_tangent.LAYOUT = default_layout
        del batch_newton.BatchNewton.jacobian_kernels
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--n", type=int, default=201)
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--layouts", default="thread,program")
    parser.add_argument("--programs", default="16,8,32")
    parser.add_argument("--shapes", default="32x1,64x1,128x1,64x2")
    parser.add_argument("--dirs", default="8,4,16",
                        help="program layout: directions per program, each D or DxW")
    parser.add_argument("--share", type=float, default=0.25,
                        help="share of the free device memory per chunk of the batch")
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--end-to-end", action="store_true")
    parser.add_argument("--easy", type=int, default=32)
    parser.add_argument("--out", default="benchmarks/results/kernel_tangent.json")
    args = parser.parse_args(argv)
    if not kernels._triton_installed():
        print("Triton is not installed", file=sys.stderr)
        return 1
    import torch

    card = torch.cuda.get_device_name() if args.device == "cuda" else "cpu (interpreter)"
    bandwidth = copy_bandwidth(args.device)
    print(f"card: {card}; copy bandwidth: {bandwidth / 1e9:.0f} GB/s", flush=True)
    rows = kernel_rows(args, bandwidth)
    if args.end_to_end:
        rows += end_to_end_rows(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"card": card, "copy_bandwidth": bandwidth, "rows": rows},
                              indent=1))
    print(f"\n{'case':9} {'variant':58} {'dtype':8} {'B':>5} {'time':>10} {'jacobians':>10} "
          f"{'err':>8} {'roofline':>8}")
    for r in rows:
        print(f"{r['case']:9} {r['variant']:58} {r['dtype']:8} {r['batch']:5d} "
              f"{r['seconds'] * 1e3:8.1f}ms "
              f"{r['jacobian_s'] * 1e3 if 'jacobian_s' in r else float('nan'):8.1f}ms "
              f"{r.get('max_rel_error_vs_float64', float('nan')):8.1e} "
              f"{r.get('roofline_fraction', float('nan')):8.2f}"
              + (f"  bands and factors/planes {r['factor_s'] * 1e3:.1f} ms, sweeps "
                 f"{r['sweep_s'] * 1e3:.1f} ms" if "factor_s" in r else "")
              + (f"  converged {r['converged']}, median it {r['median_iterations']}, "
                 f"Results built in {r['results_s'] * 1e3:.0f} ms"
                 if "converged" in r else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
