"""Newton–Krylov on a small coupling state (e.g. the attendance pair path of the two bars).

The equilibria are the zeros of R(z) = Φ(z) − z, Φ the best-response map of
:mod:`.iteration` (z ↦ running cost → HJB → FP → state(M)). Where z has a few hundred values
(the attendance paths (nt, 2) of :class:`~mfgwork.problems.two_bars.TwoBars`) but one best
response is a 2-D solve, Newton's method runs without the Jacobian (Jacobian-free
Newton–Krylov, Knoll & Keyes 2004): the step d solves (I − DΦ(z)) d = R(z) by GMRES, each
product a finite difference of Φ,

    DΦ(z) v ≈ (Φ(z + h v) − Φ(z)) / h,   h = 10⁻⁷ max(1, ‖z‖) / ‖v‖,

evaluated from the best response U(z) as the HJB sweep's guess (its Newton steps then stop
after one or two updates per level, the FP solves start from the last masses): such a product
costs a fraction of a best response. GMRES stops at the relative residual η of
Eisenstat & Walker (choice 2, γ = 0.1), or looser where that already brings R below the
certificate's trigger. A dense Jacobian by finite differences costs 2 nt such products per
step: measured with ``benchmarks/room.py --cases two-bars`` (101² × 100, two loaded CPU
cores), one dense Jacobian (200 products, 24 s) takes longer than the whole Newton–Krylov
solve (8 steps, 72 best responses, 21 s; the fixed point: 131, 42 s), so only the
matrix-free step is kept.

Globalisation: backtracking (halving from t = 1) until Armijo's rule holds for ½‖R‖²
(a descent direction for an accurate enough step); a step that finds no length above
:data:`MIN_STEP`, or ``stall`` steps without halving ‖R‖, end the iteration as "stalled" and the
caller continues with the fixed point. Certificates as in :func:`.iteration.fixed_point`: once
the relative residual r(z) = ‖R‖/‖Φ(z)‖ is below a trigger (``tol`` at first, lowered by the
amplification a refused certificate shows) one more best response, Φ(Φ(z)), gives the
residual of the densities M(z); the lowest certified M is returned, converged only when its
residual is ≤ ``tol``. A refused certificate whose point Φ(z) has the smaller ‖R‖ is taken
as a Picard step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.backend import Backend, to_numpy
from .potential import NewtonOutcome

ARMIJO = 1e-4  # sufficient decrease of ½‖R‖² per unit step
MIN_STEP = 2.0**-10  # backtracking gives up below this step length
FD_STEP = 1e-7  # relative finite-difference step of the products DΦ v
ETA_MAX, ETA_MIN, EW_GAMMA = 0.1, 1e-8, 0.1  # GMRES's relative tolerance and its forcing


@dataclass
class KrylovOutcome(NewtonOutcome):
    """:class:`~.potential.NewtonOutcome` (``residual``: the lowest certified one, or that of
    the lowest iterate, certified at the end where none was before; the ``records`` give the
    iterate residual r(z_k) of each step, as the fixed point's history does) with ``tol``,
    the lowest-residual iterate (z, U, M) where a fixed point continues, why the loop ended
    (``reason``: converged, stalled or max_iter), the best responses evaluated and the
    Jacobian products among them."""

    tol: float
    lowest: tuple[Any, Any, Any]
    reason: str
    evaluations: int
    products: int


@dataclass
class _Point:
    """A coupling state z (host), its best response (U, M, backend arrays) and Φ(z) (host)."""

    z: np.ndarray
    U: Any
    M: Any
    image: np.ndarray

    @property
    def R(self) -> np.ndarray:
        return self.image - self.z

    @property
    def residual(self) -> float:
        return _norm(self.R) / max(_norm(self.image), 1e-300)


class CouplingNewtonKrylov:
    """The iteration of the module docstring on the best response ``evaluate(z, guess) ->
    (F, U, M, state(M), stamps)`` of :func:`.iteration.evaluator` (one problem)."""

    def __init__(self, evaluate: Any, project: Any, backend: Backend, *, tol: float,
                 max_krylov: int = 40, stall: int = 5) -> None:
        self.evaluate, self.project, self.backend = evaluate, project, backend
        self.tol, self.max_krylov, self.stall = tol, max_krylov, stall
        self.evaluations = self.products = 0

    def respond(self, z: np.ndarray, guess: Any) -> _Point:
        """The best response to z (host), the HJB sweep seeded by ``guess``."""
        _, U, M, gz, _ = self.evaluate(self.backend.asarray(z), guess)
        self.evaluations += 1
        return _Point(z=z, U=U, M=M, image=np.asarray(to_numpy(gz), dtype=np.float64))

    def product(self, point: _Point, v: np.ndarray) -> np.ndarray:
        """(I − DΦ(z)) v at ``point``, DΦ v by the finite difference of the module docstring
        (one best response)."""
        h = FD_STEP * max(1.0, _norm(point.z)) / max(_norm(v), 1e-300)
        moved = self.respond(point.z + h * v, point.U)
        self.products += 1
        return v - (moved.image - point.image) / h

    def direction(self, point: _Point, eta: float) -> np.ndarray:
        """d with ‖(I − DΦ) d − R‖ ≤ η ‖R‖ (or GMRES's last iterate after ``max_krylov``
        products)."""
        import scipy.sparse.linalg as sla

        n, shape = point.z.size, point.z.shape
        op = sla.LinearOperator(
            (n, n), matvec=lambda v: self.product(point, v.reshape(shape)).reshape(-1),
            dtype=np.float64)
        d, _ = sla.gmres(op, point.R.reshape(-1), rtol=eta, atol=0.0,
                         restart=min(n, self.max_krylov), maxiter=1)
        return d.reshape(shape)

    def line_search(self, point: _Point, d: np.ndarray) -> _Point | None:
        """The first of t = 1, ½, ¼, … ≥ :data:`MIN_STEP` with ½‖R(z + t d)‖² ≤ (1 − 2·10⁻⁴ t)
        ½‖R(z)‖² (z + t d projected onto admissible states), or None."""
        norm2, t = _norm(point.R) ** 2, 1.0
        while t >= MIN_STEP:
            z = np.asarray(to_numpy(self.project(self.backend.asarray(point.z + t * d))))
            trial = self.respond(z, point.U)
            if _norm(trial.R) ** 2 <= (1.0 - 2.0 * ARMIJO * t) * norm2:
                return trial
            t *= 0.5
        return None

    def run(self, z0: Any, U0: Any, budget: int) -> KrylovOutcome:
        """At most ``budget`` Newton steps from the coupling state ``z0`` (HJB guess ``U0``)."""
        point = self.respond(np.asarray(to_numpy(z0), dtype=np.float64), U0)
        best: tuple[float, Any, Any] = (math.inf, None, None)
        lowest, anchor, stale = point, math.inf, 0
        trigger, previous = self.tol, None
        records: list[dict[str, float]] = []
        reason = "max_iter"
        for _ in range(budget):
            started = time.perf_counter()
            r = point.residual
            nxt: _Point | None = None
            if r <= trigger:  # certify M(z): one best response to Φ(z)
                again = self.respond(point.image, point.U)
                cert = again.residual
                if cert < best[0]:
                    best = (cert, point.U, point.M)
                if cert <= self.tol:
                    reason = "converged"
                else:
                    trigger = min(trigger, 0.5 * self.tol * r / max(cert, 1e-300))
                    if _norm(again.R) < _norm(point.R):
                        nxt = again
            if reason != "converged" and nxt is None:
                eta = ETA_MAX if previous is None else EW_GAMMA * (r / previous) ** 2
                eta = min(ETA_MAX, max(ETA_MIN, eta, 0.5 * trigger / max(r, 1e-300)))
                nxt = self.line_search(point, self.direction(point, eta))
            records.append({"residual": r,
                            "change_U": _change(nxt.U, point.U) if nxt else 0.0,
                            "change_M": _change(nxt.M, point.M) if nxt else 0.0,
                            "time": time.perf_counter() - started})
            if reason == "converged":
                break
            if nxt is None:
                reason = "stalled"
                break
            previous, point = r, nxt
            if point.residual < lowest.residual:
                lowest = point
            if point.residual < 0.5 * anchor:
                anchor, stale = point.residual, 0
            else:
                stale += 1
            if stale >= self.stall:
                reason = "stalled"
                break
        if best[1] is None:  # nothing certified yet: the lowest iterate, by one more response
            best = (self.respond(lowest.image, lowest.U).residual, lowest.U, lowest.M)
        return KrylovOutcome(U=best[1], M=best[2], residual=best[0], records=records,
                             tol=self.tol, lowest=(lowest.z, lowest.U, lowest.M), reason=reason,
                             evaluations=self.evaluations, products=self.products)


def _norm(a: np.ndarray) -> float:
    """‖a‖₂ over all entries."""
    return math.sqrt(float(np.sum(a * a)))


def _change(new: Any, old: Any) -> float:
    """‖new − old‖ / ‖new‖ over all entries (backend arrays)."""
    a, b = (np.asarray(to_numpy(x), dtype=np.float64) for x in (new, old))
    return _norm(a - b) / max(_norm(a), 1e-300)
