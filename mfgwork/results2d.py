"""The result of a 2-D solve (:func:`mfgwork.solve2d.solve_2d`): a :class:`~mfgwork.Result`
whose U and M have the axes ("t", "y", "x"), saved by :meth:`~mfgwork.Result.save` and read
back by :func:`mfgwork.load` like every result.

    x (nx,), t (nt+1,)      the grid (``y`` (ny,) is an entry of ``arrays``, see below)
    U, M (nt+1, ny, nx)     value and density (0 off the domain), dims ("t", "y", "x")
    observables  mass (nt+1,): Σ V m in the domain, mass + cumsum(outflow) = 1 up to
                 round-off; and the problem's paths (two bars: ``attendance`` (nt+1, 2) on
                 ("t", "bar"), ``labels["bar"] == ("1", "2")``)
    arrays       y (ny,)                 the coordinate of the axis y
                 velocity_x, velocity_y  (nt+1, ny, nx): α* = −∂p Ĥ (level n from U^n, m^{n+1})
                 outflow (nt+1,)         mass that left through the exits during the step
                                         ending at t_n (0 at t_0)
                 exit_flux (nt+1,)       outflow / Δt (the rate of leaving)
                 door_outflow (nt+1, doors)  ("t", "door"): the outflow through each door
                                         (``labels["door"]``, in the order of the problem's
                                         exits); they add up to ``outflow``
                 obstacle, exit (ny, nx) ("y", "x"): boolean masks of the geometry

Each is also an attribute (``res.velocity_x``, ``res.y``); ``res.doors`` are the door labels,
``res.mass`` the mass in the domain and ``res.mass_error`` the balance of the scheme.
``residual``, ``converged``, ``status`` (derived from ``params["max_iter"]``), ``history``
and ``check()`` mean what they mean for every result. ``problem`` is the problem solved (not
saved: None after :func:`~mfgwork.load`), which :meth:`Result2D.check` uses by default.
Construction checks the layout (axes and shapes of every entry above), so a folder that does
not hold one is refused on load.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .core.backend import to_numpy
from .core.errors import ParameterError
from .core.grid import trapezoid_weights
from .results import Result

DIMS = ("t", "y", "x")
#: The arrays of every 2-D result, with their axes.
ARRAYS: dict[str, tuple[str, ...]] = {
    "y": ("y",), "velocity_x": DIMS, "velocity_y": DIMS, "outflow": ("t",),
    "exit_flux": ("t",), "door_outflow": ("t", "door"), "obstacle": ("y", "x"),
    "exit": ("y", "x")}


@dataclass(frozen=True, kw_only=True)
class Result2D(Result):
    """A 2-D solution (module docstring); ``dims`` defaults to ("t", "y", "x")."""

    problem: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.dims is None:
            object.__setattr__(self, "dims", DIMS)
        object.__setattr__(self, "axes", ARRAYS | dict(self.axes))
        super().__post_init__()
        self._check_layout()

    def _check_layout(self) -> None:
        """Refuse what is not a 2-D result: other dims, a missing or misshapen entry."""
        if self.dims != DIMS or "door" not in self.labels or "mass" not in self.observables:
            raise ParameterError(f"dims={self.dims!r} with labels {list(self.labels)} and "
                                 f"observables {list(self.observables)} is invalid: a 2-D "
                                 f"result has dims {DIMS}, door labels and the mass path")
        missing = [k for k, v in ARRAYS.items() if k not in self.arrays or self.axes[k] != v]
        if missing:
            raise ParameterError(f"arrays={sorted(self.arrays)} is invalid: a 2-D result "
                                 f"needs {missing} on the axes {[ARRAYS[k] for k in missing]}")
        sizes = {k: len(v) for k, v in self.labels.items()} | {
            "t": np.size(self.t), "y": np.size(self.arrays["y"]), "x": np.size(self.x)}
        shapes = {"U": np.shape(self.U), "M": np.shape(self.M)} | {
            k: np.shape(v) for k, v in (self.observables | self.arrays).items()}
        dims = {"U": DIMS, "M": DIMS} | {k: self.observable_dims(k) for k in self.observables}
        dims |= {k: self.array_dims(k) for k in self.arrays}
        for name, shape in shapes.items():
            want = tuple(sizes.get(d, "?") for d in dims[name])
            if shape != want:
                raise ParameterError(f"{name} has the shape {shape}: a 2-D result needs "
                                     f"{want} on the axes {dims[name]}")

    def observable_dims(self, name: str) -> tuple[str, ...]:
        """The axes of the observable ``name``: as ``axes`` names them, else ("t",) (a path
        over time; the state axes y and x are never an observable's)."""
        return self.axes.get(name, ("t",))

    @property
    def doors(self) -> tuple[str, ...]:
        """The labels of the doors (the problem's exits), along ``door_outflow``'s axis."""
        return self.labels["door"]

    @property
    def weights(self) -> np.ndarray:
        """The control volumes V = wy ⊗ wx (ny, nx) of the grid (trapezoidal widths)."""
        return np.outer(*(trapezoid_weights(np.size(a), float(a[1] - a[0]))
                          for a in (np.asarray(self.arrays["y"]), np.asarray(self.x))))

    @property
    def mass(self) -> np.ndarray:
        """Σ V m in the domain at each time level (nt+1,)."""
        return self.observables["mass"]

    @property
    def mass_error(self) -> float:
        """max_n |mass_n + Σ_{k ≤ n} outflow_k − mass_0|: the balance of the scheme."""
        mass = np.asarray(self.mass)
        return float(np.max(np.abs(mass + np.cumsum(self.arrays["outflow"]) - mass[0])))

    #: The mass path is Σ V m itself: only round-off (float32 on a GPU) separates them.
    mass_tolerance: ClassVar[float] = 1e-5

    @property
    def density_mass_error(self) -> float:
        """max_n |Σ V m_n − mass_n|: the density against the mass path."""
        m = to_numpy(self.M).astype(np.float64)
        mass = to_numpy(self.mass).astype(np.float64)
        return float(np.max(np.abs((m * self.weights).sum(axis=(-2, -1)) - mass)))

    def check(self, problem: Any = None) -> float:
        """The residual of one best response to this solution, recomputed in NumPy float64
        with the sparse direct solver (``problem``: the one solved, by default the one kept)."""
        return super().check(self.problem if problem is None else problem)

    def metrics(self) -> dict[str, Any]:
        return super().metrics() | {"ny": int(np.size(self.arrays["y"]))}
