"""The 2-D equilibrium: the scheme, the coupling and the certified fixed point, put together.

:func:`build` makes the :class:`Setup` of one problem or of a batch (problems of one grid
size: their own obstacles, exits, ν and coupling parameters; one Hamiltonian). One
evaluation of the fixed-point map is one best response: running cost of the coupling state z
→ HJB sweep → FP sweep → z' = state(M) (:func:`mfgwork.numerics.iteration.fixed_point` mixes
and certifies: converged means ‖z' − z‖ ≤ tol ‖z'‖ for the returned densities).
:func:`best_response_residual` recomputes that residual of a given (U, M).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.backend import Backend
from ...core.grid2d import Grid2D
from ...problems.base import batch_coupling
from ..iteration import FixedPointResult, IterationScheme, fixed_point, relative_residual
from .stencil import Stencil
from .sweeps import Scheme2D


class _Feeding:
    """The problem's coupling, which also hands the density path to the scheme before each
    sweep when H depends on m."""

    def __init__(self, coupling: Any, scheme: Scheme2D, feeds: bool) -> None:
        self.coupling, self.scheme, self.feeds = coupling, scheme, feeds

    def state(self, M: Any) -> Any:
        return self.coupling.state(M)

    def running_cost(self, z: Any) -> Any:
        if self.feeds:
            self.scheme.density = z
        return self.coupling.running_cost(z)

    def project(self, z: Any) -> Any:
        return self.coupling.project(z)


@dataclass
class Setup:
    """Everything one (batched) solve needs, on the backend."""

    problems: list[Any]
    grids: list[Grid2D]
    backend: Backend
    scheme: Scheme2D
    coupling: _Feeding
    m0: Any
    U_T: Any
    batched: bool


def build(problems: Any, nx: int, ny: int, nt: int, backend: Backend, solver: str) -> Setup:
    """The :class:`Setup` of one problem, or of a list (a batch along a leading axis)."""
    batched = isinstance(problems, list | tuple)
    items = list(problems) if batched else [problems]
    grids = [p.grid(nx, ny, nt) for p in items]
    H = items[0].hamiltonian
    nu = [p.nu for p in items] if batched else items[0].nu
    stencil = Stencil(grids if batched else grids[0], nu, H, backend)
    scheme = Scheme2D(stencil, solver=solver)
    couplings = [p.coupling(g, backend) for p, g in zip(items, grids, strict=True)]
    coupling = batch_coupling(couplings, backend) if batched else couplings[0]
    feeds = bool(H.depends_on_m)
    xp = backend.xp
    m0 = [p.initial_density(g, backend) for p, g in zip(items, grids, strict=True)]
    U_T = [p.terminal_cost(g, backend) for p, g in zip(items, grids, strict=True)]
    m0, U_T = (xp.stack(a) if batched else a[0] for a in (m0, U_T))
    return Setup(items, grids, backend, scheme, _Feeding(coupling, scheme, feeds), m0, U_T,
                 batched)


def equilibrium(setup: Setup, iteration: IterationScheme, tol: float, max_iter: int,
                progress: Any = None) -> FixedPointResult:
    """The certified fixed point (see :func:`mfgwork.numerics.iteration.fixed_point`), from
    agents who do not move (m(t) = m0)."""
    xp, nt = setup.backend.xp, setup.grids[0].nt
    M_init = xp.stack([setup.m0] * (nt + 1), axis=-3)
    # in NumPy float32 the iteration's floor of 1e-300 under a ratio of residuals rounds to 0,
    # and an exactly certified iterate (residual 0) divides by it: a harmless inf
    with np.errstate(divide="ignore"):
        return fixed_point(setup.coupling, setup.scheme.solve_hjb, setup.scheme.solve_fp,
                           m0=setup.m0, U_T=setup.U_T, nt=nt, backend=setup.backend,
                           scheme=iteration, tol=tol, max_iter=max_iter, progress=progress,
                           batched=setup.batched, M_init=M_init)


def best_response(setup: Setup, M: Any, guess: Any = None) -> tuple[Any, Any, Any]:
    """(U, M', z) for the coupling state z = state(M): one HJB and one FP sweep."""
    z = setup.coupling.state(M)
    F = setup.coupling.running_cost(z)
    U = setup.scheme.solve_hjb(setup.U_T, F, guess)
    return U, setup.scheme.solve_fp(U, setup.m0), z


def best_response_residual(setup: Setup, M: Any, U: Any = None) -> Any:
    """‖state(M') − state(M)‖ / ‖state(M')‖ per problem, M' the best response's densities."""
    _, M_new, z = best_response(setup, M, U)
    return relative_residual(setup.coupling.state(M_new), z, setup.backend.xp, setup.batched)
