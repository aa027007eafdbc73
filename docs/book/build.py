"""Build the course book: every notebook executed by papermill, then rendered by Sphinx.

    python docs/book/build.py                 # make book: the notebooks at their defaults
    python docs/book/build.py --small -o DIR  # their small parameters (what the tests use)

Steps, all under the output folder (default ``build/book``):

1. ``work/notebooks/``: a copy of ``notebooks/``, the working directory of the executions, so
   that whatever a notebook writes next to itself (the demonstration sweep of the sweep
   summary, for instance) stays in the build folder;
2. ``src/``: the Sphinx sources: ``index.md`` (the README's introduction and the table of
   contents, which takes every ``notebooks/*`` page), a copy of the README, and each notebook
   executed by papermill into ``src/notebooks/`` in a fresh kernel, ``out_dir`` left empty
   (no run folder is written), or with ``--executed DIR`` the notebooks of the same names
   already executed in DIR (the tests pass their own executions: nothing runs twice);
3. ``html/``: ``sphinx-build -W`` with ``docs/book/conf.py``: myst-nb renders the executed
   notebooks without running them again; MathJax is copied into ``html/_static``.

Small parameters are the values that a notebook's ``parameters`` cell gives nbmake as mocks
(``metadata.nbmake.mock``); a notebook that declares none runs at its defaults. A failing cell
stops the build with the notebook and cell named; the partially executed notebook stays in
``src/notebooks/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mfgwork.core.ansi import strip_ansi

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "docs" / "book"
NOTEBOOKS = ROOT / "notebooks"
DEFAULT_OUT = ROOT / "build" / "book"


class BookError(RuntimeError):
    """A notebook failed to execute or Sphinx reported an error or a warning."""


def notebooks(folder: Path = NOTEBOOKS) -> list[Path]:
    """The notebooks of the book, in the order of their names (00_, 01_, ...)."""
    return sorted(folder.glob("*.ipynb"))


def small_parameters(notebook: Path) -> dict[str, Any]:
    """The nbmake mocks of the notebook's ``parameters`` cell; {} when it declares none."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            return dict(cell["metadata"].get("nbmake", {}).get("mock", {}))
    return {}


def execute(notebook: Path, target: Path, parameters: dict[str, Any], cwd: Path) -> float:
    """Run ``notebook`` in a fresh kernel in ``cwd`` into ``target``; return the seconds."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    started = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(notebook), str(target), parameters=parameters or None, cwd=str(cwd),
            progress_bar=False, shutdown_kernel="immediate",
            extra_arguments=["--IPKernelApp.log_level=ERROR"])
    except PapermillExecutionError as exc:
        raise BookError(f"{notebook.name} failed in cell In [{exc.exec_count}]: {exc.ename}: "
                        f"{strip_ansi(exc.evalue)} (partial notebook: {target})") from None
    _drop_widget_state(target)
    return time.perf_counter() - started


def take_executed(executed: Path, target: Path) -> None:
    """Copy a notebook that papermill executed without error to ``target``."""
    import nbformat

    if not executed.is_file():
        raise BookError(f"{executed} is missing: --executed needs every notebook executed")
    nb = nbformat.read(executed, as_version=4)
    papermill = nb.metadata.get("papermill")
    if papermill is None or papermill.get("exception"):
        raise BookError(f"{executed} is not a notebook that papermill executed without error")
    shutil.copy(executed, target)
    _drop_widget_state(target)


def _drop_widget_state(target: Path) -> None:
    """Widget state needs the jupyter-widgets JavaScript, which the book does not load."""
    import nbformat

    executed = nbformat.read(target, as_version=4)
    if executed.metadata.pop("widgets", None) is not None:
        nbformat.write(executed, target)


def sphinx(src: Path, html: Path) -> None:
    """Render ``src`` into ``html``; any Sphinx warning fails the build."""
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(BOOK), "-W", "--keep-going",
           "-q", "-E", str(src), str(html)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BookError(f"sphinx-build failed ({proc.returncode}):\n{proc.stderr[-4000:]}")


def build_book(out: Path = DEFAULT_OUT, *, small: bool = False, jobs: int = 1,
               executed: Path | None = None, log: Callable[[str], object] = print) -> Path:
    """Execute every notebook (``jobs`` kernels at a time; with ``executed``, take
    ``executed/NAME.ipynb`` instead) and render the book into ``out/html``; return its
    index.html."""
    out = Path(out).absolute()
    src, work, html = out / "src", out / "work", out / "html"
    for folder in (src, work, html):  # no page of a removed notebook survives
        shutil.rmtree(folder, ignore_errors=True)
    (src / "notebooks").mkdir(parents=True)
    shutil.copytree(NOTEBOOKS, work / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    shutil.copy(BOOK / "index.md", src / "index.md")
    shutil.copy(ROOT / "README.md", src / "README.md")
    started = time.perf_counter()

    def run(notebook: Path) -> str:
        if executed is not None:
            take_executed(Path(executed) / notebook.name, src / "notebooks" / notebook.name)
            return f"took {notebook.name} as executed in {executed}"
        parameters = small_parameters(notebook) if small else {}
        seconds = execute(work / "notebooks" / notebook.name, src / "notebooks" / notebook.name,
                          parameters, work / "notebooks")
        shown = ", ".join(f"{k}={v!r}" for k, v in parameters.items()) or "defaults"
        return f"executed {notebook.name} ({shown}) in {seconds:.1f} s"

    # each notebook runs in its own kernel process; the threads only wait for them
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for line in pool.map(run, notebooks()):
            log(line)
    rendered = time.perf_counter()
    sphinx(src, html)
    log(f"rendered {html} in {time.perf_counter() - rendered:.1f} s "
        f"(total {time.perf_counter() - started:.1f} s)")
    return html / "index.html"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT,
                        help=f"build folder (default: {DEFAULT_OUT.relative_to(ROOT)})")
    parser.add_argument("--small", action="store_true",
                        help="execute the notebooks at their small (nbmake mock) parameters")
    parser.add_argument("-j", "--jobs", type=int, default=1,
                        help="notebooks executed at a time (default: 1)")
    parser.add_argument("--executed", type=Path, metavar="DIR",
                        help="take the notebooks already executed in DIR (DIR/NAME.ipynb)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs={args.jobs} is invalid: it must be at least 1")
    try:
        index = build_book(args.out, small=args.small, jobs=args.jobs, executed=args.executed)
    except BookError as exc:
        print(f"book: {exc}", file=sys.stderr)
        return 1
    print(f"book: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
