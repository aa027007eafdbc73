"""Parameter scans as labeled xarray Datasets: batched on the device, resumable, on Dask.

``mw.scan(problem, grid, ...)`` solves ``problem`` (a problem class or a factory returning
an :class:`~mfgwork.MFGProblem`, or an :class:`~mfgwork.MFGProblem2D`: see below) at every
point of ``grid`` (the spec language of sweeps, :mod:`mfgwork.workflows.specs`, checked
against the problem's signature) and returns an ``xarray.Dataset`` with one dimension per
scanned axis plus ``t`` and ``x``:

- fields ``M`` and ``U`` (scan dims, t, x), unless ``keep`` drops them;
- the problem's observables over time (scan dims, t) and their summaries (scan dims), from
  ``MFGProblem.observables`` and ``MFGProblem.summary``;
- per-point metrics: ``converged``, ``status`` (converged / not_converged / failed),
  ``iterations``, ``residual`` (final fixed-point residual), ``mass_error``, ``wall_time``,
  ``device``, ``message`` (why a point failed or did not converge, or the floor above tol
  it converged within: the dtype's, or a float64 floor named before iterating,
  :mod:`mfgwork.float64_floor`), ``finished_by``
  (``batch``, ``single`` or ``single-warm``: see below), ``done``;
- attributes: the problem's fixed parameters, the solver settings and provenance.

Points are solved block by block (:mod:`mfgwork.workflows.scan_store`): a block is one
:func:`mfgwork.solve_batch` call on the device ``device="auto"`` chooses
(:func:`mfgwork.placement` for a batch of the scan's points, from the measured crossover
table: CUDA or MPS through torch, with a leading batch axis; else the compiled NumPy solver,
point by point; the reason is the attribute ``placement``), sized to the device's memory. A
block that raises is solved again point by point, so one failing point is recorded (status,
message) without stopping the scan. The points a batch does not converge are finished by the
single path (:func:`~mfgwork.workflows.scan_solve.finish`). With ``store=PATH`` each
finished block is written into a zarr store (region writes, the ``done`` flag last), a rerun
of the same call skips finished blocks, and :func:`open_scan` opens the store lazily. With
``scheduler=ADDRESS`` (or ``dask=True``: a ``LocalCluster``; ``dask="gpus"``: one worker
per visible GPU, pinned by ``CUDA_VISIBLE_DEVICES``; ``dask=client``: a
``distributed.Client``'s cluster) blocks are solved by Dask workers, each on its own device,
writing their regions into the shared store; a block whose worker dies is solved again on
another worker (Dask's retry), its write replacing whatever part of it had been written.

2-D problems (:class:`~mfgwork.MFGProblem2D`: ``mw.TwoBars``, ``mw.Room``, user problems) scan
the same way on an ``nx`` × ``ny`` × ``nt`` grid (``ny`` defaults to ``nx``): the fields are
(scan dims, t, y, x), the problem's paths (scan dims, t), or (scan dims, t, bar) for the two
bars' ``attendance`` (a path's further axis is named by the problem's ``observable_axes``), with
the mass in the domain as ``mass``. Their points are solved one by one by
:func:`mfgwork.solve_2d` (NumPy on the CPU by default; in parallel over Dask workers with
``dask=True`` or ``scheduler=``, a block per worker: set ``chunk_size``), each point with its
own certificate; the store, resume and the checks before work are those of 1-D scans. A
tuple parameter is scanned through the problem's own keywords for its components:
``mw.scan(mw.TwoBars, {"threshold_1": [...], "threshold_2": [...]}, fixed={"spill": 0.5},
nx=21, nt=20)``.

The pieces: :mod:`~mfgwork.workflows.scan_plan` (the problem, the grid, the options, checked
before work), :mod:`~mfgwork.workflows.scan_solve` (placement, block size, solving a block),
:mod:`~mfgwork.workflows.scan_store` (the layout, the zarr store, region writes, resume);
this module builds the Dataset's layout and runs the blocks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import hmac
import json
import math
import os
import platform
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..core import storage
from ..core.backend import Backend, get_backend, to_numpy
from ..core.errors import LoadError, ParameterError, check_flag, check_int, warn
from ..core.extras import require
from ..core.processes import check_spawn_safe
from ..core.progress import progress_bar, ticking
from ..fdm1d import reachable_tol
from ..placement import Placement
from ..problems import PROBLEMS
from ..results import provenance
from ..solve2d import default_iteration
from ..welfare import COMPARISON
from .dask_client import dask_client, visible_gpus
from .scan_check import DIGEST, DONE, Damage, blocks, check_store, finished_points
from .scan_inspect import RECORD_ATTR, check_metadata, inspect_store, read_record
from .scan_plan import (
    FIELDS,
    MAX_POINTS,
    SOLVE_OPTIONS,
    Problem,
    ScanPlan,
    as_json_value,
    check_points,
    check_size,
    factory_name,
    make_plan,
    resolve_problem,
    split_parameters,
)
from .scan_solve import BlockWrites, Task, placement, points_per_block, solve_block
from .scan_store import (
    METRICS,
    Layout,
    ScanStore,
    block_shape,
    check_store_target,
    store_lock,
)

__all__ = ["FIELDS", "PROBLEMS", "SOLVE_OPTIONS", "ScanPlan", "check_netcdf", "describe",
           "make_layout", "make_plan", "open_scan", "placement", "points_per_block",
           "resolve_problem", "scan", "solve_block", "split_parameters", "to_netcdf"]

#: Most Dask chunks along the scan axes of a Dataset opened from a store (blocks grouped).
DASK_BLOCKS = 4096

# -- the Dataset's layout ----------------------------------------------------------------------
def make_layout(plan: ScanPlan, be: Backend, chosen: Placement | None = None) -> Layout:
    """Dimensions, coordinates, variables and attributes of the plan's Dataset. Observable
    names come from the problem itself, on its initial density (an observable with axes
    beyond time names them in the problem's ``observable_axes``, e.g. the two bars'
    ``{"attendance": ("bar", (1, 2))}``; else ``<name>_index``); ``chosen``: the placement
    of ``device="auto"`` (its reason becomes the attribute ``placement``)."""
    first = plan.problem((0,) * len(plan.shape))
    grid = plan.grid(first)
    host = get_backend("numpy")
    m0 = to_numpy(first.initial_density(grid, host))
    paths = first.observables(grid, np.stack([m0] * (grid.nt + 1)), host)
    scalars = {} if plan.two_d else first.summary(grid, paths)
    if plan.options.get("objective") == "social":
        scalars |= dict.fromkeys(COMPARISON, 0.0)
    coords = {}
    for names, values in plan.spec.axes:
        for k, name in enumerate(names):
            coords[name] = (names[0], [v[k] for v in values])
    trailing, axes = _path_axes(first, {k: np.shape(to_numpy(v)) for k, v in paths.items()})
    field_dtype = "float32" if be.dtype == "float32" else "float64"
    clash = set(paths) | set(scalars) | set(axes)
    grid_dims = {"t", "x"} | ({"y"} if plan.two_d else set())
    for name in clash & (set(FIELDS) | set(METRICS) | set(coords) | grid_dims):
        raise ParameterError(f"the problem's observable {name!r} clashes with a scan "
                             "variable of the same name")
    for name in clash:
        if not _storable(name):
            raise ParameterError(f"the problem's observable {name!r:.80} cannot name a "
                                 "variable of a scan: a non-empty name without '/' or '\\', "
                                 "not only dots and not starting with '__' (zarr's rules)")
    return Layout(dims=plan.dims, shape=plan.shape, coords=coords, t=np.asarray(grid.t),
                  x=np.asarray(grid.x), y=np.asarray(grid.y) if plan.two_d else None,
                  fields={k: field_dtype for k in plan.keep}, paths=trailing, axes=axes,
                  scalars=tuple(scalars),
                  attrs=_attributes(plan, first, be)
                  | ({"placement": str(chosen)} if chosen is not None else {}))


def _storable(name: object) -> bool:
    """``name`` can name an array of a zarr store: a non-empty string without path
    separators, not only dots (``..`` would leave the store) and not starting with ``__``."""
    return (isinstance(name, str) and name.strip(".") != "" and not name.startswith("__")
            and "/" not in name and "\\" not in name)


def _path_axes(problem: Any, shapes: Mapping[str, tuple[int, ...]]
               ) -> tuple[dict[str, tuple[str, ...]], dict[str, np.ndarray]]:
    """Each observable's trailing dims (``("t",)``, or ``("t", axis)`` for one of shape
    (nt+1, k)) and the values of those further axes."""
    named = getattr(problem, "observable_axes", {})
    trailing, axes = {}, {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            trailing[name] = ("t",)
            continue
        if len(shape) != 2:
            raise ParameterError(f"the problem's observable {name!r} has the shape {shape}: a "
                                 "scan stores paths (nt+1,) or (nt+1, k)")
        dim, labels = named.get(name, (f"{name}_index", tuple(range(shape[1]))))
        if len(labels) != shape[1] or (dim in axes and list(axes[dim]) != list(labels)):
            raise ParameterError(f"the problem's observable {name!r} has {shape[1]} entries "
                                 f"along {dim!r}, whose labels are {list(labels)!r}")
        trailing[name], axes[dim] = ("t", dim), np.asarray(labels)
    return trailing, axes


def _attributes(plan: ScanPlan, first: Any, be: Backend) -> dict[str, Any]:
    """Flat attributes (str, int, float): fixed problem parameters (those of the problem
    that the first and the last point share, e.g. not the two bars' ``thresholds`` when
    ``threshold_1`` is scanned), solver settings, provenance."""
    scanned = set(plan.spec.varying)
    last = plan.problem(tuple(n - 1 for n in plan.shape)).params()
    fixed = {k: v for k, v in first.params().items() if k not in scanned
             and last.get(k) == v} | plan.spec.fixed
    opts = plan.options
    states = getattr(first, "state_names", None) or (first.state_name,)
    attrs: dict[str, Any] = {"title": f"parameter scan of {fixed.get('problem', 'a problem')}",
                             "scanned": ", ".join(plan.spec.varying),
                             "problem_factory": factory_name(plan.factory),
                             "state_name": ", ".join(states)}
    attrs |= {k: _attr(v) for k, v in fixed.items()}
    attrs |= {"nx": opts["nx"]} | ({"ny": opts["ny"]} if plan.two_d else {})
    default = as_json_value(default_iteration(be.dtype)) if plan.two_d else "anderson"
    attrs |= {"nt": opts["nt"], "tol": opts["tol"], "max_iter": opts["max_iter"],
              "method": "fdm", "backend": be.name, "dtype": be.dtype,
              "iteration": _attr(as_json_value(opts["iteration"]) or default)}
    if "objective" in opts:
        attrs["objective"] = opts["objective"]
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


@functools.cache
def _commit() -> str | None:
    """The git commit of the mfgwork checkout, when it is one; asked once per process (two
    ``git`` processes: 7-22 ms a scan in a checkout)."""
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
def _executor(scheduler: str | None, dask: bool | str, workers: int | None,
              writes: BlockWrites | None
              ) -> Iterator[tuple[Callable[[list[Task]], Iterator[dict[str, Any]]], str]]:
    """``(run, where)``: ``run(tasks)`` yields each task's outcome as it finishes, in this
    process (its blocks written by ``writes``, else where it solves them) or on Dask workers
    (``scheduler``, or ``dask=True``: a LocalCluster; ``dask="gpus"``: one worker per visible
    GPU), whose count ``where`` tells (a progress bar's label)."""
    if scheduler is None and not dask:
        def here(tasks: list[Task]) -> Iterator[dict[str, Any]]:
            for task in tasks:
                if writes is None:
                    yield solve_block(task)
                    continue
                writes.wait()   # (the last block written before the next is solved)
                yield solve_block(task, writes.submit)

        yield here, ""
        return
    gpus = visible_gpus(workers) if dask == "gpus" and scheduler is None else None
    with dask_client(workers or 1, scheduler, gpus) as (client, as_completed):
        def run(tasks: list[Task]) -> Iterator[dict[str, Any]]:
            futures = {client.submit(solve_block, t, pure=False): t for t in tasks}
            for future in as_completed(list(futures)):
                try:
                    yield future.result()
                except Exception as exc:  # noqa: BLE001 - a lost worker must not stop the scan
                    yield {"region": futures[future].region, "statuses": [], "arrays": None,
                           "lost": f"{type(exc).__name__}: {exc}"}

        yield run, f" on {len(client.scheduler_info()['workers'])} Dask workers"


# -- the front door ----------------------------------------------------------------------------
def scan(problem: Callable[..., Problem] | str, grid: str | os.PathLike | Mapping[str, Any],
         *, fixed: Mapping[str, Any] | None = None, nx: int = 201, ny: int | None = None,
         nt: int = 201, tol: float = 1e-8, max_iter: int = 200, dtype: Any = None,
         device: str = "auto", backend: str | None = None, iteration: Any = None,
         keep: Sequence[str] = FIELDS,
         store: str | os.PathLike | None = None, chunk_size: int | None = None,
         scheduler: str | None = None, dask: bool | str = False, workers: int | None = None,
         progress: bool = True, max_points: int = MAX_POINTS, objective: str | None = None
         ) -> Any:
    """Solve ``problem`` at every point of ``grid``; return an ``xarray.Dataset``.

    ``problem``: a problem class or factory called with each point's parameters (e.g.
    ``mw.SantaFeBar``), a name of the problem registry :data:`PROBLEMS` (``"santa_fe"``) or
    ``"module:callable"``.
    ``grid``: a spec mapping, YAML/JSON file or YAML text (lists, ``{linspace: [a, b, n]}``,
    ``{range: [a, b, step]}``, scalars, ``zip``), checked against the problem's signature;
    ``fixed``: problem parameters shared by every point. ``nx``, ``nt``, ``tol``,
    ``max_iter``, ``dtype``, ``iteration``: as for :func:`mfgwork.solve` (2-D problems: as
    for :func:`mfgwork.solve_2d` with the scan's defaults, and ``ny``, None for ``nx``; see
    the module docstring); ``device``: "auto" (where :func:`mfgwork.placement` puts a batch
    of the scan's points: CUDA or MPS through torch from the measured crossover on, else NumPy
    on the CPU; 2-D points: NumPy on the CPU), "cpu", "cuda", "mps" (``backend`` overrides
    the choice of library). ``keep``: the fields to store
    (``("M",)`` drops U).
    ``store``: a zarr path; finished blocks are written as they finish, a rerun resumes, and
    the returned Dataset is the store opened lazily. ``chunk_size``: points per block
    (default: sized to the device's memory; a resumed store keeps its own). ``scheduler`` /
    ``dask``/``workers``: solve blocks on a Dask cluster: the one at a scheduler's address,
    a LocalCluster of ``workers`` CPU processes (``dask=True``), or one worker per visible
    GPU (``dask="gpus"``, the first ``workers`` of them: each worker pinned to its GPU by
    ``CUDA_VISIBLE_DEVICES``, blocks sized to the smallest GPU's memory), or a
    ``distributed.Client``'s (``dask=client``, left open). Bad names, values
    and grids raise :class:`~mfgwork.ParameterError` before any solve, as do grids of more than
    ``max_points`` points (counted before any axis is expanded) and scans whose largest
    point, or whose Dataset when there is no store, does not fit in memory; every point is
    checked as :func:`mfgwork.solve` checks it (steps and diffusion numbers) before a store
    is made, and a grid too coarse for the points' model is warned once
    (:class:`~mfgwork.core.errors.ResolutionWarning`). ``objective="social"`` (Santa Fe):
    each point is the planner's optimum, compared with its equilibrium as by
    :func:`mfgwork.solve` (the variables ``welfare``, ``equilibrium_welfare``,
    ``welfare_loss`` and ``price_of_anarchy``; :mod:`mfgwork.welfare`).
    """
    options = {"nx": nx, "nt": nt, "tol": tol, "max_iter": max_iter, "dtype": dtype,
               "backend": backend, "iteration": iteration} | ({} if ny is None else {"ny": ny})
    if objective is not None:   # (absent otherwise: the scans of before keep their identity)
        options["objective"] = objective
    scheduler, dask = _given_client(scheduler, dask)
    workers = _check_options(store, device, scheduler, dask, workers, progress)
    _require(grid, store, dask, scheduler, "mw.scan")
    if store is not None:
        check_store_target(store)
    if chunk_size is not None:
        chunk_size = check_int("chunk_size", chunk_size, low=1)
    plan = make_plan(problem, grid, fixed, options, keep, max_points, build_points=False)
    n_points = int(np.prod(plan.shape))
    be, chosen = placement(device, backend, dtype, plan.problem((0,) * len(plan.shape)),
                           n_points, plan.options["nx"], plan.options["nt"])
    check_size(plan, be, in_memory=store is None)
    problems = check_points(plan, be)  # every point as mw.solve checks it: before any store
    if not plan.two_d:   # the dtype's floor of tol said once here, not by every block
        reachable_tol(plan.options["tol"], be)
    layout = make_layout(plan, be, chosen)
    if chunk_size is None:
        on = _worker_backends(be, scheduler, dask, workers)
        sharing = max(len(on), _client_workers(scheduler))
        chunk_size = min(points_per_block(b, plan.options["nx"] * plan.options.get("ny", 1),
                                          plan.options["nt"], len(plan.keep), n_points,
                                          sharing) for b in on)
    block = block_shape(plan.shape, check_int("chunk_size", chunk_size, low=1))
    # (solved here, a block takes its points' problems as checked; on Dask workers, its
    # worker builds them)
    built = problems if scheduler is None and not dask else None
    if store is None:
        dataset = layout.dataset()
        tasks = [Task(plan, r, layout, None, be.device, be.name, _region(built, plan.shape, r))
                 for r in blocks(plan.shape, block)]
        _run(tasks, scheduler, dask, workers, progress, n_points, 0, dataset, None)
        return dataset
    with store_lock(store), BlockWrites() as writes:
        target = ScanStore(store, layout, plan.hash(), block)
        finished = target.finished()
        if target.check.damaged:
            warn(resolving(target.path, layout, target.check.damaged),
                 RuntimeWarning)
        tasks = [Task(plan, r, layout, str(target.path), be.device, be.name,
                      _region(built, plan.shape, r))
                 for r in blocks(plan.shape, target.block) if not finished[r].all()]
        finished = finished.copy()
        for region in _run(tasks, scheduler, dask, workers, progress, n_points,
                           int(finished.sum()), None, writes):
            finished[region] = True
        # (checked above, then written whole: opened while its last block is written)
        ds = _dataset(target.path, finished, target.block, layout.dims)
        writes.wait()
    return ds


def _region(problems: list[Problem] | None, shape: tuple[int, ...],
            region: tuple[slice, ...]) -> list[Problem] | None:
    """The problems of ``region`` (C order) of all the grid's ``problems`` (C order)."""
    if problems is None:
        return None
    return [problems[i] for i in np.arange(len(problems)).reshape(shape)[region].ravel()]


def _region_text(region: tuple[slice, ...], layout: Layout) -> str:
    """A block by its coordinate values, e.g. ``threshold=0.45, sigma=0.4…0.8``."""
    parts = []
    for dim, s in zip(layout.dims, region, strict=True):
        values = layout.coords[dim][1]
        first, last = values[s.start], values[s.stop - 1]
        parts.append(f"{dim}={first:g}" if s.stop - s.start == 1 and isinstance(first, float)
                     else f"{dim}={first}" if s.stop - s.start == 1
                     else f"{dim}={first}…{last}")
    return ", ".join(parts)


def resolving(path: Path, layout: Layout, damaged: list[Damage]) -> str:
    """The message of a resume that solves damaged blocks again."""
    shown = "; ".join(f"[{_region_text(d.region, layout)}] {d.file.relative_to(path)} "
                      f"{d.reason}" for d in damaged[:3])
    return (f"store={str(path)!r}: solving {len(damaged)} finished block(s) again whose "
            f"stored data is missing or damaged: {shown}" + (" …" if len(damaged) > 3 else ""))


def _worker_backends(be: Backend, scheduler: str | None, dask: bool | str,
                     workers: int | None) -> list[Backend]:
    """The backends whose memory sizes a block: ``be``, or with ``dask="gpus"`` on CUDA
    ``be`` on each GPU of the workers (so a block fits the smallest)."""
    if dask != "gpus" or scheduler is not None or not be.device.startswith("cuda"):
        return [be]
    return [dataclasses.replace(be, device=f"cuda:{i}")
            for i in range(len(visible_gpus(workers)))]


def _client_workers(scheduler: Any) -> int:
    """The workers of a given ``distributed.Client``'s cluster (1 for anything else: an
    address is reached only when the scan runs)."""
    if not _is_client(scheduler):
        return 1
    return max(1, len(scheduler.scheduler_info().get("workers", {})))


def _given_client(scheduler: Any, dask: Any) -> tuple[Any, Any]:
    """``(scheduler, dask)``, a ``distributed.Client`` given as ``dask`` moved to
    ``scheduler``: the scan uses that client's cluster and leaves it open."""
    if not _is_client(dask):
        return scheduler, dask
    if scheduler is not None:
        raise ParameterError(f"dask={dask!r:.80} is a client and scheduler={scheduler!r:.80} "
                             "an address: give only one")
    return dask, False


def _is_client(value: Any) -> bool:
    distributed = sys.modules.get("distributed")  # (a client exists only once it is imported)
    return distributed is not None and isinstance(value, distributed.Client)


def _require(grid: Any, store: Any, dask: Any, scheduler: Any, feature: str) -> None:
    """The optional packages a scan with these options needs (before anything is made)."""
    require("xarray", "psutil", *(() if isinstance(grid, Mapping) else ("yaml",)),
            *(() if store is None else ("zarr", "dask.array", "filelock")),
            extra="scan", feature=feature)
    if dask or scheduler is not None:
        require("distributed", extra="dask", feature=f"{feature}(dask=True or scheduler=...)")
    if dask and scheduler is None:
        check_spawn_safe(f"{feature}(dask={dask!r})")


def _check_options(store: Any, device: Any, scheduler: Any, dask: Any, workers: Any,
                   progress: Any) -> int | None:
    """The types of the options that say where and how a scan runs; returns ``workers``."""
    if store is not None and not isinstance(store, str | os.PathLike):
        raise ParameterError(f"store={store!r:.80} ({type(store).__name__}) is invalid: must "
                             "be None or a path (a folder for the zarr store)")
    if scheduler is not None and not isinstance(scheduler, str) and not _is_client(scheduler):
        raise ParameterError(f"scheduler={scheduler!r:.80} ({type(scheduler).__name__}) is "
                             "invalid: must be None or a Dask scheduler address such as "
                             "'tcp://host:8786'")
    if _is_client(scheduler) and scheduler.status in ("closing", "closed"):
        raise ParameterError(f"the Dask client {scheduler!r:.80} is {scheduler.status}: give "
                             "a running one")
    if not isinstance(device, str):
        raise ParameterError(f"device={device!r:.80} ({type(device).__name__}) is invalid: "
                             "must be 'auto', 'cpu', 'cuda' or 'mps'")
    if not (dask is True or dask is False or isinstance(dask, str) and dask == "gpus"):
        raise ParameterError(f"dask={dask!r:.80} ({type(dask).__name__}) is invalid: must be "
                             "True (CPU workers), False, 'gpus' (a worker per GPU) or a "
                             "distributed.Client")
    if dask is not False and scheduler is not None:
        started = ("a cluster of this host's GPUs" if dask == "gpus"
                   else "a LocalCluster of CPU workers")
        raise ParameterError(f"dask={dask!r} starts {started}, and scheduler="
                             f"{scheduler!r:.80} names a running one: give only one")
    check_flag("progress", progress)
    workers = None if workers is None else check_int("workers", workers, low=1)
    if workers is not None and (dask is False or scheduler is not None):
        where = "a running cluster" if scheduler is not None else "this process"
        raise ParameterError(f"workers={workers} is invalid here: it sizes a cluster the scan "
                             "starts (dask=True: CPU worker processes, dask='gpus': GPUs), and "
                             f"this scan runs in {where}; leave workers out or set dask")
    if dask == "gpus":
        visible_gpus(workers)  # (refused here where no GPU is visible: nothing made yet)
    return workers


def _run(tasks: list[Task], scheduler: str | None, dask: bool | str, workers: int | None,
         progress: bool, total: int, initial: int, dataset: Any, writes: BlockWrites | None
         ) -> list[tuple[slice, ...]]:
    """Solve ``tasks`` (into ``dataset`` where there is no store); the regions solved (a
    block lost on a Dask worker is not)."""
    if not tasks:
        return []
    counts = {s: 0 for s in ("converged", "not_converged", "failed")}
    lost: list[str] = []
    solved: list[tuple[slice, ...]] = []
    # (the bar opens once the workers are up and closes before they stop: its rate and
    # remaining time count solving only)
    with _executor(scheduler, dask, workers, writes) as (run, where), \
            progress_bar(total=total, initial=initial, desc=f"scan{where}", unit="point",
                         disable=not progress) as bar, ticking(bar):
        for out in run(tasks):
            if "lost" in out:
                lost.append(out["lost"])
                bar.set_postfix(counts | {"lost": len(lost)}, refresh=False)
                continue
            solved.append(out["region"])
            if out["arrays"] is not None:
                for name, value in out["arrays"].items():
                    dataset[name].values[out["region"]] = value
            for status in out["statuses"]:
                counts[status] += 1
            bar.set_postfix(counts | ({"lost": len(lost)} if lost else {}), refresh=False)
            bar.update(len(out["statuses"]))
    if lost:
        warn(f"{len(lost)} block(s) of the scan were lost on their Dask workers "
             f"(first: {lost[0]}); their points stay pending: run the same scan "
             "again to solve them", RuntimeWarning)
    return solved


def describe(ds: Any, where: Any = None) -> str:
    """One line: points per status, and where the scan is."""
    status = np.asarray(ds["status"].values).astype(str).ravel()
    counts = {s: int(np.sum(status == s)) for s in ("converged", "not_converged", "failed",
                                                     "pending")}
    points = f"{status.size} point{'' if status.size == 1 else 's'}"
    text = f"{points}: " + ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items())
    return text + (f"; store: {where}" if where is not None else "")


def open_scan(path: str | os.PathLike, *, verify: bool = True) -> Any:
    """Open a scan store lazily (Dask arrays); points not finished (``done`` False: not yet
    solved, or their block's flag lost) have NaN values and the status ``pending``, whatever
    their other chunks hold.

    The store is first inspected (:mod:`~mfgwork.workflows.scan_inspect`, from its folder
    listing and metadata alone): a link, a FIFO or another special file anywhere in it,
    metadata that is malformed, implausibly large or changes values on reading (such as
    ``scale_factor``) raise :class:`~mfgwork.LoadError` naming the file before anything is
    read. With ``verify`` (the default) the store is then checked against its records
    (:mod:`~mfgwork.workflows.scan_check`; this reads the data once): its metadata, root
    attributes and coordinates as created, every finished block as written. A store with a
    changed coordinate, attribute or array metadata, or a missing, cut or changed chunk,
    raises :class:`~mfgwork.LoadError` naming the file and what differs (running the same
    scan again solves damaged blocks again). ``verify=False`` skips the reading of values,
    and still refuses metadata that differs from the creation record; a store written
    before creation records existed opens only this way, with a warning. Values are read as
    stored (no CF time decoding)."""
    require("xarray", "zarr", "dask.array", extra="scan", feature="mw.open_scan")

    from .scan_store import read_attrs

    verify = check_flag("verify", verify)
    if read_attrs(path) is None:
        raise ParameterError(f"store={str(path)!r} is not a scan store (no zarr metadata "
                             "with a scan plan)")
    path = Path(path)
    if verify:
        check = check_store(path)
        if check.damaged:
            d = check.damaged[0]
            raise LoadError(d.file, f"{d.reason} (block {d.block}); {len(check.damaged)} "
                            f"block(s) of the scan store {str(path)!r} cannot be trusted "
                            "(run the same scan again to solve them again)")
        finished, block, dims = check.finished, check.block, check.dims
    else:
        finished, block, dims = _unverified(path)
    return _dataset(path, finished, block, dims)


def _dataset(path: Path, finished: np.ndarray, block: tuple[int, ...],
             dims: tuple[str, ...]) -> Any:
    """The scan store at ``path`` opened lazily as :func:`open_scan` gives it, once checked:
    ``finished`` its points' flags (the others pending), ``block`` and ``dims`` its blocks
    and scan dimensions."""
    import xarray as xr

    grouped = _dask_chunks(dims, finished.shape, block)
    try:
        ds = xr.open_zarr(str(path), consolidated=None, decode_times=False,
                          decode_timedelta=False, **({} if grouped is None else
                                                     {"chunks": grouped}))
    except Exception as exc:  # noqa: BLE001 - damaged metadata not caught by the check
        raise LoadError(path, f"is not a readable zarr store ({type(exc).__name__}: "
                        f"{str(exc)[:200]})") from None
    ds = ds.drop_vars([DIGEST], errors="ignore")
    ds.attrs.pop(RECORD_ATTR, None)
    metrics = list(METRICS)

    def order(name: str) -> tuple[Any, ...]:
        return (name not in FIELDS, -ds[name].ndim,
                metrics.index(name) if name in metrics else -1, name)

    ds = ds[sorted(ds.data_vars, key=order)]
    strings = {name: ds[name].astype(object) for name, (dtype, _) in METRICS.items()
               if dtype == "object" and name in ds}  # as in memory (zarr reads StringDType)
    return _finished_only(ds.assign(strings), finished)


def _unverified(path: Path) -> tuple[np.ndarray, tuple[int, ...], tuple[str, ...]]:
    """The ``done`` flags, block shape and scan dims of a store opened without ``verify``:
    inspected, its metadata against its creation record (a warning where it has none)."""
    ins = inspect_store(path)
    record = read_record(ins)
    if record is None:
        warn(f"store={str(path)!r} has no creation record (written by an earlier "
             "mfgwork): its metadata and coordinates are not verified",
             RuntimeWarning)
    else:
        check_metadata(ins, record)
    return finished_points(ins), ins.done.chunks, ins.done.dims


def _dask_chunks(dims: tuple[str, ...], shape: tuple[int, ...], block: tuple[int, ...]
                 ) -> dict[str, int] | None:
    """Dask chunks of a store's arrays along the scan axes where it has more than
    :data:`DASK_BLOCKS` blocks: groups of blocks, at most that many (each Dask chunk costs
    the graph a task); else None (zarr's chunks, xarray's default)."""
    chunks = list(block)

    def count() -> int:
        return math.prod(-(-n // c) for n, c in zip(shape, chunks, strict=True))

    if count() <= DASK_BLOCKS:
        return None
    for axis in reversed(range(len(shape))):
        groups = -(-shape[axis] // chunks[axis])
        chunks[axis] *= min(groups, -(-count() // DASK_BLOCKS))
        if count() <= DASK_BLOCKS:
            break
    return {dim: min(c, n) for dim, c, n in zip(dims, chunks, shape, strict=True)}


def _finished_only(ds: Any, finished: np.ndarray) -> Any:
    """``ds`` with every variable at its fill value (NaN, ``pending``, False, 0, "") at the
    points not finished."""
    if finished.all():
        return ds
    import xarray as xr

    mask = xr.DataArray(finished, dims=ds[DONE].dims).chunk(ds[DONE].chunksizes)
    fills = {name: fill for name, (_, fill) in METRICS.items()}
    return ds.assign({name: var.where(mask, fills.get(name, np.nan)).astype(var.dtype)
                      for name, var in ds.data_vars.items() if var.dims[:mask.ndim] == mask.dims})


def check_netcdf(path: str | os.PathLike, *, force: bool = False) -> Path:
    """``path`` as an absolute path if :func:`to_netcdf` may write it: new, or an export that
    :func:`to_netcdf` wrote (any other existing file only with ``force``; never a folder, a
    link or a FIFO); else :class:`~mfgwork.ParameterError` (see
    :func:`mfgwork.core.storage.check_file`)."""
    require("h5netcdf", "h5py", extra="scan", feature="a NetCDF export of a scan")
    return storage.check_file(path, name="netcdf", force=force, ours=_is_scan_netcdf)


#: Root attribute of an export by :func:`to_netcdf`: ``TOKEN:DIGEST``, a random token and the
#: SHA-256 of it with the file's structure (:func:`_structure_digest`).
EXPORT_ATTR = "mfgwork_export"


def _structure_digest(f: Any, token: str) -> str:
    """SHA-256 of ``token`` and the structure of the open HDF5 file ``f``: the name, shape
    and dtype of each dataset, and the attributes of the file (but :data:`EXPORT_ATTR`) and
    of each dataset. The data are not read: this proves who wrote the file, not its values."""
    digest = hashlib.sha256(token.encode())

    def attrs(name: str, obj: Any) -> None:
        for key in sorted(obj.attrs):
            if not (name == "/" and key == EXPORT_ATTR):
                value = np.asarray(obj.attrs[key])
                digest.update(f"{name}@{key}={value.dtype}{value.tolist()!r}\n".encode())

    def visit(name: str, obj: Any) -> None:
        shape = getattr(obj, "shape", None)
        digest.update(f"{name}:{shape}:{getattr(obj, 'dtype', 'group')}\n".encode())
        attrs(name, obj)

    attrs("/", f)
    f.visititems(visit)
    return digest.hexdigest()


def _is_scan_netcdf(path: Path) -> bool:
    """True for an HDF5 file that :func:`to_netcdf` wrote: its :data:`EXPORT_ATTR` matches
    the file's structure (a file that merely carries a scan's attributes, or an export
    changed since, is not one)."""
    with open(path, "rb") as fh:
        if fh.read(8) != b"\x89HDF\r\n\x1a\n":
            return False
    import h5py

    try:
        with h5py.File(path, "r") as f:
            mark = f.attrs.get(EXPORT_ATTR)
            mark = mark.decode() if isinstance(mark, bytes) else mark
            if not isinstance(mark, str) or mark.count(":") != 1:
                return False
            token, digest = mark.split(":")
            return hmac.compare_digest(digest, _structure_digest(f, token))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return False


def to_netcdf(scan_or_path: Any, path: str | os.PathLike, *, force: bool = False) -> Path:
    """Write a scan (a Dataset or a store path) as NetCDF-4 (h5netcdf), atomically.
    ``scan_or_path`` and ``path`` are checked first (:func:`check_netcdf`): an existing file
    is replaced only if it is an earlier export (it carries :data:`EXPORT_ATTR`), or with
    ``force``."""
    is_path = isinstance(scan_or_path, str | os.PathLike)
    if not is_path:
        xr = sys.modules.get("xarray")   # (no Dataset exists before xarray is imported)
        if xr is None or not isinstance(scan_or_path, xr.Dataset):
            raise ParameterError(f"scan_or_path={scan_or_path!r:.40} "
                                 f"({type(scan_or_path).__name__}) is invalid: must be a "
                                 "scan's xarray.Dataset (what mw.scan returns) or the path "
                                 "of its store")
    target = check_netcdf(path, force=force)
    ds = open_scan(scan_or_path) if is_path else scan_or_path
    ds = ds.drop_vars([DONE, DIGEST], errors="ignore")
    strings = [name for name in ds.data_vars if ds[name].dtype == object]
    ds = ds.assign({name: ds[name].compute() for name in strings})  # small; typed on load
    with storage.atomic_path(target) as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf")
        _sign_export(tmp)
    return target


def _sign_export(path: Path) -> None:
    """Add :data:`EXPORT_ATTR` to the export at ``path``, by which :func:`check_netcdf`
    knows it as one of :func:`to_netcdf`'s."""
    import h5py

    token = secrets.token_hex(16)
    with h5py.File(path, "r+") as f:
        f.attrs[EXPORT_ATTR] = f"{token}:{_structure_digest(f, token)}"
