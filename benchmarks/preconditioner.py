"""BiCGStab iterations on the room's systems: the inverse diagonal against the two-term
Neumann series (the one-launch solves' preconditioner, :data:`.fused_krylov.NEUMANN`).

    python benchmarks/preconditioner.py [--nx 101] [--out benchmarks/results/preconditioner.json]

The systems are those of a real sweep on the CPU (NumPy, float64): for a room without
congestion and one with congestion 4 (doors 0.05 wide), the best response to agents who do
not move, the HJB step's Jacobian J and the FP step's Jᵀ at two time levels. Each is solved
from x = 0 for a right-hand side (a random one for J, Jᵀ·1 for Jᵀ) by SciPy's BiCGStab (not
the library's recurrence), right-preconditioned by M⁻¹ = D⁻¹ (Jacobi) or
M⁻¹ = D⁻¹ − D⁻¹ Ō D⁻¹ (:meth:`.stencil.Stencil.neumann`), to the relative tolerances 1e-3
(an inexact Newton update) and 1e-6. The table gives the iterations of each and their ratio.
An iteration of the fused solve with the series makes two more passes and two more
barriers than with the inverse diagonal (``benchmarks/krylov_layout.py``), so the series
pays where it saves more than about a third of the iterations.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse.linalg as sla

import mfgwork as mw
from mfgwork.apps.doctor import versions
from mfgwork.numerics.fdm2d.equilibrium import build

TOLERANCES = (1e-3, 1e-6)


def systems(nx: int) -> list[tuple[str, object, object, object]]:
    """(label, stencil, coefficients, transpose) of the rooms' J and Jᵀ."""
    be = mw.get_backend("numpy")
    out = []
    for congestion in (0.0, 4.0):
        room = mw.Room(congestion=congestion, door_widths=(0.05, 0.05))
        setup = build(room, nx, nx, nx - 1, be, "direct")
        nt = setup.grids[0].nt
        M = np.stack([setup.m0] * (nt + 1), axis=-3)
        U = setup.scheme.solve_hjb(setup.U_T, setup.coupling.running_cost(
            setup.coupling.state(M)))
        stencil = setup.scheme.stencil
        for level in (nt // 2, nt // 20):
            c = stencil.jacobian(U[level], None, exits=False)
            for transpose in (False, True):
                label = (f"congestion {congestion:g}, level {level}, "
                         f"{'FP Jᵀ' if transpose else 'HJB J'}")
                out.append((label, stencil, c, transpose))
    return out


def iterations(stencil, c, transpose: bool, precondition, b: np.ndarray,
               rtol: float) -> int:
    """SciPy BiCGStab's iterations to ``rtol`` from 0, preconditioned by ``precondition``."""
    shape, n = b.shape, b.size
    op = stencil.operator(c, transpose)
    A = sla.LinearOperator((n, n), matvec=lambda v: op(v.reshape(shape)).ravel())
    M = sla.LinearOperator((n, n), matvec=lambda v: precondition(v.reshape(shape)).ravel())
    count = [0]
    _, info = sla.bicgstab(A, b.ravel(), rtol=rtol, atol=0.0, M=M, maxiter=5000,
                           callback=lambda _: count.__setitem__(0, count[0] + 1))
    if info != 0:
        raise RuntimeError(f"BiCGStab did not reach rtol={rtol:g} (info={info})")
    return count[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nx", type=int, default=101)
    ap.add_argument("--out", default="benchmarks/results/preconditioner.json")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'system':36} {'rtol':>6} {'jacobi':>7} {'neumann':>8} {'ratio':>6}")
    for label, stencil, c, transpose in systems(args.nx):
        active = np.asarray(c.diag) != 1.0
        b = (stencil.operator(c, True)(active * 1.0) if transpose
             else rng.standard_normal(c.diag.shape) * active)
        for rtol in TOLERANCES:
            jacobi = iterations(stencil, c, transpose, lambda v, c=c: v / c.diag, b, rtol)
            neumann = iterations(stencil, c, transpose, stencil.neumann(c, transpose), b, rtol)
            rows.append({"system": label, "rtol": rtol, "jacobi": jacobi, "neumann": neumann,
                         "ratio": neumann / jacobi})
            print(f"{label:36} {rtol:6.0e} {jacobi:7d} {neumann:8d} {neumann / jacobi:6.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(["benchmarks/preconditioner.py",
                                                    *sys.argv[1:]]),
                               "nx": args.nx, "rows": rows, "versions": versions()}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
