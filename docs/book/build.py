"""Build the course book: every notebook executed by papermill, then rendered by Sphinx.

    python docs/book/build.py                 # make book: the notebooks at their defaults
    python docs/book/build.py --small -o DIR  # their small parameters (what the tests use)

The output folder (default ``build/book``) is a result folder of kind ``book`` (see "What a
writer replaces" in docs/book/guide/results.md and :func:`mfgwork.core.storage.check_target`):
it may be new, empty or an earlier book as it was built, which is replaced whole; a non-empty
folder without the book's marker, or a book with files added or changed since it was built,
needs ``--force``, which keeps it aside as ``NAME.replaced-TIME`` (never if it holds a
notebook, a project's sources, a repository or another result); a book is never built inside
another result; the
current directory, home, the checkout, the notebooks folder, their ancestors, files and links
are always refused, before any notebook runs. The book is built in a temporary folder beside
the target (``.NAME.tmp-PID-…``, with its owner record) and renamed to it at the end. Steps,
all under that folder:

1. ``work/notebooks/``: a copy of ``notebooks/``, the working directory of the executions, so
   that whatever a notebook writes next to itself (the demonstration sweep of the sweep
   summary, for instance) stays in the build folder;
2. ``src/``: the Sphinx sources: ``index.md`` (the README's introduction and the tables of
   contents), a copy of the README, the user guide (``guide/``), the API reference
   (``api.md``; autosummary writes a page per public name), the performance page generated
   from ``benchmarks/baselines/*.json`` (``performance.py``), and each notebook executed by
   papermill into ``src/notebooks/`` in a fresh kernel, ``out_dir`` left empty (no run folder
   is written), or with ``--executed DIR`` the notebooks of the same names already executed
   in DIR (the tests pass their own executions: nothing runs twice). With a cache folder
   (the command line's default: ``OUT-cache`` beside OUT, ``build/book-cache``
   for ``make book``; ``--no-cache`` for none) a notebook whose inputs
   (its content, its parameters, the package's version and code) match an earlier execution
   is taken from the cache instead of executed (:class:`ExecutionCache`);
3. ``html/``: ``sphinx-build -W`` with ``docs/book/conf.py``: myst-nb renders the executed
   notebooks without running them again; MathJax is copied into ``html/_static``.

Small parameters are the values that a notebook's ``parameters`` cell gives nbmake as mocks
(``metadata.nbmake.mock``); a notebook that declares none runs at its defaults. A failing cell
stops the build with the notebook and cell named; the target is left as it was and the
unfinished build is kept beside it (``.NAME.failed-PID-…``, with the partial notebook in
``src/notebooks/``) until the next build removes it (its owner record proves it a build's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
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
#: the Sphinx sources of docs/book copied into the build's src/ (conf.py is read in place)
SOURCES = ("index.md", "course.md", "api.md", "guide")
#: Folders the book never replaces (nor their ancestors), whatever the options.
PROTECT = {ROOT: "the checkout", NOTEBOOKS: "the notebooks folder"}
for _path in (ROOT, BOOK):  # (run as a script from a checkout)
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import performance  # noqa: E402  (docs/book/performance.py, beside this file)

from mfgwork.core import storage  # noqa: E402
from mfgwork.core.errors import ParameterError  # noqa: E402


class BookError(RuntimeError):
    """A notebook failed to execute or Sphinx reported an error or a warning."""


def notebooks(folder: Path | None = None) -> list[Path]:
    """The notebooks of the book (in ``folder``, default :data:`NOTEBOOKS`), in the order of
    their names (00_, 01_, ...)."""
    return sorted((folder or NOTEBOOKS).glob("*.ipynb"))


def small_parameters(notebook: Path) -> dict[str, Any]:
    """The nbmake mocks of the notebook's ``parameters`` cell; {} when it declares none."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            return dict(cell["metadata"].get("nbmake", {}).get("mock", {}))
    return {}


def package_digest() -> str:
    """SHA-256 of the package's code and data (every ``mfgwork/**/*.py`` and ``*.json``, by
    relative path and content): a change anywhere in the package executes the notebooks
    again."""
    import mfgwork

    package = Path(mfgwork.__file__).resolve().parent
    digest = hashlib.sha256(mfgwork.__version__.encode())
    for path in sorted([*package.rglob("*.py"), *package.rglob("*.json")]):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def cache_key(notebook: Path, parameters: dict[str, Any], package: str) -> str:
    """The key of one execution: the notebook's bytes, its parameters and ``package``
    (:func:`package_digest`)."""
    digest = hashlib.sha256(notebook.read_bytes())
    digest.update(json.dumps(parameters, sort_keys=True).encode())
    digest.update(package.encode())
    return digest.hexdigest()[:32]


class ExecutionCache:
    """Executed notebooks kept in ``folder`` by the key of their inputs (:func:`cache_key`).

    The folder holds ``NAME.KEY.ipynb`` files and :data:`MANIFEST`, which lists the entry of
    each notebook; a new entry replaces the notebook's previous one, and the cache removes
    only files its manifest lists. A folder that exists, is not empty and has no manifest
    (not a cache) or is a link is refused before any work.
    """

    MANIFEST = "mfgwork-book-cache.json"
    ENTRY = re.compile(r"[\w-]+\.[0-9a-f]{32}\.ipynb")

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder).absolute()
        manifest = self.folder / self.MANIFEST
        if self.folder.is_symlink() or self.folder.exists() and not self.folder.is_dir():
            raise ParameterError(f"cache={str(folder)!r} is refused: not a folder")
        if self.folder.is_dir() and any(self.folder.iterdir()) and not manifest.is_file():
            raise ParameterError(f"cache={str(folder)!r} is refused: a non-empty folder that "
                                 f"is not a book cache (no {self.MANIFEST}); choose another")
        listed = self._read_manifest(manifest) if manifest.is_file() else {}
        # only names this cache writes (no path, no link): a manifest edited to name another
        # file never makes the cache read or remove it
        self.entries: dict[str, str] = {
            name: entry for name, entry in listed.items()
            if isinstance(entry, str) and self.ENTRY.fullmatch(entry)
            and entry.startswith(Path(name).stem + ".")
            and not (self.folder / entry).is_symlink()}
        self._lock = threading.Lock()

    @staticmethod
    def _read_manifest(manifest: Path) -> dict[str, Any]:
        try:
            listed = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            listed = exc
        if not isinstance(listed, dict):
            raise ParameterError(f"cache={str(manifest.parent)!r} is refused: its manifest "
                                 f"{manifest.name} is not a JSON object ({listed}); remove the "
                                 "folder to start a new cache")
        return listed

    def get(self, name: str, key: str) -> Path | None:
        """The cached execution of notebook ``name`` under ``key``, or None."""
        entry = self.folder / f"{Path(name).stem}.{key}.ipynb"
        return entry if self.entries.get(name) == entry.name and entry.is_file() else None

    def put(self, name: str, key: str, executed: Path) -> None:
        """Keep ``executed`` as the entry of ``name`` under ``key`` (written to a temporary
        file and renamed); the previous entry of ``name`` is removed."""
        entry = f"{Path(name).stem}.{key}.ipynb"
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f".{entry}.tmp-{os.getpid()}"
            shutil.copyfile(executed, tmp)
            os.replace(tmp, self.folder / entry)
            previous, self.entries[name] = self.entries.get(name), entry
            self._write_manifest()
            if previous and previous != entry:
                (self.folder / previous).unlink(missing_ok=True)

    def _write_manifest(self) -> None:
        tmp = self.folder / f".{self.MANIFEST}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(self.entries, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.folder / self.MANIFEST)


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
    """Generate the performance page into ``src`` and render ``src`` into ``html``; any
    Sphinx warning fails the build."""
    try:
        performance.write_page(src)
    except performance.PerformanceError as exc:
        raise BookError(f"performance page: {exc}") from None
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(BOOK), "-W", "--keep-going",
           "-q", "-E", str(src), str(html)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BookError(f"sphinx-build failed ({proc.returncode}):\n{proc.stderr[-4000:]}")


def default_cache(out: str | os.PathLike) -> Path:
    """The cache folder of the command line: ``OUT-cache`` beside the output folder
    (``build/book-cache`` for ``make book``)."""
    out = Path(out).absolute()
    return out.parent / f"{out.name}-cache"


def check_out(out: str | os.PathLike, *, force: bool = False) -> Path:
    """``out`` as an absolute path if the book may be built there (see the module
    docstring); else :class:`~mfgwork.ParameterError`, before any work."""
    path = storage.check_target(out, "book", name="out", force=force, protect=PROTECT)
    if NOTEBOOKS.resolve() in path.resolve().parents:
        raise ParameterError(f"out={str(out)!r} is refused: it is inside the notebooks folder "
                             f"{NOTEBOOKS}, which the book copies; choose a folder elsewhere")
    return path


def build_book(out: str | os.PathLike = DEFAULT_OUT, *, small: bool = False, jobs: int = 1,
               force: bool = False, executed: str | os.PathLike | None = None,
               cache: str | os.PathLike | None = None,
               log: Callable[[str], object] = print) -> Path:
    """Execute every notebook (``jobs`` kernels at a time; with ``executed``, take
    ``executed/NAME.ipynb`` instead; with ``cache``, take an earlier execution of the same
    inputs from that folder) and render the book into ``out/html``; return its index.html.
    ``out`` and ``cache`` are checked first (:func:`check_out`, :class:`ExecutionCache`) and
    ``out`` is replaced whole, by one rename, when the build succeeds."""
    out = check_out(out, force=force)
    store = None if cache is None else ExecutionCache(cache)
    if store is not None and (store.folder == out or out in store.folder.parents):
        raise ParameterError(f"cache={str(cache)!r} is refused: it is inside the book's "
                             f"output {out}, which a build replaces; choose a folder beside it")
    if store is not None and NOTEBOOKS.resolve() in store.folder.resolve().parents:
        raise ParameterError(f"cache={str(cache)!r} is refused: it is inside the notebooks "
                             f"folder {NOTEBOOKS}; choose a folder elsewhere")
    with storage.atomic_folder(out, "book", name="out", force=force, protect=PROTECT) as tmp:
        try:
            _build(tmp, small, jobs, executed, log, store)
        except BookError as exc:
            failed = storage.temporary_sibling(out, "failed")
            os.replace(tmp, failed)
            raise BookError(str(exc).replace(str(tmp), str(failed))) from None
    return out / "html" / "index.html"


def copy_sources(src: Path) -> None:
    """The Sphinx sources that are not notebooks into ``src``: the pages of docs/book and the
    README (its introduction opens the index)."""
    for name in SOURCES:
        source = BOOK / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, src / name)
    shutil.copy(ROOT / "README.md", src / "README.md")


def _build(folder: Path, small: bool, jobs: int, executed: str | os.PathLike | None,
           log: Callable[[str], object], cache: ExecutionCache | None = None) -> None:
    src, work, html = folder / "src", folder / "work", folder / "html"
    (src / "notebooks").mkdir(parents=True)
    shutil.copytree(NOTEBOOKS, work / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    copy_sources(src)
    package = package_digest() if cache is not None else ""
    started = time.perf_counter()

    def run(notebook: Path) -> str:
        target = src / "notebooks" / notebook.name
        if executed is not None:
            take_executed(Path(executed) / notebook.name, target)
            return f"took {notebook.name} as executed in {executed}"
        parameters = small_parameters(notebook) if small else {}
        shown = ", ".join(f"{k}={v!r}" for k, v in parameters.items()) or "defaults"
        key = cache_key(notebook, parameters, package) if cache is not None else ""
        hit = cache.get(notebook.name, key) if cache is not None else None
        if hit is not None:
            shutil.copyfile(hit, target)
            return f"took {notebook.name} ({shown}) from the cache {cache.folder}"
        seconds = execute(work / "notebooks" / notebook.name, target, parameters,
                          work / "notebooks")
        if cache is not None:
            cache.put(notebook.name, key, target)
        return f"executed {notebook.name} ({shown}) in {seconds:.1f} s"

    # each notebook runs in its own kernel process; the threads only wait for them
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for line in pool.map(run, notebooks()):
            log(line)
    rendered = time.perf_counter()
    sphinx(src, html)
    log(f"rendered in {time.perf_counter() - rendered:.1f} s "
        f"(total {time.perf_counter() - started:.1f} s)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT,
                        help=f"build folder (default: {DEFAULT_OUT.relative_to(ROOT)})")
    parser.add_argument("--small", action="store_true",
                        help="execute the notebooks at their small (nbmake mock) parameters")
    parser.add_argument("-j", "--jobs", type=int, default=1,
                        help="notebooks executed at a time (default: 1)")
    parser.add_argument("--force", action="store_true",
                        help="replace OUT even if it is a non-empty folder that is not a book "
                             "(never one holding a notebook, a project root, a repository or "
                             "a result)")
    parser.add_argument("--executed", type=Path, metavar="DIR",
                        help="take the notebooks already executed in DIR (DIR/NAME.ipynb)")
    parser.add_argument("--cache", type=Path, metavar="DIR",
                        help="executed notebooks kept by their inputs (default: OUT-cache "
                             "beside OUT, e.g. build/book-cache)")
    parser.add_argument("--no-cache", action="store_true",
                        help="execute every notebook, neither reading nor writing the cache")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs={args.jobs} is invalid: it must be at least 1")
    if args.executed is not None and not args.executed.is_dir():
        what = "is not a folder" if args.executed.exists() else "does not exist"
        parser.error(f"--executed={str(args.executed)!r} is invalid: it {what}; it must be "
                     "the folder of the executed notebooks (DIR/NAME.ipynb)")
    try:
        index = build_book(args.out, small=args.small, jobs=args.jobs, force=args.force,
                           executed=args.executed, cache=None if args.no_cache else
                           args.cache or default_cache(args.out))
    except ParameterError as exc:
        print(f"book: error: {exc}", file=sys.stderr)
        return 2
    except BookError as exc:
        print(f"book: {exc}", file=sys.stderr)
        return 1
    print(f"book: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
