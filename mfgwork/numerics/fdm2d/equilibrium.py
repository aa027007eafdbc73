"""The 2-D equilibrium: the scheme, the coupling and the certified fixed point, put together.

:func:`build` makes the :class:`Setup` of one problem or of a batch (problems of one grid
size: their own obstacles, exits, ν and coupling parameters; one Hamiltonian). One
evaluation of the fixed-point map is one best response: running cost of the coupling state z
→ HJB sweep → FP sweep → z' = state(M) (:func:`mfgwork.numerics.iteration.fixed_point` mixes
and certifies: converged means ‖z' − z‖ ≤ tol ‖z'‖ for the returned densities). Where the
coupling state is a path of a few scalars (the attendance pair of the two bars), Newton–Krylov
on it comes first (:func:`uses_newton`, :mod:`mfgwork.numerics.coupling_newton`) with the
same certificate, and the fixed point continues where it stalls.
A batch narrows its evaluations to the problems still iterating once a quarter of those it
evaluates have settled (:class:`_Narrowing`, :data:`NARROW_FUSED`).
:func:`best_response_residual` recomputes that residual of a given (U, M).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.backend import Backend
from ...core.errors import ConvergenceWarning, warn
from ...core.grid2d import Grid2D
from ...problems.base import batch_coupling
from ..coupling_newton import CouplingNewtonKrylov, KrylovOutcome
from ..equilibrium import System, solve
from ..iteration import (
    FixedPointResult,
    History,
    IterationScheme,
    evaluator,
    fixed_point,
    relative_residual,
)
from .stencil import Stencil
from .sweeps import Scheme2D

#: Newton–Krylov on the coupling state (:func:`uses_newton`) where it has at most this many
#: values per time level.
NEWTON_SCALARS = 8
#: Whether a batch on the fused CUDA path narrows its evaluations to the problems still
#: iterating (:class:`_Narrowing`), as batches elsewhere do. Off: on an H100 the 64 rooms of
#: ``benchmarks/room.py`` took 14.6 s warm with it, 14.4–15.1 s without (other runs): an
#: iteration of the few rooms left is bound by the sequence of their solves, not by the
#: rooms beside them; and the first batch in a process took 36–43 s against 21–24 s (each
#: new batch size compiles and records its own graphs).
NARROW_FUSED = False


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
    #: what Newton–Krylov on the coupling state did (:func:`equilibrium`), or None
    newton: dict[str, Any] | None = None


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


def uses_newton(setup: Setup, iteration: IterationScheme) -> bool:
    """Whether :func:`equilibrium` starts with Newton–Krylov on the coupling state: a single
    float64 problem whose coupling state is a path of at most :data:`NEWTON_SCALARS` scalars
    (the attendance pair of the two bars; not a density path), with a scheme that asks for
    Newton (``iteration.newton_continuation``: the default Anderson; ``mw.Anderson(newton=
    False)`` iterates the fixed point alone)."""
    g = setup.grids[0]
    return (not setup.batched and setup.backend.dtype == "float64"
            and iteration.newton_continuation
            and setup.problems[0].coupling_size(g.nx, g.ny, g.nt) <= NEWTON_SCALARS * g.nt)


def equilibrium(setup: Setup, iteration: IterationScheme, tol: float, max_iter: int,
                progress: Any = None) -> FixedPointResult:
    """The certified fixed point from agents who do not move (m(t) = m0): Newton–Krylov on
    the coupling state (:mod:`mfgwork.numerics.coupling_newton`) where :func:`uses_newton`,
    continued by the fixed point (:func:`mfgwork.numerics.iteration.fixed_point`) from its
    lowest iterate with the remaining iterations when it stalls; otherwise the fixed point
    alone. ``setup.newton`` then tells the Newton steps, best responses and products."""
    xp, nt = setup.backend.xp, setup.grids[0].nt
    M_init = xp.stack([setup.m0] * (nt + 1), axis=-3)
    newton = None
    if uses_newton(setup, iteration):
        system = System(setup.coupling, setup.scheme.solve_hjb, setup.scheme.solve_fp,
                        setup.m0, setup.U_T, nt, setup.backend, M_init=M_init)
        newton = solve(CouplingNewtonKrylov(tol=tol), system, max_iter=max_iter,
                       progress=progress)
        steps = len(newton.history.residual)
        setup.newton = {"steps": steps, "reason": newton.reason,
                        "evaluations": newton.evaluations, "products": newton.products,
                        "residual": newton.residual}
        if newton.reason == "converged":
            return _newton_result(newton, History(), "converged")
        if steps >= max_iter:
            warn(f"Newton-Krylov on the coupling state did not reach tol={tol:g}: "
                 f"max_iter={max_iter} steps reached (final residual "
                 f"{newton.residual:.3g}); returning the best iterate found with "
                 "converged=False", ConvergenceWarning)
            return _newton_result(newton, History(), "max_iter")
    start, budget = {"M_init": M_init}, max_iter
    if newton is not None:  # the fixed point continues from Newton's lowest iterate
        z, U, M = newton.lowest
        start = {"z_init": setup.backend.asarray(z), "U_init": U, "M_init": M}
        budget = max_iter - len(newton.history.residual)
    # in NumPy float32 the iteration's floor of 1e-300 under a ratio of residuals rounds to 0,
    # and an exactly certified iterate (residual 0) divides by it: a harmless inf
    narrow = (_Narrowing(setup) if setup.batched
              and (NARROW_FUSED or not setup.scheme.fused_krylov) else None)
    try:
        with np.errstate(divide="ignore"):
            out = fixed_point(setup.coupling, setup.scheme.solve_hjb, setup.scheme.solve_fp,
                              m0=setup.m0, U_T=setup.U_T, nt=nt, backend=setup.backend,
                              scheme=iteration, tol=tol, max_iter=budget, progress=progress,
                              batched=setup.batched, accuracy=setup.scheme.resolve,
                              narrow=narrow, **start)
    finally:
        setup.scheme.resolve(None)
        if narrow is not None:
            narrow.count()
    if newton is None:
        return out
    if newton.residual < float(out.residual[0]):
        return _newton_result(newton, out.history, str(out.status[0]))
    out.iterations = out.iterations + len(newton.history.residual)
    out.history = _joined(newton, out.history)
    return out


class _Narrowing:
    """The evaluations of a batch's rows alone (:func:`fixed_point`'s ``narrow``): the setup of
    those problems, built as the batch's own was (each replaces the one before). :meth:`count`
    adds the solver counts of the last one to the batch's scheme, as each new setup does for
    the one it replaces."""

    COUNTS = ("newton_iterations", "krylov_iterations", "factorizations")

    def __init__(self, setup: Setup) -> None:
        self.setup: Setup = setup
        self.part: Scheme2D | None = None

    def __call__(self, rows: np.ndarray) -> tuple[Any, Any]:
        self.count()
        s, g = self.setup, self.setup.grids[0]
        part = build([s.problems[i] for i in rows], g.nx, g.ny, g.nt, s.backend,
                     s.scheme.solver)
        self.part = part.scheme
        return (evaluator(part.coupling, part.scheme.solve_hjb, part.scheme.solve_fp,
                           part.U_T, part.m0, s.backend), part.scheme.resolve)

    def count(self) -> None:
        if self.part is not None:
            for name in self.COUNTS:
                setattr(self.setup.scheme, name,
                        getattr(self.setup.scheme, name) + getattr(self.part, name))
        self.part = None


def _newton_result(newton: KrylovOutcome, after: History, status: str) -> FixedPointResult:
    """The fixed-point result of Newton's best certified iterate (the fixed point that ran
    ``after`` it, if any, found none better and ended with ``status``)."""
    return FixedPointResult(
        U=newton.U, M=newton.M, converged=np.array([newton.residual <= newton.tol]),
        residual=np.array([newton.residual]),
        iterations=np.array([len(newton.history.residual) + len(after.residual)]),
        history=_joined(newton, after), status=np.array([status]))


def _joined(newton: KrylovOutcome, after: History) -> History:
    """The history of Newton's steps, then that of the fixed point."""
    out = History()
    for name, values in (*newton.history.as_dict().items(), *after.as_dict().items()):
        getattr(out, name).extend(values)
    return out


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
