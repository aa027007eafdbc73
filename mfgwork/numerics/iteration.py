"""The fixed-point (Picard) coupling of HJB and FP, with damping and Anderson acceleration.

One evaluation of the fixed-point map Φ takes the coupling state z (see
:class:`mfgwork.problems.base.Coupling`: the density path, or for Santa Fe only the
attendance path A(t)), builds the running cost, solves HJB backward (the best response
U = BR(z)), then FP forward, and returns the new state Φ(z) = state(M(BR(z))). The schemes
below choose the next z from z and Φ(z):

- :class:`Relaxation`: z ← z + ω (Φ(z) − z)   (ω = 1 is plain Picard)
- :class:`FictitiousPlay`: ω_k = 1/(k + 1)
- :class:`Anderson` (default): type-II Anderson mixing of depth m with mixing factor β,
  safeguarded: a step that makes the residual grow restarts the mixing from the best iterate
  with a halved β (damping).

Convergence means the fixed point is reached. The residual of an iterate is
r(z) = ‖Φ(z) − z‖₂ / ‖Φ(z)‖₂. The solver returns densities M = M(BR(z_k)) of some iterate, and
their own residual (what :meth:`mfgwork.Result.check` recomputes) is that of Φ(z_k):
r(M) = ‖Φ(Φ(z_k)) − Φ(z_k)‖ / ‖Φ(Φ(z_k))‖, which can be far larger than r(z_k) when Φ is steep
(its Lipschitz constant scales like 1/ε for Santa Fe). So when r(z_k) is small enough the next
iterate is the plain Picard step z_{k+1} = Φ(z_k), whose evaluation certifies M_k; the
iteration stops when a certified residual is ≤ ``tol``. A failed certificate lowers the
threshold for the next try by the observed amplification. Differences of U and M between
iterates are recorded for the history only; they never stop the iteration.

:class:`FixedPoint` is this iteration as an equilibrium strategy (:mod:`.equilibrium`: its
state a :class:`PicardState`, stepped by the one driver); :func:`fixed_point` runs it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from ..core.backend import Backend, to_numpy
from ..core.errors import (
    ConvergenceWarning,
    ParameterError,
    SolverError,
    check_flag,
    check_int,
    check_real,
    warn,
)
from ..core.types import Array
from .equilibrium import System, solve


class HJBSolver(Protocol):
    """U (levels 0..nt) with U[..., nt, :] = U_T, for the running costs F (levels 0..nt−1);
    ``guess`` (or None) seeds Newton's method; ``density`` (passed only where H depends on
    m, see :func:`frozen_args`): the densities m^1..m^nt that H sees."""

    def __call__(self, U_T: Array, F: Array, guess: Array | None,
                 density: Array | None = None) -> Array: ...


class FPSolver(Protocol):
    """Densities M (levels 0..nt) from m0, transported by the control −∂p H(x, ∂x u, m) of U
    (``density`` as for :class:`HJBSolver`)."""

    def __call__(self, U: Array, m0: Array, density: Array | None = None) -> Array: ...


class CouplingMap(Protocol):
    """What the iteration mixes: ``state(M)`` (e.g. the attendance path), the running cost of
    a state, and the projection of an extrapolated state onto admissible values."""

    def state(self, M: Array) -> Array: ...

    def running_cost(self, z: Array) -> Array: ...

    def project(self, z: Array) -> Array: ...


class Fallback(Protocol):
    """Continues a single stagnating solve, one step at a time (:class:`FixedPoint` steps
    it): ``init`` from the coupling state z of the iterate (U, M), with the best response
    ``evaluate(z, guess) -> (F, U, M, state(M), times)``, for at most ``budget`` steps, gives
    its run, which has U, M (the best certified solution), ``residual`` and ``records`` (one
    dict per step: residual, change_U, change_M, time); ``step`` takes one step, ``done``
    says whether it stops."""

    def init(self, evaluate: Any, z: Array, U: Array, M: Array, budget: int) -> Any: ...

    def step(self, run: Any) -> Any: ...

    def done(self, run: Any) -> bool: ...


class Narrowing(Protocol):
    """The best response ``evaluate(z, guess) -> (F, U, M, state(M), times)`` and the accuracy
    hook (see :func:`fixed_point`'s ``accuracy``) of the problems at ``rows`` of a batch."""

    def __call__(self, rows: np.ndarray
                 ) -> tuple[Any, Callable[[float | np.ndarray | None], None]]: ...


class Mixer(Protocol):
    """The running state of one solve's mixing: the next coupling state from the current one
    and its image."""

    def update(self, k: int, z: Array, gz: Array, xp: Any) -> Array: ...


class IterationScheme:
    """Chooses the next coupling state from the current one and its image. A scheme holds
    only its settings: :meth:`start` gives each solve a fresh :class:`Mixer` (the scheme itself
    when it needs no memory), so one scheme object may serve any number of solves, and a
    scheme named by a string behaves as the instance of its class."""

    @property
    def newton_continuation(self) -> bool:
        """Whether a single solve that stalls with this scheme is continued by Newton's
        method on the potential, where the problem declares one."""
        return False

    @property
    def geometric(self) -> bool:
        """Whether the scheme's residual falls geometrically where it converges, so that
        :class:`FixedPoint`'s tests of stagnation apply: a residual that stopped halving has
        its lowest iterate certified every ``patience`` iterations, and is ended as stalled
        after ``give_up`` refusals."""
        return True

    def start(self, batched: bool = False) -> Mixer:
        """The mixer of one solve. ``batched``: the first axis of z indexes independent
        problems, each mixed on its own."""
        return self

    def update(self, k: int, z: Array, gz: Array, xp: Any) -> Array:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"scheme": type(self).__name__}


@dataclass(frozen=True)
class Relaxation(IterationScheme):
    """z ← z + ω (Φ(z) − z), 0 < ω ≤ 1."""

    omega: float = 0.5

    def __post_init__(self) -> None:
        object.__setattr__(self, "omega", check_real("omega", self.omega, low=0.0, high=1.0,
                                                     high_open=False))

    def update(self, k: int, z: Array, gz: Array, xp: Any) -> Array:
        return z + self.omega * (gz - z)

    def describe(self) -> dict[str, Any]:
        return {"scheme": "relaxation", "omega": self.omega}


@dataclass(frozen=True)
class FictitiousPlay(IterationScheme):
    """z ← z + (Φ(z) − z)/(k + 1): the running average of best responses. Its residual
    falls like 1/k, halving only as k doubles: the halving tests do not apply (a jump to the
    lowest iterate's image would undo the average), and a solve runs to ``tol`` or
    ``max_iter``."""

    @property
    def geometric(self) -> bool:
        return False

    def update(self, k: int, z: Array, gz: Array, xp: Any) -> Array:
        return z + (gz - z) / (k + 1)

    def describe(self) -> dict[str, Any]:
        return {"scheme": "fictitious_play"}


#: Largest Anderson depth accepted: each past state costs a copy of the coupling state, and
#: the least-squares problem of the mixing has depth × depth entries.
MAX_DEPTH = 1000


@dataclass(frozen=True)
class Anderson(IterationScheme):
    """Safeguarded type-II Anderson acceleration (Walker & Ni 2011) with mixing factor β.

    With residuals r_k = Φ(z_k) − z_k and the last ``depth`` differences ΔZ, ΔR:
    γ = argmin ‖r_k − ΔR γ‖₂² + λ tr(ΔRᵀΔR) ‖γ‖₂², then z_{k+1} = z_k + β r_k − (ΔZ + β ΔR) γ.
    ``column_scaling``: the regularization λ Σ_j ‖ΔR_j‖₂² γ_j² instead, each difference
    against its own size (the least-squares problem of the columns scaled to unit norm), so
    that the large differences of a solve's first steps do not drown the small recent ones
    in a regularization scaled by the whole history (101² room without congestion: 14 best
    responses with the trace, 7 with the columns; strong congestion the same).

    Safeguard (per problem of a batch): when ‖r_k‖ exceeds ``restart`` times the smallest
    residual seen so far, the step is rejected: the mixing restarts from the best iterate with
    β halved (down to ``min_mixing``), i.e. a damped step; β doubles back (up to ``mixing``)
    at each new best. The small least-squares problems are solved on the arrays' device
    (``linalg.solve``, batched), without a host round trip. The regularization λ keeps them
    well conditioned near convergence, so round-off differences between backends are not
    amplified. The history lives in the :class:`AndersonMixer` of each solve
    (:meth:`start`). ``newton``: a single solve that stalls is continued by Newton's method
    on the potential where the problem declares one (as for ``iteration="anderson"``);
    ``newton=False`` mixes alone.
    """


    depth: int = 5
    mixing: float = 0.1
    regularization: float = 1e-4
    restart: float = 2.0
    min_mixing: float = 1e-3
    newton: bool = True
    column_scaling: bool = False

    def __post_init__(self) -> None:
        checked = {
            "depth": check_int("depth", self.depth, low=0, high=MAX_DEPTH),
            "mixing": check_real("mixing", self.mixing, low=0.0, high=1.0, high_open=False),
            "regularization": check_real("regularization", self.regularization, low=0.0,
                                         low_open=False),
            "restart": check_real("restart", self.restart, low=1.0, low_open=False)}
        checked["min_mixing"] = check_real("min_mixing", self.min_mixing, low=0.0,
                                           high=checked["mixing"], high_open=False)
        check_flag("newton", self.newton)
        check_flag("column_scaling", self.column_scaling)
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def newton_continuation(self) -> bool:
        return self.newton

    def start(self, batched: bool = False) -> AndersonMixer:
        return AndersonMixer(self, batched)

    def describe(self) -> dict[str, Any]:
        return {"scheme": "anderson", "depth": self.depth, "mixing": self.mixing,
                "restart": self.restart, "newton": self.newton} | (
                    {"regularization": self.regularization, "column_scaling": True}
                    if self.column_scaling else {})


class AndersonMixer:
    """The history of one solve's Anderson mixing (see :class:`Anderson`)."""

    def __init__(self, scheme: Anderson, batched: bool) -> None:
        self.scheme = scheme
        # the differences ΔZ, ΔR live in ``depth`` slots of two (B, depth, size) buffers
        # written in place; ``order`` lists the filled slots, oldest difference first
        self._state: dict[str, Any] = {"batched": batched, "order": [], "last": None}

    def update(self, k: int, z: Array, gz: Array, xp: Any) -> Array:
        s, scheme = self._state, self.scheme
        batch = z.shape[0] if s["batched"] else 1
        zf, rf = xp.reshape(z, (batch, -1)), xp.reshape(gz - z, (batch, -1))
        rn = xp.sqrt(xp.sum(rf**2, axis=-1))
        if s["last"] is None:
            s.update(best_rn=rn, best_z=zf, best_r=rf, age=xp.zeros_like(rn),
                     beta=xp.full_like(rn, scheme.mixing))
        restart = rn > scheme.restart * s["best_rn"]
        improved = rn < s["best_rn"]
        s["best_rn"] = xp.where(improved, rn, s["best_rn"])
        s["best_z"] = xp.where(improved[:, None], zf, s["best_z"])
        s["best_r"] = xp.where(improved[:, None], rf, s["best_r"])
        beta = xp.where(restart, xp.clip(0.5 * s["beta"], scheme.min_mixing, None), s["beta"])
        s["beta"] = xp.where(improved, xp.clip(2.0 * beta, None, scheme.mixing), beta)
        s["age"] = xp.where(restart, xp.zeros_like(rn), s["age"] + 1.0)
        z0 = xp.where(restart[:, None], s["best_z"], zf)
        r0 = xp.where(restart[:, None], s["best_r"], rf)
        if s["last"] is not None and scheme.depth > 0:
            self._push(z0 - s["last"][0], r0 - s["last"][1], xp)
        s["last"] = (z0, r0)
        step = z0 + beta[:, None] * r0
        if s["order"]:
            step = step - self._correction(s, r0, beta, xp)
        return xp.reshape(step, z.shape)

    def _push(self, dz: Array, dr: Array, xp: Any) -> None:
        """Store the newest differences, over the oldest once ``depth`` are held."""
        s, depth = self._state, self.scheme.depth
        if "dZ" not in s:
            shape = (dz.shape[0], depth, dz.shape[1])
            s["dZ"] = xp.zeros(shape, dtype=dz.dtype, device=_device(dz))
            s["dR"] = xp.zeros(shape, dtype=dz.dtype, device=_device(dz))
            # per slot, the steps back to the older of the two entries its difference
            # joins (empty: inf), kept on the device (a copy from the host would wait for it)
            s["ages"] = xp.full((depth,), math.inf, dtype=dz.dtype, device=_device(dz))
            # ΔRᵀΔR, kept up to date a row and a column at a time (one pass over ΔR, where
            # the whole product is a matrix product of two long thin matrices: on an H100,
            # 64 rooms' histories, 8.8 ms a product against 1.2 ms a pass)
            s["gram"] = xp.zeros((dz.shape[0], depth, depth), dtype=dz.dtype,
                                 device=_device(dz))
        order = s["order"]
        slot = len(order) if len(order) < depth else order.pop(0)
        s["dZ"][:, slot, :] = dz
        s["dR"][:, slot, :] = dr
        row = (s["dR"] @ dr[..., None])[..., 0]   # (B, depth): every slot's ΔR against dr
        s["gram"][:, slot, :] = row
        s["gram"][:, :, slot] = row
        s["ages"] = s["ages"] + 1.0
        s["ages"][slot] = 1.0
        order.append(slot)

    def _correction(self, s: dict, r: Array, beta: Array, xp: Any) -> Array:
        """(ΔZ + β ΔR) γ over the differences younger than each problem's last restart: the
        small system on all ``depth`` slots, the empty and the too old ones masked (γ = 0)."""
        depth, dev = self.scheme.depth, _device(r)
        # the difference j-th oldest (of n) joins the entries n - j and n - j - 1 steps back:
        # valid if both follow the problem's last restart; empty slots never
        valid = xp.astype(s["ages"][None, :] < s["age"][:, None], r.dtype)  # (B, depth)
        dZ, dR = s["dZ"], s["dR"]
        gram = s["gram"] * (valid[:, :, None] * valid[:, None, :])
        rhs = (dR @ r[..., None]) * valid[..., None]
        eye = xp.eye(depth, dtype=r.dtype, device=dev)
        if self.scheme.column_scaling:   # columns of unit norm; empty ones held at γ = 0
            norms = xp.sum(gram * eye, axis=-1)   # (B, depth): ‖ΔR_j‖₂²
            held = norms > 0.0
            inv = xp.where(held, 1.0 / xp.sqrt(xp.where(held, norms, 1.0)), 0.0 * norms)
            unit = gram * inv[:, :, None] * inv[:, None, :]
            diagonal = self.scheme.regularization + xp.astype(~held, r.dtype)
            gamma = _solve(unit + diagonal[:, :, None] * eye, rhs * inv[..., None], xp)
            gamma = gamma * inv[..., None]   # (B, depth, 1)
        else:
            scale = xp.sum(xp.sum(gram * eye, axis=-1), axis=-1)
            shift = self.scheme.regularization * scale + xp.astype(scale == 0.0, r.dtype)
            gamma = _solve(gram + shift[:, None, None] * eye, rhs, xp)  # (B, depth, 1)
        weights = xp.permute_dims(gamma, (0, 2, 1))  # (B, 1, depth): γᵀ ΔZ + β γᵀ ΔR
        return (weights @ dZ + beta[:, None, None] * (weights @ dR))[:, 0, :]


def _device(a: Array) -> Any:
    import array_api_compat

    return array_api_compat.device(a)


def _solve(a: Array, b: Array, xp: Any) -> Array:
    """``linalg.solve`` without a host synchronisation: torch's ``solve`` checks on the host
    that no system is singular (a wait for the device on CUDA), ``solve_ex`` does not (the
    regularized systems of the mixing are positive definite; a non-finite one gives
    non-finite values, which the stopping test reports)."""
    import array_api_compat

    if array_api_compat.is_torch_array(a):
        import torch

        return torch.linalg.solve_ex(a, b)[0]
    return xp.linalg.solve(a, b)


def _named(scheme: IterationScheme) -> str:
    """The iteration of ``scheme`` in words, for messages ("the Anderson iteration")."""
    described = scheme.describe()
    name = described.get("scheme", type(scheme).__name__)
    if name == "relaxation":
        omega = described.get("omega")
        return "the Picard iteration" + ("" if omega == 1.0 else f" (relaxed, omega={omega:g})")
    words = {"anderson": "Anderson", "fictitious_play": "fictitious play"}.get(name, name)
    return f"the {words} iteration"


SCHEMES = {"anderson": Anderson, "relaxation": Relaxation, "fictitious_play": FictitiousPlay,
           "picard": lambda: Relaxation(1.0)}


def check_stopping(tol: object, max_iter: object) -> tuple[float, int]:
    """``tol`` (> 0 and ≤ 1: a relative residual) and ``max_iter`` (≥ 1) checked: the
    stopping options of every solve."""
    return (check_real("tol", tol, low=0.0, high=1.0, high_open=False),
            check_int("max_iter", max_iter, low=1))


#: The scheme of ``iteration=None`` (a scheme holds no state between solves: one serves all).
DEFAULT_SCHEME = Anderson()


def make_scheme(iteration: str | IterationScheme | None) -> IterationScheme:
    """An :class:`IterationScheme` from a name or an instance (None: the default Anderson)."""
    if iteration is None:
        return DEFAULT_SCHEME
    if isinstance(iteration, IterationScheme):
        return iteration
    if isinstance(iteration, str) and iteration in SCHEMES:
        return SCHEMES[iteration]()
    raise ParameterError(f"iteration={iteration!r} is invalid: must be an IterationScheme or "
                         f"one of {', '.join(map(repr, SCHEMES))}")


@dataclass
class History:
    """Per iteration: the fixed-point residual r(z_k) of the iterate, the relative changes of
    U and M, and the wall time of each phase (seconds). In a batch, the largest over the
    problems that have not yet converged. Iterations of a fallback (Newton's method) record
    the certified residual of their solution and their whole wall time as coupling time.
    ``certificate``: whether the iteration's residual certifies densities the solve may return
    (Φ evaluated at Φ of an earlier iterate, or a fallback's step) rather than measuring a new
    iterate; in a batch, that of the problem of the largest residual."""

    residual: list[float] = field(default_factory=list)
    change_U: list[float] = field(default_factory=list)
    change_M: list[float] = field(default_factory=list)
    time_hjb: list[float] = field(default_factory=list)
    time_fp: list[float] = field(default_factory=list)
    time_coupling: list[float] = field(default_factory=list)
    certificate: list[bool] = field(default_factory=list)

    def continued(self, record: dict[str, float]) -> None:
        """A fallback's step (:class:`Fallback`): its certified residual and changes, its
        whole time as coupling time."""
        self.residual.append(record["residual"])
        self.change_U.append(record["change_U"])
        self.change_M.append(record["change_M"])
        self.time_hjb.append(0.0)
        self.time_fp.append(0.0)
        self.time_coupling.append(record["time"])
        self.certificate.append(True)

    def as_dict(self) -> dict[str, list[float]]:
        return {k: list(v) for k, v in self.__dict__.items()}


@dataclass
class FixedPointResult:
    """What :func:`fixed_point` returns. ``converged``, ``residual``, ``iterations`` and
    ``status`` are per problem (length 1 unless batched); ``residual`` is that of the
    returned M, i.e. ‖Φ(state(M)) − state(M)‖ / ‖Φ(state(M))‖ (inf where it was never
    evaluated); ``status``: "converged", "max_iter" (the budget ran out) or "stalled" (the
    iteration gave up before; None: not told, see :func:`mfgwork.results.derive_status`)."""

    U: Array
    M: Array
    converged: np.ndarray
    residual: np.ndarray
    iterations: np.ndarray
    history: History
    status: np.ndarray | None = None
    #: evaluations of Φ made again at a finer accuracy (inexact Picard, see
    #: :func:`fixed_point`'s ``accuracy``), beyond one per iteration
    reevaluations: int = 0
    #: L = ‖Φ'‖ per problem at the last point, where the iteration measured it (a float64
    #: coarse stage: :attr:`~mfgwork.numerics.batch_newton.BatchNewton.measures_lipschitz`)
    lipschitz: np.ndarray | None = None
    #: per problem, its certified residual over the relative residual of the iterate it
    #: certified, where it converged (NaN elsewhere; Newton on a coupling state)
    amplification: np.ndarray | None = None


#: Inexact Picard (:func:`fixed_point`'s ``accuracy``): an evaluation made for the residual s
#: that finds a residual below RESOLVED · s is made again at the accuracy of what it found.
RESOLVED = 1e-2

#: A batch with ``narrow`` (:func:`fixed_point`) evaluates only the problems still iterating
#: once they are at most this fraction of the problems it evaluates.
NARROW = 0.75

#: Values per problem from which a relative change on CUDA is one fused Triton pass
#: (:mod:`.triton_norms`): the U and M of a solve, not the coupling states.
FUSED_NORMS_FROM = 1 << 14


def relative_residual(gz: Array, z: Array, xp: Any, batched: bool) -> Array:
    """‖gz − z‖₂ / ‖gz‖₂, per problem when ``batched`` (first axis); always shaped (B,)."""
    batch = z.shape[0] if batched else 1
    g, zz = xp.reshape(gz, (batch, -1)), xp.reshape(z, (batch, -1))
    if fused_norms(g, zz):
        from . import triton_norms

        diff, size = triton_norms.pair_norms(g, zz)
    else:
        diff = xp.linalg.vector_norm(g - zz, axis=-1)   # each norm one pass over its array
        size = xp.linalg.vector_norm(g, axis=-1)
    return diff / xp.clip(size, 1e-300, None)


def fused_norms(a: Array, b: Array, smallest: int = FUSED_NORMS_FROM) -> bool:
    """Whether the two norms of a relative change run as one Triton pass: both contiguous
    CUDA tensors of one dtype and shape, of at least ``smallest`` values per problem, Triton
    installed."""
    import array_api_compat

    if not (array_api_compat.is_torch_array(a) and array_api_compat.is_torch_array(b)):
        return False
    if a.device.type != "cuda" or a.shape[-1] < smallest:
        return False
    from .particles.triton_kernels import triton_available

    return (b.device == a.device and b.dtype == a.dtype and b.shape == a.shape
            and a.is_contiguous() and b.is_contiguous() and triton_available())


def _where(mask: Array, a: Array, b: Array, xp: Any, batched: bool) -> Array:
    """a where ``mask`` (shape (B,)) else b, broadcast over the trailing axes."""
    if not batched:
        mask = mask[0]
    return xp.where(xp.reshape(mask, mask.shape + (1,) * (a.ndim - mask.ndim)), a, b)


def fixed_point(coupling: CouplingMap, hjb: HJBSolver, fp: FPSolver, *, m0: Array,
                U_T: Array, nt: int, backend: Backend, scheme: IterationScheme, tol: float,
                max_iter: int, progress: Any = None, batched: bool = False,
                M_init: Array | None = None, U_init: Array | None = None,
                z_init: Array | None = None, fallback: Fallback | None = None, stall: int = 25,
                patience: int = 10, give_up: int = 5,
                accuracy: Callable[[float | np.ndarray | None], None] | None = None,
                narrow: Narrowing | None = None) -> FixedPointResult:
    """The :class:`FixedPoint` iteration of ``scheme`` on the system of these arguments
    (:class:`~.equilibrium.System`), run by :func:`.equilibrium.solve`."""
    strategy = FixedPoint(scheme, tol, fallback=fallback, stall=stall, patience=patience,
                          give_up=give_up, accuracy=accuracy, narrow=narrow)
    system = System(coupling, hjb, fp, m0, U_T, nt, backend, batched=batched, M_init=M_init,
                    U_init=U_init, z_init=z_init)
    return solve(strategy, system, max_iter=max_iter, progress=progress)


class FixedPoint:
    """Iterate z ← scheme(z, Φ(z)) until the returned densities have residual ≤ ``tol``: an
    equilibrium strategy (:mod:`.equilibrium`) whose state is a :class:`PicardState`.

    The first state is that of agents who do not move (m(t) = m0), or the system's
    ``M_init``/``U_init`` (a warm start), or its coupling state ``z_init``. ``batched``: arrays
    carry a leading axis of independent problems, each with its own mixing, certificate and
    stopping test; the solve ends when all have converged. While the iterate residual of a
    problem has not halved for a multiple of ``patience`` iterations, its lowest iterate is
    certified by the next evaluation (so a certificate does not wait for a residual below the
    rounding floor); after ``give_up`` refused certificates without halving (and no fallback)
    the problem stops iterating, not converged. One host synchronisation per iteration (the
    stopping test; with ``accuracy``, a second one reads the evaluation's residual). Returns
    the best certified iterate per problem; a problem that does not converge in ``max_iter``
    gets the best iterate found, its residual computed by one more evaluation,
    ``converged=False`` and a :class:`~mfgwork.ConvergenceWarning`.

    ``fallback`` (single problems only; e.g. Newton's method on a potential, see
    :mod:`mfgwork.numerics.potential`): when the scheme stagnates (the residual of the best
    iterate has not halved in ``stall`` iterations) or, when ``max_iter`` ≥ 2 ``stall``, half
    of it passes without convergence (slow progress), the fallback continues from the best
    iterate with the remaining iterations, and the better certified solution of the two is
    returned.

    ``accuracy`` (inexact Picard): called before each evaluation with the residual s that
    evaluation is to resolve, max(tol, the problem's lowest iterate residual; 1 before the
    first), so that the solvers need not resolve far below it: a float for a single
    problem, per problem (host (B,)) in a batch, each problem at its own accuracy. An
    evaluation that finds a residual below :data:`RESOLVED` · s (it fell faster than its
    accuracy followed: the value and Anderson's history would carry the evaluation's error)
    is made again, before anything uses it, at s = that residual for the problems that found
    one, from the U it found (the other problems' solves start at their end). An evaluation
    that certifies follows a residual ≤ tol, so it is made at the accuracy of ``tol``.
    Called with None (the solvers' exact accuracy) when the iteration ends.

    ``narrow`` (batches): ``narrow(rows)`` gives the evaluation Φ and the accuracy hook of the
    problems at ``rows`` (host indices) alone. Once the problems still iterating are at most
    :data:`NARROW` of those evaluated, only they are evaluated: a settled problem's state no
    longer changes, so its rows keep the arrays of its last evaluation.
    """

    def __init__(self, scheme: IterationScheme, tol: float, *, fallback: Fallback | None = None,
                 stall: int = 25, patience: int = 10, give_up: int = 5,
                 accuracy: Callable[[float | np.ndarray | None], None] | None = None,
                 narrow: Narrowing | None = None) -> None:
        self.scheme, self.tol, self.fallback = scheme, tol, fallback
        self.stall, self.patience, self.give_up = stall, patience, give_up
        self.accuracy, self.narrow = accuracy, narrow

    def init(self, system: System, max_iter: int) -> PicardState:
        loop = _PicardLoop(system, scheme=self.scheme, tol=self.tol, accuracy=self.accuracy,
                           narrow=self.narrow)
        return PicardState(loop, max_iter,
                           continues=self.fallback is not None and not system.batched)

    def done(self, state: PicardState) -> bool:
        if state.run is not None:
            return self.fallback.done(state.run)
        return state.k >= state.max_iter or state.finished

    def step(self, state: PicardState) -> PicardState:
        """One evaluation of Φ and the scheme's next state, or, once stalled, one step of the
        fallback (the first from the lowest-residual iterate, with the iterations left)."""
        if state.stalled:
            loop = state.loop
            if state.run is None:
                loop.close()
                state.run = self.fallback.init(loop.full, loop.lowest.z, loop.lowest.U,
                                               loop.lowest.M, state.max_iter - state.k)
            recorded = len(state.run.records)
            state.run = self.fallback.step(state.run)
            for record in state.run.records[recorded:]:
                loop.history.continued(record)
            return state
        self._iterate(state)
        return state

    def _iterate(self, state: PicardState) -> None:
        """Iteration k of the scheme: Φ(z), the certificate, the kept iterates, the stopping
        test; the next state is computed before the host synchronisation, so the device
        mixes while the host prepares; it is dropped when the solve stops here."""
        loop, max_iter = state.loop, state.max_iter
        k = state.k = state.k + 1
        t0 = loop.backend.stamp()
        F, U_new, M_new, res, times = loop.evaluate()
        geometric = self.scheme.geometric
        gives_up = geometric and not state.continues
        better, improved, settled = loop.observe(k, res, give_up=self.give_up if gives_up
                                                 else None)
        step = (loop.state.advance(k, loop.z, loop.gz, res, settled, loop.lowest, loop.mixer,
                                   loop.coupling, loop.xp, loop.batched,
                                   patience=self.patience if geometric else None,
                                   last=k == max_iter - 1)
                if k < max_iter else None)
        read = state.read = loop.read(k, F, U_new, M_new, res, better, improved, settled)
        loop.keep(k, read, U_new, M_new)
        loop.record(k, read)
        state.finished = finished = bool(read.settled.all())
        if state.continues and not finished:
            state.stalled = bool(read.stale[0] >= self.stall
                                 or (max_iter >= 2 * self.stall and k >= max_iter // 2))
        if not (finished or state.stalled) and step is not None:
            loop.z = step
            loop.state.commit()
            loop.rechecked = read.recheck
        loop.U, loop.M = U_new, M_new
        loop.stamps.append((t0, *times, loop.backend.stamp()))

    def certify(self, state: PicardState) -> FixedPointResult:
        return state.loop.finish(state)


@dataclass
class PicardState:
    """A :class:`FixedPoint` solve between its steps: the ``loop`` (the iterate, the kept
    iterates, the stopping test's device state and the history), the iterations ``k`` taken
    of ``max_iter`` and the last host ``read``; ``continues``: a fallback continues the solve
    where it stalls; ``finished``: every problem settled; ``stalled``: the scheme stagnated;
    ``run``: the fallback's run once it continues."""

    loop: _PicardLoop
    max_iter: int
    continues: bool = False
    k: int = 0
    read: _Read | None = None
    finished: bool = False
    stalled: bool = False
    run: Any = None

    @property
    def history(self) -> History:
        return self.loop.history

    @property
    def evaluations(self) -> int:
        """The iterations recorded: the scheme's, then the fallback's steps."""
        return len(self.loop.history.residual)


#: What each iteration of :func:`fixed_point` reads on the host (one synchronisation), one
#: value per problem: the relative changes of U and M, the iterate residual, the best
#: certified residual, the refused certificates and the iterations since the residual last
#: halved, then the flags: a better certified iterate, a lower iterate residual, settled,
#: the next step certifies the lowest iterate, the step was a plain Picard step (the
#: residual is a certificate).
class _Read(NamedTuple):
    change_U: np.ndarray
    change_M: np.ndarray
    residual: np.ndarray
    best: np.ndarray
    tries: np.ndarray
    stale: np.ndarray
    better: np.ndarray
    improved: np.ndarray
    settled: np.ndarray
    recheck: np.ndarray
    picard: np.ndarray


class _PicardLoop:
    """The state of :func:`fixed_point` between iterations: the iterate (``U``, ``M``, its
    coupling state ``z`` and ``gz`` = state(Φ(z))), the kept iterates (``best`` certified,
    ``lowest`` residual), the stopping test's device state, and on the host the problems
    still iterating, the iteration each converged at and the history."""

    def __init__(self, system: System, *, scheme: IterationScheme, tol: float,
                 accuracy: Callable[[Any], None] | None, narrow: Narrowing | None) -> None:
        backend, batched, coupling = system.backend, system.batched, system.coupling
        m0, M_init, z_init = system.m0, system.M_init, system.z_init
        xp = self.xp = backend.xp
        self.backend, self.tol, self.batched = backend, tol, batched
        self.coupling = coupling
        self.accuracy, self.narrow = accuracy, narrow
        self.mixer, self.scheme = scheme.start(batched), scheme
        self.history, self.stamps = History(), []   # stamps per iteration (start, HJB start,
        self.U = system.U_init                      # FP start, FP end, end)
        self.M = xp.stack([m0] * (system.nt + 1), axis=-2) if M_init is None else M_init
        z = self.z = coupling.state(self.M) if z_init is None else coupling.project(z_init)
        n = self.n_problems = z.shape[0] if batched else 1
        dev = _device(z)
        self.inf = xp.full((n,), math.inf, dtype=z.dtype, device=dev)
        self.best = _Iterate(self.inf)     # smallest certified residual
        self.lowest = _Iterate(self.inf)   # smallest iterate residual (uncertified), its state
        self.state = _State(trigger=xp.full((n,), tol, dtype=z.dtype, device=dev),
                            picard=xp.zeros((n,), dtype=xp.bool, device=dev),
                            recheck=xp.zeros((n,), dtype=xp.bool, device=dev), anchor=self.inf,
                            stale=xp.zeros((n,), dtype=z.dtype, device=dev),
                            tries=xp.zeros((n,), dtype=z.dtype, device=dev))
        self.rechecked = np.zeros(n, dtype=bool)  # the previous step certifies lowest iterates
        self.done_at = np.zeros(n, dtype=np.int64)
        self.full = evaluator(coupling, system.hjb, system.fp, system.U_T, m0, backend)
        self.resolve = accuracy if accuracy is not None else (lambda residual: None)
        self.lowest_host = np.ones(n)   # the lowest iterate residuals, on the host
        self.iterating = np.ones(n, dtype=bool)
        self.reevaluations = 0
        self.evaluated = n  # how many problems each evaluation takes
        self.step_eval, self.step_resolve = _narrowed(self.full, None, xp, None), self.resolve
        self.rows: np.ndarray | None = None   # the rows evaluated (None: all)
        self.gz: Array | None = None
        self.closed = False   # :meth:`close` done

    def evaluate(self) -> tuple[Array, Array, Array, Array, tuple]:
        """(F, U, M, residual, stamps) of Φ at ``z`` (``gz`` updated): narrowed to the
        problems still iterating where that pays, and made again at a finer accuracy where
        it found a residual below the accuracy it was made for (:func:`fixed_point`)."""
        xp, tol = self.xp, self.tol
        scale = np.maximum(tol, self.lowest_host)   # each problem's accuracy
        still = int(self.iterating.sum())
        if (self.narrow is not None and self.batched and still < self.evaluated
                and still <= NARROW * self.evaluated):
            self.rows, self.evaluated = np.flatnonzero(self.iterating), still
            part, self.step_resolve = self.narrow(self.rows)
            self.step_eval = _narrowed(part, self.rows, xp, _device(self.z))
        guess, gz = self.U, self.gz
        while True:
            self.step_resolve(_accuracy(scale, self.rows, self.batched))
            F, U_new, M_new, gz, times = self.step_eval(self.z, guess, (self.U, self.M, gz))
            res = relative_residual(gz, self.z, xp, self.batched)
            if self.accuracy is None or not (scale > tol).any():
                break
            found = to_numpy(res)
            finer = self.iterating & (scale > tol) & (found < RESOLVED * scale)
            if not finer.any():
                break
            # made again, each problem that found a residual below its accuracy at that
            # residual, from this evaluation's U (the others' solves start where they end);
            # the time of the evaluation dropped counts as coupling
            scale = np.where(finer, np.maximum(tol, found), scale)
            guess = U_new
            self.reevaluations += 1
        self.gz = gz
        return F, U_new, M_new, res, times

    def observe(self, k: int, res: Array, give_up: int | None) -> tuple[Array, Array, Array]:
        """The certificate, the progress and the lowest iterate after an evaluation of
        residual ``res``: (better certified, lower iterate residual, settled) per problem on
        the device. Settled: certified, or (``give_up`` given) stagnant and refused its
        certificate ``give_up`` times."""
        xp = self.xp
        better = self.state.certify(res, self.best, self.inf, self.tol, xp)
        self.state.track(res, xp)
        improved = res < self.lowest.res
        self.lowest.res = xp.where(improved, res, self.lowest.res)
        self.lowest.z = self.gz if k == 1 else _where(improved, self.gz, self.lowest.z, xp,
                                                      self.batched)
        settled = self.best.res <= self.tol
        if give_up is not None:
            settled = settled | (self.state.tries >= give_up)
        return better, improved, settled

    def read(self, k: int, F: Array, U_new: Array, M_new: Array, res: Array, better: Array,
             improved: Array, settled: Array) -> _Read:
        """The iteration's :class:`_Read`, in one host synchronisation; a non-finite F, U or
        M (the iteration diverged) raises :class:`~mfgwork.SolverError`."""
        xp, batched, state = self.xp, self.batched, self.state
        U = self.U if self.U is not None else 0.0 * U_new
        values = xp.stack([relative_residual(U_new, U, xp, batched),
                           relative_residual(M_new, self.M, xp, batched), res, self.best.res,
                           state.tries, state.stale] + [
                           xp.astype(v, res.dtype)
                           for v in (better, improved, settled, state.recheck_next,
                                     state.picard)])
        size_F = xp.linalg.vector_norm(xp.reshape(F, (-1,)))   # non-finite with any of F
        values = to_numpy(xp.concat([xp.reshape(values, (-1,)), xp.reshape(size_F, (1,))]))
        size_F, rows = values[-1], np.reshape(values[:-1], (-1, self.n_problems))
        # a non-finite value in U or M makes its change non-finite
        finite = (np.isfinite(size_F), np.isfinite(rows[0]).all(), np.isfinite(rows[1]).all())
        for name, ok in zip(("running cost F", "U", "M"), finite, strict=True):
            if not ok:
                raise SolverError(f"non-finite values in {name} at Picard iteration {k}: "
                                  "the iteration diverged (try a smaller mixing factor, a "
                                  "finer time step or a smaller eps)")
        return _Read(*rows[:6], *(rows[6:] > 0))

    def keep(self, k: int, read: _Read, U_new: Array, M_new: Array) -> None:
        """The kept iterates, row by row: the best certified one from the previous iterate
        (or the lowest one it rechecked), then the lowest."""
        xp = self.xp
        if k > 1:
            self.best.take(read.better & ~self.rechecked, self.U, self.M, xp)
            self.best.take(read.better & self.rechecked, self.lowest.U, self.lowest.M, xp,
                           shared=self.lowest.owned)
        self.lowest.take(read.improved, U_new, M_new, xp)

    def record(self, k: int, read: _Read) -> None:
        """The host's bookkeeping of an iteration: the problems still iterating, the
        iteration each converged at and the history (the largest over the problems not yet
        settled or converged)."""
        self.lowest_host = np.minimum(self.lowest_host, read.residual)
        self.iterating = ~read.settled if not read.settled.all() else self.iterating
        active = ~read.settled | (self.done_at == 0)
        self.done_at[(self.done_at == 0) & (read.best <= self.tol)] = k
        history = self.history
        history.change_U.append(float(np.max(read.change_U[active])))
        history.change_M.append(float(np.max(read.change_M[active])))
        history.residual.append(float(np.max(read.residual[active])))
        history.certificate.append(of_largest(read.picard, read.residual, active))

    def close(self) -> None:
        """The scheme's iterations are over: their phase times recorded, the accuracy of the
        evaluations that follow (they certify) set to ``tol``. Once only."""
        if self.closed:
            return
        self.closed = True
        record_times(self.history, self.stamps, self.backend)
        self.resolve(self.tol)

    def finish(self, solve: PicardState) -> FixedPointResult:
        """The result of ``solve``: the best certified iterate per problem (the fallback's
        where it ran and did better; one more evaluation where nothing was certified), its
        status, and a :class:`~mfgwork.ConvergenceWarning` for the problems not converged."""
        tol, history = self.tol, self.history
        k, read, max_iter, stalled = solve.k, solve.read, solve.max_iter, solve.stalled
        residual = read.best
        self.close()
        if stalled:
            residual = _kept(solve.run, self.best)
            k = len(history.residual)
        elif not np.all(np.isfinite(residual)):  # max_iter = 1: nothing certified yet
            residual = _certify_fallback(self.best, self.lowest, self.full, self.xp,
                                         self.batched)
        self.resolve(None)
        converged = residual <= tol
        self.done_at[self.done_at == 0] = k
        gave_up = (~converged & read.settled if not stalled
                   else np.zeros(self.n_problems, dtype=bool))
        status = np.where(converged, "converged",
                          np.where(gave_up | (k < max_iter), "stalled", "max_iter"))
        if not converged.all():
            worst = float(np.max(residual[~converged]))
            why = (f"max_iter={max_iter} reached" if k >= max_iter else
                   "stalled: the residual stopped halving and its certificates were refused")
            warn(f"{_named(self.scheme)} did not reach tol={tol:g}: stopped after {k} "
                 f"iterations ({why}; {int((~converged).sum())} of {converged.size} "
                 f"problems; final residual {worst:.3g}); returning the best iterate "
                 "found with converged=False", ConvergenceWarning)
        return FixedPointResult(U=self.best.U, M=self.best.M, converged=converged,
                                residual=residual,
                                iterations=np.where(converged, self.done_at, k),
                                history=history, status=status,
                                reevaluations=self.reevaluations)


class _Iterate:
    """A kept iterate per problem: its residual (on the device, (B,)), U, M and the coupling
    state z = state(M). U and M are the arrays of one evaluation, shared and never written,
    until rows of different iterates mix; from then on the slot owns copies and writes only
    the rows that change, chosen on the host (no full-array ``where`` passes, which would
    dominate an iteration of a large batch)."""

    def __init__(self, res: Array) -> None:
        self.res, self.z = res, None
        self.U: Array | None = None
        self.M: Array | None = None
        self.owned = False

    def take(self, rows: np.ndarray, U: Array, M: Array, xp: Any, shared: bool = False
             ) -> None:
        """U and M of the problems ``rows`` (host booleans, (B,)) from another iterate (the
        first take fills every row: the others keep an infinite residual); ``shared``: U, M
        are another slot's own arrays (copied, never referenced)."""
        if self.U is None or rows.all():
            self.U, self.M = (_copy(U, xp), _copy(M, xp)) if shared else (U, M)
            self.owned = shared
            return
        if not rows.any():
            return
        if not self.owned:
            self.U, self.M, self.owned = _copy(self.U, xp), _copy(self.M, xp), True
        idx = xp.asarray(np.flatnonzero(rows), device=_device(U))
        self.U[idx, ...] = U[idx, ...]
        self.M[idx, ...] = M[idx, ...]


def _copy(a: Array, xp: Any) -> Array:
    return xp.asarray(a, copy=True)


@dataclass
class _State:
    """The per-problem device state of the stopping test and of the certificates (all (B,)):
    the residual below which the next step is a plain Picard step (``trigger``), whether the
    current step is one (``picard``) and whether it certifies a lowest iterate (``recheck``),
    the residual when it last halved (``anchor``), the iterations since (``stale``) and the
    refused rechecks since (``tries``). :meth:`advance` prepares the next step's values,
    :meth:`commit` makes them current."""

    trigger: Array
    picard: Array
    recheck: Array
    anchor: Array
    stale: Array
    tries: Array
    prev_res: Array | None = None
    picard_next: Array | None = None
    recheck_next: Array | None = None
    prev_res_next: Array | None = None

    def __post_init__(self) -> None:
        self.recheck_next = self.recheck

    def certify(self, res: Array, best: _Iterate, inf: Array, tol: float, xp: Any) -> Array:
        """Where the current state is Φ of the previous one (``picard``), ``res`` certifies
        the previous iterate: the best certified residual is updated, a refused certificate
        lowers the trigger by the observed amplification. Returns the rows improved (none
        before a step was taken: no previous iterate)."""
        if self.prev_res is None:
            return xp.zeros_like(self.picard)
        cert = xp.where(self.picard, res, inf)
        better = cert < best.res
        amplification = xp.clip(xp.where(self.picard, cert, 1.0), 1e-300, None) / xp.clip(
            self.prev_res, 1e-300, None)
        self.trigger = xp.where(self.picard & (cert > tol),
                                xp.minimum(self.trigger, 0.5 * tol / amplification),
                                self.trigger)
        best.res = xp.where(better, cert, best.res)
        self.tries = self.tries + xp.astype(self.recheck & (cert > tol), self.tries.dtype)
        return better

    def track(self, res: Array, xp: Any) -> None:
        """Progress: the residual halved since the last time."""
        halved = res < 0.5 * self.anchor
        self.anchor = xp.where(halved, res, self.anchor)
        self.stale = xp.where(halved, 0.0 * self.stale, self.stale + 1.0)
        self.tries = xp.where(halved, 0.0 * self.tries, self.tries)

    def advance(self, k: int, z: Array, gz: Array, res: Array, settled: Array,
                lowest: _Iterate, mixer: Mixer, coupling: CouplingMap, xp: Any,
                batched: bool, *, patience: int | None, last: bool) -> Array:
        """The next coupling state: the plain Picard step Φ(z) where the residual is below
        the trigger, else the scheme's step; the lowest iterate's state where it is to be
        certified (its iterates stopped improving for ``patience`` iterations, e.g. at the
        rounding floor of float32, below which a lowered trigger is never met; None: never;
        and every problem before the last evaluation); z itself where the problem is
        settled."""
        picard = (res <= self.trigger) & ~settled
        stepped = coupling.project(mixer.update(k, z, gz, xp))
        z_next = _where(picard, gz, stepped, xp, batched)
        if last:
            recheck = ~settled & ~picard
        elif patience is None:
            recheck = xp.zeros_like(picard)
        else:
            recheck = (~settled & ~picard & (self.stale >= patience)
                       & (xp.remainder(self.stale, float(patience)) == 0.0))
        self.picard_next = picard | recheck
        self.recheck_next = recheck
        self.prev_res_next = xp.where(recheck, lowest.res, res)
        z_next = _where(recheck, lowest.z, z_next, xp, batched)
        return _where(settled, z, z_next, xp, batched)

    def commit(self) -> None:
        """The step prepared by :meth:`advance` is taken."""
        self.picard, self.recheck = self.picard_next, self.recheck_next
        self.prev_res = self.prev_res_next


def _accuracy(scale: np.ndarray, rows: np.ndarray | None, batched: bool) -> Any:
    """The accuracy hook's argument: the residual per problem evaluated (host (B,), the rows
    ``rows`` of a narrowed batch), a float for a single problem."""
    if not batched:
        return float(scale[0])
    return scale if rows is None else scale[rows]


def _narrowed(evaluate: Any, rows: np.ndarray | None, xp: Any, device: Any) -> Any:
    """Φ as ``(z, guess, last) ↦ (F, U, M, state(M), stamps)``: ``evaluate`` itself where
    ``rows`` is None, else ``evaluate`` of the problems at ``rows`` alone (F theirs), the other
    rows of U, M and the state copied from ``last`` (the previous evaluation's)."""
    if rows is None:
        return lambda z, guess, last: evaluate(z, guess)
    idx = xp.asarray(rows, device=device)

    def step(z: Array, guess: Array, last: tuple) -> tuple:
        F, U, M, gz, stamps = evaluate(z[idx, ...],
                                       None if guess is None else guess[idx, ...])
        return (F, *(_put(a, idx, b, xp) for a, b in zip(last, (U, M, gz), strict=True)),
                stamps)
    return step


def _put(full: Array, idx: Array, part: Array, xp: Any) -> Array:
    """A copy of ``full`` with the rows ``idx`` replaced by ``part``."""
    out = _copy(full, xp)
    out[idx, ...] = part
    return out


def evaluator(coupling: CouplingMap, hjb: HJBSolver, fp: FPSolver, U_T: Array, m0: Array,
               backend: Backend) -> Any:
    """Φ: z ↦ (F, U, M, state(M)) with the stamps (:meth:`Backend.stamp`) at which the HJB
    and FP phases started and FP ended."""
    def evaluate(z: Array, guess: Array | None) -> tuple[Array, Array, Array, Array, tuple]:
        F = coupling.running_cost(z)
        frozen = frozen_args(coupling, z)
        t1 = backend.stamp()
        U = hjb(U_T, F, guess, *frozen)
        t2 = backend.stamp()
        M = fp(U, m0, *frozen)
        t3 = backend.stamp()
        return F, U, M, coupling.state(M), (t1, t2, t3)
    return evaluate


def frozen_args(coupling: CouplingMap, z: Array) -> tuple[Array, ...]:
    """The extra arguments of the HJB and FP solvers at the coupling state ``z``: the density
    path a Hamiltonian depending on m sees (:meth:`mfgwork.problems.base.Coupling.
    frozen_density`), or none."""
    frozen = getattr(coupling, "frozen_density", None)
    density = None if frozen is None else frozen(z)
    return () if density is None else (density,)


def of_largest(flags: np.ndarray, residuals: np.ndarray, active: np.ndarray) -> bool:
    """The flag (host, (B,)) of the active problem with the largest residual."""
    rows = np.flatnonzero(active)
    return bool(flags[rows[np.argmax(residuals[rows])]])


def record_times(history: History, stamps: list[tuple], backend: Backend) -> None:
    """The phase times of the iterations from their stamps, read once the loop is over
    (on a device they are events: reading them inside the loop would add host waits)."""
    seconds = backend.seconds
    for t0, t1, t2, t3, t4 in stamps:
        history.time_hjb.append(seconds(t1, t2))
        history.time_fp.append(seconds(t2, t3))
        history.time_coupling.append(seconds(t0, t1) + seconds(t3, t4))


def _certify_fallback(best: _Iterate, lowest: _Iterate, evaluate: Any, xp: Any,
                      batched: bool) -> np.ndarray:
    """One more evaluation gives the residual of the best uncertified iterate; per problem,
    the better of it and the best certified one is kept. Returns the residuals (host)."""
    gz = evaluate(lowest.z, lowest.U)[3]
    cert = relative_residual(gz, lowest.z, xp, batched)
    better = cert < best.res
    best.res = xp.where(better, cert, best.res)
    best.take(to_numpy(better), lowest.U, lowest.M, xp, shared=lowest.owned)
    return to_numpy(best.res)


def _kept(run: Any, best: _Iterate) -> np.ndarray:
    """The residual (host, shape (1,)) of the better certified solution of the fallback's
    ``run`` (None: it took no step) and the scheme's ``best``, which takes the fallback's."""
    if run is None:
        return to_numpy(best.res)
    held = float(to_numpy(best.res)[0])
    if run.residual < held:
        best.U, best.M = run.U, run.M
        return np.array([run.residual])
    return np.array([held])
