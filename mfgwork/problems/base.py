"""The generic MFG problem and the coupling through which the density enters the HJB equation.

Convention (ν = σ²/2, on Ω = [x_min, x_max], t ∈ [0, T], reflecting walls), with the
Hamiltonian H(x, p, m) of :mod:`.hamiltonians` (default ½|p|²):

    −∂t u − ν ∂xx u + H(x, ∂x u, m) = f(t, x, m(t, ·)),   u(T, x) = g(x)
     ∂t m − ν ∂xx m − ∂x(m ∂p H(x, ∂x u, m)) = 0,          m(0, x) = m0(x) / ∫ m0

The optimal control is α* = −∂p H(x, ∂x u, m): for ½|p|², dX = −∂x u dt + σ dW.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from ..core.backend import Backend, to_numpy
from ..core.errors import ParameterError, ResolutionWarning, SolverError, check_real, warn
from ..core.grid import Grid
from .hamiltonians import Hamiltonian, Quadratic, check_hamiltonian

ArrayFn = Callable[..., Any]


def grid_only(observables: Callable[..., Any]) -> Callable[..., Any]:
    """Marks an ``observables`` method that reads nothing of its problem but the grid: a
    batch computes it once for all members of the class, on the stacked densities. An
    override in a subclass is not marked unless it says so itself."""
    observables.grid_only = True  # type: ignore[attr-defined]
    return observables


@dataclass(frozen=True, eq=False)
class MFGProblem:
    """A user-defined MFG problem on an interval with reflecting walls.

    ``m0(x)`` and ``g(x)`` take the grid as an array of the active backend; ``f(t, x, m)``
    takes a time, the grid and the density at that time on the grid, and returns an array
    shaped like ``x``. ``m0`` need not be normalized. ``hamiltonian``: H(x, p, m)
    (:class:`~mfgwork.Hamiltonian`; default ½|p|²), checked on the domain at construction.
    """

    x_min: float
    x_max: float
    T: float
    sigma: float
    m0: ArrayFn
    g: ArrayFn
    f: ArrayFn
    name: str = field(default="generic", kw_only=True)
    hamiltonian: Hamiltonian = field(default_factory=Quadratic, kw_only=True)

    #: Name of the state variable, for labels ("x"; Santa Fe: "θ").
    state_name = "x"

    def __post_init__(self) -> None:
        check_real("x_min", self.x_min)
        check_real("x_max", self.x_max, low=float(self.x_min))
        check_real("T", self.T, low=0.0)
        check_real("sigma", self.sigma, low=0.0)
        if not isinstance(self.name, str) or not self.name:
            raise ParameterError(f"name={self.name!r:.80} is invalid: must be a non-empty "
                                 "string")
        for name in ("m0", "g", "f"):
            if not callable(getattr(self, name)):
                raise ParameterError(f"{name}={getattr(self, name)!r} is invalid: must be a "
                                     "callable taking arrays of the active backend")
        check_hamiltonian(self.hamiltonian, _check_nodes(self.x_min, self.x_max))

    @property
    def nu(self) -> float:
        """Diffusion coefficient ν = σ²/2."""
        return 0.5 * self.sigma**2

    def grid(self, nx: int, nt: int) -> Grid:
        """The grid of ``nx`` points on [x_min, x_max] and ``nt`` steps on [0, T] (a new one
        each call: its arrays are the caller's)."""
        return Grid(self.x_min, self.x_max, nx, self.T, nt)

    def params(self) -> dict[str, Any]:
        """JSON-ready description of the problem (callables by name)."""
        out: dict[str, Any] = {"problem": self.name, "x_min": self.x_min, "x_max": self.x_max,
                               "T": self.T, "sigma": self.sigma,
                               "hamiltonian": self.hamiltonian.params()}
        for name in ("m0", "g", "f"):
            fn = getattr(self, name)
            out[name] = getattr(fn, "__qualname__", None) or repr(fn)
        return out

    def initial_density(self, grid: Grid, backend: Backend) -> Any:
        """m0 on the grid, normalized so that Σ w_i m0_i = 1; errors name what is wrong."""
        x = backend.asarray(grid.x)
        m0 = _evaluate("m0", self.m0, grid, backend, x)
        m0_np = np.asarray(to_numpy(m0), dtype=np.float64)
        if (m0_np < 0).any():
            raise ParameterError(f"m0 is invalid: it takes negative values (min {m0_np.min():g});"
                                 " a density must be >= 0")
        mass = float(np.dot(grid.weights, m0_np))
        if not np.isfinite(mass) or mass <= 0:
            raise ParameterError(f"m0 is invalid: its mass on [{grid.x_min:g}, {grid.x_max:g}] "
                                 f"is {mass!r}; it must be finite and > 0 to be normalized")
        return backend.asarray(m0_np / mass)

    def terminal_cost(self, grid: Grid, backend: Backend) -> Any:
        """g on the grid."""
        return _evaluate("g", self.g, grid, backend, backend.asarray(grid.x))

    def unresolved(self, grid: Grid) -> list[str]:
        """What ``grid`` is too coarse to resolve of the problem's features, one sentence
        each that says what it resolves and the grid that would (none here: a generic
        problem's features are its own to judge)."""
        return []

    def coupling_size(self, nx: int, nt: int) -> int:
        """Number of values in the coupling state z (here the densities at levels 1..nt),
        for memory estimates before any work."""
        return nt * nx

    def coupling(self, grid: Grid, backend: Backend) -> Coupling:
        """How the density feeds back into the HJB equation (here: through f itself, and
        through H where H depends on m)."""
        return DensityCoupling(self.f, grid, backend,
                               congested=self.hamiltonian.depends_on_m)

    @grid_only
    def observables(self, grid: Grid, M: Any, backend: Backend) -> dict[str, Any]:
        """Paths observed from densities ``M`` (..., nt+1, nx) on ``backend``, each shaped
        (..., nt+1): here the mean state E[x](t) = Σ_i w_i x_i m_i / Σ_i w_i m_i. (An
        override that reads only the grid may say so with :func:`grid_only`: batches then
        compute it once for all their members.)"""
        xp, w = backend.xp, backend.asarray(grid.weights)
        return {"mean_state": xp.sum(M * (w * backend.asarray(grid.x)), axis=-1)
                / xp.sum(M * w, axis=-1)}

    def summary(self, grid: Grid, observables: dict[str, np.ndarray]) -> dict[str, float]:
        """Scalar headline numbers from NumPy ``observables`` of one solution (JSON-ready)."""
        return {"final_mean_state": float(observables["mean_state"][-1])}

    @classmethod
    def summaries(cls, problems: Sequence[MFGProblem], grid: Grid,
                  observables: dict[str, np.ndarray]) -> list[dict[str, float]]:
        """The :meth:`summary` of each of ``problems`` (all of this class) from NumPy
        ``observables`` stacked along a leading axis, one row per problem. A class may
        override it to compute a batch's summaries at once."""
        return [p.summary(grid, {k: v[b] for k, v in observables.items()})
                for b, p in enumerate(problems)]


def member_summaries(problems: Sequence[MFGProblem], grid: Grid,
                     observables: dict[str, tuple[list[int], np.ndarray]]
                     ) -> list[dict[str, float]]:
    """The summary of each of a batch's ``problems`` from its NumPy ``observables``
    ({name: (the members that have it, their values stacked)}): one :meth:`~MFGProblem.
    summaries` call per class, unless the class overrides ``summary`` below the class that
    defines ``summaries`` (then member by member)."""
    out: list[dict[str, float]] = [{} for _ in problems]
    classes: dict[type, list[int]] = {}
    for b, p in enumerate(problems):
        classes.setdefault(type(p), []).append(b)
    # each name's row of every member that has it (once, whatever the number of classes)
    positions = {key: {b: i for i, b in enumerate(having)}
                 for key, (having, _) in observables.items()}
    for cls, members in classes.items():
        rows = {}
        for key, (having, values) in observables.items():
            position = positions[key]
            if all(b in position for b in members):
                rows[key] = (values if having == members
                             else values[[position[b] for b in members]])
        group = [problems[b] for b in members]
        if issubclass(_definer(cls, "summaries"), _definer(cls, "summary")):
            found = cls.summaries(group, grid, rows)
        else:
            found = MFGProblem.summaries(group, grid, rows)
        for b, summary in zip(members, found, strict=True):
            out[b] = summary
    return out


def _definer(cls: type, name: str) -> type:
    """The class of ``cls``'s method resolution order that defines ``name``."""
    return next(k for k in cls.__mro__ if name in vars(k))


def warn_unresolved(problems: Sequence[Any], grid: Any) -> None:
    """One :class:`~mfgwork.core.errors.ResolutionWarning` per distinct reason the problems
    give (:meth:`MFGProblem.unresolved`) why ``grid`` is too coarse for them."""
    reasons = dict.fromkeys(r for p in problems for r in p.unresolved(grid))
    for reason in reasons:
        warn(reason, ResolutionWarning)


@lru_cache(maxsize=64)
def _check_nodes(x_min: float, x_max: float) -> np.ndarray:
    """The 201 nodes of [x_min, x_max] a problem's Hamiltonian is checked on (read-only, made
    once per domain: a scan builds a problem per point on one domain)."""
    x = np.linspace(x_min, x_max, 201)
    x.flags.writeable = False
    return x


def _evaluate(name: str, fn: ArrayFn, grid: Grid, backend: Backend, *args: Any,
              at: str = "") -> Any:
    """``fn(*args)`` checked by :func:`_checked`; an exception inside it becomes a
    :class:`ParameterError` naming the callable (and ``at``, e.g. the time)."""
    try:
        out = fn(*args)
    except Exception as exc:
        raise ParameterError(f"{name} raised {type(exc).__name__}{at}: {exc}") from exc
    try:
        return _checked(name, out, grid, backend, at)
    except ParameterError:
        refuse_diverged(name, args, at)
        raise


def refuse_diverged(name: str, args: tuple, at: str = "") -> None:
    """Raise a :class:`SolverError` where an array among ``args`` (the density a solver hands
    the running cost ``name``) holds NaN or inf: the iteration diverged, and the values
    ``name`` returned are not its fault."""
    for a in args:
        host = np.asarray(to_numpy(a))
        if host.dtype.kind == "f" and host.ndim and not np.isfinite(host).all():
            raise SolverError(f"the iteration diverged at these parameters: the density it "
                              f"handed to {name}{at} holds NaN or inf at "
                              f"{int((~np.isfinite(host)).sum())} of {host.size} nodes (no "
                              f"fault of {name}; more noise, sigma, makes the problem milder)")


def _checked(name: str, out: Any, grid: Grid, backend: Backend, at: str = "") -> Any:
    """``out`` as an array of the backend's dtype shaped like x (a scalar is broadcast),
    after checking that it holds finite real numbers (integers and booleans are cast)."""
    host = np.asarray(to_numpy(out))
    if host.dtype.kind not in "biuf":
        what = ("complex values" if host.dtype.kind == "c" else
                f"{out!r:.40} ({type(out).__name__})" if host.ndim == 0 else
                f"values of dtype {host.dtype}")
        raise ParameterError(f"{name} returned {what}{at}: must return real numbers (an "
                             f"array of floats shaped like x, ({grid.nx},))")
    if host.ndim == 0:
        host = np.full(grid.nx, host)
    if host.shape != (grid.nx,):
        raise ParameterError(f"{name} returned shape {host.shape}{at}: must return an array "
                             f"shaped like x, ({grid.nx},)")
    with np.errstate(over="ignore", invalid="ignore"):
        cast = host.astype(backend.dtype)
    bad = ~np.isfinite(cast)
    if bad.any():
        i = int(np.argmax(bad))
        beyond = f", or beyond the range of {backend.dtype}" if np.isfinite(host[i]) else ""
        raise ParameterError(f"{name} returned non-finite values (NaN or inf{beyond}){at} "
                             f"at {int(bad.sum())} of {grid.nx} points, first at "
                             f"x={grid.x[i]:.6g} (index {i}): {host[i].item()!r}")
    return backend.asarray(cast)


class Coupling:
    """The coupling state z (what the Picard iteration mixes) and the running cost it implies.

    ``state(M)`` maps densities at levels 0..nt to z; ``running_cost(z)`` returns the array
    F of shape (nt, nx) where F[n] enters the HJB step from t_{n+1} back to t_n (Achdou's
    scheme pairs u^n with m^{n+1}); ``project(z)`` maps an extrapolated z back to admissible
    values.
    """

    def state(self, M: Any) -> Any:
        raise NotImplementedError

    def running_cost(self, z: Any) -> Any:
        raise NotImplementedError

    def project(self, z: Any) -> Any:
        return z

    def frozen_density(self, z: Any) -> Any | None:
        """The densities m^1..m^nt (nt, nx) that a Hamiltonian depending on m sees, frozen at
        the coupling state ``z``: the HJB step from t_{n+1} to t_n and the FP step from t_n
        to t_{n+1} both use m^{n+1}. None where H does not depend on m."""
        return None

    def potential(self) -> ScalarPotential | None:
        """The potential structure of the game, if it declares one (None: the generic
        Picard/Anderson iteration only)."""
        return None

    @classmethod
    def stacked(cls, couplings: list[Coupling], backend: Backend) -> Coupling:
        """Couplings of this type side by side along a leading batch axis (overridden where
        the batch can be computed in one go; by default, one problem after the other)."""
        return BatchCoupling(couplings, backend)


#: the data callable behind each per-problem array of :func:`member_arrays`
MEMBER_DATA = {"initial_density": "m0", "terminal_cost": "g"}


def member_arrays(problems: Sequence[MFGProblem], name: str, grid: Grid,
                  backend: Backend) -> Any:
    """``problem.<name>(grid, backend)`` of each problem stacked on a leading axis
    (``name``: "initial_density" or "terminal_cost"), evaluated once per distinct data
    callable (m0 or g, the same function object, read by the same method): a batch of Santa
    Fe problems shares one Gaussian, computed and checked once instead of once per member
    (a host round trip each on a device)."""
    source = MEMBER_DATA[name]
    seen: dict[tuple[int, int], Any] = {}
    keep = []   # the callables, alive while their ids are keys
    arrays = []
    for problem in problems:
        fn, method = getattr(problem, source), getattr(type(problem), name)
        key = (id(fn), id(method))
        if key not in seen:
            keep.append((fn, method))
            seen[key] = getattr(problem, name)(grid, backend)
        arrays.append(seen[key])
    return backend.xp.stack(arrays)


def batch_coupling(couplings: list[Coupling], backend: Backend) -> Coupling:
    """The coupling of a batch of problems: vectorised when all have one type that can be."""
    kinds = {type(c) for c in couplings}
    if len(kinds) == 1:
        return kinds.pop().stacked(couplings, backend)
    return BatchCoupling(couplings, backend)


@dataclass(frozen=True)
class ScalarPotential:
    """A monotone scalar coupling with a potential (NumPy float64 functions, elementwise).

    The running cost is F^n = −y_n χ for the price path y = P(z) of the observed path
    z_n = Σ_i χ_i μ_i^{n+1} (μ = w m); ``price_slope`` is P'(z). Where P decreases (P' ≤ 0,
    a monotone coupling) the game has a convex potential; where it rises somewhere (the
    planner's price F + A F' of Santa Fe) the potential is not convex. Either way its
    critical points are found by Newton's method (see :mod:`mfgwork.numerics.potential`).
    ``any_namespace``: ``price_slope`` also computes in the namespace of a torch argument,
    on its device (a batch's Newton directions then take the slopes there)."""

    chi: np.ndarray
    price_slope: ArrayFn
    any_namespace: bool = False


class DensityCoupling(Coupling):
    """General coupling: z = M at levels 1..nt, F[n] = f(t_{n+1}, x, m^{n+1}); ``congested``:
    H depends on m, which it sees frozen at z (:meth:`Coupling.frozen_density`);
    ``observed``: where the running cost passes through a smaller coupling state with a
    potential (Santa Fe's attendance), that coupling (the frozen-density iteration runs
    Newton's method on it, :mod:`mfgwork.numerics.frozen_density`)."""

    def __init__(self, f: ArrayFn, grid: Grid, backend: Backend, congested: bool = False,
                 observed: Coupling | None = None) -> None:
        self.f, self.grid, self.backend, self.congested = f, grid, backend, congested
        self.observed = observed
        self.x = backend.asarray(grid.x)
        self._checked_once = False

    def state(self, M: Any) -> Any:
        return M[1:, :]

    def running_cost(self, z: Any) -> Any:
        """F[n] = f(t_{n+1}, x, m^{n+1}); every value of the first call is checked (array,
        shape, real, finite) and cast to the working dtype; later calls check each row's
        dtype (real: never cast from complex), and the iteration the finiteness of F."""
        rows = [self._row(n, z[n, :]) for n in range(self.grid.nt)]
        self._checked_once = True
        return self.backend.xp.stack(rows)

    def _row(self, n: int, m: Any) -> Any:
        t = float(self.grid.t[n + 1])
        if not self._checked_once:
            return _evaluate("f", self.f, self.grid, self.backend, t, self.x, m,
                             at=f" at t={t:.6g}")
        try:
            r = self.f(t, self.x, m)
        except Exception as exc:
            raise ParameterError(f"f raised {type(exc).__name__} at t={t:.6g}: {exc}") from exc
        if not hasattr(r, "shape"):
            r = np.asarray(r)
        kind = str(r.dtype)
        if not kind.removeprefix("torch.").startswith(("float", "int", "uint", "bool")):
            what = "complex values" if "complex" in kind else f"values of dtype {kind}"
            raise SolverError(f"f returned {what} at t={t:.6g} during the Picard iteration "
                              "(its first call returned real numbers): it must return real "
                              f"numbers, an array of floats shaped like x, ({self.grid.nx},)")
        if r.ndim == 0:
            return self.backend.asarray(np.full(self.grid.nx, float(r)))
        if tuple(r.shape) != (self.grid.nx,):
            raise ParameterError(f"f returned shape {tuple(getattr(r, 'shape', ()))} at "
                                 f"t={t:.6g}: must return an array shaped like x, "
                                 f"({self.grid.nx},)")
        return self.backend.asarray(r)

    def project(self, z: Any) -> Any:
        return self.backend.xp.clip(z, 0.0, None)

    def frozen_density(self, z: Any) -> Any | None:
        return z if self.congested else None

    @classmethod
    def stacked(cls, couplings: list[Coupling], backend: Backend) -> Coupling:
        """Where every running cost passes through an observed coupling (Santa Fe with a
        congested H), the batch computes it through their stacked observed couplings, once
        for all problems and times; otherwise one problem and one time after the other."""
        if all(isinstance(c, DensityCoupling) and c.observed is not None for c in couplings):
            return StackedDensityCoupling(couplings, backend)
        return BatchCoupling(couplings, backend)


class StackedDensityCoupling(Coupling):
    """Density couplings side by side whose running costs pass through observed couplings:
    z = M at levels 1..nt (B, nt, nx), F = the stacked observed coupling's running cost of
    the observed path of z (what each member's f computes from its density)."""

    def __init__(self, couplings: list[DensityCoupling], backend: Backend) -> None:
        self.backend = backend
        self.observed = batch_coupling([c.observed for c in couplings], backend)
        self.congested = [c.congested for c in couplings]

    def state(self, M: Any) -> Any:
        return M[:, 1:, :]

    def running_cost(self, z: Any) -> Any:
        levels = self.backend.xp.concat([z[:, :1], z], axis=1)   # a level 0 the state skips
        return self.observed.running_cost(self.observed.state(levels))

    def project(self, z: Any) -> Any:
        return self.backend.xp.clip(z, 0.0, None)

    def frozen_density(self, z: Any) -> Any | None:
        return z if all(self.congested) else None


class BatchCoupling(Coupling):
    """Independent problems side by side: M, z and F carry a leading batch axis."""

    def __init__(self, couplings: list[Coupling], backend: Backend) -> None:
        self.couplings, self.xp = couplings, backend.xp

    def _each(self, method: str, a: Any) -> Any:
        return self.xp.stack([getattr(c, method)(a[b]) for b, c in enumerate(self.couplings)])

    def state(self, M: Any) -> Any:
        return self._each("state", M)

    def running_cost(self, z: Any) -> Any:
        return self._each("running_cost", z)

    def project(self, z: Any) -> Any:
        return self._each("project", z)

    def frozen_density(self, z: Any) -> Any | None:
        frozen = [c.frozen_density(z[b]) for b, c in enumerate(self.couplings)]
        return None if any(d is None for d in frozen) else self.xp.stack(frozen)
