"""Where a solve runs best: ``mw.placement(problem_or_batch, method=...)``, from measurements.

A single finite-difference solve is a sequential chain of small tridiagonal solves (one per
time step and Newton iteration), so the compiled CPU loops run it fastest: an accelerator
spends more time launching kernels than computing. A batch of problems (a parameter grid)
turns each launch into work for the whole batch, and particles are independent of each other,
so from some size on the accelerator wins: B* problems for finite-difference batches, N*
particles. Those crossovers are measured by ``benchmarks/crossover.py`` and shipped in
``mfgwork/data/crossover.json`` together with the machine they were measured on.

An accelerator entry the table does not hold as measured falls back to a fixed rule (batches
of at least :data:`FALLBACK_FDM_BATCH` problems, at least :data:`FALLBACK_PARTICLES`
particles), and the reason says so.

:func:`resolve` is the one placement rule of the package: every solver and the scan ask it
where to run (``device="auto"``: this measured choice, with the rules of 2-D problems and of
batches on the CPU; an explicit device: the library that runs there), and a solve records its
answer in ``res.params["placement"]`` (:meth:`Placement.record`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .core.backend import BACKENDS, Backend, available_devices, torch_installed
from .core.errors import LoadError, ParameterError, check_choice, check_int
from .numerics.particles.solver import DEFAULT_PARTICLES
from .problems.base import MFGProblem
from .problems.two_d import MFGProblem2D

METHODS = ("fdm", "particles")
FALLBACK_FDM_BATCH = 64
FALLBACK_PARTICLES = 100_000
ACCELERATORS = ("cuda", "mps")   # in order of preference


@dataclass(frozen=True)
class Placement:
    """The choice for one solve: ``backend`` and ``device``, with the reason and the
    crossover-table entry it rests on (None when no entry applies). ``chosen``: False where
    the caller gave the device (nothing was chosen, nothing is recorded)."""

    method: str
    size: int            # problems in the batch (fdm) or particles (particles)
    backend: str
    device: str
    reason: str
    row: dict[str, Any] | None
    chosen: bool = field(default=True, repr=False)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["chosen"]
        return out

    def record(self) -> dict[str, Any]:
        """A result's ``params`` entry ``{"placement": ...}`` of a choice (the table row
        compacted to its kind, whether measured, crossover and machine); ``{}`` where the
        caller gave the device."""
        if not self.chosen:
            return {}
        entry = {k: v for k, v in self.as_dict().items() if k != "row"}
        row = self.row
        entry["table_entry"] = None if row is None else {
            "kind": row["kind"], "measured": row["measured"], "crossover": row.get("crossover"),
            "machine": (row.get("machine") or {}).get("name")}
        return {"placement": entry}

    def __str__(self) -> str:
        return f"{self.backend} on {self.device}: {self.reason}"


@cache
def _packaged_table() -> dict[str, Any]:
    text = resources.files("mfgwork.data").joinpath("crossover.json").read_text()
    return json.loads(text)


def crossover_table(path: str | Path | None = None) -> dict[str, Any]:
    """The crossover table: the one shipped with the package, or the JSON object at ``path``
    (read as by :func:`mfgwork.core.storage.read_json`; a LoadError names a bad file)."""
    if path is None:
        return _packaged_table()
    from .core import storage

    table = storage.read_json(path)
    problem = table_problem(table)
    if problem is not None:
        raise LoadError(Path(path), f"must hold a crossover table: {problem}")
    return table


def table_problem(table: Any) -> str | None:
    """What keeps ``table`` from being a crossover table, in words (None: nothing): a dict
    whose ``accelerators`` (a dict by kind) hold dicts with an optional ``machine`` (a dict)
    and series ``fdm_batch``/``particles`` (dicts: ``crossover`` an int or null, ``sizes`` a
    list of ints), and whose ``cases`` is a dict of dicts."""
    if not isinstance(table, dict):
        return f"it is a {type(table).__name__}, not a dict (a JSON object)"
    for key in ("accelerators", "cases"):
        part = table.get(key, {})
        if not isinstance(part, dict) or not all(isinstance(v, dict) for v in part.values()):
            return f"its {key!r} must be a dict of dicts"
    for kind, entry in table.get("accelerators", {}).items():
        if not isinstance(entry.get("machine", {}), dict):
            return f"accelerators[{kind!r}]['machine'] must be a dict"
        for name in ("fdm_batch", "particles"):
            series = entry.get(name, {})
            if not isinstance(series, dict):
                return f"accelerators[{kind!r}][{name!r}] must be a dict"
            crossover, sizes = series.get("crossover"), series.get("sizes", [])
            if crossover is not None and (isinstance(crossover, bool)
                                          or not isinstance(crossover, int)):
                return f"accelerators[{kind!r}][{name!r}]['crossover'] must be an int or null"
            if not isinstance(sizes, list) or not all(
                    isinstance(n, int) and not isinstance(n, bool) for n in sizes):
                return f"accelerators[{kind!r}][{name!r}]['sizes'] must be a list of ints"
    return None


def placement(problems: MFGProblem | Sequence[MFGProblem], method: str = "fdm", *,
              n_particles: int | None = None, nx: int = 201, nt: int = 201,
              backend: str | None = None, table: dict[str, Any] | None = None,
              batch_size: int | None = None) -> Placement:
    """Where ``problems`` (one problem, or a batch for ``solve_batch``) should run.

    ``method``: "fdm" or "particles" (with ``n_particles``, default 100 000). ``backend``:
    None (free choice: NumPy on the CPU, torch on an accelerator), "torch" (choose among the
    torch devices) or "numpy" (the CPU; the reason says where torch would go). ``table``: a
    crossover table (default: the packaged one, see :func:`crossover_table`).
    ``batch_size``: the number of finite-difference problems solved together when
    ``problems`` stands for more (a scan's points: one problem and their count); default
    ``len(problems)``.
    """
    size, method = _check(problems, method, n_particles, nx, nt, backend)
    if batch_size is not None and method == "fdm":
        size = check_int("batch_size", batch_size, low=1)
    if table is None:
        table = crossover_table()
    elif (problem := table_problem(table)) is not None:
        raise ParameterError(f"table={table!r:.60} is invalid: must be a crossover table "
                             f"(see mw.crossover_table()): {problem}")
    kind = next((d for d in ACCELERATORS if d in _torch_devices()), None)
    cpu_backend = backend or "numpy"
    if kind is None:
        return Placement(method, size, cpu_backend, "cpu",
                         "no CUDA or MPS device is available here", None)
    row = _row(table, kind, method)
    go, why = _decide(method, size, kind, row, table)
    if go and backend == "numpy":
        return Placement(method, size, "numpy", "cpu", f"backend='numpy' runs on the CPU only "
                         f"(with backend='torch' this would go to {kind}: {why})", row)
    if go:
        return Placement(method, size, "torch", kind, why, row)
    return Placement(method, size, cpu_backend, "cpu", why, row)


def resolve(problems: Any, method: str = "fdm", *, backend: str | None = None,
            device: Any = "auto", n_particles: int | None = None, nx: int = 201,
            nt: int = 201, batch_size: int | None = None,
            numpy_on_cpu: bool = False) -> Placement:
    """Where ``problems`` (one problem, a batch, or with ``batch_size`` a scan's points like
    it) run: the one placement rule of every solver and of the scan. ``backend``: a name,
    or None for a free choice.

    - An explicit ``device`` (anything but "auto"; :func:`mfgwork.get_backend` checks it):
      ``backend``, else :func:`device_backend`. Nothing is chosen (``chosen=False``).
    - ``device="auto"`` with a backend name not in :data:`BACKENDS`: passed on as given, for
      get_backend to name the error.
    - ``device="auto"``, 2-D problems: NumPy on the CPU, or with ``backend="torch"`` torch's
      first device here (CUDA, else MPS, else the CPU): they are solved one by one (their
      batches run on torch alone), and the crossover table measures 1-D batches.
    - ``device="auto"``, others: :func:`placement`, from the measured crossovers. With
      ``numpy_on_cpu`` (:func:`mfgwork.solve_batch`, which on NumPy solves its problems one
      after the other) a batch placed on the CPU runs on NumPy whatever ``backend``: the
      compiled NumPy loops are faster there than a torch batch, whose many small kernels
      per time step cost more than they share.
    """
    size = batch_size or (len(problems) if isinstance(problems, list | tuple) else 1)
    if not isinstance(device, str) or device != "auto":
        return Placement(method, size, device_backend(device) if backend is None else backend,
                         device, f"device={device!r} was given", None, chosen=False)
    if backend is not None and backend not in BACKENDS:
        return Placement(method, size, backend, device, f"backend={backend!r} is no name of "
                         f"{BACKENDS}", None, chosen=False)
    first = problems[0] if isinstance(problems, list | tuple) and problems else problems
    if isinstance(first, MFGProblem2D):
        on = (_torch_devices() or ["auto"])[0] if backend == "torch" else "cpu"
        return Placement(method, size, backend or "numpy", on, "a 2-D problem is solved "
                         "one by one with mw.solve, by default the compiled NumPy solver "
                         "(ILU-BiCGStab) on the CPU" + (f"; backend='torch' runs it on {on}, "
                         "torch's first device here" if backend == "torch" else ""), None)
    chosen = placement(problems, method, n_particles=n_particles, nx=nx, nt=nt,
                       backend=backend, batch_size=batch_size)
    if numpy_on_cpu and chosen.device == "cpu" and chosen.backend != "numpy":
        return replace(chosen, backend="numpy", reason=(
            f"{chosen.reason}; on the CPU the compiled NumPy loops, one problem after the "
            f"other, are faster than a {chosen.backend} batch, so backend='numpy'"))
    return chosen


def place_solve(problems: Any, method: str, n_particles: int | None, nx: int, nt: int,
                backend: str | Backend, device: str, numpy_on_cpu: bool = False
                ) -> tuple[str | Backend, str, dict[str, Any]]:
    """(backend, device, params entry) of :func:`mfgwork.placement.resolve` (the entry
    ``{"placement": ...}`` where it chose, else empty); a backend that is no name (a
    :class:`~mfgwork.Backend` says where already) is passed on."""
    if not isinstance(backend, str):
        return backend, device, {}
    chosen = resolve(problems, method, backend=backend, device=device,
                     n_particles=n_particles, nx=nx, nt=nt, numpy_on_cpu=numpy_on_cpu)
    return chosen.backend, chosen.device, chosen.record()


def device_backend(device: object) -> str:
    """The library of an explicit ``device`` when no backend is given: torch on CUDA and
    MPS (``"cuda:1"`` too), which are PyTorch's alone; else NumPy, the solvers' default (a
    device that does not exist is named by :func:`mfgwork.get_backend`)."""
    kind = device.split(":")[0] if isinstance(device, str) else None
    return "torch" if kind in ("cuda", "mps") else "numpy"


def _decide(method: str, size: int, kind: str, row: dict[str, Any], table: dict[str, Any]
            ) -> tuple[bool, str]:
    """(whether the accelerator ``kind`` pays off for ``size``, why)."""
    what = "problems" if method == "fdm" else "particles"
    if method == "fdm" and size == 1:
        return False, ("a single finite-difference solve is a sequential chain of small "
                       "tridiagonal solves: the compiled CPU loops are fastest")
    if not row.get("measured"):
        threshold = FALLBACK_FDM_BATCH if method == "fdm" else FALLBACK_PARTICLES
        rule = (f"no crossover measured for {kind} in the table ({row.get('note', 'no entry')});"
                f" fallback rule: {threshold} {what} or more go to the accelerator")
        return size >= threshold, f"{size} {what}; {rule}"
    crossover = row.get("crossover")
    where = (f"measured on {row.get('machine', {}).get('name', 'an unnamed machine')} "
             f"({_describe_case(table, method)})")
    if crossover is None:
        largest = max(row.get("sizes") or [0])
        return False, (f"{kind} did not beat the CPU at any size up to {largest} {what}, "
                       f"{where}")
    if size >= crossover:
        return True, f"{size} {what} ≥ crossover {crossover} for {kind}, {where}"
    return False, f"{size} {what} < crossover {crossover} for {kind}, {where}"


def _describe_case(table: dict[str, Any], method: str) -> str:
    case = table.get("cases", {}).get("fdm_batch" if method == "fdm" else "particles", {})
    return ", ".join(f"{k}={v}" for k, v in case.items() if k in ("nx", "nt", "iterations"))


def _row(table: dict[str, Any], kind: str, method: str) -> dict[str, Any]:
    """The table's entry for ``kind`` and ``method``, with the machine and whether measured."""
    entry = table.get("accelerators", {}).get(kind, {})
    row = {"kind": kind, "measured": bool(entry.get("measured")),
           "machine": entry.get("machine") or {}, "note": entry.get("note", "no entry")}
    if row["measured"]:
        series = entry.get("fdm_batch" if method == "fdm" else "particles") or {}
        row |= {"crossover": series.get("crossover"), "sizes": series.get("sizes")}
        row["measured"] = bool(series.get("sizes"))
    return row


def _torch_devices() -> list[str]:
    return available_devices("torch") if torch_installed() else []


def _check(problems: object, method: object, n_particles: object, nx: object, nt: object,
           backend: object) -> tuple[int, str]:
    method = check_choice("method", method, METHODS)
    check_int("nx", nx, low=3)
    check_int("nt", nt, low=1)
    if backend is not None and backend not in BACKENDS:
        raise ParameterError(f"backend={backend!r} is invalid: must be None, "
                             f"{' or '.join(map(repr, BACKENDS))}")
    if isinstance(problems, MFGProblem):
        batch = [problems]
    elif isinstance(problems, (list, tuple)) and problems:
        batch = list(problems)
    else:
        raise ParameterError(f"problems={problems!r} is invalid: must be an mfgwork.MFGProblem "
                             "or a non-empty list of them")
    for i, p in enumerate(batch):
        if not isinstance(p, MFGProblem):
            raise ParameterError(f"problems[{i}]={p!r} is invalid: must be an "
                                 "mfgwork.MFGProblem")
    if method == "particles":
        if len(batch) > 1:
            raise ParameterError(f"problems has {len(batch)} problems: method='particles' "
                                 "solves one problem at a time")
        return check_int("n_particles", DEFAULT_PARTICLES if n_particles is None
                         else n_particles, low=1), method
    if n_particles is not None:
        raise ParameterError(f"n_particles={n_particles!r} is invalid with method='fdm': it "
                             "applies only to method='particles'")
    return len(batch), method
