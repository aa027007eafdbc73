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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.backend import Backend, to_numpy
from .equilibrium import System
from .iteration import History, evaluator

ARMIJO = 1e-4  # sufficient decrease of ½‖R‖² per unit step
MIN_STEP = 2.0**-10  # backtracking gives up below this step length
FD_STEP = 1e-7  # relative finite-difference step of the products DΦ v
ETA_MAX, ETA_MIN, EW_GAMMA = 0.1, 1e-8, 0.1  # GMRES's relative tolerance and its forcing


@dataclass
class KrylovOutcome:
    """The best certified iterate: U, M (backend arrays) and its ``residual`` (the lowest
    certified one, or that of the lowest iterate, certified at the end where none was before);
    the ``history`` of its steps (the iterate residual r(z_k) of each, as the fixed point's
    history gives it, its whole time as coupling time), ``tol``, the lowest-residual iterate
    (z, U, M) where a fixed point continues, why the iteration ended (``reason``: converged,
    stalled or max_iter), the best responses evaluated and the Jacobian products among them."""

    U: Any
    M: Any
    residual: float
    history: History
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


@dataclass
class BestResponses:
    """The best response ``evaluate(z, guess) -> (F, U, M, state(M), stamps)`` of
    :func:`.iteration.evaluator` (one problem) on host coupling states, with the projection
    onto admissible states; counts the best responses (``evaluations``) and the Jacobian
    products among them."""

    evaluate: Any
    project: Any
    backend: Backend
    evaluations: int = 0
    products: int = 0

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


@dataclass
class KrylovState:
    """A Newton–Krylov solve between its steps: the best ``responses``, the current ``point``,
    the ``best`` certified iterate (residual, U, M), the ``lowest`` iterate, the residual that
    last halved (``anchor``) and the steps since (``stale``), the certificate's ``trigger``,
    the residual of the step before (``previous``), the ``history`` of the steps (at most
    ``max_iter``) and why the iteration ended (``reason``)."""

    responses: BestResponses
    point: _Point
    max_iter: int
    trigger: float
    lowest: _Point
    best: tuple[float, Any, Any] = (math.inf, None, None)
    anchor: float = math.inf
    stale: int = 0
    previous: float | None = None
    history: History = field(default_factory=History)
    reason: str = "max_iter"

    @property
    def evaluations(self) -> int:
        """The steps taken, which the budget ``max_iter`` counts (a step takes one or more
        best responses)."""
        return len(self.history.residual)


class CouplingNewtonKrylov:
    """The iteration of the module docstring: an equilibrium strategy (:mod:`.equilibrium`)
    on a :class:`~.equilibrium.System` of one problem, whose state is a
    :class:`KrylovState`; ``max_iter`` counts its Newton steps."""

    def __init__(self, *, tol: float, max_krylov: int = 40, stall: int = 5) -> None:
        self.tol, self.max_krylov, self.stall = tol, max_krylov, stall

    def init(self, system: System, max_iter: int) -> KrylovState:
        """The best response to the system's ``z_init``, else the state of its ``M_init``,
        else of m0 at all times (its HJB sweep seeded by ``U_init``)."""
        be = system.backend
        responses = BestResponses(evaluator(system.coupling, system.hjb, system.fp, system.U_T,
                                            system.m0, be), system.coupling.project, be)
        z0 = system.z_init
        if z0 is None:
            M0 = system.M_init
            if M0 is None:
                M0 = be.xp.stack([system.m0] * (system.nt + 1), axis=-3)
            z0 = system.coupling.state(M0)
        point = responses.respond(np.asarray(to_numpy(z0), dtype=np.float64), system.U_init)
        return KrylovState(responses=responses, point=point, max_iter=max_iter,
                           trigger=self.tol, lowest=point)

    def done(self, s: KrylovState) -> bool:
        """Converged, stalled, or ``max_iter`` steps taken."""
        return s.reason != "max_iter" or len(s.history.residual) >= s.max_iter

    def step(self, s: KrylovState) -> KrylovState:
        """One Newton step: the certificate of the point where its residual is below the
        trigger (a refused one whose Φ(z) has the smaller ‖R‖ is the next point), else a
        line search along the Newton–Krylov direction."""
        started = time.perf_counter()
        point, r = s.point, s.point.residual
        nxt: _Point | None = None
        if r <= s.trigger:  # certify M(z): one best response to Φ(z)
            again = s.responses.respond(point.image, point.U)
            cert = again.residual
            if cert < s.best[0]:
                s.best = (cert, point.U, point.M)
            if cert <= self.tol:
                s.reason = "converged"
            else:
                s.trigger = min(s.trigger, 0.5 * self.tol * r / max(cert, 1e-300))
                if _norm(again.R) < _norm(point.R):
                    nxt = again
        if s.reason != "converged" and nxt is None:
            eta = ETA_MAX if s.previous is None else EW_GAMMA * (r / s.previous) ** 2
            eta = min(ETA_MAX, max(ETA_MIN, eta, 0.5 * s.trigger / max(r, 1e-300)))
            nxt = self.line_search(s.responses, point, self.direction(s.responses, point, eta))
        _record(s.history, r, nxt, point, time.perf_counter() - started)
        if s.reason == "converged":
            return s
        if nxt is None:
            s.reason = "stalled"
            return s
        s.previous, s.point = r, nxt
        if nxt.residual < s.lowest.residual:
            s.lowest = nxt
        if nxt.residual < 0.5 * s.anchor:
            s.anchor, s.stale = nxt.residual, 0
        else:
            s.stale += 1
        if s.stale >= self.stall:
            s.reason = "stalled"
        return s

    def certify(self, s: KrylovState) -> KrylovOutcome:
        """The best certified iterate; where none was certified, the lowest iterate, by one
        more best response."""
        best, lowest = s.best, s.lowest
        if best[1] is None:
            best = (s.responses.respond(lowest.image, lowest.U).residual, lowest.U, lowest.M)
        return KrylovOutcome(U=best[1], M=best[2], residual=best[0], history=s.history,
                             tol=self.tol, lowest=(lowest.z, lowest.U, lowest.M),
                             reason=s.reason, evaluations=s.responses.evaluations,
                             products=s.responses.products)

    def direction(self, responses: BestResponses, point: _Point, eta: float) -> np.ndarray:
        """d with ‖(I − DΦ) d − R‖ ≤ η ‖R‖ (or GMRES's last iterate after ``max_krylov``
        products)."""
        import scipy.sparse.linalg as sla

        n, shape = point.z.size, point.z.shape
        op = sla.LinearOperator(
            (n, n), matvec=lambda v: responses.product(point, v.reshape(shape)).reshape(-1),
            dtype=np.float64)
        d, _ = sla.gmres(op, point.R.reshape(-1), rtol=eta, atol=0.0,
                         restart=min(n, self.max_krylov), maxiter=1)
        return d.reshape(shape)

    @staticmethod
    def line_search(responses: BestResponses, point: _Point, d: np.ndarray) -> _Point | None:
        """The first of t = 1, ½, ¼, … ≥ :data:`MIN_STEP` with ½‖R(z + t d)‖² ≤ (1 − 2·10⁻⁴ t)
        ½‖R(z)‖² (z + t d projected onto admissible states), or None."""
        norm2, t = _norm(point.R) ** 2, 1.0
        while t >= MIN_STEP:
            z = np.asarray(to_numpy(responses.project(responses.backend.asarray(point.z
                                                                                + t * d))))
            trial = responses.respond(z, point.U)
            if _norm(trial.R) ** 2 <= (1.0 - 2.0 * ARMIJO * t) * norm2:
                return trial
            t *= 0.5
        return None


def _record(history: History, r: float, nxt: _Point | None, point: _Point,
            seconds: float) -> None:
    """A step from ``point`` (iterate residual ``r``) to ``nxt`` (None: none), its whole time
    as coupling time."""
    history.residual.append(r)
    history.change_U.append(_change(nxt.U, point.U) if nxt else 0.0)
    history.change_M.append(_change(nxt.M, point.M) if nxt else 0.0)
    history.time_hjb.append(0.0)
    history.time_fp.append(0.0)
    history.time_coupling.append(seconds)


def _norm(a: np.ndarray) -> float:
    """‖a‖₂ over all entries."""
    return math.sqrt(float(np.sum(a * a)))


def _change(new: Any, old: Any) -> float:
    """‖new − old‖ / ‖new‖ over all entries (backend arrays)."""
    a, b = (np.asarray(to_numpy(x), dtype=np.float64) for x in (new, old))
    return _norm(a - b) / max(_norm(a), 1e-300)
