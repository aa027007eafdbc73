"""The result of a 2-D solve (:func:`mfgwork.solve2d.solve_2d`), and saving/loading it.

A :class:`Result2D` is frozen and holds NumPy arrays with labelled axes (``dims``):

    t (nt+1,), y (ny,), x (nx,)                       the grid
    U, M                (nt+1, ny, nx)  ("t", "y", "x")  value and density (0 off the domain)
    velocity_x, velocity_y (nt+1, ny, nx)               α* = −∂p Ĥ (level n from U^n, m^{n+1})
    outflow (nt+1,)   mass that left through the exits during the step ending at t_n (0 at t_0)
    exit_flux (nt+1,) outflow / Δt (the rate of leaving)
    door_outflow (nt+1, doors)  ("t", "door")  outflow through each door (labels ``doors``, in
                      the order of the problem's exits; they add up to ``outflow``)
    mass (nt+1,)      Σ V m in the domain; mass + cumsum(outflow) = 1 up to round-off
    obstacle, exit (ny, nx) masks of the geometry
    observables       the problem's paths (two bars: ``attendance`` (nt+1, 2))

``residual`` is the certified fixed-point residual (one best response to the returned
solution reproduces its coupling state to that relative accuracy); ``converged`` means
``residual <= tol``; ``status`` is "converged" or "not converged"; ``history`` the per-iteration
residuals, changes of U and M and phase times. :func:`save_result2d` / :func:`load_result2d`
write and read a folder (marker kind "result2d", JSON + NPZ, atomic; no pickle).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .core import storage
from .core.errors import LoadError

KIND = "result2d"
FIELDS3 = ("U", "M", "velocity_x", "velocity_y")
PATHS = ("outflow", "exit_flux", "mass")


@dataclass(frozen=True, eq=False)
class Result2D:
    """A 2-D solution (module docstring)."""

    t: np.ndarray
    y: np.ndarray
    x: np.ndarray
    U: np.ndarray
    M: np.ndarray
    velocity_x: np.ndarray
    velocity_y: np.ndarray
    outflow: np.ndarray
    exit_flux: np.ndarray
    door_outflow: np.ndarray
    mass: np.ndarray
    obstacle: np.ndarray
    exit: np.ndarray
    doors: tuple[str, ...]
    converged: bool
    residual: float
    iterations: int
    tol: float
    history: dict[str, list[float]]
    params: dict[str, Any]
    observables: dict[str, np.ndarray] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    problem: Any = field(default=None, repr=False)

    #: Axis names of U, M and the velocities.
    dims = ("t", "y", "x")

    @property
    def status(self) -> str:
        return "converged" if self.converged else "not converged"

    @property
    def mass_error(self) -> float:
        """max_n |mass_n + Σ_{k ≤ n} outflow_k − mass_0|: the balance of the scheme."""
        return float(np.max(np.abs(self.mass + np.cumsum(self.outflow) - self.mass[0])))

    def __getattr__(self, name: str) -> Any:
        observables = self.__dict__.get("observables") or {}
        if name in observables:
            return observables[name]
        raise AttributeError(f"Result2D has no attribute {name!r} (observables: "
                             f"{', '.join(observables) or 'none'})")

    def check(self, problem: Any = None) -> float:
        """The residual of one best response to this solution, recomputed in NumPy float64
        with the sparse direct solver (``problem``: the one solved, by default the one kept)."""
        from .best_response import best_response_residual_2d

        return best_response_residual_2d(self, problem if problem is not None else self.problem)

    def to_xarray(self) -> Any:
        """An xarray Dataset with coordinates t, y, x (U, M, velocities, paths, masks)."""
        import xarray as xr

        data = {k: (self.dims, getattr(self, k)) for k in FIELDS3}
        data |= {k: (("t",), getattr(self, k)) for k in PATHS}
        data |= {k: (("y", "x"), getattr(self, k)) for k in ("obstacle", "exit")}
        data["door_outflow"] = (("t", "door"), self.door_outflow)
        return xr.Dataset(data, coords={"t": self.t, "y": self.y, "x": self.x,
                                        "door": list(self.doors)},
                          attrs={"residual": self.residual, "converged": int(self.converged)})

    def metrics(self) -> dict[str, Any]:
        return {"converged": self.converged, "residual": self.residual,
                "iterations": self.iterations, "tol": self.tol, "status": self.status,
                "mass_error": self.mass_error, "timings": self.timings, "extra": self.extra,
                "history": self.history, "doors": list(self.doors),
                "observables": {k: list(np.shape(v)[1:]) for k, v in self.observables.items()}}

    def save(self, path: str | os.PathLike, *, force: bool = False) -> Path:
        return save_result2d(path, self, force=force)


def save_result2d(path: str | os.PathLike, result: Result2D, *, force: bool = False) -> Path:
    """Write ``result`` to the folder ``path`` atomically (the rules of
    :func:`mfgwork.core.storage.check_target`, kind "result2d")."""
    arrays = {k: getattr(result, k) for k in ("t", "y", "x", *FIELDS3, *PATHS,
                                              "door_outflow")}
    arrays |= {k: getattr(result, k).astype(np.uint8) for k in ("obstacle", "exit")}
    arrays |= {f"observable_{k}": np.asarray(v) for k, v in result.observables.items()}
    with storage.atomic_folder(path, KIND, name="path", force=force) as tmp:
        storage.write_json(tmp / "parameters.json", result.params)
        storage.write_json(tmp / "metrics.json", result.metrics() | {
            "provenance": storage.provenance()})
        storage.write_npz(tmp / "arrays.npz", arrays)
    return Path(path)


def load_result2d(path: str | os.PathLike) -> Result2D:
    """Read a folder written by :func:`save_result2d` (every file checked; errors are
    :class:`~mfgwork.LoadError` naming the file)."""
    folder = Path(path)
    if storage.marker_kind(folder) != KIND:
        raise LoadError(folder, f"is not a {KIND} folder (no marker of that kind)")
    metrics = storage.read_json(folder / "metrics.json",
                                keys={"converged": bool, "iterations": int, "tol": float,
                                      "history": dict, "doors": list})
    doors = metrics["doors"]
    if not all(isinstance(d, str) for d in doors):
        raise LoadError(folder / "metrics.json", "has door labels that are not strings")
    params = storage.read_json(folder / "parameters.json")
    grid3 = ("nt+1", "ny", "nx")
    shapes = {"t": ("nt+1",), "y": ("ny",), "x": ("nx",), **{k: grid3 for k in FIELDS3},
              **{k: ("nt+1",) for k in PATHS}, "obstacle": ("ny", "nx"), "exit": ("ny", "nx"),
              "door_outflow": ("nt+1", len(doors))}
    observed = metrics.get("observables", {})
    if not isinstance(observed, dict) or not all(
            isinstance(v, list) and all(isinstance(n, int) for n in v) for v in observed.values()):
        raise LoadError(folder / "metrics.json", "has observables that are not a mapping of "
                        "names to trailing shapes")
    shapes |= {f"observable_{k}": ("nt+1", *v) for k, v in observed.items()}
    arrays = storage.read_npz(folder / "arrays.npz", shapes, others=None)
    residual = metrics.get("residual")
    return Result2D(**{k: arrays[k] for k in ("t", "y", "x", *FIELDS3, *PATHS,
                                              "door_outflow")},
                    obstacle=arrays["obstacle"].astype(bool), exit=arrays["exit"].astype(bool),
                    doors=tuple(doors),
                    converged=metrics["converged"],
                    residual=float("inf") if residual is None else float(residual),
                    iterations=metrics["iterations"], tol=metrics["tol"],
                    history=metrics["history"], params=params,
                    observables={k.removeprefix("observable_"): v for k, v in arrays.items()
                                 if k.startswith("observable_")},
                    timings=metrics.get("timings", {}), extra=metrics.get("extra", {}))
