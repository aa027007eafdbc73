"""The result of a solve, its observables, and saving/loading (NPZ + JSON, no pickle).

Arrays stay on the backend that computed them (``mw.to_numpy`` converts any of them);
observables and saving work on NumPy copies, at this boundary only. A saved run records the
SHA-256 of each of its arrays in ``metrics.json`` (:data:`DIGESTS`), which :func:`load`
checks.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .core import storage
from .core.backend import to_numpy
from .core.errors import LoadError, ParameterError, warn
from .core.extras import require
from .core.figures import save_figure
from .core.frozen import freeze
from .core.grid import trapezoid_weights
from .core.storage import load_table, provenance
from .problems import PROBLEMS, CommonNoise, problem_class, problem_from_params

__all__ = ["DIGESTS", "FIELDS", "RESULT_CLASSES", "STATUSES", "Result", "Status",
           "array_digest", "check_solves", "derive_status", "load", "load_table", "provenance",
           "save_run"]

FIELDS = ("x", "t", "U", "M")
class Status(StrEnum):
    """How a solve ended, a string (``res.status == "converged"``) with its :attr:`message`:
    its certificate held (``converged``), the iteration budget ran out (``max_iter``), the
    iteration stopped improving before that (``stalled``), or the certificate claimed by the
    iteration did not hold when checked again (``failed``; e.g. a float32 certificate
    re-checked in float64)."""

    CONVERGED = "converged"
    MAX_ITER = "max_iter"
    STALLED = "stalled"
    FAILED = "failed"

    @property
    def message(self) -> str:
        """What the status means for the result's densities."""
        return _MESSAGES[self]


_MESSAGES = {
    Status.CONVERGED: "the fixed point is reached: one more best response to the returned "
                      "densities moves them by at most tol (res.residual, relative)",
    Status.MAX_ITER: "max_iter iterations ran out before tol was reached: the best certified "
                     "densities are returned, with their residual (raise max_iter)",
    Status.STALLED: "the iteration stopped before max_iter: its residual stopped decreasing "
                    "(a line search failed, or its certificates were refused); the best "
                    "certified densities are returned, with their residual",
    Status.FAILED: "the certificate of the iteration did not hold when checked again (a "
                   "float32 certificate recomputed in float64): not converged, whatever the "
                   "iteration claimed",
}
#: The statuses' values.
STATUSES = tuple(s.value for s in Status)


def derive_status(converged: bool, iterations: int, max_iter: int | None) -> str:
    """The status of a solve from what every result records: converged, else ``max_iter``
    when the budget ``max_iter`` was used up, else ``stalled``."""
    if converged:
        return "converged"
    if max_iter is not None and iterations >= max_iter:
        return "max_iter"
    return "stalled"


class ObservablesByName:
    """Reads the entries of a result's ``observables`` (and further ``arrays``) as
    attributes (``res.attendance``)."""

    def __getattr__(self, name: str) -> Any:
        observables = self.__dict__.get("observables") or {}
        arrays = self.__dict__.get("arrays") or {}
        if name in observables:
            return observables[name]
        if name in arrays:
            return arrays[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r} (observables: "
                             f"{', '.join(observables) or 'none'})")


#: The best-response residual of each problem kind, ``(result, problem) -> float`` (the
#: entry of the problem's most specific class): :meth:`Result.check`. Filled by
#: :mod:`mfgwork.best_response`, where the solvers are: this module imports none.
CERTIFICATES: dict[type, Callable[[Any, Any], float]] = {}

#: What the parameters of a problem of one's own are compared on (:func:`check_solves`): its
#: domain (its callables, and a Hamiltonian of one's own, are recorded by name only).
DOMAIN = ("x_min", "x_max", "y_min", "y_max", "T")
#: Parameters that a problem's ``params()`` leaves out at their default (compared by
#: :func:`check_solves` as that default, with ``objective``): a Santa Fe bar's objective.
LEFT_OUT = {"objective": "equilibrium"}


def check_solves(problem: Any, result: Result, *, objective: bool = True) -> None:
    """Refuse a ``problem`` that ``result`` does not solve: not of the class of the problem
    its params name (:func:`~mfgwork.problems.problem_class`), or whose parameters
    (``problem.params()``) differ from ``result.params``: all of them for a problem of the
    registry (with ``objective``, also those of :data:`LEFT_OUT`: a planner's result is not
    the equilibrium's), the :data:`DOMAIN` for a problem of one's own."""
    name = result.params.get("problem")
    kind = problem_class(name)
    own = kind is None
    if (isinstance(problem, (*PROBLEMS.values(), CommonNoise)) if own
            else not isinstance(problem, kind)):
        what = "a problem of one's own" if own else f"mfgwork.{kind.__name__}"
        raise ParameterError(f"problem={problem!r:.120} is invalid: the result is a result of "
                             f"{name!r:.80} ({what}): pass the problem that was solved")
    given = problem.params()
    mismatch = {k: (given[k], result.params[k]) for k in (DOMAIN if own else given)
                if k in given and k in result.params and result.params[k] != given[k]}
    for k, default in ({} if own or not objective else LEFT_OUT).items():
        if k in given or k in result.params:
            there, here = given.get(k, default), result.params.get(k, default)
            if there != here:
                mismatch[k] = (there, here)
    if mismatch:
        raise ParameterError(f"problem={problem!r:.120} is invalid: the result does not solve "
                             f"problem: parameters differ (problem, result): {mismatch!r:.300}; "
                             f"it is a result of {name!r:.80}: pass the problem that was solved")


#: The mappings of a :class:`Result`, read-only (:func:`~mfgwork.core.frozen.freeze`).
MAPPINGS = ("history", "params", "timings", "observables", "summary", "extra", "labels",
            "arrays", "axes")
#: The arrays of a :class:`Result`, read-only views (those in its mappings too).
ARRAYS = ("x", "t", "U", "M")
#: The fields a Result freezes when it is built (:func:`~mfgwork.core.frozen.freeze`).
FROZEN_FIELDS = MAPPINGS + ARRAYS


@dataclass(frozen=True)
class Result(ObservablesByName):
    """Solution of an MFG system (of any problem kind: continuous, finite-state, several
    populations; 2-D domains: the subclass :class:`~mfgwork.Result2D`, dims ("t", "y",
    "x")), frozen: its mappings too (:data:`MAPPINGS` refuse changes; ``res.extra | {...}``
    is a changed plain dict) and its arrays (read-only views: ``res.M.copy()`` is a changeable
    array); build a changed copy with ``dataclasses.replace``.

    ``x`` (nx,), ``t`` (nt+1,), ``U`` and ``M`` (nt+1, nx) with axes named by ``dims``
    (default ``("t", state_name)``); an axis of named entries has them in ``labels`` (the
    two-state game: ``dims=("t", "state")``, ``labels={"state": ("home", "bar")}`` and ``x``
    the state index; several populations: a leading ``"population"`` axis, e.g.
    ``dims=("population", "t", "x")``). ``observables``: the paths the problem observes,
    each (nt+1,) (Santa Fe: ``attendance``, ``mean_state``; per population (K, nt+1), see
    :meth:`observable_dims`), also readable as attributes
    (``res.attendance``); ``summary``: the problem's scalar headline numbers; ``arrays``:
    further arrays of the solver (two-state: ``gap`` = u_1 − u_0 as carried by the sweep;
    2-D, :class:`~mfgwork.Result2D`: the velocity field, the outflows, the geometry), also
    readable as attributes. ``axes``: the axes of an entry of ``observables`` or ``arrays``
    where they differ from the default (an observable: those of U and M without the state
    axis, as many as it has, see :meth:`observable_dims`; an array: ("t",), see
    :meth:`array_dims`); an array named like an axis and along that axis alone is its
    coordinate (2-D: ``y``). ``residual`` is the relative fixed-point residual of the
    returned solution, ‖A(BR(A)) − A‖ / ‖A(BR(A))‖ for its attendance path A (for
    other problems the same with the density path): ``converged`` means ``residual`` ≤
    ``tol``, and :meth:`check` recomputes it. ``status``: one of :data:`STATUSES`,
    ``"converged"`` exactly when ``converged`` (None: derived by :func:`derive_status`).
    ``history`` holds per-iteration residuals of the iterates, relative changes of U and M
    and the wall time of each phase; ``timings`` the totals.
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
    status: Status | str | None = None
    dims: tuple[str, ...] | None = None
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    arrays: dict[str, Any] = field(default_factory=dict)
    axes: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        RESULT_CLASSES[cls.__name__] = cls

    def __post_init__(self) -> None:
        self._check_status()
        dims = ("t", self.state_name) if self.dims is None else tuple(self.dims)
        if len(dims) != np.ndim(self.M):
            raise ParameterError(f"dims={dims!r} is invalid: must name the {np.ndim(self.M)} "
                                 "axes of U and M")
        fields = vars(self)   # (set in place: the dataclass is frozen to its users)
        fields["dims"] = dims
        for name in ("labels", "axes"):
            if fields[name]:
                fields[name] = {k: tuple(v) for k, v in fields[name].items()}
        for name in FROZEN_FIELDS:   # read-only all the way down (core.frozen)
            fields[name] = freeze(fields[name])

    def _check_status(self) -> None:
        """The status (None: derived) checked against ``converged``, kept as a
        :class:`Status`."""
        status = self.status
        if status is None:
            status = derive_status(self.converged, self.iterations, self.params.get("max_iter"))
        if status not in STATUSES or (status == "converged") != bool(self.converged):
            raise ParameterError(f"status={status!r} is invalid with converged="
                                 f"{self.converged!r}: must be one of {STATUSES}, "
                                 "'converged' exactly when converged")
        object.__setattr__(self, "status", Status(status))

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled read-only again (pickle restores arrays writeable)."""
        self.__dict__.update({k: freeze(v) if k in ARRAYS else v for k, v in state.items()})

    @property
    def scheme(self) -> str | None:
        """The name of the iteration that solved this result, as the solver recorded it
        (``params["iteration"]["scheme"]``, or ``extra["iteration"]`` for 2-D solves):
        "newton", "anderson", "relaxation", "fictitious_play"; None where none is recorded."""
        for where in (self.params, self.extra):
            described = where.get("iteration")
            if isinstance(described, dict) and isinstance(described.get("scheme"), str):
                return described["scheme"]
        return None

    @property
    def populations(self) -> tuple[str, ...] | None:
        """The group names along the leading axis of ``U`` and ``M`` (K, nt+1, nx) of a
        solve of several populations; None for one population."""
        return self.labels.get("population")

    # -- derived numbers (NumPy) ------------------------------------------------------------
    def observable_dims(self, name: str) -> tuple[str, ...]:
        """The axes of the observable ``name``: those of U and M without the state axis,
        as many as it has (a path over time: ("t",); per population:
        ("population", "t")), unless ``axes`` names them."""
        if name in self.axes:
            return self.axes[name]
        return self.dims[:-1][-np.ndim(self.observables[name]):]

    def array_dims(self, name: str) -> tuple[str, ...]:
        """The axes of the entry ``name`` of ``arrays``: as ``axes`` names them, else
        ("t",)."""
        return self.axes.get(name, ("t",))

    @property
    def states(self) -> tuple[str, ...] | None:
        """The names of the states along the last axis (finite-state games), else None."""
        return self.labels.get(self.dims[-1])

    @property
    def weights(self) -> np.ndarray:
        """Trapezoidal weights of the grid (ones over named states)."""
        return grid_weights(self.x, self.states)

    @property
    def mass(self) -> np.ndarray:
        """∫ m(t, x) dx (the sum over named states) at each time level (and population)."""
        return to_numpy(self.M).astype(np.float64) @ self.weights

    @property
    def mass_error(self) -> float:
        """max_t |∫ m(t) − 1|."""
        return float(np.max(np.abs(self.mass - 1.0)))

    #: Largest :attr:`density_mass_error` :func:`load` accepts (float32 solves: ~1e-7).
    mass_tolerance: ClassVar[float] = 1e-3

    @property
    def density_mass_error(self) -> float:
        """max_t |∫ m(t) dx − the mass the result holds| computed from ``M`` itself (1-D:
        the mass 1, so :attr:`mass_error`); what :func:`load` bounds."""
        return self.mass_error

    def check(self, problem: Any = None) -> float:
        """Recompute one best response to this solution and return its relative fixed-point
        residual (what ``residual`` reports; ≤ ``tol`` when converged). The best response
        is computed as the solve did (method, backend, device, dtype, particles and seed
        from ``params``; in NumPy float64 for float32 results re-certified in float64,
        ``extra["certificate"]``). ``problem``: the problem solved; a result of a problem of
        the registry that is rebuilt from its params (:data:`mfgwork.problems.REBUILDABLE`:
        Santa Fe and its populations with a shipped Hamiltonian, the two-state game; also one
        read by ``mw.load``) rebuilds it from ``params``, any other problem must be passed;
        one this result does not solve is refused (:func:`check_solves`)."""
        if problem is None:
            problem = problem_from_params(self.params)
        for kind in type(problem).__mro__:
            if kind in CERTIFICATES:
                check_solves(problem, self)
                return CERTIFICATES[kind](self, problem)
        raise ParameterError(f"problem={problem!r:.80} is invalid: must be one of "
                             f"{', '.join(f'mfgwork.{k.__name__}' for k in CERTIFICATES)}")

    def metrics(self) -> dict[str, Any]:
        """Headline numbers, JSON-ready."""
        size = int(np.size(to_numpy(self.x)))
        out: dict[str, Any] = {
            "converged": bool(self.converged), "status": self.status,
            "iterations": int(self.iterations), "residual": _finite_or_none(self.residual),
            "final_change_U": _last(self.history.get("change_U")),
            "final_change_M": _last(self.history.get("change_M")),
            "mass_error": self.mass_error, "min_density": float(np.min(to_numpy(self.M))),
            "timings": dict(self.timings), "backend": self.backend, "device": self.device,
            "dtype": self.dtype, "method": self.method,
            "nt": int(np.size(to_numpy(self.t))) - 1,
        } | ({"nx": size} if self.states is None else {"states": list(self.states)})
        return out | self.summary | self.extra

    def to_xarray(self) -> Any:
        """An xarray Dataset (NumPy): U, M, the observables and the arrays on their axes, with
        the coordinates t, the state axis (``x``, or the names of the states), the labels of
        labelled axes and the arrays that are coordinates (2-D: ``y``); attributes
        ``converged``, ``status``, ``residual`` (NaN when unknown)."""
        require("xarray", extra="scan", feature="Result.to_xarray")
        import xarray as xr

        host = self.to_numpy()
        coords: dict[str, Any] = {"t": host.t, self.dims[-1]: host.x}
        coords |= {k: (k, v) for k, v in host.arrays.items() if self.array_dims(k) == (k,)}
        coords |= {k: list(v) for k, v in self.labels.items()}
        data = {"U": (self.dims, host.U), "M": (self.dims, host.M)}
        data |= {k: (self.observable_dims(k), v) for k, v in host.observables.items()}
        data |= {k: (self.array_dims(k), v) for k, v in host.arrays.items() if k not in coords}
        residual = np.nan if self.residual is None else float(self.residual)
        return xr.Dataset(data, coords=coords, attrs={
            "converged": int(self.converged), "status": str(self.status), "residual": residual})

    def to_numpy(self) -> Result:
        """A copy whose arrays are NumPy arrays."""
        kw = {k: to_numpy(getattr(self, k)) for k in FIELDS}
        observables = {k: to_numpy(v) for k, v in self.observables.items()}
        arrays = {k: to_numpy(v) for k, v in self.arrays.items()}
        return replace(self, **kw, observables=observables, arrays=arrays)

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
        arrays = {k: np.asarray(to_numpy(getattr(self, k))) for k in FIELDS}
        arrays |= {k: np.asarray(to_numpy(v)) for k, v in (self.observables | self.arrays).items()}
        storage.write_npz(folder / "arrays.npz", arrays)
        storage.write_json(folder / "parameters.json", self.params | (parameters or {}))
        storage.write_json(folder / "metrics.json", self.metrics() | {
            "history": self.history, "observables": list(self.observables),
            "observable_dims": {k: list(self.observable_dims(k)) for k in self.observables},
            "arrays": list(self.arrays),
            "array_dims": {k: list(self.array_dims(k)) for k in self.arrays},
            "result": type(self).__name__, "summary": self.summary,
            "state_name": self.state_name, "dims": list(self.dims),
            "labels": {k: list(v) for k, v in self.labels.items()}, "extra": self.extra,
            "provenance": provenance()} | (metrics or {})
            | {DIGESTS: {k: array_digest(a) for k, a in arrays.items()}})


def grid_weights(x: Any, states: tuple[str, ...] | None = None) -> np.ndarray:
    """The weights of :attr:`Result.weights` for the grid ``x`` (any backend's array):
    trapezoidal, or ones over named ``states``."""
    x = to_numpy(x).astype(np.float64)
    if states is not None:
        return np.ones(x.size)
    return trapezoid_weights(x.size, float(x[1] - x[0]))


#: The fields that :meth:`Result.__post_init__` checks against one another (the status with
#: ``converged``; ``dims`` with the state name and the axes of ``M``) or normalises (the
#: status, ``labels``, ``axes``): :func:`updated` checks a copy again where one of them changes.
CHECKED = frozenset({"converged", "status", "dims", "state_name", "M", "labels", "axes"})
#: Of :data:`CHECKED`, those checked by the status alone (:meth:`Result._check_status`).
STATUS_CHECKED = frozenset({"converged", "status"})
_FIELD_NAMES = frozenset(f.name for f in fields(Result))
_FROZEN = frozenset(FROZEN_FIELDS)


def _ndim(a: Any) -> int:
    """The number of axes of ``a`` (its ``ndim`` where it has one: a tenth of ``np.ndim``'s
    time)."""
    ndim = getattr(a, "ndim", None)
    return np.ndim(a) if ndim is None else ndim


def updated(results: Sequence[Result], changes: Sequence[Mapping[str, Any]] | None = None,
            **shared: Any) -> list[Result]:
    """``[dataclasses.replace(res, **shared, **change) for res, change in zip(results,
    changes)]`` for the results of a batch, at the cost of one check per copy at most: the
    values of ``shared`` (e.g. the batch's timings) are frozen once for all, those of each
    change once (a change's value wins over a shared one of the same name), and a copy is
    checked as a construction checks it only where a change touches what the construction
    checks (:data:`CHECKED`; the status alone where only it or ``converged`` changes, or ``M``
    with as many axes as the result's: the members of a batch); its other fields are the
    result's own, checked and frozen when it was built. A result of a subclass (whose
    construction may check more) is copied by ``dataclasses.replace``."""
    unknown = (set(shared) | {k for c in changes or () for k in c}) - _FIELD_NAMES
    if unknown:
        raise TypeError(f"Result has no field {sorted(unknown)[0]!r}")
    shared = {k: freeze(v) if k in _FROZEN else v for k, v in shared.items()}
    out = []
    for b, res in enumerate(results):
        change = shared if changes is None else shared | {
            k: freeze(v) if k in _FROZEN else v for k, v in changes[b].items()}
        if type(res) is not Result:
            out.append(replace(res, **change))
            continue
        copy = object.__new__(Result)
        copy.__dict__.update(res.__dict__)
        copy.__dict__.update(change)
        touched = CHECKED.intersection(change)
        if "M" in touched and _ndim(change["M"]) == _ndim(res.M):   # (the same dims)
            touched -= {"M"}
        if touched <= STATUS_CHECKED:
            if touched:
                copy._check_status()
        else:
            copy.__post_init__()
        out.append(copy)
    return out


#: Entry of ``metrics.json`` holding the SHA-256 of each array of ``arrays.npz``.
DIGESTS = "array_sha256"
#: A density may dip below zero by this fraction of its largest value (round-off).
DENSITY_ROUND_OFF = 1e-6


def array_digest(a: np.ndarray) -> str:
    """SHA-256 (hex) of an array's dtype, shape and values in C order."""
    a = np.asarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


#: The result classes by name (each subclass of :class:`Result` adds itself), which
#: ``metrics.json`` records (``"result"``) and :func:`load` builds.
RESULT_CLASSES: dict[str, type[Result]] = {"Result": Result}


def _finite_or_none(value: float | None) -> float | None:
    return float(value) if value is not None and np.isfinite(value) else None


def _last(values: list[float] | None) -> float | None:
    return float(values[-1]) if values else None


#: Entries of ``metrics.json`` that :func:`load` reads, with their types.
METRICS_REQUIRED = {"converged": bool, "iterations": int}
METRICS_OPTIONAL = {"history": dict, "timings": dict, "backend": str, "device": str,
                    "dtype": str, "method": str, "observables": list, "summary": dict,
                    "state_name": str, "extra": dict, "status": str, "dims": list,
                    "labels": dict, "arrays": list, "observable_dims": dict,
                    "array_dims": dict, "result": str, DIGESTS: dict}


def load(path: str | os.PathLike, *, max_bytes: int | None = None) -> Result:
    """Read a folder written by :meth:`Result.save` or :func:`save_run` (NumPy arrays and
    JSON; no pickle) as the class it was saved from (``Result`` or a subclass such as
    :class:`~mfgwork.Result2D`). Figures, tables and the executed notebook are left on disk.

    Every file is checked before use: present, parsable, with the expected entries and
    types; the arrays real-valued and finite, ``x`` (nx,), ``t`` (nt+1,), ``U`` and ``M``
    (nt+1, nx) (axes as named by ``dims``), each observable (nt+1,) and each further array
    (nt+1,) (or on their recorded ``observable_dims`` and ``array_dims``), their decompressed
    size at most ``max_bytes`` (default: :data:`mfgwork.core.storage.MAX_NPZ_BYTES`, 1 GiB),
    checked before reading; a folder marked as another kind than a run is refused, and the
    result class checks what it needs (2-D: the velocity, outflows and geometry). Anything
    wrong raises :class:`~mfgwork.LoadError` naming the file. Runs saved without a
    ``status`` get the one :func:`derive_status` gives.

    Then the values: each array must have the SHA-256 that ``metrics.json`` recorded when the
    run was saved (:data:`DIGESTS`; a LoadError names the array that differs, is missing or
    was added), and, as a second line, ``M`` must be a density: ≥ 0 up to round-off, of mass
    1 at every time level (2-D: the mass path), giving the ``mass_error`` recorded. A run
    saved before digests were recorded is read with a :class:`RuntimeWarning` that its
    arrays are unverified (not refused: such runs are only checked by the second line,
    which a scaled or negated ``M`` does not pass, so they stay readable).
    """
    folder = Path(path)
    if not folder.is_dir():
        raise LoadError(folder, "is not a result folder (it does not exist)" if not
                        folder.exists() else "is not a result folder but a file")
    marked = storage.marker_kind(folder)
    if marked not in (None, "run"):
        raise LoadError(folder, f"is a {marked!r:.40} folder, not a run folder written by "
                        "Result.save or mw.save_run")
    metrics = storage.read_json(folder / "metrics.json", keys=METRICS_REQUIRED)
    for key, kind in METRICS_OPTIONAL.items():
        if key in metrics and not isinstance(metrics[key], kind):
            raise LoadError(folder / "metrics.json", f"has {key}={metrics[key]!r:.60}: must "
                            f"be a {kind.__name__}")
    cls = RESULT_CLASSES.get(metrics.get("result", "Result"))
    if cls is None:
        raise LoadError(folder / "metrics.json", f"has result={metrics['result']!r:.60}: "
                        f"must be one of {list(RESULT_CLASSES)}")
    residual = metrics.get("residual")
    if residual is not None and not _is_residual(residual):
        raise LoadError(folder / "metrics.json", f"has residual={residual!r:.60}: must be a "
                        "finite number >= 0 or null")
    status = metrics.get("status")
    if status is not None and (status not in STATUSES
                               or (status == "converged") != metrics["converged"]):
        raise LoadError(folder / "metrics.json", f"has status={status!r:.60} with converged="
                        f"{metrics['converged']!r}: must be one of {STATUSES}, 'converged' "
                        "exactly when converged")
    params = storage.read_json(folder / "parameters.json")
    if not isinstance(params, dict):
        raise LoadError(folder / "parameters.json", "must hold a JSON object")
    dims = _dims(folder, metrics)
    labels = _labels(folder, metrics)
    sizes: dict[str, str | int] = {d: len(v) for d, v in labels.items() if d != dims[-1]}
    sizes |= {"t": "nt+1", dims[-1]: "nx"}
    axes = _axes(folder, metrics, "observable_dims", (*dims[:-1], *labels))
    axes |= _axes(folder, metrics, "array_dims", (*dims, *labels))
    arrays = storage.read_npz(folder / "arrays.npz",
                              {"x": ("nx",), "t": ("nt+1",)} | {
                                  k: tuple(sizes.get(d, d) for d in v)
                                  for k, v in (axes | {"U": dims, "M": dims}).items()},
                              others=("nt+1",), max_bytes=max_bytes)
    others = metrics.get("arrays", [])
    names = metrics.get("observables", [k for k in arrays if k not in FIELDS])
    missing = [k for k in [*names, *others] if k not in arrays]
    if missing:
        raise LoadError(folder / "arrays.npz", f"has no array for the observables {missing} "
                        "listed in metrics.json")
    try:
        result = cls(x=arrays["x"], t=arrays["t"], U=arrays["U"], M=arrays["M"],
                   converged=metrics["converged"], iterations=metrics["iterations"],
                   history=metrics.get("history", {}), params=params,
                   timings=metrics.get("timings", {}), backend=metrics.get("backend", "numpy"),
                   device=metrics.get("device", "cpu"), dtype=metrics.get("dtype", "float64"),
                   method=metrics.get("method", "fdm"),
                   observables={k: arrays[k] for k in names},
                   summary=metrics.get("summary", {}),
                   state_name=metrics.get("state_name", "x"), extra=metrics.get("extra", {}),
                   residual=metrics.get("residual"), status=status, dims=dims, labels=labels,
                   arrays={k: arrays[k] for k in others}, axes=axes)
    except ParameterError as exc:
        raise LoadError(folder, f"does not hold a {cls.__name__}: {exc}") from None
    _check_digests(folder, metrics.get(DIGESTS), arrays)
    _check_density(folder, result, metrics.get("mass_error"))
    return result


def _check_digests(folder: Path, recorded: dict[str, Any] | None,
                   arrays: dict[str, np.ndarray]) -> None:
    """Each array as its recorded SHA-256 says (a warning where none is recorded)."""
    if recorded is None:
        warn(f"{folder}: the run was saved without digests of its arrays (by an "
             "earlier mfgwork): its values are unverified (checked only for shape, "
             "finite values, M >= 0 and mass)", RuntimeWarning)
        return
    for name in sorted(set(recorded) | set(arrays)):
        if name not in arrays:
            raise LoadError(folder / "arrays.npz", f"has no array {name!r}, whose digest "
                            "metrics.json records")
        if name not in recorded:
            raise LoadError(folder / "arrays.npz", f"holds the array {name!r}, of which "
                            "metrics.json records no digest (added after saving)")
        if recorded[name] != array_digest(arrays[name]):
            raise LoadError(folder / "arrays.npz", f"array {name!r} differs from the SHA-256 "
                            "that metrics.json recorded when the run was saved (changed "
                            "after saving)")


def _check_density(folder: Path, result: Result, recorded: Any) -> None:
    """``M`` ≥ 0 up to round-off, of the mass the result holds, giving the recorded
    ``mass_error``."""
    m = np.asarray(to_numpy(result.M), dtype=np.float64)
    floor = -DENSITY_ROUND_OFF * float(np.max(np.abs(m), initial=0.0))
    if m.size and float(m.min()) < floor:
        raise LoadError(folder / "arrays.npz", f"array 'M' has the value {m.min():.3g}: a "
                        f"density is >= 0 (allowed round-off {floor:.3g})")
    gap = result.density_mass_error
    if not gap <= result.mass_tolerance:
        raise LoadError(folder / "arrays.npz", f"array 'M' has a mass off by {gap:.3g} at "
                        f"some time level (allowed {result.mass_tolerance:g}): a density's "
                        "mass is 1 (2-D: the mass path)")
    if _is_residual(recorded) and abs(result.mass_error - recorded) > 1e-9 + 1e-6 * recorded:
        raise LoadError(folder / "arrays.npz", f"gives the mass error "
                        f"{result.mass_error:.3g}, not the {recorded:.3g} that metrics.json "
                        "recorded when the run was saved")


def _axes(folder: Path, metrics: dict[str, Any], key: str, allowed: tuple[str, ...]
          ) -> dict[str, tuple[str, ...]]:
    """The axes of observables or arrays recorded under ``key`` in ``metrics``."""
    recorded = metrics.get(key, {})
    if not all(isinstance(v, list) and v and set(v) <= set(allowed) and len(set(v)) == len(v)
               and k not in FIELDS for k, v in recorded.items()):
        raise LoadError(folder / "metrics.json", f"has {key}={recorded!r:.60}: must map "
                        f"names to distinct axes of {list(dict.fromkeys(allowed))}")
    return {k: tuple(v) for k, v in recorded.items()}


def _labels(folder: Path, metrics: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """The names of the entries of labelled axes recorded in ``metrics``."""
    labels = metrics.get("labels", {})
    for key, names in labels.items():
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise LoadError(folder / "metrics.json", f"has labels[{key!r:.40}]={names!r:.60}:"
                            " must be a list of names")
    return {k: tuple(v) for k, v in labels.items()}


def _dims(folder: Path, metrics: dict[str, Any]) -> tuple[str, ...]:
    """The axis names of U and M recorded in ``metrics`` (older runs: ("t", state_name))."""
    dims = metrics.get("dims", ["t", metrics.get("state_name", "x")])
    if (len(dims) < 2 or not all(isinstance(d, str) for d in dims) or "t" not in dims
            or len(set(dims)) != len(dims) or dims[-1] in ("t", "nx", "nt+1")):
        raise LoadError(folder / "metrics.json", f"has dims={dims!r:.60}: must be distinct "
                        "axis names holding 't', the state axis last")
    return tuple(dims)


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
             results: dict[str, Result] | None = None,
             pages: dict[str, str] | None = None, force: bool = False) -> Path:
    """Write a run folder at ``path`` atomically (temporary folder beside it, renamed at the
    end) and return its path.

    ``path`` may be new, an empty folder or a previous run folder (it holds the marker
    ``mfgwork.json``) as it was written, which is replaced; a non-empty folder without a
    marker, or a run changed since it was written, is refused before any work unless
    ``force=True`` (which keeps it aside as ``<path>.replaced-<time>``), and even then if it
    holds a notebook, a project's sources or a result folder; a folder of another kind, a
    file, a link, the current
    directory, the home folder and their ancestors are always refused (the rule of
    :func:`mfgwork.core.storage.check_target`). The folder holds:

    - ``parameters.json``: ``result.params`` updated by ``parameters``;
    - ``metrics.json``: ``result.metrics()``, history and provenance (package versions),
      updated by ``metrics``;
    - ``arrays.npz``: the result's arrays (x, t, U, M and the observables);
    - ``figures/<name>.png`` and ``figures/<name>.pdf`` (vector, at print size) for each
      ``figures`` entry (anything with ``savefig``; see :mod:`mfgwork.core.figures`);
    - ``<name>.json`` and ``<name>.csv`` for each ``tables`` entry (a list of flat rows);
    - ``<name>/`` for each ``results`` entry: a result folder of its own (as
      :meth:`Result.save` writes it, read back by :func:`load`), recorded in the run's marker
      as one of its parts, so that replacing the run replaces it too (a result is never
      written into a finished run: see :func:`mfgwork.core.storage.check_target`);
    - ``<name>.html`` for each ``pages`` entry: the text of a stand-alone page (e.g.
      :func:`mfgwork.analysis.plots2d.animation_page`), which, like any file, is written
      with the run and not into it once finished.

    Without a result only the parameters, metrics (with provenance), figures and tables are
    written. A parameter named ``out_dir`` (where a notebook was told to write) is left out.
    Every argument is checked before anything is written: ``result`` a :class:`Result` or
    None; ``parameters`` and ``metrics`` dicts with str keys and values JSON holds (no NaN
    or infinity); each name of ``figures``, ``tables``, ``results`` and ``pages`` a plain
    file name (:func:`mfgwork.core.storage.is_plain_name`: no path, never ``..``), a table's
    not one of :data:`RESERVED_TABLES`; each page a str.
    """
    if result is not None and not isinstance(result, Result):
        raise ParameterError(f"result={_shown(result)} is invalid: must be an mfgwork Result "
                             "(what mw.solve returns) or None")
    parameters = {k: v for k, v in _json_values("parameters", parameters).items()
                  if k != "out_dir"}
    metrics = _json_values("metrics", metrics)
    figures = check_figures(figures)
    tables = _check_tables(tables)
    parts = _check_parts(_mapping("results", results), taken={"figures", *tables})
    pages = _check_pages(pages)
    with storage.atomic_folder(path, "run", name="path", force=force) as tmp:
        if result is not None:
            result.write_files(tmp, parameters, metrics)
        else:
            storage.write_json(tmp / "parameters.json", parameters)
            storage.write_json(tmp / "metrics.json", {"provenance": provenance()} | metrics)
        if figures:
            (tmp / "figures").mkdir()
            for name, fig in figures.items():
                save_figure(fig, tmp / "figures", name)
        for name, rows in tables.items():
            storage.write_json(tmp / f"{name}.json", rows)
            storage.write_csv(tmp / f"{name}.csv", rows)
        for name, text in pages.items():
            (tmp / f"{name}.html").write_text(text, encoding="utf-8")
        for name, part in parts.items():
            (tmp / name).mkdir()
            part.write_files(tmp / name)
            storage.write_marker(tmp / name, "run")
    return Path(path)


def _shown(value: Any) -> str:
    """A value in a message: its shortened repr and its type."""
    return f"{value!r:.60} ({type(value).__name__})"


def _mapping(name: str, value: Any) -> dict[Any, Any]:
    """The mapping ``value`` (None: empty) as a dict; else :class:`ParameterError`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ParameterError(f"{name}={_shown(value)} is invalid: must be a dict or None")
    return dict(value)


def _json_values(name: str, value: Any) -> dict[str, Any]:
    """``parameters`` or ``metrics`` of :func:`save_run`: str keys, each value one that
    ``metrics.json`` can hold (no NaN or infinity); else :class:`ParameterError`."""
    out = _mapping(name, value)
    for key, item in out.items():
        if not isinstance(key, str):
            raise ParameterError(f"{name} has the key {_shown(key)}, which is invalid: its "
                                 "keys must be str")
        _check_json(f"{name}[{key!r}]", item)
    return out


def _check_json(name: str, value: Any) -> None:
    """Refuse a value that JSON cannot hold (NaN or infinity, a cycle, nested keys of
    mixed types), naming ``name``."""
    try:
        storage.dumps(value)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ParameterError(f"{name}={value!r:.60} is invalid: must be a value JSON holds "
                             f"(finite numbers, no NaN or infinity; {str(exc)[:80]})"
                             ) from None


#: Names a table of :func:`save_run` may not have: its files would replace the run's own.
RESERVED_TABLES = ("parameters", "metrics", Path(storage.MARKER).stem)


def _check_tables(tables: Any) -> dict[str, list[dict[str, Any]]]:
    """``tables`` of :func:`save_run` if each name is a plain file name (not one of
    :data:`RESERVED_TABLES`) and each table a list of rows (dicts) that JSON holds; else
    :class:`ParameterError`."""
    tables = _mapping("tables", tables)
    for name, rows in tables.items():
        if not storage.is_plain_name(name) or name in RESERVED_TABLES:
            raise ParameterError(f"tables={name!r:.80} is invalid: a table's name must be "
                                 f"{storage.PLAIN_NAME}, other than "
                                 f"{', '.join(map(repr, RESERVED_TABLES))} (its files are "
                                 "<name>.json and <name>.csv in the run folder)")
        if not isinstance(rows, list | tuple) or not all(isinstance(r, dict) for r in rows):
            raise ParameterError(f"tables[{name!r}]={_shown(rows)} is invalid: must be a list "
                                 "of rows (dicts)")
        _check_json(f"tables[{name!r}]", rows)
    return tables


def _check_pages(pages: Any) -> dict[str, str]:
    """``pages`` of :func:`save_run` if each name is a plain file name and each page a str;
    else :class:`ParameterError`."""
    pages = _mapping("pages", pages)
    for name, text in pages.items():
        if not storage.is_plain_name(name):
            raise ParameterError(f"pages={name!r:.80} is invalid: a page's name must be "
                                 f"{storage.PLAIN_NAME} (its file is <name>.html)")
        if not isinstance(text, str):
            raise ParameterError(f"pages[{name!r}]={_shown(text)} is invalid: must be the "
                                 "page's text (str)")
    return pages


def check_figures(figures: Any, name: str = "figures") -> dict[str, Any]:
    """``figures`` (None: none) if each name is a plain file name and each figure has
    ``savefig`` (a matplotlib Figure); else :class:`ParameterError` naming ``name``."""
    figures = _mapping(name, figures)
    for key, fig in figures.items():
        if not storage.is_plain_name(key):
            raise ParameterError(f"{name}={key!r:.80} is invalid: a figure's name must be "
                                 f"{storage.PLAIN_NAME} (its files are <name>.png and "
                                 "<name>.pdf)")
        if not callable(getattr(fig, "savefig", None)):
            raise ParameterError(f"{name}[{key!r}]={_shown(fig)} is invalid: must be a "
                                 "figure with savefig (a matplotlib Figure)")
    return figures


def _check_parts(results: dict[str, Any], taken: set[str]) -> dict[str, Result]:
    """``results`` of :func:`save_run` if each name is a plain folder name not used by the
    run's other files and each value a :class:`Result`; else :class:`ParameterError`."""
    for name, part in results.items():
        plain = storage.is_plain_name(name) and not name.startswith(".")
        if not plain or name in taken or Path(name).suffix in {".json", ".npz", ".csv"}:
            raise ParameterError(f"results={name!r:.80} is invalid: a result's name must be "
                                 f"{storage.PLAIN_NAME} for a folder (no leading dot, no file "
                                 "suffix) other than 'figures' and the tables' names")
        if not isinstance(part, Result):
            raise ParameterError(f"results[{name!r}]={type(part).__name__} is invalid: must "
                                 "be an mfgwork Result (what mw.solve returns)")
    return results
