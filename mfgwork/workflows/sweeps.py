"""Batch runs of a notebook over a parameter grid: parallel, resumable, with an index.

A sweep folder holds::

    mfgwork.json     the marker of a sweep folder (see :mod:`mfgwork.core.storage`)
    spec.yaml        the grid spec as given
    sweep.json       the notebook, the fixed parameters and the planned runs
    index.csv        one row per planned run: status, error, parameters, headline metrics;
                     written whole when a sweep starts and ends, one row appended per
                     finished run in between (the last row of a run is its state)
    runs/NAME/       an ordinary run folder per finished run (written by ``run_notebook``
                     under a temporary name and renamed, so it is either whole or absent)
    failed/NAME.json the error of a failed run
    locks/           one lock file per run, held while the run executes

The status of a run is read from disk: done if ``runs/NAME`` exists, failed if
``failed/NAME.json`` does, pending otherwise; so the index can always be rebuilt
(:func:`load_sweep`) and a rerun of the same sweep skips what is finished.
A sweep goes only into a new or empty folder or a sweep folder; another spec in an existing
sweep folder needs ``replan=True`` (the earlier runs stay listed). Plans of more than
``max_runs`` runs are refused before anything is written.
Runs execute in worker processes (fresh interpreters, :mod:`~mfgwork.workflows.sweep_worker`:
a script calling :func:`sweep` needs no ``if __name__ == "__main__":``) or on Dask workers,
each in its own kernel through papermill; local workers exit when the sweep process dies.
"""

from __future__ import annotations

import contextlib
import csv
import html
import os
import pickle
import re
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ..core import storage
from ..core.errors import LoadError, ParameterError, check_flag, check_int, warn
from ..core.extras import require
from ..core.processes import check_spawn_safe
from ..core.progress import progress_bar, ticking
from .dask_client import dask_client
from .differences import plan_differences
from .specs import Run, parse_spec, read_spec

#: Largest number of runs a sweep plans unless ``max_runs`` says otherwise.
MAX_RUNS = 10_000

#: Headline metrics of every run in the index; the problem's own summary numbers (its
#: ``summary`` in ``metrics.json``, e.g. the mean attendance for Santa Fe) follow them.
METRICS = ("iterations", "converged", "residual", "solve_time", "wall_time", "device")
STATUSES = ("done", "failed", "pending")
#: The first bytes of every index CSV (its first three columns).
INDEX_HEADER = b"run,status,error"
#: Where a sweep writes: none of these, nor any entry inside them, may be a symbolic link.
PARTS = ("runs", "failed", "locks")
#: The files a sweep writes at its top level (regular files where they exist).
FILES = ("index.csv", "sweep.json", "spec.yaml", "sweep.lock", storage.MARKER)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class SweepIndex:
    """The runs of a sweep, one dict per run (``run``, ``status``, ``error``, the
    parameters, then the headline metrics); ``folder`` is the sweep folder."""

    def __init__(self, folder: Path, rows: list[dict[str, Any]], parameters: list[str],
                 problems: list[str] | None = None) -> None:
        self.folder = Path(folder)
        self.rows = rows
        self.parameters = parameters
        #: Entries of the folder that could not be read (each also in its row's error).
        self.problems = problems or []

    @property
    def columns(self) -> list[str]:
        fixed = ["run", "status", "error", *self.parameters, *METRICS]
        summary = dict.fromkeys(k for row in self.rows for k in row if k not in fixed)
        return fixed + list(summary)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.rows[i]

    def __repr__(self) -> str:
        c = self.counts()
        return (f"SweepIndex({str(self.folder)!r}: {len(self)} runs, {c['done']} done, "
                f"{c['failed']} failed, {c['pending']} pending)")

    def _repr_html_(self) -> str:
        def cell(v: Any) -> str:
            text = f"{v:.6g}" if isinstance(v, float) else ("" if v is None else str(v))
            return f"<td>{html.escape(text)}</td>"

        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(cell(r.get(c)) for c in self.columns) + "</tr>"
                       for r in self.rows)
        return (f"<p>{html.escape(repr(self))}</p><table><thead><tr>{head}</tr></thead>"
                f"<tbody>{body}</tbody></table>")

    def counts(self) -> dict[str, int]:
        """Number of runs per status."""
        c = Counter(r["status"] for r in self.rows)
        return {s: c.get(s, 0) for s in STATUSES}

    def where(self, **conditions: Any) -> list[dict[str, Any]]:
        """Rows whose columns equal the given values, e.g. ``where(status="done", sigma=0.5)``."""
        return [r for r in self.rows if all(r.get(k) == v for k, v in conditions.items())]

    def run_folder(self, row: Mapping[str, Any]) -> Path:
        """The run folder of a row (it exists when the row is done)."""
        return self.folder / "runs" / row["run"]

    def write_csv(self, path: str | os.PathLike | None = None, *, force: bool = False
                  ) -> Path:
        """Write the index as CSV (atomically: temporary file, then ``os.replace``): to the
        sweep's ``index.csv``, or to ``path``, which must be new or an index written
        before (its header starts with ``run,status,error``); any other existing file
        only with ``force=True``; never a folder, a link, a FIFO or a file inside a sweep,
        a run or another output, this sweep included (``path=None`` writes its index)
        (:func:`mfgwork.core.storage.check_file`)."""
        target = self.folder / "index.csv" if path is None else \
            storage.check_file(path, name="path", force=force, ours=_is_index_csv)
        with storage.atomic_file(target) as fh:
            self._writer(fh).writeheader()
            self._writer(fh).writerows(_cells(r) for r in self.rows)
        return target

    def append_csv(self, i: int) -> None:
        """Append row ``i`` to ``index.csv`` under its present header (its state now; the
        last row of a run wins; columns new since the header wait for :meth:`write_csv`)."""
        path = self.folder / "index.csv"
        with open(path, newline="") as fh:
            header = next(csv.reader(fh), None)
        if not header:
            self.write_csv()
            return
        with open(path, "a", newline="") as fh:
            self._writer(fh, header).writerow(_cells(self.rows[i]))

    def _writer(self, fh: Any, fields: list[str] | None = None) -> csv.DictWriter:
        return csv.DictWriter(fh, fieldnames=fields or self.columns, extrasaction="ignore")


def _is_index_csv(path: Path) -> bool:
    """True for a CSV file written by :meth:`SweepIndex.write_csv` (read: its first bytes)."""
    with open(path, "rb") as fh:
        return fh.read(len(INDEX_HEADER)) == INDEX_HEADER


def _cells(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: ("" if v is None else v) for k, v in row.items()}


# -- reading state from disk ---------------------------------------------------------------------
def load_sweep(folder: str | os.PathLike) -> SweepIndex:
    """Rebuild the index of a sweep folder from its plan and the run folders on disk.

    A plan (``sweep.json``) that cannot be read raises :class:`~mfgwork.LoadError`; an
    unreadable entry (a run's metrics, a failure record) is reported in its row's error,
    in ``index.problems`` and by one warning, and the rest still loads.
    """
    folder = Path(folder).resolve()
    if not (folder / "sweep.json").is_file():
        raise LoadError(folder, "has no sweep.json: not a sweep folder")
    plan = read_plan(folder)
    problems: list[str] = []
    rows = [_row(folder, Run(r["name"], r["parameters"]), problems) for r in plan["runs"]]
    if problems:
        warn(f"{len(problems)} entr{'y' if len(problems) == 1 else 'ies'} of the "
             f"sweep {folder} could not be read: {problems[0]}"
             + (" …" if len(problems) > 1 else ""), UserWarning)
    return SweepIndex(folder, rows, plan["parameters"], problems)


def read_plan(folder: Path) -> dict[str, Any]:
    """The checked content of ``sweep.json``."""
    path = folder / "sweep.json"
    plan = storage.read_json(path, keys={"notebook": str, "spec": dict, "fixed": dict,
                                         "parameters": list, "runs": list})
    for i, r in enumerate(plan["runs"]):
        if not (isinstance(r, dict) and isinstance(r.get("name"), str)
                and isinstance(r.get("parameters"), dict)
                and re.fullmatch(r"[A-Za-z0-9._=+-]+", r["name"]) and r["name"][0] != "."):
            raise LoadError(path, f"runs[{i}]={r!r:.80} is not a run (a name and parameters)")
    return plan


def _row(folder: Path, run: Run, problems: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"run": run.name, "status": "pending", "error": None}
    row.update(run.parameters)
    row.update(dict.fromkeys(METRICS))
    run_dir, failed = folder / "runs" / run.name, folder / "failed" / f"{run.name}.json"
    try:
        if run_dir.is_dir():
            row["status"] = "done"
            row.update(_metrics(run_dir))
        elif failed.is_file():
            row["status"] = "failed"
            row["error"] = _short(storage.read_json(failed, keys={"error": str})["error"])
    except LoadError as exc:
        problems.append(str(exc))
        row["error"] = _short(f"unreadable: {exc}")
    return row


def _metrics(run_dir: Path) -> dict[str, Any]:
    """Headline metrics of a finished run folder (None where the run did not record one)."""
    path = run_dir / "metrics.json"
    m = storage.read_json(path) if path.exists() else {}
    if not isinstance(m, dict):
        raise LoadError(path, "must hold a JSON object")
    out = {k: m.get(k) for k in ("iterations", "converged", "residual", "device")}
    out |= {k: v for k, v in (m.get("summary") or {}).items() if k not in out}
    out["solve_time"] = (m.get("timings") or {}).get("total")
    out["wall_time"] = _notebook_duration(run_dir)
    return out


def _notebook_duration(run_dir: Path) -> float | None:
    """Wall time of the papermill execution (kernel start included), from the executed
    notebook's metadata."""
    for nb in sorted(run_dir.glob("*.ipynb")):
        with contextlib.suppress(LoadError, KeyError, TypeError):
            duration = storage.read_json(nb)["metadata"]["papermill"]["duration"]
            if isinstance(duration, int | float):
                return float(duration)
    return None


def _short(message: str, limit: int = 400) -> str:
    """One line of an error message for the index (the full text stays in failed/)."""
    text = " ".join(_ANSI.sub("", message).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- the worker side -----------------------------------------------------------------------------
def execute_run(task: Mapping[str, Any]) -> dict[str, Any]:
    """Run one notebook into its run folder under the run's lock; record a failure in
    ``failed/NAME.json``. Returns ``{"run", "status", "error"}``. Safe to call twice: a
    run whose folder exists is not run again."""
    from filelock import FileLock

    from .runs import run_notebook

    folder, name = Path(task["folder"]), task["name"]
    run_dir, failed = folder / "runs" / name, folder / "failed" / f"{name}.json"
    for part in (*(folder / p for p in PARTS), run_dir, failed):
        if part.is_symlink():
            raise ParameterError(f"{part} is a symbolic link: a sweep writes only into its "
                                 "own folders, never through a link")
    with FileLock(folder / "locks" / f"{name}.lock"):
        if run_dir.is_dir():
            return {"run": name, "status": "done", "error": None}
        storage.remove_stale(run_dir)
        try:
            run_notebook(task["notebook"], task["parameters"], run_dir,
                         kernel_name=task.get("kernel_name"), progress=False)
        except Exception as exc:  # noqa: BLE001 - any failure of one run is recorded, not raised
            message = f"{type(exc).__name__}: {_ANSI.sub('', str(exc))}"
            storage.write_json(failed, {"run": name, "error": message,
                                        "parameters": task["parameters"]}, atomic=True)
            return {"run": name, "status": "failed", "error": _short(message)}
        failed.unlink(missing_ok=True)
        return {"run": name, "status": "done", "error": None}


# -- executors -----------------------------------------------------------------------------------
@contextlib.contextmanager
def _local_pool(workers: int) -> Iterator[tuple[Callable[[dict], Future], Callable]]:
    """Threads, each handing its runs to a worker process of its own
    (:mod:`~mfgwork.workflows.sweep_worker`: a fresh interpreter, so the caller's script is
    not run again, with or without ``if __name__ == "__main__":``); a worker that died is
    replaced for the next run. On the way out, pending runs are cancelled, running ones end
    and the workers exit."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    started: list[subprocess.Popen] = []
    mine = threading.local()

    def run(task: dict) -> dict[str, Any]:
        worker = getattr(mine, "worker", None)
        if worker is None or worker.poll() is not None:
            worker = mine.worker = _start_worker()
            started.append(worker)
        return _ask(worker, task)

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mfgwork-sweep")
    try:
        yield (lambda task: pool.submit(run, task)), as_completed
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for worker in started:
            with contextlib.suppress(OSError):
                worker.stdin.close()
        for worker in started:
            worker.wait()


#: The worker's start: this very mfgwork (its folder put first on the path where the path
#: lacks it; the environment, which its kernels inherit, is left alone). A Ctrl-C at the
#: terminal (its process group) ends it with status 130 and no traceback: the sweep says it.
_WORKER = ("import sys; root = sys.argv[2]; root in sys.path or sys.path.insert(0, root)\n"
           "from mfgwork.workflows.sweep_worker import main\n"
           "try:\n    sys.exit(main())\nexcept KeyboardInterrupt:\n    sys.exit(130)")


def _start_worker() -> subprocess.Popen:
    root = str(Path(__file__).resolve().parents[2])
    return subprocess.Popen([sys.executable, "-c", _WORKER, str(os.getpid()), root],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _ask(worker: subprocess.Popen, task: dict) -> dict[str, Any]:
    """Send ``task`` to ``worker`` and wait for its answer; a worker that dies meanwhile or
    whose run raised is an error (:func:`_worker_error` records it)."""
    try:
        pickle.dump(task, worker.stdin)
        worker.stdin.flush()
        answer = pickle.load(worker.stdout)
    except (OSError, EOFError, pickle.UnpicklingError):
        status = worker.poll()
        if status is None:   # alive but unreadable: it cannot serve another run
            worker.kill()
            worker.wait()
        raise RuntimeError(f"the worker process {worker.pid} ended (exit status {status}) "
                           f"during run {task['name']}") from None
    if "error" in answer:
        name, message = answer["error"]
        raise RuntimeError(f"{name}: {message}")
    return answer["result"]


@contextlib.contextmanager
def _dask_pool(workers: int, scheduler: Any
               ) -> Iterator[tuple[Callable[[dict], Any], Callable]]:
    with dask_client(workers, scheduler) as (client, as_completed):
        yield (lambda task: client.submit(execute_run, task, key=f"mfgwork-{task['name']}",
                                          pure=False)), as_completed


# -- the front door ------------------------------------------------------------------------------
def sweep(notebook: str | os.PathLike, grid: str | os.PathLike | Mapping[str, Any],
          out_dir: str | os.PathLike, parameters: Mapping[str, Any] | None = None,
          workers: int | None = None, scheduler: str | None = None, dask: bool = False,
          retry_failed: bool = False, progress: bool = True, *,
          kernel_name: str | None = None, replan: bool = False,
          max_runs: int = MAX_RUNS) -> SweepIndex:
    """Run ``notebook`` for every point of ``grid`` into run folders under ``out_dir``.

    ``grid`` is a spec (see :mod:`mfgwork.workflows.specs`) as a mapping, a YAML/JSON file or YAML
    text; ``parameters`` are fixed for every run. Runs go to ``workers`` local processes
    (default: the number of usable cores), or to the Dask cluster at ``scheduler``, or with
    ``dask=True`` to a fresh ``LocalCluster``. Finished runs are skipped; failed ones are
    retried only with ``retry_failed``. Returns the index, also written to ``index.csv``
    (one row appended per finished run). ``kernel_name`` picks the Jupyter kernel (default:
    the notebook's; without a ``scheduler``, one not installed here is refused before any
    run).

    Checked before any run starts and before anything is written: the spec against the
    notebook's parameters; the number of runs against ``max_runs``; ``out_dir``, which must
    be new, empty or a sweep folder (see :func:`mfgwork.core.storage.check_target`); and,
    for an existing sweep folder, that the notebook, spec and fixed parameters are those of
    its plan, unless ``replan=True``: then this spec's runs are planned and executed, and the
    earlier runs stay listed. ``dask=True`` with a ``scheduler`` is refused, and the
    ``scheduler`` is reached before anything is written.
    """
    from .runs import notebook_parameters

    require("papermill", "nbformat", "yaml", "filelock", "psutil", extra="run",
            feature="mw.sweep")
    if dask or scheduler:
        require("distributed", extra="dask", feature="mw.sweep(dask=True or scheduler=...)")
    if dask and scheduler is None:
        check_spawn_safe("mw.sweep(dask=True)")
    workers = check_int("workers", workers if workers is not None else _cores(), low=1)
    max_runs = check_int("max_runs", max_runs, low=1)
    _check_options(notebook, scheduler, kernel_name, dask=dask, retry_failed=retry_failed,
                   progress=progress, replan=replan)
    if dask and scheduler is not None:
        raise ParameterError(f"dask=True (--dask: a LocalCluster started for this sweep) and "
                             f"scheduler={scheduler!r} (--scheduler: a running cluster) are "
                             "refused together: give only one")
    if scheduler is None:   # (a running cluster's workers have their own kernels)
        from .runs import check_kernel

        check_kernel(kernel_name)
    where = Path(notebook).resolve()
    folder = storage.check_target(out_dir, "sweep", legacy=["sweep.json"], forceable=False,
                                  protect={where.parent: f"the folder of the notebook "
                                                         f"{where.name}"})
    if folder.is_dir():
        _check_parts(folder)
    declared = notebook_parameters(notebook)
    if "out_dir" not in declared:
        raise ParameterError(f"notebook={str(notebook)!r} cannot be swept: its parameters cell "
                             "has no out_dir (the run folder it writes into)")
    notebook = where
    raw = read_spec(grid)
    spec = parse_spec(raw, parameters, declared, max_points=max_runs, limit_name="max_runs")
    runs = spec.runs()

    plan = {"notebook": str(notebook), "spec": dict(raw), "fixed": dict(parameters or {})}
    _check_files(folder)
    earlier = _check_replan(folder, plan, replan)
    with reached_scheduler(scheduler) as client:   # (an unreachable scheduler: nothing written)
        for sub in PARTS:
            (folder / sub).mkdir(parents=True, exist_ok=True)
        with _sweep_lock(folder):
            storage.write_marker(folder, "sweep")
            _clean_stale(folder)
            _write_plan(folder, plan, spec.varying, runs, earlier)
            index = load_sweep(folder)
            status = {row["run"]: row["status"] for row in index}
            tasks = [{"folder": str(folder), "name": r.name, "notebook": str(notebook),
                      "parameters": r.parameters, "kernel_name": kernel_name}
                     for r in runs if status[r.name] == "pending"
                     or (retry_failed and status[r.name] == "failed")]
            index.write_csv()
            _execute(index, tasks, workers, client, dask, progress)
            index.write_csv()
    return index


@contextlib.contextmanager
def reached_scheduler(scheduler: str | None) -> Iterator[Any]:
    """The client of the cluster at ``scheduler`` (None without one), connected before a
    sweep (or a scan of the command line) writes anything; closed on exit. An unreachable
    address raises :class:`~mfgwork.ParameterError`."""
    if scheduler is None:
        yield None
        return
    with dask_client(1, scheduler) as (client, _):
        yield client


@contextlib.contextmanager
def _sweep_lock(folder: Path) -> Iterator[None]:
    """Hold the sweep folder's lock; refuse a folder in use by another sweep."""
    from filelock import FileLock, Timeout

    try:
        lock = FileLock(folder / "sweep.lock", timeout=0).acquire()
    except Timeout:
        raise ParameterError(f"out_dir={str(folder)!r} is in use by another sweep") from None
    with lock:
        yield


def _check_parts(folder: Path) -> None:
    """Refuse a sweep folder whose parts are links (:func:`~mfgwork.core.storage.check_links`,
    two levels deep: the run folders included) or of the wrong type (a folder where a file
    goes, a file where a folder goes), before anything is written."""
    storage.check_links(folder, name="out_dir", depth=2)
    for names, ok, want in ((FILES, Path.is_file, "a file"), (PARTS, Path.is_dir, "a folder")):
        for name in names:
            part = folder / name
            if part.exists() and not ok(part):
                raise ParameterError(f"out_dir={str(folder)!r} is refused: its {name} is not "
                                     f"{want}; remove it or choose another folder")


def _check_options(notebook: Any, scheduler: Any, kernel_name: Any, **flags: Any) -> None:
    """The types of :func:`sweep`'s options, before anything is read or written."""
    if not isinstance(notebook, str | os.PathLike):
        raise ParameterError(f"notebook={notebook!r:.80} ({type(notebook).__name__}) is "
                             "invalid: must be the path of a notebook (.ipynb)")
    for name, value in (("scheduler", scheduler), ("kernel_name", kernel_name)):
        if value is not None and not isinstance(value, str):
            raise ParameterError(f"{name}={value!r:.80} ({type(value).__name__}) is invalid: "
                                 "must be None or a string")
    for name, value in flags.items():
        check_flag(name, value)


def _check_replan(folder: Path, plan: Mapping[str, Any], replan: bool) -> dict[str, Any] | None:
    """The earlier plan of the sweep folder (None if new); refuses a different plan unless
    ``replan``."""
    if not (folder / "sweep.json").is_file():
        return None
    earlier = read_plan(folder)
    changed = [k for k in plan if earlier.get(k) != plan[k]]
    if changed and not replan:
        what = {"notebook": "another notebook", "spec": "another spec",
                "fixed": "other fixed parameters"}
        raise ParameterError(
            f"out_dir={str(folder)!r} holds a sweep with "
            f"{' and '.join(what.get(k, k) for k in changed)} (there → here: "
            f"{plan_differences(earlier, plan)}); rerun with the same spec to resume it, "
            "choose another folder, or pass replan=True (--replan) to run this spec there "
            "(the earlier runs stay listed)")
    return earlier


#: The files of a sweep folder that a sweep reads, writes or locks.
FILES = ("mfgwork.json", "spec.yaml", "sweep.json", "index.csv", "sweep.lock")


def _check_files(folder: Path) -> None:
    """Each of :data:`FILES` is absent or a regular file (not a link, a folder or a FIFO)."""
    import stat

    for name in FILES:
        path = folder / name
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            what = ("a symbolic link" if stat.S_ISLNK(mode) else "a folder"
                    if stat.S_ISDIR(mode) else "not a regular file")
            raise ParameterError(f"out_dir={str(folder)!r} is refused: its {name} is {what}, "
                                 "which a sweep does not read or write through; remove it or "
                                 "choose another folder")


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _write_plan(folder: Path, plan: Mapping[str, Any], varying: Iterable[str],
                runs: list[Run], earlier: Mapping[str, Any] | None) -> None:
    """``spec.yaml`` and ``sweep.json``: this plan's runs, then those of earlier plans."""
    import yaml

    with storage.atomic_file(folder / "spec.yaml") as fh:
        fh.write(yaml.safe_dump(plan["spec"], sort_keys=False))
    listed = [{"name": r.name, "parameters": r.parameters} for r in runs]
    names = [*varying, *(k for r in runs for k in r.parameters)]
    history = []
    if earlier is not None:
        new = {r.name for r in runs}
        listed += [r for r in earlier["runs"] if r["name"] not in new]
        names += earlier["parameters"]
        if any(earlier.get(k) != plan[k] for k in plan):
            history = [*earlier.get("earlier_plans", []),
                       {k: earlier.get(k) for k in ("notebook", "spec", "fixed")}]
        else:
            history = earlier.get("earlier_plans", [])
    storage.write_json(folder / "sweep.json", dict(plan) | {
        "parameters": list(dict.fromkeys(names)), "runs": listed,
        "earlier_plans": history}, atomic=True)


def _clean_stale(folder: Path) -> None:
    """Remove temporary files and folders of killed writes (nested temporaries of a
    notebook's ``save_run`` included) that their owner records prove stale (their process
    has ended: a straggler of a killed sweep still finishing keeps its own; see
    :func:`mfgwork.core.storage.remove_stale`). Called under the sweep's lock, after
    :func:`mfgwork.core.storage.check_links`: nothing here is a link, and removals never
    follow one."""
    for name in ("index.csv", "sweep.json", "spec.yaml", storage.MARKER):
        storage.remove_stale(folder / name)
    for part in ("failed", "runs"):
        for name in sorted({owner[0] for owner in _temporaries(folder / part)}):
            storage.remove_stale(folder / part / name)


def _temporaries(folder: Path) -> list[tuple[str, list[int]]]:
    """Owners (target name, process ids) of the temporaries in ``folder``."""
    with os.scandir(folder) as entries:
        return [o for e in entries if (o := storage.temporary_owner(e.name)) is not None]


def _execute(index: SweepIndex, tasks: list[dict], workers: int, scheduler: Any,
             dask: bool, progress: bool) -> None:
    if not tasks:
        return
    position = {r["run"]: i for i, r in enumerate(index.rows)}
    for t in tasks:
        index.rows[position[t["name"]]].update(status="pending", error=None)
    counts = index.counts()
    bar = progress_bar(total=len(index), initial=counts["done"] + counts["failed"],
                       desc="sweep", unit="run", disable=not progress)
    bar.set_postfix(counts)
    n = min(workers, len(tasks))
    pool = _dask_pool(n, scheduler) if dask or scheduler is not None else _local_pool(n)
    try:
        with pool as (submit, as_completed), ticking(bar):
            futures = {submit(t): t for t in tasks}
            for future in as_completed(list(futures)):
                task = futures[future]
                i = position[task["name"]]
                index.rows[i] = _row(index.folder, Run(task["name"], task["parameters"]),
                                     index.problems)
                error = _worker_error(future)
                if error and index.rows[i]["status"] == "pending":
                    index.rows[i]["error"] = error
                index.append_csv(i)
                bar.set_postfix(index.counts(), refresh=False)
                bar.update(1)
    finally:
        bar.close()


def _worker_error(future: Any) -> str | None:
    """Why a worker could not report a result (it died or lost its scheduler), or None.
    Failures of the run itself are recorded by the worker in ``failed/``."""
    try:
        future.result()
    except Exception as exc:  # noqa: BLE001 - a crashed worker must not stop the sweep
        return _short(f"worker error: {type(exc).__name__}: {exc}")
    return None


def describe(index: SweepIndex) -> str:
    """One line: counts per status and where the index is."""
    c = index.counts()
    n_runs = f"{len(index)} run{'' if len(index) == 1 else 's'}"
    return (f"{n_runs}: {c['done']} done, {c['failed']} failed, {c['pending']} pending; "
            f"index: {index.folder / 'index.csv'}")
