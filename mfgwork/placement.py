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
particles), and the reason says so. ``device="auto"`` in :func:`mfgwork.solve` and
:func:`mfgwork.solve_batch` asks this function and records its answer in
``res.params["placement"]``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .core.backend import BACKENDS, available_devices, torch_installed
from .core.errors import LoadError, ParameterError, check_choice, check_int
from .numerics.particles.solver import DEFAULT_PARTICLES
from .problems.base import MFGProblem

METHODS = ("fdm", "particles")
FALLBACK_FDM_BATCH = 64
FALLBACK_PARTICLES = 100_000
ACCELERATORS = ("cuda", "mps")   # in order of preference


@dataclass(frozen=True)
class Placement:
    """The choice for one solve: ``backend`` and ``device``, with the reason and the
    crossover-table entry it rests on (None when no entry applies)."""

    method: str
    size: int            # problems in the batch (fdm) or particles (particles)
    backend: str
    device: str
    reason: str
    row: dict[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

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
    if not isinstance(table, dict):
        raise LoadError(Path(path), "must hold a JSON object (a crossover table)")
    return table


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
    table = crossover_table() if table is None else table
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
