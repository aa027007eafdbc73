"""The float64 floor of a coarse-to-fine solve's certificate, named before its fine iteration.

Where the best response is steep (little noise over a long horizon), the certified residual of
a float64 solve stalls near :func:`~mfgwork.numerics.batch_newton.certificate_floor`
``= FLOOR_FACTOR · L² ε``, L = ‖Φ'‖ at the equilibrium (the module docstring of
:mod:`mfgwork.numerics.batch_newton`). L is a property of the continuous best response, so the
coarse stage measures it at its equilibrium, by a few power iterations at its end
(:attr:`~mfgwork.numerics.batch_newton.BatchNewton.measures_lipschitz`). Measured over 48
Santa Fe solves at 201 × 201 (T 10 to 80, σ 0.05 to 0.3, threshold 0.45 to 0.6), L at the
fine equilibrium is 0.83 to 1.5 times L at the 51 × 51 one, 0.93 to 1.32 where the floor
exceeds 10⁻¹⁰, and 0.94 to 1.21 at T ≥ 40: the prediction takes L = :data:`COARSE_MARGIN`
times the coarse one.

Before the fine iteration, a UserWarning names each floor so predicted that lies above
``tol`` (as for the float32 floor, :func:`mfgwork.fdm1d.reachable_tol`;
``res.extra["reachable_tol"]``). The iteration still aims at ``tol`` (rounding lets 6 of the
7 such solves of those 48 reach it, 2 of 12 at T 120 and 160 with σ 0.03 and 0.05); a member
that stops above ``tol`` but within its floor is converged there, with ``res.params["tol"]``
its floor; once certified within it, its line search gives up after
:data:`~mfgwork.numerics.batch_newton.FLOOR_HALVINGS` refused trials instead of 12 (T 80,
σ 0.05, threshold 0.6: 29 → 19 iterations, the same residual). One that stops above both
is told apart after the iteration, at its own L
(:meth:`~mfgwork.numerics.batch_newton.BatchNewton._floors`). Grids too coarse for a coarse
stage (nx or nt below 102) and float32 solves name no floor before iterating.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .core.backend import Backend
from .core.errors import warn
from .numerics.batch_newton import FLOOR_FACTOR, BatchNewton, certificate_floor
from .warm_start import Start

#: L at the fine equilibrium over L at the coarse one, at most (measured 1.32 where the floor
#: exceeds 10⁻¹⁰, the module docstring)
COARSE_MARGIN = 1.4


def measure_at_end(newton: Any, be: Backend) -> None:
    """A coarse stage's ``newton``, where it is float64 Newton on a coupling state, set to
    measure L of every problem at its end (into the stage's Starts)."""
    if isinstance(newton, BatchNewton) and newton.system_dtype == "float64" and be.eps < 1e-10:
        newton.measures_lipschitz = True


def name_floors(newton: BatchNewton, starts: Sequence[Start], tol: float) -> None:
    """Where ``newton`` starts from coarse equilibria ``starts`` that measured L
    (:class:`~mfgwork.warm_start.Start`, :func:`measure_at_end`): the certificate floor of
    each problem predicted there (:func:`~mfgwork.numerics.batch_newton.certificate_floor`
    of :data:`COARSE_MARGIN` times that L), where it lies above ``tol`` said in one
    UserWarning, recorded in ``newton.reachable`` (``"predicted"``: the grid it was predicted
    on) and accepted as that problem's tol should its residual stop above ``tol``
    (``newton.floor_tol``)."""
    measured = [s.lipschitz for s in starts]
    if not newton.floors or any(v is None for v in measured):
        return
    L = COARSE_MARGIN * np.array(measured, dtype=np.float64)
    floors = certificate_floor(L, newton.backend.eps)
    above = floors > tol
    if not above.any():
        return
    nt, nx = np.shape(starts[0].M)
    for b in np.flatnonzero(above):
        newton.reachable[int(b)] = {"tol": float(floors[b]), "lipschitz": float(L[b]),
                                    "predicted": f"{nx} x {nt - 1}", "reached": None}
    newton.floor_tol = np.where(above, floors, tol)
    worst = int(np.argmax(floors))
    warn(f"tol={tol:g} may be below what float64 resolves for {int(above.sum())} of {len(L)} "
         f"problems: the best response amplifies a change of the coupling state up to "
         f"L = {L[worst]:.1e}-fold (little noise over a long horizon; {COARSE_MARGIN:g} × L "
         f"at the {nx} × {nt - 1} start), so the certified residual can stall near "
         f"{FLOOR_FACTOR:g}·L²·ε = {floors[worst]:.1e}; iterating to tol={tol:g}, and "
         "accepting its floor for a problem whose residual stops above tol "
         "(res.extra['reachable_tol'])", UserWarning)
