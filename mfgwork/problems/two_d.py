"""MFG problems on 2-D domains: a rectangle with obstacles, reflecting walls and exits.

Convention (ν = σ²/2, on Ω ⊂ ℝ² the rectangle minus the obstacles, t ∈ [0, T]):

    −∂t u − ν Δu + H(x, ∇u, m) = f(t, x, m(t, ·)),   u(T) = g,   u = exit cost at exits
     ∂t m − ν Δm − div(m ∂p H(x, ∇u, m)) = 0,          m(0) = m0 / ∫ m0

with zero flux through walls and obstacles; the optimal velocity is α* = −∂p H(x, ∇u, m), and
mass that reaches an exit leaves. H is an isotropic
:class:`~mfgwork.problems.hamiltonians.Hamiltonian` (½|p|² by default).

:class:`MFGProblem2D` takes user callables ``m0(X, Y)``, ``g(X, Y)`` (node coordinates, arrays
(ny, nx) of the active backend) and ``f(t, X, Y, m)`` (m: the density at time t, (ny, nx))
returning (ny, nx) arrays. A problem owns its coupling (:class:`DensityCoupling2D` here: the
coupling state is the density path) and its observables (the mass left in the domain).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.backend import Backend, to_numpy
from ..core.errors import ParameterError, check_real
from ..core.grid2d import Exit, Grid2D, Obstacle
from .base import BatchCoupling, Coupling, refuse_diverged
from .hamiltonians import Hamiltonian, Quadratic

ArrayFn = Callable[..., Any]


def _check_planar(hamiltonian: Hamiltonian) -> None:
    """Refuse (ParameterError) an H that the 2-D scheme cannot take as H(|p|, m): one whose
    traced value reads x (a node of the plane has two coordinates, H's x is the scalar of an
    interval), or one that says it is isotropic while H(p) ≠ H(−p) (the scheme would see its
    branch p > 0 only)."""
    traced = hamiltonian.traced()
    if traced is not None and traced.structure.reads_x:
        raise ParameterError(f"hamiltonian={hamiltonian!r:.80} is invalid on a 2-D domain: its "
                             f"value reads x (H = {traced.structure.value}), the coordinate of "
                             "an interval; a 2-D model is H(|p|, m)")
    p = np.concatenate([np.logspace(-3, 3, 25), [0.7, 1.3]])
    m = np.array([0.0, 0.5, 5.0]) if hamiltonian.depends_on_m else np.zeros(1)
    P, M = np.meshgrid(p, m)
    density = M if hamiltonian.depends_on_m else None
    with np.errstate(all="ignore"):
        ahead, behind = (np.asarray(hamiltonian.value(0.0 * P, s * P, density, np),
                                    dtype=np.float64) * np.ones_like(P) for s in (1.0, -1.0))
    bad = ~(np.abs(ahead - behind) <= 1e-9 * (1.0 + np.abs(ahead)))
    if bad.any():
        i = np.argmax(bad)
        raise ParameterError(f"hamiltonian={hamiltonian!r:.80} is invalid on a 2-D domain: it "
                             f"says it is isotropic but H(p) = {ahead.flat[i]:.6g} and H(-p) = "
                             f"{behind.flat[i]:.6g} at p = {P.flat[i]:.6g}; a 2-D model is "
                             "H(|p|, m)")


@dataclass(frozen=True, eq=False)
class MFGProblem2D:
    """A user-defined MFG problem on the rectangle [x_min, x_max] × [y_min, y_max] with
    ``obstacles`` and ``exits`` (module docstring)."""

    x_min: float
    x_max: float
    y_min: float
    y_max: float
    T: float
    sigma: float
    m0: ArrayFn
    g: ArrayFn
    f: ArrayFn
    obstacles: tuple[Obstacle, ...] = field(default=(), kw_only=True)
    exits: tuple[Exit, ...] = field(default=(), kw_only=True)
    hamiltonian: Hamiltonian = field(default_factory=Quadratic, kw_only=True)
    name: str = field(default="generic_2d", kw_only=True)

    #: Names of the two state variables, for labels.
    state_names = ("x", "y")

    def __post_init__(self) -> None:
        check_real("x_min", self.x_min)
        check_real("x_max", self.x_max, low=float(self.x_min))
        check_real("y_min", self.y_min)
        check_real("y_max", self.y_max, low=float(self.y_min))
        check_real("T", self.T, low=0.0)
        check_real("sigma", self.sigma, low=0.0)
        for name in ("m0", "g", "f"):
            if not callable(getattr(self, name)):
                raise ParameterError(f"{name}={getattr(self, name)!r:.80} is invalid: must be "
                                     "a callable taking arrays of the active backend")
        for name, kind in (("obstacles", Obstacle), ("exits", Exit)):
            items = getattr(self, name)
            if not isinstance(items, list | tuple) or not all(isinstance(v, kind) for v in items):
                raise ParameterError(f"{name}={items!r:.80} is invalid: must be a tuple of "
                                     f"mfgwork {kind.__name__} objects")
            object.__setattr__(self, name, tuple(items))
        for door in self.exits:
            door.check_wall(*((self.y_min, self.y_max) if door.side in ("left", "right")
                              else (self.x_min, self.x_max)))
        if not isinstance(self.hamiltonian, Hamiltonian) or not self.hamiltonian.isotropic:
            raise ParameterError(f"hamiltonian={self.hamiltonian!r:.80} is invalid: must be an "
                                 "isotropic mfgwork Hamiltonian (a function of |p|: Quadratic(),"
                                 " Power(q), Congestion(c, alpha))")
        self.hamiltonian.check(np.linspace(self.x_min, self.x_max, 201))  # as in 1-D
        _check_planar(self.hamiltonian)

    @property
    def nu(self) -> float:
        return 0.5 * self.sigma**2

    def grid(self, nx: int, ny: int, nt: int) -> Grid2D:
        return Grid2D(self.x_min, self.x_max, self.y_min, self.y_max, nx, ny, self.T, nt,
                      self.obstacles, self.exits)

    def unresolved(self, grid: Grid2D) -> list[str]:
        """What the node grid misses of the geometry: a door narrower than the step along
        its wall (it has only its nearest node), two doors on the same nodes, an obstacle
        that holds no node (see :meth:`mfgwork.MFGProblem.unresolved`)."""
        steps = f"the {grid.nx} x {grid.ny} grid (hx = {grid.hx:.3g}, hy = {grid.hy:.3g})"
        out, seen = [], np.zeros(grid.shape, dtype=bool)
        for door in self.exits:
            along = grid.y if door.side in ("left", "right") else grid.x
            nodes = door.nodes(grid.x, grid.y)
            if not np.any(np.abs(along - door.center) <= 0.5 * door.width * (1 + 1e-12)):
                out.append(f"the door on the {door.label} holds no node of {steps}: it is "
                           "represented by its nearest node only; use a step below its width")
            elif np.any(nodes & seen):
                out.append(f"the door on the {door.label} shares nodes with another door on "
                           f"{steps}: they act as one door; use a finer grid")
            seen |= nodes
        for ob in self.obstacles:
            if not ob.contains(*grid.mesh).any():
                out.append(f"the obstacle {ob!r} holds no node of {steps}: the grid does not "
                           "see it; use a step below its width and height")
        return out

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"problem": self.name, "x_min": self.x_min, "x_max": self.x_max,
                               "y_min": self.y_min, "y_max": self.y_max, "T": self.T,
                               "sigma": self.sigma, "hamiltonian": self.hamiltonian.params(),
                               "obstacles": [vars(o) for o in self.obstacles],
                               "exits": [vars(e) for e in self.exits]}
        for name in ("m0", "g", "f"):
            fn = getattr(self, name)
            out[name] = getattr(fn, "__qualname__", None) or repr(fn)
        return out

    def coords(self, grid: Grid2D, backend: Backend) -> tuple[Any, Any]:
        X, Y = grid.mesh
        return backend.asarray(X), backend.asarray(Y)

    def initial_density(self, grid: Grid2D, backend: Backend) -> Any:
        """m0 on the active nodes, normalized so that Σ V m0 = 1."""
        m0 = to_numpy(evaluate("m0", self.m0, grid, backend, *self.coords(grid, backend)))
        m0 = np.asarray(m0, dtype=np.float64) * grid.active
        if np.any(m0 < 0):
            raise ParameterError(f"m0 is invalid: it takes negative values (min {m0.min():g}); "
                                 "a density must be >= 0")
        mass = float(np.sum(grid.volumes * m0))
        if not np.isfinite(mass) or mass <= 0:
            raise ParameterError(f"m0 is invalid: its mass on the active nodes is {mass!r}; it "
                                 "must be finite and > 0 to be normalized")
        return backend.asarray(m0 / mass)

    def terminal_cost(self, grid: Grid2D, backend: Backend) -> Any:
        """g on the nodes, the exit costs at the exits."""
        g = to_numpy(evaluate("g", self.g, grid, backend, *self.coords(grid, backend)))
        return backend.asarray(np.where(grid.exit, grid.exit_cost, g))

    def coupling_size(self, nx: int, ny: int, nt: int) -> int:
        """Values in the coupling state (here the densities at levels 1..nt)."""
        return nt * nx * ny

    def coupling(self, grid: Grid2D, backend: Backend) -> Coupling:
        return DensityCoupling2D(self, grid, backend)

    def running_costs(self, z: Any, grid: Grid2D, backend: Backend, X: Any, Y: Any) -> Any:
        """F[n] = f(t_{n+1}, X, Y, z[n]) for the density path z (nt, ny, nx)."""
        rows = [evaluate("f", self.f, grid, backend, float(grid.t[n + 1]), X, Y, z[n],
                         at=f" at t={grid.t[n + 1]:.6g}") for n in range(grid.nt)]
        return backend.xp.stack(rows)

    @classmethod
    def stacked_running_costs(cls, problems: list[MFGProblem2D], backend: Backend
                              ) -> Callable[[Any], Any] | None:
        """z ↦ F for a batch of problems of this type at once (z and F (B, nt, ny, nx)), or
        None: their ``running_costs`` one problem after the other (here: f is a user
        callable, evaluated per problem and level)."""
        return None

    def observables(self, grid: Grid2D, M: Any, backend: Backend) -> dict[str, Any]:
        """Paths (..., nt+1): the mass in the domain Σ V m."""
        xp, V = backend.xp, backend.asarray(grid.volumes)
        return {"mass": xp.sum(xp.sum(M * V, axis=-1), axis=-1)}


def evaluate(name: str, fn: ArrayFn, grid: Grid2D, backend: Backend, *args: Any,
             at: str = "") -> Any:
    """``fn(*args)`` as a finite real (ny, nx) array of the backend's dtype (a scalar is
    broadcast); otherwise a :class:`ParameterError` naming the callable."""
    try:
        out = fn(*args)
    except Exception as exc:
        raise ParameterError(f"{name} raised {type(exc).__name__}{at}: {exc}") from exc
    host = np.asarray(to_numpy(out))
    if host.dtype.kind not in "biuf":
        raise ParameterError(f"{name} returned values of dtype {host.dtype}{at}: must return "
                             f"real numbers shaped like X, {grid.shape}")
    if host.ndim == 0:
        return backend.asarray(np.full(grid.shape, float(host)))
    if host.shape != grid.shape:
        raise ParameterError(f"{name} returned shape {host.shape}{at}: must return an array "
                             f"shaped like X, {grid.shape} (ny, nx)")
    if not np.isfinite(host).all():
        refuse_diverged(name, args, at)
        raise ParameterError(f"{name} returned non-finite values (NaN or inf){at} at "
                             f"{int((~np.isfinite(host)).sum())} nodes")
    return backend.asarray(host)


class DensityCoupling2D(Coupling):
    """z = M at levels 1..nt (nt, ny, nx); F[n] from the problem's ``running_costs``. When H
    depends on m, the scheme's steps read the same z (``feeds_density``)."""

    feeds_density = True

    def __init__(self, problem: MFGProblem2D, grid: Grid2D, backend: Backend) -> None:
        self.problem, self.grid, self.backend = problem, grid, backend
        self.X, self.Y = problem.coords(grid, backend)

    def state(self, M: Any) -> Any:
        return M[..., 1:, :, :]

    def density(self, z: Any) -> Any:
        """The densities m^{n+1} the steps of H use (levels 1..nt)."""
        return z

    def running_cost(self, z: Any) -> Any:
        return self.problem.running_costs(z, self.grid, self.backend, self.X, self.Y)

    def project(self, z: Any) -> Any:
        return self.backend.xp.clip(z, 0.0, None)

    @classmethod
    def stacked(cls, couplings: list[Coupling], backend: Backend) -> Coupling:
        """The whole batch's arrays at once where the problems share one type that gives
        its running costs for a batch (:meth:`MFGProblem2D.stacked_running_costs`): one
        pass over the batch's path per operation, where one problem after the other costs a
        launch per problem and a copy to stack them (64 rooms on a GPU: ~200 launches and
        three 0.5 GB copies per Picard iteration)."""
        problems = [c.problem for c in couplings]   # type: ignore[attr-defined]
        kinds = {type(p) for p in problems}
        costs = (kinds.pop().stacked_running_costs(problems, backend) if len(kinds) == 1
                 else None)
        if costs is None:
            return BatchCoupling(couplings, backend)
        return StackedDensityCoupling2D(couplings, backend, costs)


class StackedDensityCoupling2D(BatchCoupling):
    """Density couplings side by side (z = M at levels 1..nt, (B, nt, ny, nx)), each
    operation on the whole batch: the running costs from ``costs`` (z ↦ F), the projection
    onto z ≥ 0."""

    def __init__(self, couplings: list[Coupling], backend: Backend,
                 costs: Callable[[Any], Any]) -> None:
        super().__init__(couplings, backend)
        self.costs = costs

    def state(self, M: Any) -> Any:
        return M[..., 1:, :, :]

    def running_cost(self, z: Any) -> Any:
        return self.costs(z)

    def project(self, z: Any) -> Any:
        return self.xp.clip(z, 0.0, None)
