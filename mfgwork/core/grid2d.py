"""Two-dimensional space-time grids: a rectangle with obstacles, reflecting walls and exits.

Nodes. ``nx`` × ``ny`` points on [x_min, x_max] × [y_min, y_max], both walls included (as the
1-D :class:`~mfgwork.core.grid.Grid`); node (j, i) sits at (x_i, y_j) and owns the control
volume V_ji = wx_i · wy_j (trapezoidal widths: h inside, h/2 at a wall), so ∫ φ ≈ Σ V φ.
Arrays on the grid are shaped (ny, nx): rows are y, columns x.

Edges. Neighbouring nodes are joined by an x-edge (j, i)–(j, i+1) or a y-edge (j, i)–(j+1, i).
An edge is open unless one of its nodes is an obstacle node (or both are exit nodes): a closed
edge carries no gradient and no flux, which is the reflecting wall (zero flux) of the boundary
and of the obstacles.

Exits. An :class:`Exit` is a segment of one side of the rectangle; its boundary nodes are
absorbing: u = the exit's cost there, m = 0, and the mass that flows into them leaves the
domain (the scheme reports that outflow per time step, so mass + cumulative outflow is
conserved to round-off). Obstacles are axis-aligned rectangles (:class:`Obstacle`); a node
inside one (boundary included) is an obstacle node. The unknowns of the scheme are the
``active`` nodes: neither obstacle nor exit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .errors import ParameterError, check_choice, check_int, check_real
from .grid import MAX_POINTS, trapezoid_weights

SIDES = ("left", "right", "bottom", "top")


@dataclass(frozen=True)
class Obstacle:
    """The closed rectangle [x0, x1] × [y0, y1]: no agent enters it."""

    x0: float
    x1: float
    y0: float
    y1: float

    def __post_init__(self) -> None:
        check_real("x0", self.x0)
        check_real("x1", self.x1, low=float(self.x0))
        check_real("y0", self.y0)
        check_real("y1", self.y1, low=float(self.y0))

    def contains(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        return (X >= self.x0) & (X <= self.x1) & (Y >= self.y0) & (Y <= self.y1)


@dataclass(frozen=True)
class Exit:
    """A door: the segment of ``side`` ("left", "right", "bottom" or "top") centred at
    ``center`` (a y for left/right, an x for bottom/top, on the span of that wall: a grid
    refuses a centre off it) of width ``width`` > 0; leaving through it costs ``cost`` (the
    value u takes there)."""

    side: str
    center: float
    width: float
    cost: float = 0.0

    def __post_init__(self) -> None:
        check_choice("side", self.side, SIDES)
        check_real("center", self.center)
        check_real("width", self.width, low=0.0)
        check_real("cost", self.cost)

    def check_wall(self, low: float, high: float) -> None:
        """Refuse a centre off [low, high], the span of the door's wall."""
        if not low <= self.center <= high:
            raise ParameterError(f"center={self.center!r} is invalid for the exit on the "
                                 f"{self.side} wall: must be in [{low:g}, {high:g}], the span "
                                 "of that wall")

    @property
    def label(self) -> str:
        """The door's wall, centre and width, e.g. "right wall y=0.25, width 0.1"."""
        along = "y" if self.side in ("left", "right") else "x"
        return f"{self.side} wall {along}={self.center:g}, width {self.width:g}"

    def nodes(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Mask (ny, nx) of the boundary nodes of this door (at least the nearest one)."""
        along = y if self.side in ("left", "right") else x
        inside = np.abs(along - self.center) <= 0.5 * self.width + 1e-12 * (1 + abs(self.center))
        if not inside.any():
            inside = np.abs(along - self.center) == np.min(np.abs(along - self.center))
        mask = np.zeros((y.size, x.size), dtype=bool)
        if self.side == "left":
            mask[:, 0] = inside
        elif self.side == "right":
            mask[:, -1] = inside
        elif self.side == "bottom":
            mask[0, :] = inside
        else:
            mask[-1, :] = inside
        return mask


@dataclass(frozen=True)
class Grid2D:
    """The node grid of the module docstring on [0, T] with ``nt`` time steps."""

    x_min: float
    x_max: float
    y_min: float
    y_max: float
    nx: int
    ny: int
    T: float
    nt: int
    obstacles: tuple[Obstacle, ...] = field(default=())
    exits: tuple[Exit, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "nx", check_int("nx", self.nx, low=3, high=MAX_POINTS))
        object.__setattr__(self, "ny", check_int("ny", self.ny, low=3, high=MAX_POINTS))
        object.__setattr__(self, "nt", check_int("nt", self.nt, low=1, high=MAX_POINTS))
        check_real("T", self.T, low=0.0)
        check_real("x_min", self.x_min)
        check_real("x_max", self.x_max, low=float(self.x_min))
        check_real("y_min", self.y_min)
        check_real("y_max", self.y_max, low=float(self.y_min))
        object.__setattr__(self, "obstacles", tuple(self.obstacles))
        object.__setattr__(self, "exits", tuple(self.exits))
        for door in self.exits:
            door.check_wall(*((self.y_min, self.y_max) if door.side in ("left", "right")
                              else (self.x_min, self.x_max)))
        if not self.active.any():
            raise ParameterError(f"obstacles={self.obstacles!r:.120} is invalid: they cover "
                                 f"every node of the {self.nx} x {self.ny} grid")

    @property
    def hx(self) -> float:
        return (self.x_max - self.x_min) / (self.nx - 1)

    @property
    def hy(self) -> float:
        return (self.y_max - self.y_min) / (self.ny - 1)

    @property
    def dt(self) -> float:
        return self.T / self.nt

    @property
    def shape(self) -> tuple[int, int]:
        """(ny, nx)."""
        return (self.ny, self.nx)

    @cached_property
    def x(self) -> np.ndarray:
        return np.linspace(self.x_min, self.x_max, self.nx)

    @cached_property
    def y(self) -> np.ndarray:
        return np.linspace(self.y_min, self.y_max, self.ny)

    @cached_property
    def t(self) -> np.ndarray:
        return np.linspace(0.0, self.T, self.nt + 1)

    @cached_property
    def wx(self) -> np.ndarray:
        return trapezoid_weights(self.nx, self.hx)

    @cached_property
    def wy(self) -> np.ndarray:
        return trapezoid_weights(self.ny, self.hy)

    @cached_property
    def mesh(self) -> tuple[np.ndarray, np.ndarray]:
        """(X, Y), each (ny, nx)."""
        return np.meshgrid(self.x, self.y)

    @cached_property
    def volumes(self) -> np.ndarray:
        """Control volumes V = wy ⊗ wx, (ny, nx)."""
        return np.outer(self.wy, self.wx)

    @cached_property
    def obstacle(self) -> np.ndarray:
        mask = np.zeros(self.shape, dtype=bool)
        for ob in self.obstacles:
            mask |= ob.contains(*self.mesh)
        return mask

    @cached_property
    def exit(self) -> np.ndarray:
        """Exit nodes (not obstacle nodes)."""
        mask = np.zeros(self.shape, dtype=bool)
        for door in self.exits:
            mask |= door.nodes(self.x, self.y)
        return mask & ~self.obstacle

    @cached_property
    def door_index(self) -> np.ndarray:
        """(ny, nx) ints: at each exit node the index in ``exits`` of its door (the first
        listed where doors overlap), −1 elsewhere."""
        index = np.full(self.shape, -1, dtype=np.int64)
        for d in range(len(self.exits) - 1, -1, -1):
            index[self.exits[d].nodes(self.x, self.y)] = d
        return np.where(self.exit, index, -1)

    @cached_property
    def exit_cost(self) -> np.ndarray:
        """u at the exit nodes (the last door listed wins where doors overlap), 0 elsewhere."""
        cost = np.zeros(self.shape)
        for door in self.exits:
            cost[door.nodes(self.x, self.y) & ~self.obstacle] = door.cost
        return cost

    @cached_property
    def active(self) -> np.ndarray:
        """The unknowns: nodes that are neither obstacle nor exit."""
        return ~self.obstacle & ~self.exit

    @cached_property
    def open_x(self) -> np.ndarray:
        """Open x-edges (ny, nx − 1)."""
        free, ex = ~self.obstacle, self.exit
        return free[:, 1:] & free[:, :-1] & ~(ex[:, 1:] & ex[:, :-1])

    @cached_property
    def open_y(self) -> np.ndarray:
        """Open y-edges (ny − 1, nx)."""
        free, ex = ~self.obstacle, self.exit
        return free[1:, :] & free[:-1, :] & ~(ex[1:, :] & ex[:-1, :])

    def check_scales(self, sigma: float, dtype: str = "float64", steady: bool = False
                     ) -> None:
        """h, Δt and ν finite and normal; the diffusion numbers ν Δt / h² at most the 1-D
        limit (the checks of :meth:`mfgwork.core.grid.Grid.check_scales`, per axis;
        ``steady``: no time steps, Δt unchecked)."""
        from .grid import Grid

        for low, high, n in ((self.x_min, self.x_max, self.nx), (self.y_min, self.y_max, self.ny)):
            Grid(low, high, n, self.T, self.nt).check_scales(sigma, dtype, steady=steady)
