"""Newton's method on the coupling state of potential games, per problem of a batch.

The method of :mod:`.potential` (R(z) = Φ(z) − z on the observed path z, the Jacobian
−S⁻¹ (S D S + I) S with S = diag(√−P'), D the exact tangent Jacobian of the scheme, Armijo's
backtracking on ½‖R‖²) run as the main iteration from the first iterate on, for a leading axis
of independent problems (a single solve is a batch of one). Every iteration is one batched
best response (on CUDA, for a coarse grid's batch, replayed from a recorded CUDA graph from the
second iteration on: :mod:`.recorded_evaluation`); what it evaluates differs per problem:

- a *trial* point z + t d of the line search: accepted when ‖R‖² ≤ (1 − 2·10⁻⁴ t)‖R(z)‖²,
  else t shrinks (quadratic interpolation, by 2 to 10; after ``max_halvings`` refusals the
  problem is stuck, after :data:`FLOOR_HALVINGS` once it is certified within its float64
  floor predicted before iterating); a line search starts from twice the last accepted step
  (at most 1);
- or Φ(z), the *certificate* of the densities of the accepted z (their fixed-point residual),
  evaluated once the relative residual of z is below a trigger (``tol`` at first, lowered by
  the amplification that a refused certificate shows, as in :mod:`.iteration`; in a
  coarse-to-fine solve, from the start by the amplification that the coarse stage's
  certificate showed, :func:`first_triggers`). A refused certificate whose point Φ(z)
  decreases ‖R‖ is accepted as a Picard step.

Problems whose new point was accepted get a new Newton direction d = S⁻¹ (S D S + I)⁻¹ S R:

- on devices (CUDA, MPS and its emulation) from the dense tangent Jacobians D of all these
  problems at once, in chunks that fit ``jacobian_memory`` bytes (a quarter of the free memory
  on CUDA), and one batched Cholesky factorisation (a problem whose factorisation fails steps
  along R, the Picard direction; an LU factorisation of S D S + Σ where a price rises, see
  :func:`.potential.scaling`; the price slopes computed on the device where the potential
  allows, :meth:`MemberPotentials.price_slope_on`). On CUDA with Triton, D comes from the
  fused tangent sweeps of :mod:`.fdm.triton_tangent` (two launches per chunk, the time loop
  inside); elsewhere
  (MPS, its emulation, CUDA without Triton) from the batched torch sweeps of
  :mod:`.fdm.tangent_torch` (all nt directions as one wide batch of tridiagonal solves per
  level);
- on the CPU matrix-free (Newton–Krylov): conjugate gradients on the SPD system, compiled
  whole (:func:`.fdm.tangent.newton_direction`), each product D p one tangent sweep of a
  single direction (:func:`.fdm.tangent.tangent_product`, the Thomas factors of the step
  matrices computed once per direction), O(nt nx) against
  O(nt² nx) for D. Measured on one core (``benchmarks/batch_equilibria.py --cases system``):
  10–14 products per system (at most 26); 1.7 ms against 30 ms for D and its Cholesky
  solve at 81², the same at 41².

The Newton system is float64 except on MPS (float32 throughout), also for float32 solves, whose
evaluations and certificates stay float32. On CUDA the tangent Jacobians D are computed in
float32 (``jacobian_dtype``) and the system assembled and factorised in float64: the
Jacobian only steers the step, the certificate decides. Measured on one H100 (1024 problems
at 201², float64): the same certified counts and iteration counts as float64 Jacobians,
1.4–1.5× less time in the Jacobians, which take most of an iteration on the generic torch
path. A problem stops when its certificate is ≤ ``tol``
(converged) or when it is stuck and its current point is certified (not converged); it returns
the best certified densities.

The floor of the certificate in float64. The certificate of an iterate z is the residual of its
densities, whose state is w = Φ(z): R(w) ≈ Φ'(z) R(z). Where the best response is steep
(little noise over a long horizon, agents near the threshold: L = ‖Φ'‖ measured from 10⁴ to
3·10⁵, as R(z) is pushed down to the rounding of its evaluation) both factors grow with L:
R(z) stops at about L ε (the rounding of z and of the running cost, amplified by Φ'), and the
certificate at about L² ε. Measured over 56 stalled float64 solves (Santa Fe, T 80 and 160,
σ 0.03 to 0.05, nx 41 to 201, nt 81 to 201): certified residual / (L² ε) from 9·10⁻⁴ to 0.031,
while the HJB sweeps' own rounding (their Newton started from another guess) moves Φ(z) by
6·10⁻¹⁶ only. A problem that stops above ``tol`` is therefore told apart by
:func:`certificate_floor` ``= FLOOR_FACTOR · L² ε`` with L estimated at its last point by the
power iteration of :meth:`BatchNewton.lipschitz`, recorded in :attr:`BatchNewton.reachable`
with whether its certificate reached it, and named by its ConvergenceWarning: the tol that is
reachable there. It stays not converged: a floor found after the iteration does not move the
tol it was told. A coarse-to-fine solve predicts the floor before its fine iteration, at the
coarse equilibrium, and says so where it lies above ``tol``; a problem that stops above
``tol`` but within that floor is converged there (:mod:`mfgwork.float64_floor`). The floor
at the fine L is computed only where the iteration still stopped above both.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any

import numpy as np
from numba import njit
from numba.extending import register_jitable

from ..core.backend import Backend, from_host, to_numpy
from ..core.errors import ConvergenceWarning, SolverError, warn
from ..core.grid import Grid
from ..problems.base import ScalarPotential
from ..problems.hamiltonians import Hamiltonian
from .equilibrium import System
from .fdm.operators import CURVATURE_FLOOR, QUADRATIC
from .fdm.tangent import newton_direction, tangent_product
from .iteration import FixedPointResult, History, evaluator, fused_norms, record_times
from .potential import TangentOperands, product_operands, scaling
from .recorded_evaluation import RecordedEvaluation, recorded_sweeps

TRIAL, CERTIFY, DONE = 0, 1, 2
ARMIJO = 2e-4
ETA = 1e-4
GROW = 2.0
#: A stopped problem whose certified residual is this many times its iterate's is at the
#: floor of what the working precision resolves (:func:`_amplified`).
AMPLIFIED = 1e3
#: Arrays of (nt + 1) × nx values the batched Newton holds per problem on a device (U, M,
#: their trial and kept iterates, the running cost, the sweeps' work arrays, the dense
#: tangent Jacobian and Newton system, nt × nt each), with margin: what
#: :func:`mfgwork.solve` checks a device batch against and a scan sizes its blocks by (its
#: GPU throughput was measured with these blocks).
DEVICE_GRID_ARRAYS = 32
#: The float64 certificate floor over L² ε (:func:`certificate_floor`): above the largest
#: ratio measured at stalls (0.031, see the module docstring).
FLOOR_FACTOR = 0.05
#: How far above its float64 floor a stalled residual may end and still be said to be at
#: it (the floor is an estimate: stalls measured up to a few times above it).
NEAR_FLOOR = 10.0
#: Power iterations of :meth:`BatchNewton.lipschitz` (each one tangent product, O(nt nx)).
POWER_STEPS = 30
#: Refusals of a line search after which a problem already certified within its float64 floor
#: predicted before iterating (:mod:`mfgwork.float64_floor`) is stuck: rounding, not the
#: step, then decides the residual
FLOOR_HALVINGS = 2
#: Power iterations of L where a coarse stage measures it (:attr:`BatchNewton.measures_lipschitz`):
#: at 51 × 51 five already give L to four digits (Santa Fe, T 10 to 160, σ 0.03 to 0.3)
MEASURE_STEPS = 8


def dense_on(backend: Backend) -> bool:
    """Whether :class:`BatchNewton` solves its systems from dense tangent Jacobians on
    ``backend`` (devices, MPS emulation) rather than matrix-free (the CPU)."""
    return backend.is_accelerator


def device_bytes(nx: int, nt: int, itemsize: int) -> int:
    """Bytes per problem of a batch that :class:`BatchNewton` solves on a device
    (:data:`DEVICE_GRID_ARRAYS` arrays of (nt + 1) × nx values of ``itemsize`` bytes)."""
    return DEVICE_GRID_ARRAYS * (nt + 1) * nx * itemsize


@dataclass(frozen=True)
class MemberPotentials:
    """The potentials of the problems of a batch on one grid (one χ, a price per problem)."""

    chi: np.ndarray
    members: tuple[ScalarPotential, ...]
    #: the stacked keywords of the slopes on a device, per (device, dtype)
    _keywords_on: dict = field(default_factory=dict, compare=False, repr=False)

    def price_slope(self, z: np.ndarray, members: Sequence[int]) -> np.ndarray:
        """P'(z) (k, nt) of the problems ``members`` at their observed paths z (host). Slopes
        given as ``functools.partial`` of one function with scalar keywords (Santa Fe's) are
        evaluated in one call with the keywords stacked per member; others, and a single
        member, one by one."""
        stacked = self._stacked_slopes
        if len(members) > 1 and stacked is not None:
            func, keywords = stacked
            return np.asarray(func(z, **{k: v[members] for k, v in keywords.items()}),
                              dtype=np.float64)
        return np.array([self.members[b].price_slope(z[i]) for i, b in enumerate(members)])

    def price_slope_on(self, z: Any, members: Sequence[int], index: Any) -> Any | None:
        """P'(z) (k, nt) of the problems ``members`` (``index``: the same as a tensor on z's
        device, None: every problem) computed where the tensor z is and in its dtype: where
        every slope is one function of any namespace
        (:attr:`~mfgwork.problems.base.ScalarPotential.any_namespace`) with stacked
        keywords, moved to that device once; else None."""
        stacked = self._stacked_slopes
        if stacked is None or not self._any_namespace:
            return None
        func, keywords = stacked
        key = (str(z.device), z.dtype)
        if key not in self._keywords_on:
            import torch

            self._keywords_on[key] = {k: torch.as_tensor(v, dtype=z.dtype, device=z.device)
                                      for k, v in keywords.items()}
        on = self._keywords_on[key]
        return func(z, **(on if index is None else {k: v[index] for k, v in on.items()}))

    @cached_property
    def _any_namespace(self) -> bool:
        """Whether every member's slope computes in any array namespace."""
        return all(m.any_namespace for m in self.members)

    @cached_property
    def _stacked_slopes(self) -> tuple[Any, dict[str, np.ndarray]] | None:
        """(the one function, its keywords stacked per member (B, 1)) where every member's
        slope is a ``functools.partial`` of that function with the same scalar keywords."""
        slopes = [m.price_slope for m in self.members]
        first = slopes[0]
        if not (isinstance(first, partial) and not first.args and all(
                isinstance(s, partial) and s.func is first.func and not s.args
                and s.keywords.keys() == first.keywords.keys() for s in slopes)):
            return None
        return first.func, {k: np.array([s.keywords[k] for s in slopes],
                                        dtype=np.float64)[:, None] for k in first.keywords}


def member_potentials(potentials: list[ScalarPotential | None]) -> MemberPotentials | None:
    """The batch's potentials, or None unless every problem declares one with the same χ."""
    if not potentials or any(p is None for p in potentials):
        return None
    chi = potentials[0].chi
    if any(p.chi is not chi and (p.chi.shape != chi.shape or not np.array_equal(p.chi, chi))
           for p in potentials[1:]):
        return None
    return MemberPotentials(chi=chi, members=tuple(potentials))


class Float64State:
    """A coupling whose states z live in float64 around float32 sweeps (mixed precision).

    Where the price is steep (small ε), rounding z to float32 before F(z) moves the running
    cost by |F'| · 6·10⁻⁸ · |z|: the residual R(z) = Φ(z) − z then has a floor far above the
    float32 floor of the sweeps and Newton stalls there. The states (B, nt), residuals,
    directions and the running cost's argument are float64; the sweeps see F cast to float32.
    """

    def __init__(self, coupling: Any, backend: Backend) -> None:
        self.coupling, self.backend = coupling, backend

    def __getattr__(self, name: str) -> Any:  # frozen_density and the like
        return getattr(self.coupling, name)

    def state(self, M: Any) -> Any:
        return self.backend.xp.astype(self.coupling.state(M), self.backend.xp.float64)

    def running_cost(self, z: Any) -> Any:
        return self.backend.xp.astype(self.coupling.running_cost(z), self.backend.native_dtype)

    def project(self, z: Any) -> Any:
        return self.coupling.project(z)


class Unbatched:
    """A single problem's coupling and sweeps seen as a batch of one (a leading axis of 1)."""

    def __init__(self, coupling: Any, hjb: Any, fp: Any) -> None:
        self.coupling, self._hjb, self._fp = coupling, hjb, fp

    def state(self, M: Any) -> Any:
        return self.coupling.state(M[0])[None]

    def running_cost(self, z: Any) -> Any:
        return self.coupling.running_cost(z[0])[None]

    def project(self, z: Any) -> Any:
        return self.coupling.project(z[0])[None]

    def frozen_density(self, z: Any) -> Any | None:
        frozen = getattr(self.coupling, "frozen_density", None)
        density = None if frozen is None else frozen(z[0])
        return None if density is None else density[None]

    def hjb(self, U_T: Any, F: Any, guess: Any, *density: Any) -> Any:
        return self._hjb(U_T, F[0], None if guess is None else guess[0],
                         *(d[0] for d in density))[None]

    def fp(self, U: Any, m0: Any, *density: Any) -> Any:
        return self._fp(U[0], m0, *(d[0] for d in density))[None]


def _quarter_of_free_memory(backend: Backend) -> int:
    """A quarter of the free memory of a CUDA device (the tangent sweeps' budget), else 1 GiB."""
    if backend.kind == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(backend.native_device)[0] // 4)
    return 2**30


def minimal_residual(apply: Any, b: np.ndarray, rtol: float, max_steps: int) -> np.ndarray:
    """x with ‖A x − b‖ ≤ rtol ‖b‖ (at best) for the symmetric, possibly indefinite operator
    ``apply``: SciPy's MINRES from x = 0, at most ``max_steps`` products."""
    from scipy.sparse.linalg import LinearOperator, minres

    n = b.size
    x, _ = minres(LinearOperator((n, n), matvec=apply, dtype=np.float64), b, rtol=rtol,
                  maxiter=max_steps)
    return x


@register_jitable
def backtrack(t, norm, trial):
    """The next step length after the step t was refused (floats): the minimiser of the
    quadratic through φ(0) = ‖R‖² (``norm``, 1 where not finite), φ'(0) = −2‖R‖² (the Newton
    direction) and φ(t) = ``trial``², within [0.1 t, 0.5 t]. Plain Python, compiled into
    :func:`advance` (the same arithmetic: products, no division by zero)."""
    phi0 = norm if math.isfinite(norm) else 1.0
    phi0 = phi0 * phi0
    curvature = trial * trial - phi0 + 2.0 * phi0 * t
    s = phi0 * t * t / curvature if curvature != 0.0 else math.nan
    if math.isnan(s) or s == math.inf:
        s = 0.5 * t
    return min(max(s, 0.1 * t), 0.5 * t)


#: The rows of the moves :func:`advance` sets: the certified densities are the best yet
#: (kept), the evaluated point is accepted (current), a new Newton direction is needed, the
#: next point is Φ(z) (a certificate).
KEEP, ACCEPT, FRESH, CERTIFYING = 0, 1, 2, 3


@njit(cache=True, nogil=True, error_model="numpy")
def advance(k, sums, tol, max_halvings, moves, step, mode, t, start, halvings, norm, rel,
            trigger, best, certified, stuck, done_at):
    """Iteration ``k`` of every problem's state machine (the module docstring; the host
    arrays (B,) of :class:`_NewtonState`, changed in place) once its point is evaluated, from
    the iteration's sums (:meth:`BatchNewton._iteration_sums`), in one compiled pass: the
    certificate of a CERTIFY point, the acceptance of a point, a refused trial's step
    (:func:`backtrack`; stuck after ``max_halvings[b]`` refusals), and what the problem does
    next. Sets its ``moves`` (rows :data:`KEEP`, :data:`ACCEPT`, :data:`FRESH`,
    :data:`CERTIFYING`; none where it was done already) and the ``step`` t of its next
    trial z + t d (0 where it certifies or is done), and returns the history's entries (the
    largest relative residual, change of U and change of M over the problems that were
    active, and whether the problem of the largest residual was certifying) and the number
    of problems still running."""
    residual = change_U = change_M = -math.inf
    certificate = False
    running = 0
    for b in range(mode.size):
        moves[KEEP, b] = moves[ACCEPT, b] = moves[FRESH, b] = moves[CERTIFYING, b] = False
        step[b] = 0.0
        if mode[b] == DONE:
            continue
        n_w = math.sqrt(sums[0, b])
        r_w = n_w / max(math.sqrt(sums[1, b]), 1e-300)
        check = mode[b] == CERTIFY
        if r_w > residual:
            residual, certificate = r_w, check
        change_U = max(change_U, math.sqrt(sums[2, b] / max(sums[3, b], 1e-300)))
        change_M = max(change_M, math.sqrt(sums[4, b] / max(sums[5, b], 1e-300)))
        # a certificate: r_w is the residual of the densities of z, kept where best; a refused
        # one lowers the trigger by the amplification it shows
        finished = False
        if check:
            if r_w < best[b]:
                best[b] = r_w
                moves[KEEP, b] = True
            certified[b] = True
            if r_w <= tol[b]:
                finished = True
            else:
                amplification = max(r_w / max(rel[b], 1e-300), 1e-300)
                trigger[b] = min(trigger[b], 0.5 * tol[b] / amplification)
                finished = stuck[b]
        # acceptance: the first point, an Armijo trial, or a refused certificate's Φ(z)
        decrease = 1.0 - ARMIJO * (1.0 if check else t[b])
        accept = not finished and (not math.isfinite(norm[b])
                                   or n_w * n_w <= decrease * (norm[b] * norm[b]))
        moves[ACCEPT, b] = accept
        if accept:
            if mode[b] == TRIAL:
                start[b] = min(1.0, GROW * t[b])
            norm[b], rel[b] = n_w, r_w
            certified[b] = stuck[b] = False
            halvings[b] = 0
        elif mode[b] == TRIAL:   # refused: a shorter step
            t[b] = backtrack(t[b], norm[b], n_w)
            halvings[b] += 1
            stuck[b] |= halvings[b] > max_halvings[b]
        # next: stop (finished, or stuck at a certified point); certify an accepted point
        # below the trigger (or a stuck one); else a trial along d, new where the point moved
        if finished or (stuck[b] and certified[b]):
            mode[b], done_at[b] = DONE, k
            continue
        running += 1
        if not certified[b] and (stuck[b] or (accept and rel[b] <= trigger[b])):
            mode[b] = CERTIFY
            moves[CERTIFYING, b] = True
        else:
            mode[b] = TRIAL
            if not stuck[b] and (accept or check):
                moves[FRESH, b] = True
                t[b], halvings[b] = start[b], 0
            step[b] = t[b]
    return residual, change_U, change_M, certificate, running


@register_jitable
def _squares(a, b, old, changed):
    """(Σ (a − old)² (0 where not ``changed``), Σ a²) over row b of ``a`` (2-D), in float64."""
    change = size = 0.0
    for i in range(a.shape[1]):
        v = float(a[b, i])
        if changed:
            change += (v - float(old[b, i])) ** 2
        size += v * v
    return change, size


@njit(cache=True, nogil=True)
def host_sums(R, g, U, U_old, M, M_old, F, U_changed, M_changed):  # pragma: no cover
    """The rows of :meth:`BatchNewton._iteration_sums` (7, B) from host arrays (B, ·) in one
    pass, summed in float64 (the change of U or M 0 where not ``U_changed``, ``M_changed``:
    no old array)."""
    out = np.zeros((7, R.shape[0]))
    for b in range(R.shape[0]):
        out[0, b] = _squares(R, b, R, False)[1]
        out[1, b] = _squares(g, b, g, False)[1]
        out[2, b], out[3, b] = _squares(U, b, U_old, U_changed)
        out[4, b], out[5, b] = _squares(M, b, M_old, M_changed)
        out[6, b] = _squares(F, b, F, False)[1]
    return out


#: Batches of at least this many problems run the compiled :func:`advance` on a device too.
COMPILED_STEP_FROM = 64


def state_machine(backend: Backend, size: int
                  ) -> Callable[..., tuple[float, float, float, bool, int]]:
    """:func:`advance` for a batch of ``size`` problems on ``backend``: compiled on the CPU
    (beside its other compiled kernels) and for batches of :data:`COMPILED_STEP_FROM` or
    more, else interpreted: on a device its Python source costs about 0.4 µs a problem and
    iteration, where loading Numba's compiled code costs a process's first solve about 0.5 s
    (the same arithmetic either way; floating-point warnings off, as compiled)."""
    if backend.kind == "cpu" or size >= COMPILED_STEP_FROM:
        return advance
    return _interpreted_advance


def _interpreted_advance(*args: Any) -> tuple[float, float, float, bool, int]:
    with np.errstate(all="ignore"):
        residual, change_U, change_M, certificate, running = advance.py_func(*args)
    return float(residual), float(change_U), float(change_M), bool(certificate), int(running)


def compile_step() -> float:
    """Seconds spent compiling (or loading) :func:`advance` on a batch of one (the argument
    types of every solve); 0.0 once done in this process."""
    if advance.overloads:   # compiled or loaded already
        return 0.0
    started = time.perf_counter()
    s = _NewtonState.first(np.zeros((1, 1)), None, 1.0, np)
    advance(1, np.zeros((7, 1)), np.ones(1), np.ones(1, dtype=np.int64),
            np.zeros((4, 1), dtype=bool), np.zeros(1), *s.host())
    return time.perf_counter() - started


def _at_every_level(m0: Any, nt: int, xp: Any) -> Any:
    """Densities (..., nt + 1, nx) equal to ``m0`` (..., nx) at every level: a read-only
    broadcast view (the first point's state is all that is read of them)."""
    return xp.broadcast_to(m0[..., None, :], (*m0.shape[:-1], nt + 1, m0.shape[-1]))


def _amplified(s: _NewtonState, converged: np.ndarray) -> str:
    """Why a problem stopped above tol when its iterate went far below it: the best response
    amplifies the rounding of the coupling state (said with the worst such problem), else
    nothing."""
    floor = ~converged & np.isfinite(s.best) & (s.rel * AMPLIFIED < s.best)
    if not floor.any():
        return ""
    b = int(np.argmax(np.where(floor, s.best, -np.inf)))
    return (f". Its iterate reached the residual {s.rel[b]:.1e}, but one more best response "
            f"moves the densities it returns by {s.best[b]:.1e}: the best response amplifies "
            f"the rounding of the coupling state about {s.best[b] / s.rel[b]:.0e}-fold here (a "
            "steep payoff over a long horizon, or little noise), so about "
            f"{s.best[b]:.0e} is what the working precision resolves for this problem: raise "
            "tol to it")


def first_triggers(amplification: Sequence[float | None], tol: float) -> np.ndarray | None:
    """The residual below which each problem of a fine solve evaluates its first
    certificate, from the ``amplification`` of its certificate measured by a coarse stage
    (:attr:`.iteration.FixedPointResult.amplification`; None or NaN: not measured): as a
    refused certificate lowers the trigger, to ``0.5 tol / amplification`` (at most tol),
    so that no certificate is evaluated where the one before it showed it would fail. Not
    where it is :data:`AMPLIFIED` or more: that certificate was at the floor of what the
    working precision resolves, not where the fine one will be. None where no problem has
    one."""
    a = np.array([np.nan if v is None else v for v in amplification], dtype=np.float64)
    known = np.isfinite(a) & (a > 0) & (a < AMPLIFIED)
    if not known.any():
        return None
    return np.where(known, np.minimum(tol, 0.5 * tol / np.where(known, a, 1.0)), tol)


def certificate_floor(lipschitz: float, eps: float) -> float:
    """The certified residual a float64 solve can be expected to reach: ``FLOOR_FACTOR`` ·
    L² ε for the Lipschitz constant L = ‖Φ'‖ of the best response at the equilibrium and the
    machine epsilon ε (2.2·10⁻¹⁶ in float64; the module docstring: R(z) stops near L ε, the
    certificate R(Φ(z)) ≈ Φ' R(z) near L² ε)."""
    return FLOOR_FACTOR * lipschitz**2 * eps


def on_backend(host: np.ndarray, like: Any, backend: Backend, dtype: Any = None) -> Any:
    """The host array ``host`` as an array of ``backend`` where ``like`` is (in ``dtype``;
    default: its own)."""
    if backend.name == "numpy":
        return np.asarray(host, dtype=dtype)
    if like.device.type == "cuda":   # (without waiting for the work queued there)
        out = from_host(host, like.device)
        return out if dtype is None or out.dtype == dtype else out.to(dtype)
    return backend.xp.asarray(host, dtype=dtype, device=like.device)


def batch_mask(mask: np.ndarray, like: Any, backend: Backend) -> Any:
    """The host mask (B,) as a backend array broadcastable against ``like``."""
    return _along_rows(on_backend(mask, like, backend), like, backend.xp)


def _along_rows(rows: Any, like: Any, xp: Any) -> Any:
    """A (B,) array shaped to broadcast against ``like`` (B, ...)."""
    return xp.reshape(rows, tuple(rows.shape) + (1,) * (like.ndim - 1))


def where_rows(mask: np.ndarray, new: dict, old: dict, backend: Backend) -> dict:
    """{k: new[k] in the rows (problems) of the host ``mask`` (B,), old[k] elsewhere} for
    batched arrays of any shapes, the mask moved to the backend once."""
    xp = backend.xp
    rows = on_backend(mask, next(iter(new.values())), backend)
    return {k: xp.where(_along_rows(rows, a, xp), a, old[k]) for k, a in new.items()}


def keep_where(kept: dict, mask: np.ndarray, U: Any, M: Any, backend: Backend) -> dict:
    """The kept iterates {"U", "M"}: the new U, M for the problems of ``mask``, the kept ones
    elsewhere (all new where none is kept yet)."""
    if kept["U"] is None or mask.all():
        return {"U": U, "M": M}
    return where_rows(mask, {"U": U, "M": M}, kept, backend)


def newton_refusal(hamiltonian: Hamiltonian) -> str | None:
    """Why Newton's method on the coupling state cannot serve ``hamiltonian`` (None if it
    can): its tangent sweeps need H independent of m."""
    if hamiltonian.depends_on_m:
        return (f"not used: {hamiltonian!r} depends on m, so the coupling state is the "
                "density path (no scalar potential); Anderson iteration")
    return None


def newton_tangent(hamiltonian: Hamiltonian) -> str | None:
    """How Newton's tangent sweeps treat ``hamiltonian`` where they are not exact (None where
    they are): ∂pp H unbounded at p = 0 is capped (:func:`.fdm.operators.tangent_weights`)."""
    if hamiltonian.bounded_curvature:
        return None
    return (f"approximate tangent: ∂pp H of {hamiltonian!r} evaluated at max(|p|, "
            f"{CURVATURE_FLOOR:g}·h) (unbounded at p = 0); line search and certificate exact")


@dataclass
class _Solve:
    """What :class:`BatchNewton` keeps of a solve around the problems' state machine: the
    best response ``evaluate`` of its ``coupling`` (``single``: one problem seen as a batch
    of one), the iterations ``k`` of ``max_iter``, the problems' tolerances, how many are
    still ``running``, the moves and trial steps of :func:`advance`, the points ``w``
    evaluated next, the history and the phase stamps."""

    evaluate: Any
    coupling: Any
    single: bool
    max_iter: int
    tol: np.ndarray
    running: int
    #: refusals of a line search after which each problem is stuck (``max_halvings``;
    #: :data:`FLOOR_HALVINGS` once certified within its float64 floor)
    halving_limit: np.ndarray
    moves: np.ndarray
    step: np.ndarray
    w: Any
    k: int = 0
    history: History = field(default_factory=History)
    stamps: list[tuple] = field(default_factory=list)
    #: the evaluations recorded as a CUDA graph (:mod:`.recorded_evaluation`; None: eager)
    recorded: RecordedEvaluation | None = None
    #: the sweeps of ``recorded``, which count its HJB Newton iterations
    sweeps: Any = None


@dataclass
class _NewtonState:
    """Where each problem of a :class:`BatchNewton` solve stands (host arrays (B,)): its
    ``mode`` (TRIAL, CERTIFY, DONE), step length ``t`` and the first one of its next line
    search (``start``), the halvings of this search, ‖R(z)‖ and the relative residual of the
    accepted point (``norm``, ``rel``), the residual below which it is certified
    (``trigger``), the certified residual of the best densities (``best``), whether the
    accepted point's densities are certified and whether its search is ``stuck``, the
    iteration it finished at (changed in place by :func:`advance`); and on the device the
    accepted point (``cur``: z, R, U, M), the kept densities and the directions ``d``; the
    ``solve`` around them (:class:`_Solve`, set by :meth:`BatchNewton.init`)."""

    mode: np.ndarray
    t: np.ndarray
    start: np.ndarray
    halvings: np.ndarray
    norm: np.ndarray
    rel: np.ndarray
    trigger: np.ndarray
    best: np.ndarray
    certified: np.ndarray
    stuck: np.ndarray
    done_at: np.ndarray
    cur: dict[str, Any]
    kept: dict[str, Any]
    d: Any
    solve: _Solve | None = None

    @property
    def history(self) -> History:
        return self.solve.history

    @property
    def evaluations(self) -> int:
        return self.solve.k

    @classmethod
    def first(cls, w: Any, U_init: Any, tol: Any, xp: Any) -> _NewtonState:
        """Every problem at its first point ``w`` (U_init: the HJB solves' first guess)."""
        B = w.shape[0]
        return cls(mode=np.full(B, TRIAL), t=np.ones(B), start=np.ones(B),
                   halvings=np.zeros(B, dtype=np.int64), norm=np.full(B, math.inf),
                   rel=np.full(B, math.inf), trigger=np.full(B, tol),
                   best=np.full(B, math.inf), certified=np.zeros(B, dtype=bool),
                   stuck=np.zeros(B, dtype=bool), done_at=np.zeros(B, dtype=np.int64),
                   cur={"z": w, "R": None, "U": U_init, "M": None},
                   kept={"U": None, "M": None}, d=xp.zeros_like(w))

    def host(self) -> tuple[np.ndarray, ...]:
        """The host arrays in the order :func:`advance` takes them (after its first six
        arguments)."""
        return (self.mode, self.t, self.start, self.halvings, self.norm, self.rel, self.trigger,
                self.best, self.certified, self.stuck, self.done_at)


class BatchNewton:
    """Damped Newton's method for the coupling states z (B, nt) of B potential games on one
    grid: ``potential`` gives χ and the price slopes P'(z) of each; ``nu`` their
    diffusions (B,); ``hamiltonian`` theirs (one for the batch, independent of m unless
    :attr:`density` freezes the density it sees, see :func:`newton_refusal`; an unbounded
    ∂pp H is capped, see :func:`newton_tangent`)."""

    def __init__(self, potential: MemberPotentials, *, grid: Grid, nu: np.ndarray,
                 backend: Backend, tol: float, max_halvings: int = 12,
                 jacobian_memory: int | None = None, jacobian_dtype: str | None = None,
                 hamiltonian: Hamiltonian = QUADRATIC) -> None:
        self.potential, self.grid, self.backend, self.tol = potential, grid, backend, tol
        self.hamiltonian = hamiltonian
        self.nu = np.asarray(nu, dtype=np.float64).reshape(-1)
        self.max_halvings = max_halvings
        self.jacobian_memory = (_quarter_of_free_memory(backend) if jacobian_memory is None
                                else jacobian_memory)
        mps = backend.kind == "mps" or backend.emulate_mps
        #: the dtype of the Newton systems, and of the coupling states z, their residuals and
        #: directions (float64 around float32 sweeps: :class:`Float64State`)
        self.system_dtype = backend.dtype if mps else "float64"
        self.jacobian_dtype = jacobian_dtype or (
            "float32" if backend.kind == "cuda" else self.system_dtype)
        self.newton_steps = self.products = 0
        #: χ, 1/(h w), w and x of the grid as tensors, per (dtype, device) (the Jacobians')
        self._grid_tensors: dict[tuple[str, str], tuple[Any, ...]] = {}
        #: the frozen densities m^1..m^nt ((nt, nx), or (B, nt, nx): one per problem; on the
        #: backend) that H sees where it depends on m (:mod:`.frozen_density`); None otherwise
        self.density: Any = None
        #: per problem that stopped above ``tol`` in float64: {"tol": its certificate floor
        #: (:func:`certificate_floor`), "lipschitz": L, "reached": whether its certified
        #: residual is at or below the floor}
        self.reachable: dict[int, dict[str, Any]] = {}
        #: per problem, the float64 certificate floor predicted before iterating
        #: (:mod:`mfgwork.float64_floor`; None: none): one that stops above ``tol`` but at or
        #: below it is converged there
        self.floor_tol: np.ndarray | None = None
        #: whether the iteration measures L (:meth:`lipschitz_all`) of every problem at its
        #: last point into its result's ``lipschitz`` (a float64 coarse stage, whose L
        #: predicts the floor of the fine solve it starts: :mod:`mfgwork.float64_floor`)
        self.measures_lipschitz = False
        #: per problem, the relative residual below which its first certificate is
        #: evaluated (None: ``tol``), lowered by the amplification a coarse stage measured
        #: (:func:`first_triggers`)
        self.first_trigger: np.ndarray | None = None
        #: whether the float64 certificate floors of problems stopped above ``tol`` are
        #: computed (False where ``tol`` is an inner tolerance, :mod:`.frozen_density`)
        self.floors = True

    @property
    def matrix_free(self) -> bool:
        """Whether Newton systems are solved by conjugate gradients (the CPU) rather than from
        the dense tangent Jacobians (devices)."""
        return not dense_on(self.backend)

    # -- the iteration (an equilibrium strategy, :mod:`.equilibrium`) -----------------------
    def init(self, system: System, max_iter: int) -> _NewtonState:
        """Every problem at its first point: the system's ``z_init``, else the state of its
        ``M_init``, else of m0 at all times (a single problem as a batch of one)."""
        be, xp, nt = self.backend, self.backend.xp, self.grid.nt
        coupling, hjb, fp = system.coupling, system.hjb, system.fp
        M_init, U_init, z_init = system.M_init, system.U_init, system.z_init
        if not system.batched:
            one = Unbatched(coupling, hjb, fp)
            coupling, hjb, fp = one, one.hjb, one.fp
            M_init = (_at_every_level(system.m0, nt, xp) if M_init is None else M_init)[None]
            U_init = None if U_init is None else U_init[None]
            z_init = None if z_init is None else z_init[None]
        if self.system_dtype != be.dtype:
            coupling = Float64State(coupling, be)
            z_init = None if z_init is None else xp.astype(z_init, xp.float64)
        M0 = _at_every_level(system.m0, nt, xp) if M_init is None else M_init
        w = coupling.state(M0) if z_init is None else coupling.project(z_init)
        s = _NewtonState.first(w, U_init, self.tol, xp)
        if self.first_trigger is not None:
            s.trigger = np.minimum(s.trigger, self.first_trigger)
        B = w.shape[0]
        s.solve = _Solve(evaluate=evaluator(coupling, hjb, fp, system.U_T, system.m0, be),
                         coupling=coupling, single=not system.batched, max_iter=max_iter,
                         tol=np.full(B, self.tol, dtype=np.float64), running=B,
                         halving_limit=np.full(B, self.max_halvings, dtype=np.int64),
                         moves=np.zeros((4, B), dtype=bool), step=np.zeros(B), w=w)
        sweeps = recorded_sweeps(hjb, fp, be, nt + 1, self.grid.nx, B)
        if sweeps is not None:   # (a coarse device batch: :mod:`.recorded_evaluation`)
            s.solve.sweeps = sweeps
            s.solve.recorded = RecordedEvaluation(partial(
                self._evaluate_and_sum, coupling, sweeps, system.U_T, system.m0))
        return s

    def done(self, s: _NewtonState) -> bool:
        """Every problem stopped, or ``max_iter`` best responses evaluated."""
        return not s.solve.running or s.solve.k >= s.solve.max_iter

    def step(self, s: _NewtonState) -> _NewtonState:
        """One batched best response at each problem's point, :func:`advance`, then the
        moves it asks for (keep, accept, new directions) and the next points."""
        be, run = self.backend, s.solve
        k = run.k = run.k + 1
        t0, status = be.stamp(), None
        if run.recorded is not None and s.cur["U"] is not None and s.cur["M"] is not None:
            t1 = be.stamp()   # (a replay's time is booked as HJB's)
            U_w, M_w, g_w, R_w, sums, status = run.recorded(run.w, s.cur["U"], s.cur["M"])
            t2 = t3 = be.stamp()
            read = to_numpy(be.xp.concat([sums, be.xp.astype(status, sums.dtype)]))
            sums, status = read[:7].astype(np.float64), read[7:]
        else:
            F, U_w, M_w, g_w, (t1, t2, t3) = run.evaluate(run.w, s.cur["U"])
            R_w = g_w - run.w
            sums = self._iteration_sums(R_w, g_w, U_w, s.cur["U"], M_w, s.cur["M"], F)
        if not np.isfinite(sums).all():
            raise SolverError(f"non-finite values at iteration {k} of Newton's method on "
                              "the coupling state: the iteration diverged")
        if status is not None:   # (as the eager sweeps' flags, read after the sums)
            run.sweeps.count_newton(status.astype(np.int64))
        advance_all = state_machine(be, run.step.size)
        residual, change_U, change_M, certificate, run.running = advance_all(
            k, sums, run.tol, run.halving_limit, run.moves, run.step, *s.host())
        if self.floor_tol is not None:   # certified within its float64 floor: no long search
            run.halving_limit[s.best <= self.floor_tol] = min(FLOOR_HALVINGS, self.max_halvings)
        history = run.history
        history.residual.append(residual)
        history.change_U.append(change_U)
        history.change_M.append(change_M)
        history.certificate.append(certificate)
        moves = run.moves
        keep, accept, fresh, certifying = moves.any(axis=1)
        if keep:   # the current point's densities are certified and the best yet
            s.kept = keep_where(s.kept, moves[KEEP], s.cur["U"], s.cur["M"], be)
        if accept:
            s.cur = self._accept(s.cur, moves[ACCEPT], run.w, R_w, U_w, M_w)
        if fresh:
            s.d = self._directions(s.d, moves[FRESH], s.cur, s.rel)
        run.stamps.append((t0, t1, t2, t3, be.stamp()))
        if run.running:
            run.w = self._next_points(run.step, moves[CERTIFYING] if certifying else None,
                                      s.cur, s.d, run.coupling)
        return s

    def certify(self, s: _NewtonState) -> FixedPointResult:
        """The best certified densities per problem (:meth:`_result`), a single problem's
        without the batch axis."""
        run = s.solve
        record_times(run.history, run.stamps, self.backend)
        out = self._result(s, run.evaluate, run.k, run.max_iter, run.history)
        if self.measures_lipschitz:
            out.lipschitz = self.lipschitz_all(s.cur, MEASURE_STEPS)
        if run.single:
            out.U, out.M = out.U[0], out.M[0]
        return out

    def _result(self, s: _NewtonState, evaluate: Any, k: int, max_iter: int,
                history: History) -> FixedPointResult:
        """The best certified densities per problem after ``k`` iterations (the accepted
        points of unfinished problems evaluated once more), with a
        :class:`~mfgwork.ConvergenceWarning` for those not converged."""
        xp = self.backend.xp
        open_ = (s.mode != DONE) & ~s.certified
        if open_.any():   # the accepted points of unfinished problems: one more evaluation
            z = s.cur["z"] + s.cur["R"]
            g = evaluate(z, s.cur["U"])[3]
            sums = to_numpy(xp.stack([xp.sum((g - z) ** 2, axis=-1), xp.sum(g * g, axis=-1)]))
            r = np.sqrt(sums[0]) / np.maximum(np.sqrt(sums[1]), 1e-300)
            better = open_ & (r < s.best)
            s.best = np.where(better, r, s.best)
            if better.any():
                s.kept = keep_where(s.kept, better, s.cur["U"], s.cur["M"], self.backend)
        converged = s.best <= (self.tol if self.floor_tol is None
                               else np.maximum(self.tol, self.floor_tol))
        self._floors(s, ~converged & s.stuck)
        done_at = np.where(s.done_at == 0, k, s.done_at)
        if not converged.all():
            warn(f"Newton's method did not reach tol={np.max(self.tol):g} for "
                 f"{int((~converged).sum())} of {converged.size} problems in {k} "
                 f"iterations (max_iter={max_iter}; final residual "
                 f"{float(np.max(s.best[~converged])):.3g}); returning the best "
                 "certified iterate with converged=False" + _amplified(s, converged)
                 + self._floors_missed(converged, s.best), ConvergenceWarning)
        amplification = np.full(converged.size, np.nan)
        certified = converged & (s.rel > 0)   # (a converged problem's last certificate)
        amplification[certified] = s.best[certified] / s.rel[certified]
        return FixedPointResult(U=s.kept["U"], M=s.kept["M"], converged=converged,
                                residual=s.best, iterations=done_at, history=history,
                                amplification=amplification)

    def _floors(self, s: _NewtonState, above: np.ndarray) -> None:
        """The float64 certificate floor (:func:`certificate_floor`, L at the accepted point)
        of each problem of ``above`` (stuck above ``tol``: its line search refused every
        step; not one that ran out of iterations, whose point says nothing of the floor),
        recorded in :attr:`reachable` with whether its certified residual reached it (so is
        each floor predicted before iterating, :mod:`mfgwork.float64_floor`). None in
        float32 (its own floor is raised before iterating,
        :func:`mfgwork.fdm1d.reachable_tol`)."""
        if not self.floors or self.system_dtype != "float64" or self.backend.eps > 1e-10:
            return
        for b, v in self.reachable.items():   # floors predicted before iterating
            v["reached"] = bool(s.best[b] <= v["tol"])
        for b in np.flatnonzero(above & np.isfinite(s.best)):
            L = self.lipschitz(b, s.cur)
            floor = certificate_floor(L, self.backend.eps)
            self.reachable[int(b)] = {"tol": floor, "lipschitz": L,
                                      "reached": bool(s.best[b] <= floor)}

    def _floors_missed(self, converged: np.ndarray, best: np.ndarray) -> str:
        """What the float64 floors above ``tol`` of the unconverged problems say (the
        largest), else nothing: the accuracy float64 resolves where the best response is
        this steep, for the problems whose residual ``best`` came within :data:`NEAR_FLOOR`
        of it; for the others, that the iteration, not the rounding, failed."""
        tol = np.broadcast_to(self.tol, converged.shape)
        missed = {b: v for b, v in self.reachable.items()
                  if not converged[b] and v["tol"] > tol[b]}
        if not missed:
            return ""
        near = {b: v for b, v in missed.items() if best[b] <= NEAR_FLOOR * v["tol"]}
        if not near:
            b, v = max(missed.items(), key=lambda item: best[item[0]] / item[1]["tol"])
            return (f". The best response amplifies a change of the coupling state up to "
                    f"L = {v['lipschitz']:.1e}-fold here, and the residual stayed "
                    f"{best[b] / v['tol']:.0e}-fold above the {v['tol']:.1e} that float64 "
                    "resolves at that slope: not the rounding, the iteration does not "
                    "converge where the best response is this steep (more noise, a smoother "
                    "payoff or a Hamiltonian nearer ½|p|² makes it milder)")
        v = max(near.values(), key=lambda v: v["tol"])
        reached = sum(w["reached"] for w in near.values())
        return (f". The best response amplifies a change of the coupling state up to "
                f"L = {v['lipschitz']:.1e}-fold here (as little noise over a long horizon or a "
                f"steep payoff make it), so float64 certifies to about {FLOOR_FACTOR:g}·L²·ε = "
                f"{v['tol']:.1e} at best; {reached} of {len(near)} reached that floor "
                "(res.extra['reachable_tol']): a tol at or above it is reachable")

    def lipschitz(self, b: int, cur: dict, steps: int = POWER_STEPS) -> float:
        """L = ‖Φ'‖ of problem ``b`` at the accepted point ``cur`` (its z and best response
        U, M): Φ'(z) = D diag(P'(z)) is similar to −S D S (S = diag(√−P')), whose largest
        eigenvalue in modulus the power iteration with ``steps`` tangent products on the
        host estimates (|P'| where a price rises)."""
        g = self.grid
        z, U, M = (np.asarray(to_numpy(cur[k][b]), dtype=np.float64) for k in ("z", "U", "M"))
        factored = product_operands(self._tangent_operands(
            U, M * g.weights, self.potential.chi, float(self.nu[b]), self._density_of(b)))
        root = np.sqrt(np.abs(self.potential.members[b].price_slope(z)))
        v, L = np.full(z.size, 1.0 / math.sqrt(z.size)), 0.0
        self.products += steps
        for _ in range(steps):
            Av = root * tangent_product(*factored, g.dt, root * v)
            L = float(np.linalg.norm(Av))
            if not L > 0.0:
                return 0.0
            v = Av / L
        return L

    def lipschitz_all(self, cur: dict, steps: int = POWER_STEPS) -> np.ndarray:
        """L = ‖Φ'‖ (:meth:`lipschitz`, ``steps`` power iterations) of every problem at the
        points ``cur`` (z, U, M, each batched): on the host one after the other, on a device
        from the dense tangent Jacobians D of all at once (:meth:`_lipschitz_dense`)."""
        if self.matrix_free:
            return np.array([self.lipschitz(b, cur, steps) for b in range(cur["z"].shape[0])])
        return self._lipschitz_dense(cur, steps)

    def _lipschitz_dense(self, cur: dict, steps: int) -> np.ndarray:
        """:meth:`lipschitz` of every problem from its dense D (B, nt, nt) on the backend: the
        same power iteration on S D S, one batched product per step."""
        import torch

        idx = np.arange(cur["z"].shape[0])
        D = self._jacobians(cur["U"], cur["M"], idx).to(torch.float64)
        root = torch.sqrt(torch.abs(self._slopes(cur["z"].to(torch.float64), idx, None)))
        v = torch.full_like(root, 1.0 / math.sqrt(root.shape[-1]))
        L = torch.zeros(root.shape[0], dtype=torch.float64, device=D.device)
        for _ in range(steps):
            Av = root * (D @ (root * v)[..., None])[..., 0]
            L = torch.linalg.vector_norm(Av, dim=-1)
            v = Av / torch.where(L > 0, L, torch.ones_like(L))[:, None]
        return to_numpy(L).astype(np.float64)

    # -- pieces ------------------------------------------------------------------------------
    def _density_of(self, b: int) -> np.ndarray | None:
        """The frozen density (nt, nx) that problem ``b``'s H sees, or None."""
        if self.density is None:
            return None
        m = self.density if self.density.ndim == 2 else self.density[b]
        return np.asarray(to_numpy(m), dtype=np.float64)

    def _accept(self, cur: dict, mask: np.ndarray, z: Any, R: Any, U: Any, M: Any) -> dict:
        if cur["R"] is None or mask.all():
            return {"z": z, "R": R, "U": U, "M": M}
        return where_rows(mask, {"z": z, "R": R, "U": U, "M": M}, cur, self.backend)

    def _iteration_sums(self, R: Any, g: Any, U: Any, U_old: Any, M: Any, M_old: Any,
                        F: Any) -> np.ndarray:
        """Per problem (rows): ‖R‖², ‖g‖², ‖U − U_old‖², ‖U‖², ‖M − M_old‖², ‖M‖², ‖F‖²
        (an old array None: no change), in the one host read of an iteration. Each is a
        sum of squares; a non-finite value anywhere in U, M or F (or R, g) makes its row
        non-finite."""
        B = R.shape[0]
        if self.backend.name == "numpy":   # one compiled pass (a tenth of the array calls' time)
            return host_sums(*(a.reshape(B, -1) for a in (
                R, g, U, U if U_old is None else U_old, M, M if M_old is None else M_old, F)),
                U_old is not None, M_old is not None)
        return to_numpy(self._sums_on_backend(R, g, U, U_old, M, M_old, F)).astype(np.float64)

    def _sums_on_backend(self, R: Any, g: Any, U: Any, U_old: Any, M: Any, M_old: Any,
                         F: Any) -> Any:
        """The rows of :meth:`_iteration_sums` (7, B) as an array of the backend, in R's
        dtype."""
        xp = self.backend.xp
        B = R.shape[0]

        def squares(a: Any) -> Any:
            a = a.reshape(B, -1)
            total = (a * a).sum(axis=-1)
            return total if total.dtype == R.dtype else xp.astype(total, R.dtype)

        rows = [squares(R), squares(g)]
        for new, old in ((U, U_old), (M, M_old)):
            if old is not None and fused_norms(new, old, smallest=1):   # one Triton pass
                from . import triton_norms

                pair = triton_norms.pair_sums(new.reshape(B, -1), old.reshape(B, -1))
                rows += [xp.astype(pair[:, 0], R.dtype), xp.astype(pair[:, 1], R.dtype)]
            else:
                rows += [0.0 * rows[0] if old is None else squares(new - old), squares(new)]
        rows.append(squares(F))
        return xp.reshape(xp.concat(rows), (len(rows), B))

    def _evaluate_and_sum(self, coupling: Any, sweeps: Any, U_T: Any, m0: Any, w: Any,
                          U: Any, M: Any) -> tuple[Any, ...]:
        """The evaluation that :mod:`.recorded_evaluation` records: the best response at w
        seeded by U (fused sweeps, their Newton status left on the device), R = g − w and
        the iteration's sums against U and M."""
        F = coupling.running_cost(w)
        U_w, status = sweeps.hjb_with_status(U_T, F, U)
        M_w = sweeps.solve_fp(U_w, m0)
        g = coupling.state(M_w)
        R = g - w
        return U_w, M_w, g, R, self._sums_on_backend(R, g, U_w, U, M_w, M, F), status

    def _next_points(self, step: np.ndarray, certify: np.ndarray | None, cur: dict, d: Any,
                     coupling: Any) -> Any:
        """z + t d (trials; ``step``: t, 0 elsewhere), Φ(z) = z + R (the problems of
        ``certify``, None: none), z (finished problems)."""
        z = cur["z"]
        if certify is None:
            return coupling.project(z + on_backend(step, z, self.backend, z.dtype)[:, None] * d)
        # the steps and the certifying problems in one copy to the backend
        t, certifying = on_backend(np.stack([step, certify]), z, self.backend, z.dtype)
        trial = coupling.project(z + t[:, None] * d)
        return self.backend.xp.where(certifying[:, None] > 0, z + cur["R"], trial)

    def _directions(self, d: Any, mask: np.ndarray, cur: dict, rel: np.ndarray) -> Any:
        """d = S⁻¹ Σ (S D S + Σ)⁻¹ S R for the problems of ``mask`` (others keep theirs;
        :func:`.potential.scaling`)."""
        idx = np.flatnonzero(mask)
        self.newton_steps += idx.size
        if self.matrix_free:
            return self._directions_krylov(d, idx, cur, rel)
        import torch

        sys_dtype = getattr(torch, self.system_dtype)
        every = idx.size == mask.size   # (no gathered copies of U and M)
        index = None if every else on_backend(idx, d, self.backend)
        z, R, U, M = (cur[k] if every else cur[k][index] for k in ("z", "R", "U", "M"))
        z, R = z.to(sys_dtype), R.to(sys_dtype)
        slope = self._slopes(z, idx, index)
        rising = slope > 0   # S and Σ of :func:`.potential.scaling`, where z is
        s, sign = torch.sqrt(torch.abs(slope)), 1.0 - 2.0 * rising.to(sys_dtype)
        spd = not bool(rising.any())   # (read before the Jacobians are queued: no wait)
        D = self._jacobians(U, M, idx).to(sys_dtype)
        A = (D + D.mT).mul_((0.5 * s)[:, :, None]).mul_(s[:, None, :])   # S ½(D + Dᵀ) S
        A.diagonal(dim1=-2, dim2=-1).add_(sign)                          # + Σ (in place)
        if spd:   # Σ = I; two triangular solves (cholesky_solve waits for the device on CUDA)
            L, info = torch.linalg.cholesky_ex(A)
            y = torch.linalg.solve_triangular(L, (s * R)[..., None], upper=False)
            v = torch.linalg.solve_triangular(L.mT, y, upper=True)[..., 0]
        else:                        # symmetric indefinite (a price rising somewhere)
            v, info = torch.linalg.solve_ex(A, (s * R)[..., None])   # one column per problem:
            v = v[..., 0]                                            # no broadcast (MPS)
        newton = torch.where(s > 0, sign * v / torch.where(s > 0, s, torch.ones_like(s)), R)
        step = torch.where((info == 0)[:, None], newton, R).to(d.dtype)
        if every:
            return step
        d = d.clone()
        d[index] = step
        return d

    def _slopes(self, z: Any, idx: np.ndarray, index: Any) -> Any:
        """P'(z) (k, nt) of the problems ``idx`` (``index``: the same on z's device, None:
        every problem) as a tensor where z is and in its dtype: computed there in float64
        where the potential allows (:meth:`MemberPotentials.price_slope_on`), else from the
        host's float64 (on MPS, which has no float64, always)."""
        import torch

        if z.dtype == torch.float64:
            slope = self.potential.price_slope_on(z, idx, index)
            if slope is not None:
                return slope
        return torch.as_tensor(self.potential.price_slope(to_numpy(z).astype(np.float64), idx),
                               dtype=z.dtype, device=z.device)

    def _directions_krylov(self, d: Any, idx: np.ndarray, cur: dict, rel: np.ndarray) -> Any:
        """The Newton directions on the CPU, matrix-free: conjugate gradients on
        (S D S + I) v = S R, compiled whole (:func:`.fdm.tangent.newton_direction`; MINRES
        on (S D S + Σ) v = S R where a price rises somewhere, :func:`.potential.scaling`),
        each product D p by the compiled tangent sweeps of one direction (O(nt nx), against
        O(nt² nx) for D itself), to the relative accuracy min(10⁻², r) (r: the relative
        residual of z; an inexact Newton step)."""
        g = self.grid
        out = np.array(to_numpy(d), dtype=np.float64)
        for b in idx:
            z, R, U, M = (np.asarray(to_numpy(cur[k][b]), dtype=np.float64)
                          for k in ("z", "R", "U", "M"))
            ops = self._tangent_operands(U, M * g.weights, self.potential.chi,
                                         float(self.nu[b]), self._density_of(b))
            factored = product_operands(ops)
            slope = np.asarray(self.potential.members[b].price_slope(z), dtype=np.float64)
            rtol, steps = min(ETA, max(float(rel[b]), 1e-14)), 4 * z.size
            if (slope > 0).any():   # a price rises: symmetric indefinite
                s, sign = scaling(slope)
                v = minimal_residual(self._product(factored, s, sign), s * R, rtol, steps)
                out[b] = np.where(s > 0, sign * v / np.where(s > 0, s, 1.0), R)
            else:
                out[b], products = newton_direction(*factored, g.dt, slope, R, rtol, steps)
                self.products += products
        xp = self.backend.xp
        return xp.asarray(out, device=d.device) if self.backend.name != "numpy" else out

    @cached_property
    def _tangent_operands(self) -> TangentOperands:
        """The operands of the tangent sweeps on this grid (the CPU's matrix-free systems)."""
        return TangentOperands(self.grid, self.hamiltonian)

    def _product(self, factored: tuple[Any, ...], s: np.ndarray, sign: np.ndarray) -> Any:
        """p ↦ (S D S + Σ) p by the compiled tangent sweeps of the ``factored`` operands
        (:func:`.potential.product_operands`), counted in :attr:`products`."""
        def apply(p: np.ndarray) -> np.ndarray:
            self.products += 1
            return s * tangent_product(*factored, self.grid.dt, s * p) + sign * p
        return apply

    @property
    def jacobian_kernels(self) -> str:
        """What computes the dense tangent Jacobians here (devices only): the fused Triton
        sweeps carry every model the fused sweeps carry (:meth:`.fdm.kernels.FusedTriton.
        carries`), a frozen density included; the torch sweeps any model."""
        from .fdm.kernels import TRITON

        if self.backend.kind == "cuda" and TRITON.carries(self.hamiltonian):
            return "fused Triton tangent sweeps"
        return "torch tangent sweeps (parallel cyclic reduction)"

    def _jacobians(self, U: Any, M: Any, idx: np.ndarray) -> Any:
        """D (k, nt, nt) of the problems ``idx`` (U, M their best responses)."""
        import torch

        from .fdm import tangent_torch, triton_tangent

        g = self.grid
        fused = self.jacobian_kernels.startswith("fused")
        if fused:
            per_member = triton_tangent.workspace_items(g.nx, g.nt)
        else:
            per_member = g.nx * g.nt * (g.nt + 40)
        dtype = getattr(torch, self.jacobian_dtype)
        on = {"dtype": dtype, "device": U.device}
        key = (self.jacobian_dtype, str(U.device))
        if key not in self._grid_tensors:   # (the grid's constants, moved once)
            self._grid_tensors[key] = tuple(torch.as_tensor(a, **on) for a in (
                self.potential.chi, 1.0 / (g.h * g.weights), g.weights, g.x))
        chi, inv_hw, weights, x = self._grid_tensors[key]
        nu = on_backend(self.nu[idx], U, self.backend, dtype)
        per_member *= np.dtype(self.jacobian_dtype).itemsize
        chunk = max(1, int(self.jacobian_memory // per_member))
        m = None if self.density is None else torch.as_tensor(self.density, **on)
        if m is not None and m.ndim == 3:   # one frozen density per problem
            m = m[torch.as_tensor(idx, device=m.device)]

        def jacobian(U: Any, mu: Any, nu: Any, m: Any) -> Any:
            if fused:
                return triton_tangent.tangent_jacobian_triton(U, mu, chi, nu, g.h, g.dt, inv_hw,
                                                              hamiltonian=self.hamiltonian,
                                                              x=x, m=m)
            return tangent_torch.tangent_jacobian_torch(U, mu, chi, nu, g.h, g.dt, inv_hw,
                                                        self.hamiltonian, x, m)

        parts = [jacobian(U[i:i + chunk].to(dtype), M[i:i + chunk].to(dtype) * weights,
                          nu[i:i + chunk],
                          m[i:i + chunk] if m is not None and m.ndim == 3 else m)
                 for i in range(0, idx.size, chunk)]
        return parts[0] if len(parts) == 1 else torch.cat(parts)
