"""Launch parameters of the fused Triton particle step (CUDA): time per step and deposit.

    python benchmarks/fused_tuning.py [--n 1e6] [--nx 201] [--dtype float32] [--out FILE]

For each (particles per program, warps per program, private deposit copies) the fused
step + deposit kernel is timed alone (median of CUDA-event timings by
``triton.testing.do_bench``, on random positions), and the first row, the library's
defaults, is the baseline of the ``x_default`` ratios. Every variant's node masses are
compared with the default's (they differ only by the rounding of the CIC weights to 2^-k,
``bits`` = k, which depends on the copies), so a fast wrong variant shows.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import mfgwork as mw
from mfgwork.apps.doctor import versions
from mfgwork.numerics.particles import triton_kernels as tk
from mfgwork.numerics.particles.solver import default_copies


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--nx", type=int, default=201)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", default="fused_tuning.json")
    args = ap.parse_args(argv)
    import torch
    from triton.testing import do_bench

    n, be = int(args.n), mw.get_backend("torch", "cuda", args.dtype)
    length, dev, dtype = 10.0, be.native_device, be.native_dtype
    gen = torch.Generator(device=dev).manual_seed(0)
    y0 = torch.rand(n, generator=gen, device=dev, dtype=dtype) * length
    b = torch.sin(torch.linspace(0, 6, args.nx, device=dev, dtype=dtype))
    b0, db = b[:-1].contiguous(), (b[1:] - b[:-1]).contiguous()
    default = (tk.BLOCK, tk.NUM_WARPS, default_copies(True, args.nx, args.nx))
    variants = [default] + [v for v in itertools.product([256, 512, 1024], [2, 4, 8],
                                                          [1, 16, 64, 128, 256, 512, 1024])
                            if v != default]
    rows, ref = [], None
    print(f"{'block':>6} {'warps':>5} {'copies':>6} {'us':>8} {'x_default':>9} {'diff':>9} "
          f"{'bits':>4}")
    for block, warps, copies in variants:
        k = tk.FusedKernels(args.nx, length, n, 0.01, 0.1, y0, copies=copies, block=block,
                            num_warps=warps)
        out = k.mass_buffer(1)[0]
        y = y0.clone()
        k.step_deposit(y, b0, db, out, 0)
        us = 1e3 * do_bench(lambda k=k, y=y, out=out: k.step_deposit(y, b0, db, out, 0),
                            return_mode="median")
        y = y0.clone()
        out.zero_()
        k.step_deposit(y, b0, db, out, 0)
        masses = k.node_masses(out[None]).double() / 2.0**k.k  # in particles
        ref = masses if ref is None else ref
        diff = float((masses - ref).abs().max() / ref.abs().max())
        base = rows[0]["us"] if rows else us
        rows.append({"block": block, "warps": warps, "copies": copies, "us": us,
                     "x_default": base / us, "masses_diff": diff, "weight_bits": k.k})
        print(f"{block:6d} {warps:5d} {copies:6d} {us:8.1f} {base / us:9.2f} {diff:9.1e} "
              f"{k.k:4d}", flush=True)
    Path(args.out).write_text(json.dumps({"benchmark": "fused_tuning", "args": vars(args),
                                          "device": mw.device_info("cuda"),
                                          "versions": versions(), "rows": rows}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
