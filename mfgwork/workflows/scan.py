"""Parameter scans as labeled xarray Datasets: batched on the device, resumable, on Dask.

``mw.scan(problem, grid, ...)`` solves ``problem`` (a problem class or a factory returning
an :class:`~mfgwork.MFGProblem`) at every point of ``grid`` (the spec language of sweeps,
:mod:`mfgwork.workflows.specs`, checked against the problem's signature) and returns an
``xarray.Dataset`` with one dimension per scanned axis plus ``t`` and ``x``:

- fields ``M`` and ``U`` (scan dims, t, x), unless ``keep`` drops them;
- the problem's observables over time (scan dims, t) and their summaries (scan dims), from
  ``MFGProblem.observables`` and ``MFGProblem.summary``;
- per-point metrics: ``converged``, ``status`` (converged / not_converged / failed),
  ``iterations``, ``residual`` (final fixed-point residual), ``mass_error``, ``wall_time``,
  ``device``, ``message`` (why a point failed or did not converge), ``done``;
- attributes: the problem's fixed parameters, the solver settings and provenance.

Points are solved block by block (:mod:`mfgwork.workflows.scan_store`): a block is one
:func:`mfgwork.solve_batch` call on the device ``device="auto"`` chooses (CUDA or MPS through
torch, with a leading batch axis; else the compiled NumPy solver, point by point), sized to
the device's memory. A block that raises is solved again point by point, so one failing point
is recorded (status, message) without stopping the scan. With ``store=PATH`` each finished
block is written into a zarr store (region writes, the ``done`` flag last), a rerun of the
same call skips finished blocks, and :func:`open_scan` opens the store lazily. With
``scheduler=ADDRESS`` (or ``dask=True``: a ``LocalCluster``) blocks are solved by Dask
workers, each on its own device, writing their regions into the shared store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..core.backend import Backend, available_devices, device_info, get_backend, to_numpy
from ..core.errors import ConvergenceWarning, ParameterError, check_int, check_real
from ..problems import MFGProblem, SantaFeBar
from ..results import Result, provenance
from .scan_store import (
    METRICS,
    Layout,
    ScanStore,
    block_shape,
    blocks,
    region_points,
    store_lock,
)
from .specs import SpecError, SweepSpec, parse_spec, read_spec, signature_parameters

#: Problems known by name to the command line (any ``module:callable`` works too).
PROBLEMS: dict[str, Callable[..., MFGProblem]] = {"santa_fe": SantaFeBar}
#: Fields a scan can keep, and the default.
FIELDS = ("M", "U")
#: Solver options, with their defaults (the type rule of specs applies to them too).
SOLVE_OPTIONS: dict[str, Any] = {"nx": 201, "nt": 201, "tol": 1e-8, "max_iter": 200,
                                 "dtype": None, "backend": None, "iteration": None}
#: Points per block on the host, where the NumPy solver takes them one by one: enough that
#: writing a block costs little against solving it, few enough to lose little when killed.
HOST_BLOCK_POINTS = 16
#: Arrays of (nt + 1) × nx values a batched solve holds per point on a device (U, M, their
#: next iterates, the running cost, Newton work arrays, Anderson history), with margin.
DEVICE_ARRAYS_PER_POINT = 32
#: Fraction of free device memory (host memory for results) a block may take.
MEMORY_FRACTION = 0.5
#: Longest message kept per point (the rest is cut).
MESSAGE_CHARS = 400


# -- the plan ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScanPlan:
    """What a scan computes: the problem factory, the parsed grid and the solver options."""

    factory: Callable[..., MFGProblem]
    spec: SweepSpec
    options: dict[str, Any]
    keep: tuple[str, ...]

    @property
    def dims(self) -> tuple[str, ...]:
        """One dimension per axis, named by its first parameter."""
        return tuple(names[0] for names, _ in self.spec.axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(values) for _, values in self.spec.axes)

    def parameters(self, index: Sequence[int]) -> dict[str, Any]:
        """The full parameter set of the point at grid ``index``."""
        params = dict(self.spec.fixed)
        for (names, values), i in zip(self.spec.axes, index, strict=True):
            params.update(zip(names, values[i], strict=True))
        return params

    def problem(self, index: Sequence[int]) -> MFGProblem:
        params = self.parameters(index)
        try:
            problem = self.factory(**params)
        except ParameterError as exc:
            raise ParameterError(f"the point {params} is invalid: {exc}") from None
        except TypeError as exc:  # e.g. a parameter without a default left out of the grid
            raise ParameterError(f"problem={_name(self.factory)} cannot be built from "
                                 f"{params}: {exc}") from None
        if not isinstance(problem, MFGProblem):
            raise ParameterError(f"problem={_name(self.factory)} returned {problem!r}: must "
                                 "return an mfgwork.MFGProblem")
        return problem

    def identity(self) -> dict[str, Any]:
        """What makes two scans the same computation (JSON-ready)."""
        return {"problem": _name(self.factory), "grid": self.spec.as_dict(),
                "options": {k: _jsonable(v) for k, v in self.options.items()},
                "keep": list(self.keep)}

    def hash(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


def _name(factory: Callable[..., Any]) -> str:
    for key, value in PROBLEMS.items():
        if value is factory:
            return key
    return f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', factory)}"


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, str | int | float | bool):
        return v
    describe = getattr(v, "describe", None)
    return describe() if callable(describe) else repr(v)


def make_plan(problem: Callable[..., MFGProblem] | str, grid: Any,
              fixed: Mapping[str, Any] | None, options: Mapping[str, Any],
              keep: Sequence[str]) -> ScanPlan:
    """Check everything that can be checked before work and return the plan: the grid
    against the problem's parameters, the solver options, ``keep``, and every point's
    problem (constructed once, which validates its parameters, and sharing one domain)."""
    factory = resolve_problem(problem)
    declared = signature_parameters(factory)
    spec = parse_spec(read_spec(grid), fixed, declared, reserved=(),
                      owner=f"problem {_name(factory)}")
    if not spec.axes:
        raise SpecError("the grid has no axis to scan: give at least one parameter a list, "
                        "linspace or range")
    keep = tuple(keep)
    for name in keep:
        if name not in FIELDS:
            raise ParameterError(f"keep={keep!r} is invalid: may hold only {FIELDS}")
    opts = SOLVE_OPTIONS | dict(options)
    opts["nx"] = check_int("nx", opts["nx"], low=3)
    opts["nt"] = check_int("nt", opts["nt"], low=1)
    opts["tol"] = check_real("tol", opts["tol"], low=0.0)
    opts["max_iter"] = check_int("max_iter", opts["max_iter"], low=1)
    from ..numerics.iteration import make_scheme

    make_scheme(opts["iteration"])
    plan = ScanPlan(factory, spec, opts, tuple(dict.fromkeys(keep)))
    _check_points(plan)
    return plan


def resolve_problem(problem: Callable[..., MFGProblem] | str) -> Callable[..., MFGProblem]:
    """A problem class or factory from itself, a name of :data:`PROBLEMS` or
    ``"module:callable"``."""
    if isinstance(problem, str):
        if problem in PROBLEMS:
            return PROBLEMS[problem]
        module, _, attr = problem.partition(":")
        if attr:
            import importlib

            try:
                target: Any = importlib.import_module(module)
                for part in attr.split("."):
                    target = getattr(target, part)
            except (ImportError, AttributeError) as exc:
                raise ParameterError(f"problem={problem!r} cannot be imported: {exc}") from None
            problem = target
        else:
            raise ParameterError(f"problem={problem!r} is unknown: must be one of "
                                 f"{', '.join(map(repr, PROBLEMS))} or 'module:callable'")
    if isinstance(problem, MFGProblem) or not callable(problem):
        raise ParameterError(f"problem={problem!r} is invalid: must be a problem class or a "
                             "factory of problems (e.g. mw.SantaFeBar), called with each "
                             "point's parameters")
    return problem


def _check_points(plan: ScanPlan) -> None:
    """Construct every point's problem (cheap; validates the values) and check that they share
    the domain and horizon, so the scan has one grid."""
    first = None
    for index in np.ndindex(*plan.shape):
        p = plan.problem(index)
        if first is None:
            first = p
            continue
        for name in ("x_min", "x_max", "T"):
            if getattr(p, name) != getattr(first, name):
                raise ParameterError(
                    f"the point {plan.parameters(index)} has {name}={getattr(p, name)!r} but "
                    f"the first point {name}={getattr(first, name)!r}: a scan shares one "
                    "grid in t and x, so scanned parameters may not change the domain or T")


# -- placement and block size -----------------------------------------------------------------
def placement(device: str, backend: str | None, dtype: Any) -> Backend:
    """The backend a scan solves on: ``device="auto"`` takes CUDA, else MPS, through torch
    (where batches pay off), else the compiled NumPy solver on the CPU; ``device="cpu"``
    NumPy unless ``backend`` says otherwise."""
    if backend is None:
        backend = "numpy"
        if device != "cpu":
            from ..core.backend import torch_installed

            accelerators = [d for d in (available_devices("torch") if torch_installed()
                                        else []) if d != "cpu"]
            if device != "auto" or accelerators:
                backend = "torch"
    return get_backend(backend, device, dtype)


def points_per_block(be: Backend, nx: int, nt: int, kept: int, points: int) -> int:
    """Points per block: on the host a fixed count (the NumPy solver loops over them); on a
    device as many as fit in a fraction of its free memory; either way bounded by host memory
    for the block's results."""
    itemsize = 4 if be.dtype == "float32" else 8
    per_point = (nt + 1) * nx * itemsize
    host = _host_available() * MEMORY_FRACTION // max(1, (kept + 1) * per_point)
    if not be.is_accelerator:
        return int(max(1, min(points, HOST_BLOCK_POINTS, host)))
    info = device_info(be.device)
    free = None
    if info.get("memory_total"):
        free = info["memory_total"] - (info.get("memory_reserved") or 0)
    device = free * MEMORY_FRACTION // (DEVICE_ARRAYS_PER_POINT * per_point) if free else points
    return int(max(1, min(points, device, host)))


def _host_available() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


# -- solving one block -------------------------------------------------------------------------
@dataclass
class Task:
    """One block for a worker: the plan, the region, and where to write it (or None)."""

    plan: ScanPlan
    region: tuple[slice, ...]
    layout: Layout
    store: str | None
    device: str


def solve_block(task: Task) -> dict[str, Any]:
    """Solve the points of ``task.region`` and fill their arrays; write them into the store
    when there is one. Returns ``{"region", "statuses", "arrays"}`` (arrays only without a
    store). Runs in the scan's process or on a Dask worker."""
    plan, opts = task.plan, task.plan.options
    indices = region_points(task.region)
    problems = [plan.problem(i) for i in indices]
    be = placement(task.device, opts["backend"], opts["dtype"])
    outcomes = _solve_points(problems, be, opts)
    shape = tuple(s.stop - s.start for s in task.region)
    arrays = task.layout.empty_block(shape)
    for k, outcome in enumerate(outcomes):
        at = np.unravel_index(k, shape)
        for name, value in outcome.items():
            if name in arrays:
                arrays[name][at] = value
    arrays["done"][...] = True
    if task.store is not None:
        from .scan_store import write_region

        write_region(task.store, task.region, arrays)
    return {"region": task.region, "statuses": [o["status"] for o in outcomes],
            "arrays": None if task.store is not None else arrays}


def _solve_points(problems: list[MFGProblem], be: Backend, opts: Mapping[str, Any]
                  ) -> list[dict[str, Any]]:
    """One batched solve on torch (a leading batch axis); point by point with NumPy, or when
    the batch raised (so the failing point is found and the others are solved)."""
    kw = {"nx": opts["nx"], "nt": opts["nt"], "backend": be, "tol": opts["tol"],
          "max_iter": opts["max_iter"], "iteration": opts["iteration"], "progress": False}
    if be.name == "torch" and len(problems) > 1:
        from ..solve import solve_batch

        started = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                results = solve_batch(problems, **kw)
        except Exception:  # noqa: BLE001 - the points are solved one by one below
            pass
        else:
            share = (time.perf_counter() - started) / len(problems)
            return [_outcome(r, share, opts) for r in results]
    return [_solve_one(p, kw, opts) for p in problems]


def _solve_one(problem: MFGProblem, kw: dict[str, Any], opts: Mapping[str, Any]
               ) -> dict[str, Any]:
    from ..solve import solve

    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            result = solve(problem, **kw)
    except Exception as exc:  # noqa: BLE001 - a failing point is recorded, not raised
        return {"status": "failed", "converged": False,
                "wall_time": time.perf_counter() - started,
                "device": kw["backend"].device,
                "message": _clip(f"{type(exc).__name__}: {exc}")}
    return _outcome(result, time.perf_counter() - started, opts)


def final_residual(result: Result) -> float:
    """The final relative fixed-point residual of a solve."""
    value = getattr(result, "residual", None)
    if value is None:
        value = result.history["residual"][-1]
    return float(value)


def _outcome(result: Result, wall_time: float, opts: Mapping[str, Any]) -> dict[str, Any]:
    """A solved point's entries: fields, observables, summaries and metrics (NumPy)."""
    residual = final_residual(result)
    status = "converged" if result.converged else "not_converged"
    message = "" if result.converged else _clip(
        f"did not reach tol={opts['tol']:g} in max_iter={opts['max_iter']} iterations "
        f"(final residual {residual:.3g})")
    out = {"status": status, "converged": bool(result.converged),
           "iterations": int(result.iterations), "residual": residual,
           "mass_error": float(result.mass_error), "wall_time": wall_time,
           "device": str(result.device), "message": message,
           "M": to_numpy(result.M), "U": to_numpy(result.U)}
    out |= {name: to_numpy(path) for name, path in result.observables.items()}
    return out | {name: float(value) for name, value in result.summary.items()}


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


# -- the Dataset's layout ----------------------------------------------------------------------
def make_layout(plan: ScanPlan, be: Backend) -> Layout:
    """Dimensions, coordinates, variables and attributes of the plan's Dataset. Observable
    names come from the problem itself, on its initial density."""
    first = plan.problem((0,) * len(plan.shape))
    grid = first.grid(plan.options["nx"], plan.options["nt"])
    host = get_backend("numpy")
    m0 = to_numpy(first.initial_density(grid, host))
    paths = first.observables(grid, np.stack([m0] * (grid.nt + 1)), host)
    scalars = first.summary(grid, paths)
    coords = {}
    for names, values in plan.spec.axes:
        for k, name in enumerate(names):
            coords[name] = (names[0], [v[k] for v in values])
    field_dtype = "float32" if be.dtype == "float32" else "float64"
    clash = set(paths) | set(scalars)
    for name in clash & (set(FIELDS) | set(METRICS) | set(coords) | {"t", "x"}):
        raise ParameterError(f"the problem's observable {name!r} clashes with a scan "
                             "variable of the same name")
    return Layout(dims=plan.dims, shape=plan.shape, coords=coords, t=np.asarray(grid.t),
                  x=np.asarray(grid.x), fields={k: field_dtype for k in plan.keep},
                  paths=tuple(paths), scalars=tuple(scalars),
                  attrs=_attributes(plan, first, be))


def _attributes(plan: ScanPlan, first: MFGProblem, be: Backend) -> dict[str, Any]:
    """Flat attributes (str, int, float): fixed problem parameters, solver settings,
    provenance."""
    scanned = set(plan.spec.varying)
    fixed = {k: v for k, v in first.params().items() if k not in scanned} | plan.spec.fixed
    opts = plan.options
    attrs: dict[str, Any] = {"title": f"parameter scan of {fixed.get('problem', 'a problem')}",
                             "scanned": ", ".join(plan.spec.varying),
                             "problem_factory": _name(plan.factory),
                             "state_name": first.state_name}
    attrs |= {k: _attr(v) for k, v in fixed.items()}
    attrs |= {"nx": opts["nx"], "nt": opts["nt"], "tol": opts["tol"],
              "max_iter": opts["max_iter"], "method": "fdm", "backend": be.name,
              "dtype": be.dtype, "iteration": _attr(_jsonable(opts["iteration"]) or "anderson")}
    prov = provenance()
    attrs |= {f"version_{k}": _attr(v) for k, v in prov["versions"].items()}
    attrs |= {"platform": prov["platform"], "machine": prov["machine"],
              "host": platform.node(), "commit": _commit() or "unknown",
              "created": datetime.now(UTC).isoformat(timespec="seconds")}
    return attrs


def _attr(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, str | int | float):
        return v
    return json.dumps(v, sort_keys=True, default=repr)


def _commit() -> str | None:
    """The git commit of the mfgwork checkout, when it is one."""
    here = Path(__file__).resolve().parent
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        if out.returncode == 0:
            dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--",
                                    str(here.parent)], capture_output=True, text=True,
                                   timeout=5).stdout.strip()
            return out.stdout.strip() + ("-dirty" if dirty else "")
    return None


# -- executors ---------------------------------------------------------------------------------
@contextlib.contextmanager
def _executor(scheduler: str | None, dask: bool, workers: int | None
              ) -> Iterator[Callable[[list[Task]], Iterator[dict[str, Any]]]]:
    """``run(tasks)`` yields each task's outcome as it finishes: in this process, or on Dask
    workers (``scheduler``, or ``dask=True``: a LocalCluster)."""
    if scheduler is None and not dask:
        yield lambda tasks: (solve_block(t) for t in tasks)
        return
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as exc:
        raise ParameterError("dask=True or scheduler=... needs dask.distributed: "
                             "pip install 'mfgwork[dask]'") from exc
    with contextlib.ExitStack() as stack:
        if scheduler is None:
            cluster = stack.enter_context(LocalCluster(
                n_workers=workers or 1, threads_per_worker=1, processes=True,
                dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        else:
            client = stack.enter_context(Client(scheduler))

        def run(tasks: list[Task]) -> Iterator[dict[str, Any]]:
            futures = {client.submit(solve_block, t, pure=False): t for t in tasks}
            for future in as_completed(list(futures)):
                try:
                    yield future.result()
                except Exception as exc:  # noqa: BLE001 - a lost worker must not stop the scan
                    yield {"region": futures[future].region, "statuses": [], "arrays": None,
                           "lost": f"{type(exc).__name__}: {exc}"}

        yield run


# -- the front door ----------------------------------------------------------------------------
def scan(problem: Callable[..., MFGProblem] | str, grid: str | os.PathLike | Mapping[str, Any],
         *, fixed: Mapping[str, Any] | None = None, nx: int = 201, nt: int = 201,
         tol: float = 1e-8, max_iter: int = 200, dtype: Any = None, device: str = "auto",
         backend: str | None = None, iteration: Any = None, keep: Sequence[str] = FIELDS,
         store: str | os.PathLike | None = None, chunk_size: int | None = None,
         scheduler: str | None = None, dask: bool = False, workers: int | None = None,
         progress: bool = True) -> Any:
    """Solve ``problem`` at every point of ``grid``; return an ``xarray.Dataset``.

    ``problem``: a problem class or factory called with each point's parameters (e.g.
    ``mw.SantaFeBar``), a name of :data:`PROBLEMS` (``"santa_fe"``) or ``"module:callable"``.
    ``grid``: a spec mapping, YAML/JSON file or YAML text (lists, ``{linspace: [a, b, n]}``,
    ``{range: [a, b, step]}``, scalars, ``zip``), checked against the problem's signature;
    ``fixed``: problem parameters shared by every point. ``nx``, ``nt``, ``tol``,
    ``max_iter``, ``dtype``, ``iteration``: as for :func:`mfgwork.solve`; ``device``: "auto"
    (CUDA or MPS through torch, else NumPy on the CPU), "cpu", "cuda", "mps" (``backend``
    overrides the choice of library). ``keep``: the fields to store (``("M",)`` drops U).
    ``store``: a zarr path; finished blocks are written as they finish, a rerun resumes, and
    the returned Dataset is the store opened lazily. ``chunk_size``: points per block
    (default: sized to the device's memory; a resumed store keeps its own). ``scheduler`` /
    ``dask``/``workers``: solve blocks on a Dask cluster. Bad names, values and grids raise
    :class:`~mfgwork.ParameterError` before any solve.
    """
    options = {"nx": nx, "nt": nt, "tol": tol, "max_iter": max_iter, "dtype": dtype,
               "backend": backend, "iteration": iteration}
    if workers is not None:
        workers = check_int("workers", workers, low=1)
    plan = make_plan(problem, grid, fixed, options, keep)
    be = placement(device, backend, dtype)
    layout = make_layout(plan, be)
    n_points = int(np.prod(plan.shape))
    if chunk_size is None:
        chunk_size = points_per_block(be, plan.options["nx"], plan.options["nt"],
                                      len(plan.keep), n_points)
    block = block_shape(plan.shape, check_int("chunk_size", chunk_size, low=1))
    if store is None:
        dataset = layout.dataset()
        tasks = [Task(plan, r, layout, None, device) for r in blocks(plan.shape, block)]
        _run(tasks, scheduler, dask, workers, progress, n_points, 0, dataset)
        return dataset
    with store_lock(store):
        target = ScanStore(store, layout, plan.hash(), block)
        finished = target.finished()
        tasks = [Task(plan, r, layout, str(target.path), device)
                 for r in blocks(plan.shape, target.block) if not finished[r].all()]
        _run(tasks, scheduler, dask, workers, progress, n_points, int(finished.sum()), None)
    return open_scan(target.path)


def _run(tasks: list[Task], scheduler: str | None, dask: bool, workers: int | None,
         progress: bool, total: int, initial: int, dataset: Any) -> None:
    from tqdm.auto import tqdm

    if not tasks:
        return
    counts = {s: 0 for s in ("converged", "not_converged", "failed")}
    lost: list[str] = []
    with tqdm(total=total, initial=initial, desc="scan", unit="point",
              disable=not progress) as bar, _executor(scheduler, dask, workers) as run:
        for out in run(tasks):
            if "lost" in out:
                lost.append(out["lost"])
                continue
            if out["arrays"] is not None:
                for name, value in out["arrays"].items():
                    dataset[name].values[out["region"]] = value
            for status in out["statuses"]:
                counts[status] += 1
            bar.set_postfix(counts, refresh=False)
            bar.update(len(out["statuses"]))
    if lost:
        warnings.warn(f"{len(lost)} block(s) of the scan were lost on their Dask workers "
                      f"(first: {lost[0]}); their points stay pending: run the same scan "
                      "again to solve them", RuntimeWarning, stacklevel=3)


def split_parameters(problem: Callable[..., MFGProblem] | str, parameters: Mapping[str, Any]
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``NAME VALUE`` pairs of the command line into fixed problem parameters and solver
    options (:data:`SOLVE_OPTIONS`, checked by the type rule of specs); an unknown name is
    refused, listing both."""
    from .specs import coerce_parameter

    declared = signature_parameters(resolve_problem(problem))
    fixed, options = {}, {}
    for name, value in parameters.items():
        if name in declared:
            fixed[name] = value
        elif name in SOLVE_OPTIONS:
            options[name] = coerce_parameter(name, value, SOLVE_OPTIONS[name], "the scan")
        else:
            raise ParameterError(
                f"parameter {name!r} is unknown: the problem has "
                f"{', '.join(sorted(declared))}; solver options are "
                f"{', '.join(SOLVE_OPTIONS)}")
    return fixed, options


def describe(ds: Any, where: Any = None) -> str:
    """One line: points per status, and where the scan is."""
    status = np.asarray(ds["status"].values).astype(str).ravel()
    counts = {s: int(np.sum(status == s)) for s in ("converged", "not_converged", "failed",
                                                     "pending")}
    text = f"{status.size} points: " + ", ".join(f"{n} {s.replace('_', ' ')}"
                                                 for s, n in counts.items())
    return text + (f"; store: {where}" if where is not None else "")


def open_scan(path: str | os.PathLike) -> Any:
    """Open a scan store lazily (Dask arrays); points not yet solved have ``done`` False,
    NaN values and an empty ``status``."""
    import xarray as xr

    from .scan_store import read_attrs

    if read_attrs(path) is None:
        raise ParameterError(f"store={str(path)!r} is not a scan store (no zarr metadata "
                             "with a scan plan)")
    ds = xr.open_zarr(str(path), consolidated=False)
    metrics = list(METRICS)

    def order(name: str) -> tuple[Any, ...]:
        return (name not in FIELDS, -ds[name].ndim,
                metrics.index(name) if name in metrics else -1, name)

    ds = ds[sorted(ds.data_vars, key=order)]
    strings = {name: ds[name].astype(object) for name, (dtype, _) in METRICS.items()
               if dtype == "object" and name in ds}  # as in memory (zarr reads StringDType)
    return ds.assign(strings)


def to_netcdf(scan_or_path: Any, path: str | os.PathLike) -> Path:
    """Write a scan (a Dataset or a store path) as NetCDF-4 (h5netcdf), atomically."""
    from .scan_store import atomic_file

    ds = open_scan(scan_or_path) if isinstance(scan_or_path, str | os.PathLike) \
        else scan_or_path
    strings = [name for name in ds.data_vars if ds[name].dtype == object]
    ds = ds.assign({name: ds[name].compute() for name in strings})  # small; typed on load
    with atomic_file(path) as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf")
    return Path(path)
