"""The outflow of a 2-D solution split by door.

A 2-D result (:class:`~mfgwork.results2d.Result2D`) holds the total mass that leaves during
each step, ``outflow[n] = Δt Σ_k o_k μ_k^n`` (cell masses μ = V m, o_k ≥ 0 the coefficients of
node k of the scheme's Jacobian towards exit nodes; :mod:`mfgwork.numerics.fdm2d.stencil`).
Each coefficient points at one exit node, which belongs to one door, so the same sum taken
over the edges into one door's nodes is that door's outflow, and the doors' outflows add up
to the total to round-off. :func:`door_outflows` recomputes them from ``U`` and ``M`` with the
scheme's own coefficients (NumPy float64).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from ..core.backend import get_backend
from ..core.errors import ParameterError
from ..numerics.fdm2d.stencil import Stencil, shift
from ..problems.two_d import MFGProblem2D

#: (axis, step) of the four neighbours W, E, S, N, in the stencil's order.
NEIGHBOURS = ((-1, -1), (-1, 1), (-2, -1), (-2, 1))


def door_outflows(result: Any, problem: MFGProblem2D | None = None) -> np.ndarray:
    """The mass that leaves through each door during each step, (nt+1, number of doors)
    (row 0 is 0; columns in the order of the problem's ``exits``). ``problem``: the problem
    that was solved (default: the one the result keeps; a loaded result needs it). An exit
    node shared by two doors counts for the first."""
    problem = problem if problem is not None else getattr(result, "problem", None)
    if not isinstance(problem, MFGProblem2D):
        raise ParameterError(f"problem={problem!r:.80} is invalid: pass the MFGProblem2D that "
                             "was solved (a loaded result does not keep it)")
    nt, ny, nx = np.shape(result.M)[0] - 1, np.size(result.y), np.size(result.x)
    grid = problem.grid(nx, ny, nt)
    if not (np.array_equal(grid.exit, result.exit) and np.array_equal(grid.obstacle,
                                                                      result.obstacle)):
        raise ParameterError(f"problem={problem!r:.80} is invalid: its doors and obstacles on "
                             f"the {nx} x {ny} grid are not those of the result")
    U, M = (np.asarray(a, dtype=np.float64) for a in (result.U, result.M))
    stencil = Stencil(grid, problem.nu, problem.hamiltonian, get_backend("numpy"))
    active = grid.active.astype(np.float64)
    taken = np.zeros(grid.shape, dtype=bool)
    flows = np.zeros((nt + 1, len(grid.exits)))
    for d, door in enumerate(grid.exits):
        nodes = door.nodes(grid.x, grid.y) & grid.exit & ~taken
        taken |= nodes
        one = copy.copy(stencil)
        one.to_exit = tuple(active * shift(nodes.astype(np.float64), axis, step, np)
                            for axis, step in NEIGHBOURS)
        for n in range(nt):
            m = M[n + 1] if problem.hamiltonian.depends_on_m else None
            out = one.jacobian(U[n], m).out
            flows[n + 1, d] = grid.dt * float(np.sum(out * M[n + 1] * grid.volumes))
    return flows
