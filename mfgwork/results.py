"""The result of a solve, its observables, and saving/loading (NPZ + JSON, no pickle).

Arrays stay on the backend that computed them (``mw.to_numpy`` converts any of them);
observables and saving work on NumPy copies, at this boundary only.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .core import storage
from .core.backend import to_numpy
from .core.errors import LoadError
from .core.figures import save_figure
from .core.grid import trapezoid_weights
from .core.storage import load_table, provenance

__all__ = ["FIELDS", "Result", "load", "load_table", "provenance", "save_run"]

FIELDS = ("x", "t", "U", "M")


class ObservablesByName:
    """Reads the entries of a result's ``observables`` as attributes (``res.attendance``)."""

    def __getattr__(self, name: str) -> Any:
        observables = self.__dict__.get("observables") or {}
        if name in observables:
            return observables[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r} (observables: "
                             f"{', '.join(observables) or 'none'})")


@dataclass
class Result(ObservablesByName):
    """Solution of an MFG system on a grid.

    ``x`` (nx,), ``t`` (nt+1,), ``U`` and ``M`` (nt+1, nx). ``observables``: the paths the
    problem observes, each (nt+1,) (Santa Fe: ``attendance``, ``mean_state``), also readable
    as attributes (``res.attendance``); ``summary``: the problem's scalar headline numbers.
    ``residual`` is the relative fixed-point residual of the returned solution,
    ‖A(BR(A)) − A‖ / ‖A(BR(A))‖ for its attendance path A (for other problems the same with
    the density path): ``converged`` means ``residual`` ≤ ``tol``, and :meth:`check`
    recomputes it. ``history`` holds per-iteration residuals of the iterates, relative
    changes of U and M and the wall time of each phase; ``timings`` the totals.
    """

    x: Any
    t: Any
    U: Any
    M: Any
    converged: bool
    iterations: int
    history: dict[str, list[float]]
    params: dict[str, Any]
    timings: dict[str, float]
    backend: str = "numpy"
    device: str = "cpu"
    dtype: str = "float64"
    method: str = "fdm"
    observables: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, float] = field(default_factory=dict)
    state_name: str = "x"
    extra: dict[str, Any] = field(default_factory=dict)
    residual: float | None = None

    @property
    def populations(self) -> tuple[str, ...] | None:
        """The group names along the leading axis of ``U`` and ``M`` (K, nt+1, nx) of a
        solve of several populations; None for one population."""
        names = self.extra.get("populations")
        return None if names is None else tuple(names)

    # -- derived numbers (NumPy) ------------------------------------------------------------
    @property
    def weights(self) -> np.ndarray:
        """Trapezoidal weights of the grid."""
        x = to_numpy(self.x).astype(np.float64)
        return trapezoid_weights(x.size, float(x[1] - x[0]))

    @property
    def mass(self) -> np.ndarray:
        """∫ m(t, x) dx at each time level."""
        return to_numpy(self.M).astype(np.float64) @ self.weights

    @property
    def mass_error(self) -> float:
        """max_t |∫ m(t) − 1|."""
        return float(np.max(np.abs(self.mass - 1.0)))

    def check(self, problem: Any = None) -> float:
        """Recompute one best response to this solution and return its relative fixed-point
        residual (what ``residual`` reports; ≤ ``tol`` when converged). The best response
        is computed as the solve did (method, backend, device, dtype, particles and seed
        from ``params``; in NumPy float64 for float32 results re-certified in float64,
        ``extra["certificate"]``). ``problem``: the problem solved; a Santa Fe result (also one read
        by ``mw.load``) rebuilds it from ``params``, any other problem must be passed."""
        if self.populations is not None:
            from .numerics.populations import populations_residual

            return populations_residual(self, problem)
        from .solve import best_response_residual

        return best_response_residual(self, problem)

    def metrics(self) -> dict[str, Any]:
        """Headline numbers, JSON-ready."""
        out: dict[str, Any] = {
            "converged": bool(self.converged), "iterations": int(self.iterations),
            "residual": _finite_or_none(self.residual),
            "final_change_U": _last(self.history.get("change_U")),
            "final_change_M": _last(self.history.get("change_M")),
            "mass_error": self.mass_error, "min_density": float(np.min(to_numpy(self.M))),
            "timings": dict(self.timings), "backend": self.backend, "device": self.device,
            "dtype": self.dtype, "method": self.method,
            "nx": int(np.size(to_numpy(self.x))), "nt": int(np.size(to_numpy(self.t))) - 1,
        }
        return out | self.summary | self.extra

    def to_numpy(self) -> Result:
        """A copy whose arrays are NumPy arrays."""
        kw = {k: to_numpy(getattr(self, k)) for k in FIELDS}
        observables = {k: to_numpy(v) for k, v in self.observables.items()}
        return Result(**(self.__dict__ | kw | {"observables": observables}))

    def save(self, path: str | os.PathLike, *, force: bool = False) -> Path:
        """Write ``arrays.npz``, ``parameters.json``, ``metrics.json`` into the folder
        ``path``, atomically: files go to a temporary folder beside it, renamed at the end.
        What may be replaced: see :func:`save_run`."""
        return save_run(path, self, force=force)

    def write_files(self, folder: Path, parameters: dict[str, Any] | None = None,
                    metrics: dict[str, Any] | None = None) -> None:
        """Write ``arrays.npz``, ``parameters.json`` (``params`` updated by ``parameters``) and
        ``metrics.json`` (:meth:`metrics`, history, provenance, updated by ``metrics``) into
        the existing folder ``folder``, non-atomically (see :func:`save_run`)."""
        arrays = {k: to_numpy(getattr(self, k)) for k in FIELDS}
        arrays |= {k: to_numpy(v) for k, v in self.observables.items()}
        storage.write_npz(folder / "arrays.npz", arrays)
        storage.write_json(folder / "parameters.json", self.params | (parameters or {}))
        storage.write_json(folder / "metrics.json", self.metrics() | {
            "history": self.history, "observables": list(self.observables),
            "summary": self.summary, "state_name": self.state_name, "extra": self.extra,
            "provenance": provenance()} | (metrics or {}))


def _finite_or_none(value: float | None) -> float | None:
    return float(value) if value is not None and np.isfinite(value) else None


def _last(values: list[float] | None) -> float | None:
    return float(values[-1]) if values else None


#: Entries of ``metrics.json`` that :func:`load` reads, with their types.
METRICS_REQUIRED = {"converged": bool, "iterations": int}
METRICS_OPTIONAL = {"history": dict, "timings": dict, "backend": str, "device": str,
                    "dtype": str, "method": str, "observables": list, "summary": dict,
                    "state_name": str, "extra": dict}


def load(path: str | os.PathLike, *, max_bytes: int | None = None) -> Result:
    """Read a folder written by :meth:`Result.save` or :func:`save_run` (NumPy arrays and
    JSON; no pickle). Figures, tables and the executed notebook are left on disk.

    Every file is checked before use: present, parsable, with the expected entries and
    types; the arrays real-valued and finite, ``x`` (nx,), ``t`` (nt+1,), ``U`` and ``M``
    (nt+1, nx) (several populations: (K, nt+1, nx), K the group names recorded in
    ``extra``), each observable (nt+1,), their decompressed size at most ``max_bytes``
    (default: :data:`mfgwork.core.storage.MAX_NPZ_BYTES`, 1 GiB), checked before reading.
    Anything wrong raises :class:`~mfgwork.LoadError` naming the file.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise LoadError(folder, "is not a result folder (it does not exist)" if not
                        folder.exists() else "is not a result folder but a file")
    metrics = storage.read_json(folder / "metrics.json", keys=METRICS_REQUIRED)
    for key, kind in METRICS_OPTIONAL.items():
        if key in metrics and not isinstance(metrics[key], kind):
            raise LoadError(folder / "metrics.json", f"has {key}={metrics[key]!r:.60}: must "
                            f"be a {kind.__name__}")
    residual = metrics.get("residual")
    if residual is not None and not _is_residual(residual):
        raise LoadError(folder / "metrics.json", f"has residual={residual!r:.60}: must be a "
                        "finite number >= 0 or null")
    params = storage.read_json(folder / "parameters.json")
    if not isinstance(params, dict):
        raise LoadError(folder / "parameters.json", "must hold a JSON object")
    groups = _populations(folder, metrics.get("extra", {}).get("populations"))
    field_shape = ("nt+1", "nx") if groups is None else (len(groups), "nt+1", "nx")
    arrays = storage.read_npz(folder / "arrays.npz",
                              {"x": ("nx",), "t": ("nt+1",), "U": field_shape,
                               "M": field_shape}, others=("nt+1",), max_bytes=max_bytes)
    names = metrics.get("observables", [k for k in arrays if k not in FIELDS])
    missing = [k for k in names if k not in arrays]
    if missing:
        raise LoadError(folder / "arrays.npz", f"has no array for the observables {missing} "
                        "listed in metrics.json")
    return Result(x=arrays["x"], t=arrays["t"], U=arrays["U"], M=arrays["M"],
                  converged=metrics["converged"], iterations=metrics["iterations"],
                  history=metrics.get("history", {}), params=params,
                  timings=metrics.get("timings", {}), backend=metrics.get("backend", "numpy"),
                  device=metrics.get("device", "cpu"), dtype=metrics.get("dtype", "float64"),
                  method=metrics.get("method", "fdm"),
                  observables={k: arrays[k] for k in names},
                  summary=metrics.get("summary", {}), state_name=metrics.get("state_name", "x"),
                  extra=metrics.get("extra", {}), residual=metrics.get("residual"))


def _populations(folder: Path, names: Any) -> list[str] | None:
    """The group names recorded in ``metrics.json`` (None: one population), checked."""
    if names is None:
        return None
    if (not isinstance(names, list) or not names
            or not all(isinstance(n, str) for n in names)):
        raise LoadError(folder / "metrics.json", f"has extra.populations={names!r:.60}: must "
                        "be a non-empty list of group names")
    return names


def _is_residual(value: Any) -> bool:
    """A finite number >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value)) and value >= 0
    except OverflowError:
        return False


def save_run(path: str | os.PathLike, result: Result | None = None, *,
             parameters: dict[str, Any] | None = None, metrics: dict[str, Any] | None = None,
             figures: dict[str, Any] | None = None,
             tables: dict[str, list[dict[str, Any]]] | None = None,
             force: bool = False) -> Path:
    """Write a run folder at ``path`` atomically (temporary folder beside it, renamed at the
    end) and return its path.

    ``path`` may be new, an empty folder or a previous run folder (it holds the marker
    ``mfgwork.json``), which is replaced; a non-empty folder without a marker is refused
    before any work unless ``force=True``, and even then if it holds a notebook, a project
    root or a result folder; a folder of another kind, a file, a link, the current
    directory, the home folder and their ancestors are always refused (the rule of
    :func:`mfgwork.core.storage.check_target`). The folder holds:

    - ``parameters.json``: ``result.params`` updated by ``parameters``;
    - ``metrics.json``: ``result.metrics()``, history and provenance (package versions),
      updated by ``metrics``;
    - ``arrays.npz``: the result's arrays (x, t, U, M and the observables);
    - ``figures/<name>.png`` and ``figures/<name>.pdf`` (vector, at print size) for each
      ``figures`` entry (anything with ``savefig``; see :mod:`mfgwork.core.figures`);
    - ``<name>.json`` and ``<name>.csv`` for each ``tables`` entry (a list of flat rows).

    Without a result only the parameters, metrics (with provenance), figures and tables are
    written. A parameter named ``out_dir`` (where a notebook was told to write) is left out.
    """
    parameters = {k: v for k, v in (parameters or {}).items() if k != "out_dir"}
    with storage.atomic_folder(path, "run", name="path", force=force) as tmp:
        if result is not None:
            result.write_files(tmp, parameters, metrics)
        else:
            storage.write_json(tmp / "parameters.json", parameters)
            storage.write_json(tmp / "metrics.json",
                               {"provenance": provenance()} | (metrics or {}))
        if figures:
            (tmp / "figures").mkdir()
            for name, fig in figures.items():
                save_figure(fig, tmp / "figures", name)
        for name, rows in (tables or {}).items():
            storage.write_json(tmp / f"{name}.json", rows)
            storage.write_csv(tmp / f"{name}.csv", rows)
    return Path(path)
