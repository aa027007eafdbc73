"""Solving the points of one block of a scan: where (placement), how many (block size), and
each point's entries in the Dataset, with failures and non-convergence kept as data."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import memory
from ..core.backend import Backend, device_info, get_backend, to_numpy
from ..core.errors import ConvergenceWarning
from ..numerics.batch_newton import device_bytes
from ..placement import Placement, resolve
from ..problems import MFGProblem
from ..problems.two_d import MFGProblem2D
from ..results import Result
from .scan_plan import Problem, ScanPlan
from .scan_store import Layout, region_points, write_region

#: Points per block on the host, where the NumPy solver takes them one by one: enough that
#: writing a block costs little against solving it, few enough to lose little when killed.
HOST_BLOCK_POINTS = 16
#: Blocks per GPU worker at least, where several share a scan: a worker that drew a slow
#: block is then not alone at the end (with one block each, the slowest sets the pace).
BLOCKS_PER_WORKER = 4
#: The warning that tol is below the dtype's floor (1-D), which :func:`mfgwork.scan` gives
#: once for the whole scan: its blocks do not repeat it.
FLOOR_SAID = r"tol=\S+ is below what float(32|64) resolves;"
#: Longest message kept per point (the rest is cut).
MESSAGE_CHARS = 400
#: Grid cells (nx × nt) of a point from which the single path finishes a batch's points over
#: threads, one per core: from about 101 × 100 on, half of a solve's time or more is spent in
#: compiled loops that release the GIL (profiled on Santa Fe: 0.4 of it at 51², 0.5 at 101²,
#: 0.8 at 201², 0.85 at 401²); below, the threads would mostly wait for one another.
PARALLEL_MIN_CELLS = 10_000


def placement(device: str, backend: str | None, dtype: Any, problem: Problem,
              points: int = 1, nx: int = 201, nt: int = 201) -> tuple[Backend, Placement | None]:
    """The backend a scan of ``points`` problems like ``problem`` on the nx × nt grid
    solves on, and the choice behind it (None where ``device`` was given): that of
    :func:`mfgwork.placement.resolve` for them as one batch."""
    chosen = resolve(problem, backend=backend, device=device, nx=nx, nt=nt, batch_size=points)
    return (get_backend(chosen.backend, chosen.device, dtype),
            chosen if chosen.chosen else None)


def points_per_block(be: Backend, nx: int, nt: int, kept: int, points: int,
                     workers: int = 1) -> int:
    """Points per block: on the host a fixed count (the NumPy solver loops over them); on a
    device as many as fit in :data:`~mfgwork.core.memory.BLOCK_FRACTION` of its free memory
    by the bytes the batched Newton declares per point
    (:func:`~mfgwork.numerics.batch_newton.device_bytes`, the figure :func:`mfgwork.solve`
    checks a device batch by), and with several ``workers`` (GPUs) few enough that each
    gets :data:`BLOCKS_PER_WORKER` blocks; either way bounded by host memory for the block's
    results (shared by the ``workers`` processes of this host, each holding a block).
    ``nx``: the nodes of the state grid (nx × ny in 2-D)."""
    itemsize = 4 if be.dtype == "float32" else 8
    level = (nt + 1) * nx * itemsize
    host = _host_available() * memory.BLOCK_FRACTION // max(1, workers * (kept + 1) * level)
    if not be.is_accelerator:
        return int(max(1, min(points, HOST_BLOCK_POINTS, host)))
    info = device_info(be.device)
    free = None
    if info.get("memory_total"):
        free = info["memory_total"] - (info.get("memory_reserved") or 0)
    device = (memory.batch_that_fits(free * memory.BLOCK_FRACTION, device_bytes(nx, nt, itemsize))
              if free else points)
    shared = -(-points // (BLOCKS_PER_WORKER * workers)) if workers > 1 else points
    return int(max(1, min(points, device, host, shared)))


def _host_available() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


# -- solving one block -------------------------------------------------------------------------
@dataclass
class Task:
    """One block for a worker: the plan, the region, where to write it (or None), and where
    to solve it (the device and backend the scan placed it on); ``problems``: the region's
    problems in C order where the scan built them already (in its own process), else None
    (built from the plan)."""

    plan: ScanPlan
    region: tuple[slice, ...]
    layout: Layout
    store: str | None
    device: str
    backend: str | None = None
    problems: list[Problem] | None = None


def solve_block(task: Task, write: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Solve the points of ``task.region`` and fill their arrays; write them into the store
    when there is one (by ``write``, else :func:`~.scan_store.write_region`; the scan's
    own process writes by :class:`BlockWrites`). Returns ``{"region", "statuses",
    "arrays"}`` (arrays only without a store). Runs in the scan's process or on a Dask
    worker."""
    plan, opts = task.plan, task.plan.options
    problems = task.problems if task.problems is not None else \
        [plan.problem(i) for i in region_points(task.region)]
    be, _ = placement(task.device, task.backend, opts["dtype"], problems[0])
    with warnings.catch_warnings():   # (the scan said it once, before any block)
        warnings.filterwarnings("ignore", FLOOR_SAID, UserWarning)
        outcomes, rows = _solve(problems, be, opts)
    shape = tuple(s.stop - s.start for s in task.region)
    arrays = block_arrays(task.layout, shape, outcomes, rows)
    arrays["done"][...] = True
    if task.store is not None:
        (write or write_region)(task.store, task.region, arrays)
    return {"region": task.region, "statuses": [o["status"] for o in outcomes],
            "arrays": None if task.store is not None else arrays}


class BlockWrites:
    """The store writes of the blocks a scan solves in its own process, on one thread: a
    block's write starts as its solve ends, and ends before the next block's solve starts
    (:meth:`wait`: one block's arrays in memory at a time, as :func:`points_per_block`
    counts), so that the last one runs while the scan opens its result. A failed write is
    raised by the next :meth:`wait`; leaving the context waits for a write in flight."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mfgwork-write")
        self._pending: Future | None = None

    def __enter__(self) -> BlockWrites:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)   # (its block then whole, or not finished)

    def submit(self, store: str, region: tuple[slice, ...], arrays: dict[str, Any]) -> None:
        """Start the write of a block (:func:`~.scan_store.write_region`) once the last one
        has ended."""
        self.wait()
        self._pending = self._pool.submit(write_region, store, region, arrays)

    def wait(self) -> None:
        """Wait for the write in flight; raise its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()


def block_arrays(layout: Layout, shape: tuple[int, ...], outcomes: list[dict[str, Any]],
                 rows: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The arrays of a block of ``shape`` from its points' outcomes (in C order): each
    variable at its fill value where a point's outcome lacks it. ``rows``: arrays of a
    batch with one row per point (B, ...): an array of the variable's dtype becomes the
    block's array as it is, so a batch's fields are not copied; the rows that an outcome
    does not hold as :meth:`BatchRows.row` gives it are replaced by the outcome's."""
    arrays = {}
    for name, (trailing, dtype, fill) in layout.variables().items():
        if not trailing:   # (one value per point)
            arrays[name] = np.array([o.get(name, fill) for o in outcomes],
                                    dtype=dtype).reshape(shape)
            continue
        level = layout.trailing_shape(trailing)
        source = (rows or {}).get(name)
        if source is not None and source.shape != (len(outcomes), *level):
            source = None
        if source is not None and source.dtype == dtype and source.flags.writeable:
            flat = source
        elif source is not None:
            flat = source.astype(dtype)
        else:
            flat = np.empty((len(outcomes), *level), dtype=dtype)
        held = isinstance(rows, BatchRows) and source is not None
        for k, outcome in enumerate(outcomes):
            value = outcome.get(name)
            if value is None:
                flat[k] = fill
            elif not (held and value is rows.row(name, k)):
                flat[k] = value
        arrays[name] = flat.reshape(shape + level)
    return arrays


class BatchRows(dict):
    """A batch's host arrays, name -> (B, ...) with a row per point, and the views of their
    rows, each made once (:meth:`row`): an outcome whose array *is* ``rows.row(name, b)``
    holds row b of the batch's memory, which :func:`block_arrays` then leaves in place (by
    identity: comparing the memory took about 3 µs a point per field)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._views: dict[str, list[np.ndarray]] = {}

    def row(self, name: str, b: int) -> np.ndarray:
        """The view of row ``b`` of ``self[name]`` (the same object at every call)."""
        if name not in self._views:
            self._views[name] = list(self[name])
        return self._views[name][b]


def solve_points(problems: list[Problem], be: Backend, opts: Mapping[str, Any]
                 ) -> list[dict[str, Any]]:
    """One batched solve on torch (a leading batch axis), whose points that did not converge
    are finished by the single path (:func:`finish`); point by point with NumPy, or when the
    batch raised (so the failing point is found and the others are solved). 2-D points one
    by one with :func:`mfgwork.solve_2d` (a scan spreads them over Dask workers, a block
    each)."""
    return _solve(problems, be, opts)[0]


def _solve(problems: list[Problem], be: Backend, opts: Mapping[str, Any]
           ) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """:func:`solve_points`, and the batch's host arrays with a row per point (U, M and the
    observables every point has; empty without a batch), of which the outcomes of the
    points the batch solved hold views."""
    if isinstance(problems[0], MFGProblem2D):
        return [_solve_one_2d(p, opts, be) for p in problems], {}
    kw = {"nx": opts["nx"], "nt": opts["nt"], "backend": be, "tol": opts["tol"],
          "max_iter": opts["max_iter"], "iteration": opts["iteration"], "progress": False,
          **_objective(opts)}
    if be.name == "torch" and len(problems) > 1:
        from ..solve import solve

        started = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                results = solve(problems, **kw)   # a list: one batch
        except Exception as exc:  # noqa: BLE001 - the points are solved one by one below
            raise_interrupt(exc)
        else:
            share = (time.perf_counter() - started) / len(problems)
            rows, masses = _on_host(results, be)
            outcomes = [_outcome(r, share, opts, {k: rows.row(k, b) for k in rows}, masses[b])
                        | {"finished_by": "batch"} for b, r in enumerate(results)]
            return finish(problems, outcomes, list(rows["M"]), opts), rows
    return [_solve_one(p, kw, opts) for p in problems], {}


def _on_host(results: list[Result], be: Backend) -> tuple[BatchRows, list[float | None]]:
    """A batch's arrays (U, M, the observables all members have) as NumPy arrays with a row
    per member, one transfer per name for the whole batch, not one per point; and each
    member's :attr:`~mfgwork.Result.mass_error`, computed in float64 where the densities are
    (None on MPS, which has no float64: each result's own, on the host)."""
    xp, first = be.xp, results[0]
    names = [k for k in first.observables if all(k in r.observables for r in results)]
    M = xp.stack([r.M for r in results])
    masses: list[float | None] = [None] * len(results)
    if be.kind != "mps" and not be.emulate_mps:
        weights = xp.asarray(first.weights, dtype=xp.float64, device=M.device)
        errors = xp.max(xp.abs(xp.astype(M, xp.float64) @ weights - 1.0), axis=-1)
        masses = [float(e) for e in to_numpy(errors)]
    rows = BatchRows(U=to_numpy(xp.stack([r.U for r in results]), transient=True),
                     M=to_numpy(M, transient=True))
    rows.update({k: to_numpy(xp.stack([r.observables[k] for r in results]), transient=True)
                 for k in names})
    return rows, masses


def finish(problems: list[MFGProblem], outcomes: list[dict[str, Any]], iterates: list[Any],
           opts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Finish the points a batch did not bring in by the single path: :func:`mfgwork.solve`
    with NumPy in float64 on the CPU (where :func:`mfgwork.placement` puts a single solve;
    its Newton fallback rescues stalling Santa Fe points), warm-started from the coupling
    state of the batch's best iterate (``iterates``: its densities per point), and from the
    start if the warm start does not converge; over the CPU cores in parallel (threads, from
    :data:`PARALLEL_MIN_CELLS`). A finished point counts the batch's iterations and time too;
    one that the single path cannot bring in either keeps the better of the two solutions."""
    hard = [k for k, o in enumerate(outcomes) if o["status"] == "not_converged"]
    jobs = [(problems[k], _state(problems[k], iterates[k], opts), dict(opts)) for k in hard]
    parallel = opts["nx"] * opts["nt"] >= PARALLEL_MIN_CELLS
    for k, single in zip(hard, _map(_finish_one, jobs, parallel), strict=True):
        batch = outcomes[k]
        single["iterations"] = single.get("iterations", 0) + batch["iterations"]
        single["wall_time"] = single["wall_time"] + batch["wall_time"]
        held = batch["residual"] if np.isfinite(batch["residual"]) else np.inf
        if single["status"] != "converged" and not single.get("residual", np.inf) < held:
            single = batch | {"message": _clip(f"{batch['message']}; nor did the single path "
                                               f"({single['message']})")}
        outcomes[k] = single
    return outcomes


def _finish_one(problem: MFGProblem, initial: np.ndarray, opts: dict[str, Any]
                ) -> dict[str, Any]:
    """One point by the single path: warm, then (if that does not converge) cold."""
    kw = {"nx": opts["nx"], "nt": opts["nt"], "backend": get_backend("numpy"),
          "tol": opts["tol"], "max_iter": opts["max_iter"], "iteration": opts["iteration"],
          "progress": False, **_objective(opts)}
    warm = _solve_one(problem, kw, opts, initial)
    if warm["status"] == "converged":
        return warm
    cold = _solve_one(problem, kw, opts)
    cold["iterations"] = cold.get("iterations", 0) + warm.get("iterations", 0)
    cold["wall_time"] += warm["wall_time"]
    return cold


def _objective(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The solve's ``objective`` where the scan has one (:func:`mfgwork.scan`)."""
    return {"objective": opts["objective"]} if "objective" in opts else {}


def _state(problem: MFGProblem, M: Any, opts: Mapping[str, Any]) -> np.ndarray:
    """The coupling state (Santa Fe: the attendance path) of densities ``M``, in float64 on
    the host: what a warm start of the single path takes."""
    host = get_backend("numpy")
    grid = problem.grid(opts["nx"], opts["nt"])
    M = np.asarray(to_numpy(M), dtype=np.float64)
    return np.asarray(problem.coupling(grid, host).state(M))


def _map(fn: Any, jobs: list[tuple[Any, ...]], parallel: bool) -> list[Any]:
    """``[fn(*job) for job in jobs]``, over threads, one per core, when ``parallel`` and there
    are several jobs and cores (and this process is not a daemon such as a Dask worker, already
    one of several in parallel).

    Threads, not processes: the single path spends its time in compiled loops that release the
    GIL (the Numba kernels are ``nogil``), a thread starts at once and needs nothing pickled,
    and it never re-runs the user's script (a process started by spawn or forkserver imports
    ``__main__`` again, so a script without ``if __name__ == "__main__":`` ran its scan again in
    every worker and broke the pool). ``warnings.catch_warnings``, which the solves enter, is
    not thread-safe: the caller's warning filters are restored when the threads are done."""
    import multiprocessing

    workers = min(len(jobs), _cores()) if parallel else 1
    if workers < 2 or multiprocessing.current_process().daemon:
        return [fn(*job) for job in jobs]
    from concurrent.futures import ThreadPoolExecutor

    with warnings.catch_warnings():
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mfgwork-finish")
        try:
            futures = [pool.submit(fn, *job) for job in jobs]
            return [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _cores() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def _solve_one(problem: MFGProblem, kw: dict[str, Any], opts: Mapping[str, Any],
               initial: np.ndarray | None = None) -> dict[str, Any]:
    from ..solve import solve

    return _attempt(lambda: solve(problem, initial=initial, **kw),
                    "single" if initial is None else "single-warm", kw["backend"], opts)


def _solve_one_2d(problem: MFGProblem2D, opts: Mapping[str, Any], be: Backend
                  ) -> dict[str, Any]:
    """One 2-D point by :func:`mfgwork.solve` (its default linear solver on ``be``)."""
    from ..solve import solve

    return _attempt(lambda: solve(problem, nx=opts["nx"], ny=opts["ny"], nt=opts["nt"],
                                  backend=be, tol=opts["tol"], max_iter=opts["max_iter"],
                                  iteration=opts["iteration"], progress=False),
                    "single", be, opts)


def _attempt(run: Any, how: str, be: Backend, opts: Mapping[str, Any]) -> dict[str, Any]:
    """The outcome of ``run()`` (a solve), timed; a raising solve is recorded as failed."""
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            result = run()
    except Exception as exc:  # noqa: BLE001 - a failing point is recorded, not raised
        raise_interrupt(exc)
        return {"status": "failed", "converged": False, "finished_by": how,
                "wall_time": time.perf_counter() - started, "device": be.device,
                "message": _clip(f"{type(exc).__name__}: {exc}")}
    wall_time = time.perf_counter() - started
    return _outcome(result, wall_time, opts) | {"finished_by": how}


def raise_interrupt(exc: BaseException) -> None:
    """Raise the KeyboardInterrupt that ``exc`` carries (a Ctrl-C that landed inside a
    compiled loop comes back as the loop's SystemError, the interrupt as its context), so
    that an interrupted point is not recorded as failed: the scan stops, and resumes it."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            raise exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__


def _outcome(result: Result, wall_time: float, opts: Mapping[str, Any],
             host: Mapping[str, np.ndarray] | None = None, mass: float | None = None
             ) -> dict[str, Any]:
    """A solved point's entries (any Result, 2-D too): metrics, fields, observables and
    summaries (NumPy). ``host``, ``mass``: the result's arrays (``U``, ``M``, observables) on
    the host and its mass error, read in place of its own (a batch's, computed at once)."""
    residual = np.nan if result.residual is None else float(result.residual)
    why = {"max_iter": f"max_iter={opts['max_iter']} reached",
           "stalled": f"stalled before max_iter={opts['max_iter']}"}.get(result.status, "")
    message = "" if result.converged else _clip(
        result.extra.get("certificate", {}).get("message")
        or f"did not reach tol={opts['tol']:g}: stopped after {int(result.iterations)} "
           f"iterations ({why}; final residual {residual:.3g})")
    floor = result.extra.get("reachable_tol") or {}
    reached = float(result.params.get("tol", opts["tol"]))   # (raised to the dtype's floor)
    if result.converged and residual > opts["tol"] and floor.get("predicted"):
        message = (f"converged within its float64 floor {floor['tol']:.1e} above "
                   f"tol={opts['tol']:g} (said before iterating: L = "
                   f"{floor['lipschitz']:.1e})")
    elif result.converged and residual > opts["tol"] and reached > opts["tol"]:
        message = (f"converged to tol={reached:.1e}, the floor of what {result.dtype} "
                   f"resolves, above tol={opts['tol']:g} (said before the scan)")
    host = host or {}
    arrays = {name: host[name] if name in host else to_numpy(value) for name, value in
              ({"M": result.M, "U": result.U} | dict(result.observables)).items()}
    out = {"status": "converged" if result.converged else "not_converged",
           "converged": bool(result.converged), "iterations": int(result.iterations),
           "residual": residual,
           "mass_error": float(result.mass_error) if mass is None else mass,
           "wall_time": wall_time, "device": str(result.device), "message": message}
    return out | arrays | {name: float(value) for name, value in result.summary.items()}


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"
