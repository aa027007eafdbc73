"""A crowd leaving a room: two doors, one obstacle, congestion.

On [0, L] × [0, L] agents pay 1 per unit of time spent in the room plus a congestion cost
κ m (and optionally move under the congestion Hamiltonian), ½|α|² for moving, nothing when
they leave through a door (u = 0 there) and ``terminal`` if still inside at T:

    f(t, x, m) = 1 + κ m(t, x),   g = terminal,   m0 ∝ exp(−|x − c0|²/(2 s0²)) (a blob)

Doors: on the right wall (x = L), centred at y = ``door_centers``, widths ``door_widths``.
Obstacle: the rectangle ``obstacle`` = (x0, x1, y0, y1) between the blob and the doors.
Since f increases in m, the coupling is monotone (the equilibrium is unique).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.backend import Backend
from ..core.errors import ParameterError, check_real
from ..core.grid2d import Exit, Grid2D, Obstacle
from .hamiltonians import Hamiltonian, Quadratic
from .two_d import MFGProblem2D

DEFAULTS: dict[str, Any] = {
    "length": 1.0, "T": 1.0, "sigma": 0.3, "congestion": 1.0, "door_widths": (0.1, 0.1),
    "door_centers": (0.25, 0.75), "obstacle": (0.5, 0.7, 0.35, 0.65), "start": (0.25, 0.5),
    "spread": 0.1, "terminal": 1.0}


class Room(MFGProblem2D):
    """The room of the module docstring; ``hamiltonian`` any isotropic H (½|p|² default).
    Observables: the mass in the room and the exit flux."""

    name_default = "room"

    def __init__(self, length: float = 1.0, T: float = 1.0, sigma: float = 0.3,
                 congestion: float = 1.0, door_widths: tuple[float, float] = (0.1, 0.1),
                 door_centers: tuple[float, float] = (0.25, 0.75),
                 obstacle: tuple[float, float, float, float] | None = (0.5, 0.7, 0.35, 0.65),
                 start: tuple[float, float] = (0.25, 0.5), spread: float = 0.1,
                 terminal: float = 1.0, hamiltonian: Hamiltonian | None = None) -> None:
        length = check_real("length", length, low=0.0)
        values = {"length": length, "congestion": check_real("congestion", congestion,
                                                             low=0.0, low_open=False),
                  "spread": check_real("spread", spread, low=0.0),
                  "terminal": check_real("terminal", terminal),
                  "door_widths": _pair("door_widths", door_widths, 0.0, length),
                  "door_centers": _pair("door_centers", door_centers, -1e-300, length),
                  "start": _pair("start", start, -1e-300, length),
                  "obstacle": None if obstacle is None else Obstacle(*_four(obstacle))}
        for k, v in values.items():
            object.__setattr__(self, k, v)
        exits = tuple(Exit("right", c, w) for c, w in zip(values["door_centers"],
                                                           values["door_widths"], strict=True))
        obstacles = () if obstacle is None else (values["obstacle"],)
        super().__init__(0.0, length, 0.0, length, T, sigma, self._m0, self._g,
                         self._f, obstacles=obstacles, exits=exits,
                         hamiltonian=Quadratic() if hamiltonian is None else hamiltonian,
                         name=self.name_default)

    def __repr__(self) -> str:
        return (f"Room(congestion={self.congestion!r}, door_widths={self.door_widths!r}, "
                f"sigma={self.sigma!r}, T={self.T!r})")

    def params(self) -> dict[str, Any]:
        ob = self.obstacle
        return {"problem": self.name, "length": self.length, "T": self.T,
                "sigma": self.sigma, "congestion": self.congestion,
                "door_widths": list(self.door_widths), "door_centers": list(self.door_centers),
                "obstacle": None if ob is None else [ob.x0, ob.x1, ob.y0, ob.y1],
                "start": list(self.start), "spread": self.spread, "terminal": self.terminal,
                "hamiltonian": self.hamiltonian.params()}

    def _m0(self, X: Any, Y: Any) -> Any:
        import array_api_compat

        xp = array_api_compat.array_namespace(X)
        r2 = (X - self.start[0]) ** 2 + (Y - self.start[1]) ** 2
        return xp.exp(-0.5 * r2 / self.spread**2)

    def unresolved(self, grid: Grid2D) -> list[str]:
        """The doors and the obstacle (:meth:`MFGProblem2D.unresolved`), and the initial
        blob: its spread s0 must be at least the step (h <= s0)."""
        out = super().unresolved(grid)
        h = max(grid.hx, grid.hy)
        if h > self.spread * (1 + 1e-12):
            n = math.ceil(self.length / self.spread - 1e-9) + 1
            out.append(f"the {grid.nx} x {grid.ny} grid has the step {h:.3g}, coarser than the "
                       f"spread {self.spread:g} of the initial crowd: it does not resolve m0; "
                       f"use nx, ny >= {n}")
        return out

    def _g(self, X: Any, Y: Any) -> Any:
        return 0.0 * X + self.terminal

    def _f(self, t: float, X: Any, Y: Any, m: Any) -> Any:
        return 1.0 + self.congestion * m

    def running_costs(self, z: Any, grid: Grid2D, backend: Backend, X: Any, Y: Any) -> Any:
        """F = 1 + κ z on the whole path at once."""
        return 1.0 + self.congestion * z

    @classmethod
    def stacked_running_costs(cls, problems: list[MFGProblem2D], backend: Backend
                              ) -> Callable[[Any], Any] | None:
        """F = 1 + κ_b z for the batch (κ per problem), unless this type gives its own
        ``running_costs`` (a subclass's costs are its own, one problem after the other)."""
        if cls.running_costs is not Room.running_costs:
            return None
        kappa = backend.asarray(np.array([p.congestion for p in problems], dtype=np.float64))
        kappa = backend.xp.reshape(kappa, (-1, 1, 1, 1))
        return lambda z: 1.0 + kappa * z


def _pair(name: str, value: object, low: float, high: float) -> tuple[float, float]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ParameterError(f"{name}={value!r:.80} is invalid: must be a pair of numbers")
    return tuple(check_real(name, v, low=low, high=high, high_open=False) for v in value)


def _four(value: object) -> tuple[float, ...]:
    if not isinstance(value, list | tuple) or len(value) != 4:
        raise ParameterError(f"obstacle={value!r:.80} is invalid: must be (x0, x1, y0, y1) "
                             "or None")
    return tuple(check_real("obstacle", v) for v in value)
