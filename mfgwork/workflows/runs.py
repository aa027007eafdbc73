"""Executing one parameterized notebook through papermill into a run folder.

:func:`run_notebook` checks the given parameters against the notebook's cell tagged
``parameters`` (names, and types: a value must have the type of the default, an int being
accepted for a float), executes the notebook in a fresh kernel with ``out_dir`` set to a
temporary folder beside the target, adds the executed notebook to that folder and renames it
to the target: an interrupted or failed run never leaves a half-written run folder. A failing
cell raises :class:`NotebookError` naming the cell and the error; the partially executed
notebook is kept at ``<out_dir>.failed.ipynb``.

The module imports papermill only when a notebook is run, so importing it is cheap and free
of side effects (worker processes of a sweep import it). :func:`solve_options` is the check
that notebooks call on their solver parameters.
"""

from __future__ import annotations

import ast
import contextlib
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core import storage
from ..core.ansi import strip_ansi
from ..core.backend import get_backend
from ..core.errors import LoadError, ParameterError, check_choice, check_int
from ..core.extras import require
from ..numerics.iteration import check_stopping
from .specs import coerce_parameter, load_yaml

FAILED_SUFFIX = ".failed.ipynb"
KERNEL_STARTS = 3  # tries to start a kernel that dies before running a cell


class NotebookError(RuntimeError):
    """A notebook cell raised: ``cell_index`` (in the source notebook), ``ename``,
    ``evalue``, and ``failed_notebook`` (where the partial notebook was kept)."""

    def __init__(self, message: str, *, cell_index: int | None = None, ename: str = "",
                 evalue: str = "", failed_notebook: Path | None = None) -> None:
        super().__init__(message)
        self.cell_index, self.ename, self.evalue = cell_index, ename, evalue
        self.failed_notebook = failed_notebook


def notebook_parameters(notebook: str | os.PathLike) -> dict[str, Any]:
    """The names and default values of the notebook's ``parameters`` cell.

    A default that is not a Python literal is returned as its source text.
    """
    path = _existing_notebook(notebook)
    import papermill

    try:
        inferred = papermill.inspect_notebook(str(path))
    except Exception as exc:  # noqa: BLE001 - a file that is JSON but not a notebook
        raise ParameterError(f"notebook={str(path)!r} is invalid: it cannot be read as a "
                             f"notebook ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not inferred:
        raise ParameterError(f"notebook={str(path)!r} is invalid: it has no cell tagged "
                             "'parameters'")
    out = {}
    for name, info in inferred.items():
        try:
            out[name] = ast.literal_eval(info["default"])
        except (ValueError, SyntaxError):
            out[name] = info["default"]
    return out


def check_parameters(notebook: str | os.PathLike, parameters: Mapping[str, Any]
                     ) -> dict[str, Any]:
    """Check names and types of ``parameters`` against the notebook's defaults.

    Raises :class:`~mfgwork.core.errors.ParameterError` for an unknown name (listing the
    notebook's parameters) or a value whose type differs from the default's
    (:func:`~mfgwork.workflows.specs.coerce_parameter`: an int is accepted for a float, an
    integral float for an int; a None default accepts anything). Returns the parameters,
    converted by that rule.
    """
    return _check(notebook_parameters(notebook), parameters, Path(notebook).name)


def _check(defaults: dict[str, Any], parameters: Mapping[str, Any], notebook: str
           ) -> dict[str, Any]:
    out = {}
    for name, value in parameters.items():
        if name not in defaults:
            listing = ", ".join(f"{k}={v!r}" for k, v in defaults.items())
            raise ParameterError(f"parameter {name!r} is unknown to {notebook}: its "
                                 f"parameters are {listing}")
        out[name] = coerce_parameter(name, value, defaults[name], notebook)
    return out


def run_notebook(notebook: str | os.PathLike, parameters: Mapping[str, Any] | None,
                 out_dir: str | os.PathLike, *, kernel_name: str | None = None,
                 progress: bool = False, force: bool = False) -> Path:
    """Execute ``notebook`` with ``parameters`` into the run folder ``out_dir``; return it.

    The notebook receives ``out_dir`` as the temporary folder it must write into
    (parameters.json, metrics.json, arrays.npz, figures/). It runs in its own directory (as
    in JupyterLab), in the kernel ``kernel_name`` (default: the notebook's; one not
    installed is refused before any work), whose connection file lives in a temporary
    folder beside the target. On success the executed
    notebook is added and the folder renamed to ``out_dir``, replacing it only if it is a
    previous run folder (or an empty folder; a non-empty folder without a marker with
    ``force=True``, unless it holds a notebook or a project root); a folder holding a
    repository or another result, a folder inside another result, the current directory,
    home, the notebook's folder, their ancestors, files, links and targets this process
    could not write are refused before any work (see
    :func:`mfgwork.core.storage.check_target`). A stale
    ``<out_dir>.failed.ipynb`` (a partial notebook that an earlier run into ``out_dir`` kept
    and marked; any other file of that name is left alone) is removed. On failure nothing is
    left at ``out_dir`` and :class:`NotebookError` is raised.
    """
    require("papermill", "nbformat", extra="run", feature="running a notebook")
    path = _existing_notebook(notebook)
    protect = {path.parent: f"the folder of the notebook {path.name}"}
    target = storage.check_target(out_dir, "run", force=force, protect=protect)
    defaults = notebook_parameters(path)
    params = _check(defaults, dict(parameters or {}), path.name)
    if "out_dir" not in defaults:
        raise ParameterError(f"notebook={str(path)!r} is invalid for a run: its parameters "
                             "cell has no out_dir")
    if "out_dir" in params:
        raise ParameterError("out_dir is set by run_notebook (the run folder's temporary "
                             "name): give the run folder as its out_dir argument (-o OUT on "
                             "the command line), not as a parameter")
    check_kernel(kernel_name)
    storage.remove_stale(target)
    failed = target.with_name(target.name + FAILED_SUFFIX)
    made = [storage.temporary_sibling(target, "tmp"),
            storage.temporary_sibling(target, "running", directory=False, suffix=".ipynb"),
            storage.temporary_sibling(target, "kernel")]
    tmp, running_nb, kernel_dir = made
    try:
        storage.write_marker(tmp, "run")  # the notebook's save_run(out_dir) may replace it
        _execute(path, running_nb, params | {"out_dir": str(tmp)}, kernel_name, progress,
                 failed, kernel_dir)
        os.replace(running_nb, tmp / path.name)
        os.chmod(tmp / path.name, 0o644)
        os.chmod(tmp, 0o755)
        storage.write_marker(tmp, "run", parts=True)  # (also when the notebook wrote files)
        storage.check_target(target, "run", force=force, protect=protect)
        storage.replace_folder(tmp, target)
    finally:
        for p in made:
            storage.discard_temporary(p)
        # the kernel has ended: what its save_run(out_dir) left beside our temporary folder
        # (..<target>.tmp-<ours>.tmp-<kernel's>, owned by the kernel) is stale now
        with contextlib.suppress(OSError):   # (never in place of the run's own error)
            storage.remove_stale(target)
    if _is_partial_notebook(failed, target):
        failed.unlink(missing_ok=True)
    return target


def check_kernel(kernel_name: Any, name: str = "kernel_name") -> None:
    """Refuse a ``kernel_name`` that is neither None (the notebook's kernel) nor the name of
    an installed Jupyter kernel, listing those installed."""
    if kernel_name is None:
        return
    require("jupyter_client", extra="run", feature="running a notebook")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    manager = KernelSpecManager()
    if isinstance(kernel_name, str) and kernel_name:
        try:
            manager.get_kernel_spec(kernel_name)
            return
        except NoSuchKernel:
            pass
    installed = ", ".join(map(repr, sorted(manager.find_kernel_specs()))) or "none"
    raise ParameterError(f"{name}={kernel_name!r:.80} is invalid: must be the name of an "
                         f"installed Jupyter kernel (installed: {installed}) or, to use "
                         "the notebook's, left out")


def _execute(path: Path, output: Path, params: dict[str, Any], kernel_name: str | None,
             progress: bool, failed: Path, kernel_dir: Path) -> None:
    import papermill
    from papermill.exceptions import PapermillExecutionError
    from traitlets.config import Config

    # the kernel's connection file (ports and key) goes to kernel_dir, removed by the caller
    # and, after a killed run, by the next run to the same target
    config = Config({"KernelManager": {"connection_file": str(kernel_dir / "kernel.json")}})
    extra: dict[str, Any] = {"shutdown_kernel": "immediate",  # outputs are saved by then
                             "config": config}
    if kernel_name is None and _language(path) == "python":
        # ipykernel warns on stderr about its local TCP transport; the notebook keeps errors
        extra["extra_arguments"] = ["--IPKernelApp.log_level=ERROR"]
    if progress:   # the kernel takes seconds to start before the first cell
        print(f"{path.name}: starting a kernel", file=sys.stderr, flush=True)
    try:
        for attempt in range(1, KERNEL_STARTS + 1):
            try:
                papermill.execute_notebook(str(path), str(output), parameters=params,
                                           kernel_name=kernel_name, progress_bar=progress,
                                           cwd=str(path.parent), **extra)
                break
            except PapermillExecutionError:
                raise
            except Exception:
                # a kernel that died before its first cell (a port taken by another process
                # between jupyter_client's choice and the kernel's bind: several kernels
                # starting at once) is started again; nothing of the notebook has run
                if attempt == KERNEL_STARTS or not _no_cell_ran(output):
                    raise
                output.unlink(missing_ok=True)
                (kernel_dir / "kernel.json").unlink(missing_ok=True)
    except PapermillExecutionError as exc:
        kept = _keep(output, failed)
        index, first_line = _source_cell(path, exc.source)
        where = f"cell {index}" if index is not None else f"cell In [{exc.exec_count}]"
        evalue = strip_ansi(exc.evalue)
        raise NotebookError(f"{path.name} failed in {where} ({first_line!r}): {exc.ename}: "
                            f"{evalue} — partial notebook kept at {kept}",
                            cell_index=index, ename=exc.ename, evalue=evalue,
                            failed_notebook=kept) from None
    except Exception as exc:
        kept = _keep(output, failed)
        evalue = strip_ansi(str(exc))
        raise NotebookError(f"{path.name} could not be executed: {type(exc).__name__}: "
                            f"{evalue}" + (f" — partial notebook kept at {kept}" if kept else ""),
                            ename=type(exc).__name__, evalue=evalue,
                            failed_notebook=kept) from exc


def _no_cell_ran(output: Path) -> bool:
    """True if the notebook papermill was writing to ``output`` has no executed cell."""
    try:
        cells = storage.read_json(output).get("cells", [])
    except (OSError, ValueError):
        return not output.exists()
    return all(c.get("execution_count") is None for c in cells if c.get("cell_type") == "code")


def _language(path: Path) -> str | None:
    meta = storage.read_json(path).get("metadata", {})
    return (meta.get("kernelspec") or {}).get("language") or \
        (meta.get("language_info") or {}).get("name")


def _keep(output: Path, failed: Path) -> Path | None:
    """Move the partial notebook, marked as the partial notebook of its run folder
    (:data:`PARTIAL_KEY`), to ``failed`` (if that name holds nothing but an earlier partial
    notebook of the same run folder; else to a free name beside it)."""
    if not (output.exists() and output.stat().st_size > 0):
        return None
    stem, n = failed.name[: -len(FAILED_SUFFIX)], 1
    target = failed.with_name(stem)
    while not _is_partial_notebook(failed, target):
        n += 1
        failed = failed.with_name(f"{stem}.failed-{n}.ipynb")
    _mark_partial(output, target)
    os.chmod(output, 0o644)
    os.replace(output, failed)
    return failed


#: Notebook metadata entry of a partial notebook kept by a run: the run folder it was for.
PARTIAL_KEY = "mfgwork_partial_run"


def _mark_partial(path: Path, target: Path) -> None:
    """Record ``target`` in the notebook's metadata (:data:`PARTIAL_KEY`); a notebook that
    cannot be read as one stays unmarked (and is then never removed by a later run)."""
    import nbformat

    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return
    nb.metadata[PARTIAL_KEY] = str(target)
    nbformat.write(nb, path)


def _is_partial_notebook(path: Path, target: Path) -> bool:
    """True where nothing is, or a partial notebook that a run into ``target`` kept (its
    mark, :data:`PARTIAL_KEY`, names ``target``; a name alone proves nothing)."""
    if not os.path.lexists(path):
        return True
    try:
        return path.is_file() and not path.is_symlink() and \
            storage.read_json(path)["metadata"].get(PARTIAL_KEY) == str(target)
    except (LoadError, KeyError, TypeError, AttributeError):
        return False


def _source_cell(path: Path, source: str) -> tuple[int | None, str]:
    """Index (from 0, in the source notebook) and first non-empty line of the cell."""
    import nbformat

    lines = [ln for ln in source.splitlines() if ln.strip()]
    first = lines[0].strip() if lines else ""
    cells = nbformat.read(path, as_version=4).cells
    for i, cell in enumerate(cells):
        if cell.cell_type == "code" and cell.source.strip() == source.strip():
            return i, first
    return None, first


def _existing_notebook(notebook: str | os.PathLike) -> Path:
    """The notebook's absolute path, once it is found to be a readable regular ``.ipynb``
    file holding a JSON object with a list of cells."""
    path = Path(notebook)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ParameterError(f"notebook={str(notebook)!r} is invalid: must be an existing "
                             ".ipynb file")
    try:
        content = storage.read_json(path)
    except LoadError as exc:
        raise ParameterError(f"notebook={str(notebook)!r} is invalid: {exc.reason}") from None
    if not (isinstance(content, dict) and isinstance(content.get("cells"), list)
            and isinstance(content.get("metadata", {}), dict)):
        raise ParameterError(f"notebook={str(notebook)!r} is invalid: it is JSON but not a "
                             "notebook (no list of cells)")
    return path.absolute()


def parse_value(text: str) -> Any:
    """A command-line value as a YAML scalar (``0.6`` float, ``201`` int, ``true`` bool,
    ``cpu`` str, ``[1, 2]`` list), with ``1e-8``-style numbers read as floats: read as grid
    specs are (:func:`mfgwork.workflows.specs.load_yaml`)."""
    import yaml

    try:
        return load_yaml(text)
    except yaml.YAMLError:
        return text


def solve_options(*, nx: int, nt: int, method: str, backend: str, device: str, tol: float,
                  max_iter: int, n_particles: int | None = None, seed: int | None = None
                  ) -> dict[str, Any]:
    """Check a notebook's solver parameters before any work; return ``mw.solve`` keywords.

    ``n_particles`` and ``seed`` are passed on only for ``method="particles"``. Unavailable
    backends or devices raise :class:`~mfgwork.core.errors.BackendError` listing what is here.
    """
    from ..fdm1d import METHODS

    options = {"nx": check_int("nx", nx, low=3), "nt": check_int("nt", nt, low=1),
               "method": check_choice("method", method, METHODS),
               **dict(zip(("tol", "max_iter"), check_stopping(tol, max_iter), strict=True)),
               "backend": backend, "device": device}
    get_backend(backend, device)
    if n_particles is not None:
        n_particles = check_int("n_particles", n_particles, low=1)
    if seed is not None:
        seed = check_int("seed", seed, low=0)
    if method == "particles":
        options |= {"n_particles": n_particles, "seed": seed}
    return options


def main(notebook: str, parameters: list[tuple[str, str]], out_dir: str | None,
         kernel_name: str | None = None, force: bool = False, progress: bool = False) -> int:
    """``python -m mfgwork run``: run, print the run folder; a one-line error and exit 2 for
    bad input (nothing was run), 1 for a failing cell. ``progress``: on stderr, the start of
    the kernel, then the cells done, the elapsed and the remaining time. SIGTERM stops the
    run like Ctrl-C: the kernel and the temporaries are removed."""
    import signal

    def terminate(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    started = time.perf_counter()
    target = out_dir or str(Path("runs") / Path(notebook).stem)
    try:
        if any(name == "out_dir" for name, _ in parameters):
            raise ParameterError("-p out_dir is refused: the run sets out_dir itself (its run "
                                 "folder); give the run folder on the command line with -o OUT")
        check_kernel(kernel_name, "--kernel")
        params = {name: parse_value(value) for name, value in parameters}
        folder = run_notebook(notebook, params, target, kernel_name=kernel_name,
                              progress=progress, force=force)
    except NotebookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        # bad input that the notebook's checks refused (in the cell after its parameters,
        # before any work): exit 2, as for what this command refuses itself
        return 2 if exc.ename in ("ParameterError", "BackendError") else 1
    except (ParameterError, LoadError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"run folder: {folder}  ({time.perf_counter() - started:.1f} s)")
    return 0
