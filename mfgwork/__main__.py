"""Command line: ``python -m mfgwork {doctor,run,sweep,scan,lab} ...``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _doctor(args: argparse.Namespace) -> int:
    from .apps.doctor import main

    return main(as_json=args.json, clear_cache=args.clear_cache)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="python -m mfgwork",
                                     description="mfgwork: mean field games workbench")
    parser.add_argument("--version", action="version", version=f"mfgwork {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="versions, devices and a per-kernel self-check")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--clear-cache", action="store_true",
                        help="remove the compiled Triton kernels (they are rebuilt on use)")
    doctor.set_defaults(func=_doctor)
    _add_run(sub)
    _add_sweep(sub)
    _add_scan(sub)
    _add_lab(sub)
    return parser


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="execute a notebook through papermill into a run folder",
                       epilog="Exit status: 0 when the notebook ran, 1 when a cell failed, 2 "
                              "for bad input (refused here, or by the notebook's check of its "
                              "parameters: nothing was run).")
    p.add_argument("notebook", help="the notebook to run (needs a cell tagged 'parameters')")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                   metavar=("NAME", "VALUE"), help="set a parameter (value read as YAML)")
    p.add_argument("-o", "--out-dir", default=None,
                   help="the run folder (default: runs/<notebook name>)")
    p.add_argument("--kernel", default=None, help="Jupyter kernel name (default: the notebook's)")
    p.add_argument("--force", action="store_true",
                   help="replace OUT_DIR even if it is a non-empty folder without a marker "
                        "(never one holding a notebook, a project root, a repository or a "
                        "result; never a folder inside a result, a file, a link, the current "
                        "directory, home or the notebook's folder)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (shown only when stderr is a terminal)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from .core.progress import wanted_on_terminal
    from .workflows.runs import main

    return main(args.notebook, args.parameter, args.out_dir, args.kernel, args.force,
                progress=wanted_on_terminal(args.no_progress))


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a notebook over a parameter grid (resumable)",
                       epilog="Rerun the same command to resume. Exit status: 0 when every "
                              "run is done, 1 when some failed or are pending, 2 for bad "
                              "input (nothing was run).")
    p.add_argument("notebook", help="the notebook to run (needs a cell tagged 'parameters')")
    p.add_argument("--grid", required=True, metavar="SPEC",
                   help="YAML/JSON grid: lists, {linspace: [a, b, n]}, {range: [a, b, step]}; "
                        "a file when it exists, ends in .yaml/.yml/.json or has no ':'")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                   metavar=("NAME", "VALUE"), help="a parameter fixed for every run")
    p.add_argument("-o", "--out-dir", required=True, help="the sweep folder")
    p.add_argument("--workers", type=int, default=None, help="parallel runs (default: cores)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on this Dask distributed scheduler")
    p.add_argument("--dask", action="store_true",
                   help="run on a Dask LocalCluster started for this sweep")
    p.add_argument("--retry-failed", action="store_true", help="run failed runs again")
    p.add_argument("--replan", action="store_true",
                   help="run another spec into an existing sweep folder (its earlier runs "
                        "stay listed)")
    p.add_argument("--max-runs", type=int, default=None,
                   help="refuse specs planning more runs than this (default: 10000)")
    p.add_argument("--kernel", default=None, help="Jupyter kernel name (default: the notebook's)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (shown only when stderr is a terminal)")
    p.set_defaults(func=_sweep)


def _sweep(args: argparse.Namespace) -> int:
    from .core.errors import LoadError, ParameterError
    from .core.progress import wanted_on_terminal
    from .workflows.runs import parse_value
    from .workflows.sweeps import MAX_RUNS, describe, sweep

    try:
        index = sweep(args.notebook, args.grid, args.out_dir,
                      {name: parse_value(value) for name, value in args.parameter},
                      workers=args.workers, scheduler=args.scheduler, dask=args.dask,
                      retry_failed=args.retry_failed, kernel_name=args.kernel,
                      progress=wanted_on_terminal(args.no_progress), replan=args.replan,
                      max_runs=MAX_RUNS if args.max_runs is None else args.max_runs)
    except (ParameterError, LoadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(describe(index))
    return 0 if index.counts()["done"] == len(index) else 1


def _add_scan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scan", help="solve a problem over a parameter grid into an xarray "
                                     "dataset (zarr store, resumable)",
                       epilog="Rerun the same command to resume. Exit status: 0 when every "
                              "point converged, 1 when some failed or did not converge, 2 for "
                              "bad input (nothing was solved).")
    p.add_argument("--problem", required=True,
                   help="a problem name (santa_fe, two_bars, room) or module:callable (a "
                        "problem factory)")
    p.add_argument("--grid", required=True, metavar="SPEC",
                   help="YAML/JSON grid: lists, {linspace: [a, b, n]}, {range: [a, b, step]}; "
                        "a file when it exists, ends in .yaml/.yml/.json or has no ':'")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                   metavar=("NAME", "VALUE"),
                   help="a problem parameter fixed for every point, or a solver option "
                        "(nx, nt, tol, max_iter, dtype, backend, iteration; ny for 2-D "
                        "problems)")
    p.add_argument("-o", "--store", required=True, help="the zarr store (a folder)")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda or mps")
    p.add_argument("--keep", default="M,U",
                   help="fields to store: M,U (default), M, U or none (each at most once)")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="points per block (default: sized to the device's memory)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="solve blocks on this Dask distributed scheduler (shared file system)")
    p.add_argument("--dask", action="store_true",
                   help="solve blocks on a Dask LocalCluster started for this scan")
    p.add_argument("--workers", type=int, default=None, help="LocalCluster workers (--dask)")
    p.add_argument("--netcdf", default=None, metavar="FILE",
                   help="also export the finished scan as NetCDF-4 (checked before the scan: "
                        "a new file or an earlier scan export)")
    p.add_argument("--force", action="store_true",
                   help="let --netcdf replace an existing file that is not a scan export "
                        "(never a folder, a link or a FIFO)")
    p.add_argument("--max-points", type=int, default=None,
                   help="refuse grids of more points (default: 100000)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (shown only when stderr is a terminal)")
    p.set_defaults(func=_scan)


def _scan(args: argparse.Namespace) -> int:
    from .core.errors import BackendError, LoadError, ParameterError
    from .core.progress import wanted_on_terminal
    from .workflows.runs import parse_value
    from .workflows.scan import check_netcdf, describe, scan, split_parameters, to_netcdf
    from .workflows.sweeps import reached_scheduler

    try:
        keep = _keep(args.keep)
        _one_cluster(args)
        if args.netcdf:
            _outside_store(args.netcdf, args.store)
            check_netcdf(args.netcdf, force=args.force)
        fixed, options = split_parameters(
            args.problem, {name: parse_value(value) for name, value in args.parameter})
        _no_options_in_grid(args.problem, args.grid)
        with reached_scheduler(args.scheduler) as scheduler:   # (before the store is made)
            ds = scan(args.problem, args.grid, fixed=fixed, **options, device=args.device,
                      keep=keep, store=args.store, chunk_size=args.chunk_size,
                      scheduler=scheduler, dask=args.dask, workers=args.workers,
                      progress=wanted_on_terminal(args.no_progress),
                      **({} if args.max_points is None else {"max_points": args.max_points}))
    except (ParameterError, BackendError, LoadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(describe(ds, args.store))
    if args.netcdf:
        try:
            print(f"netcdf: {to_netcdf(ds, args.netcdf, force=args.force)}")
        except ParameterError as exc:  # (the file changed while the scan ran)
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 0 if bool((ds["status"] == "converged").all()) else 1


def _keep(text: str) -> tuple[str, ...]:
    """The fields of ``--keep`` (``none``: no field); a field named twice is refused."""
    from .core.errors import ParameterError

    if text.strip().lower() == "none":
        return ()
    keep = tuple(k.strip() for k in text.split(",") if k.strip())
    twice = sorted({k for k in keep if keep.count(k) > 1})
    if twice:
        raise ParameterError(f"--keep={text!r} is invalid: it names {', '.join(twice)} more "
                             "than once; give each field at most once: M,U, M, U or none")
    return keep


def _one_cluster(args: argparse.Namespace) -> None:
    """Refuse ``--scheduler`` with ``--dask``: a running cluster and one to start."""
    from .core.errors import ParameterError

    if args.scheduler is not None and args.dask:
        raise ParameterError(f"--scheduler={args.scheduler!r} (a running cluster) and --dask "
                             "(a LocalCluster started here) are refused together: give only "
                             "one")


def _no_options_in_grid(problem: str, grid: str) -> None:
    """Refuse a solver option (nx, nt, tol, ...) in the grid, where the problem has no
    parameter of that name: a scan solves every point with the same options."""
    from .core.errors import ParameterError
    from .workflows.scan_plan import SOLVE_OPTIONS, resolve_problem
    from .workflows.specs import read_spec, signature_parameters

    declared = signature_parameters(resolve_problem(problem))
    misplaced = [n for n in read_spec(grid) if n in SOLVE_OPTIONS and n not in declared]
    if misplaced:
        raise ParameterError(f"{', '.join(map(repr, misplaced))} in the grid is refused: "
                             f"solver options ({', '.join(SOLVE_OPTIONS)}) are the same for "
                             "every point of a scan; set them with -p NAME VALUE (one scan "
                             "per value)")


def _outside_store(netcdf: str, store: str) -> None:
    """Refuse a ``--netcdf`` file that is the scan's own store or lies inside it (the store
    may not exist yet)."""
    from .core.errors import ParameterError

    path, folder = Path(os.path.abspath(netcdf)), Path(os.path.abspath(store))
    real = path.parent.resolve()
    if folder in (path, *path.parents) or \
            folder.resolve() in (real / path.name, real, *real.parents):
        raise ParameterError(f"netcdf={netcdf!r} is refused: it is the store of this scan "
                             f"({folder}) or lies inside it; a file is never added to another "
                             "output, even with force; choose a file outside it")


def _add_lab(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lab", help="JupyterLab with a token in force (LAB_TOKEN or a fresh one)",
                       epilog="Exit status: the server's; 2 when it could not start with the "
                              "token in force (nothing is left running).")
    p.add_argument("--root", default="notebooks", help="the folder it serves (default: notebooks)")
    p.add_argument("--ip", default="127.0.0.1", help="listening address (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8888, help="port (default: 8888)")
    p.add_argument("--allow-root", action="store_true", help="let it run as root")
    p.add_argument("server_args", nargs="*", metavar="-- OPTION",
                   help="further jupyter lab options (not the address or the authentication)")
    p.set_defaults(func=_lab)


def _lab(args: argparse.Namespace) -> int:
    from .core.extras import MissingExtraError, require

    try:
        require("jupyterlab", extra="notebooks", feature="python -m mfgwork lab")
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from .apps.lab import main

    return main(args.root, args.ip, args.port, args.server_args, args.allow_root)


#: What an interrupted command kept, by command (Ctrl-C: one line, exit status 130).
INTERRUPTED = {
    "run": "the run left nothing: no run folder was written (an earlier one is as it was) "
           "and its temporaries were removed",
    "sweep": "the finished runs are kept: rerun the same command to resume from where it "
             "stopped",
    "scan": "the finished blocks are kept in the store: rerun the same command to resume "
            "from where it stopped",
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        kept = INTERRUPTED.get(args.command, "nothing more was done")
        print(f"interrupted; {kept}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
