"""Progress bars: where they show, and which tqdm draws them.

A command-line tool shows progress on stderr only when stderr is a terminal and the user did
not ask for quiet (:func:`wanted_on_terminal`): pipes, logs and tests stay silent.
:func:`progress_bar` builds a tqdm bar: tqdm's notebook widget where ipywidgets is installed
(``tqdm.auto``, which in a terminal is the text bar anyway), else the text bar, so that a
Jupyter kernel without ipywidgets shows text instead of warning "IProgress not found".
:func:`ticking` redraws a bar every second while one long step (a run, a block of a scan)
is under way, so that its elapsed time runs.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO


def wanted_on_terminal(quiet: bool, stream: TextIO | None = None) -> bool:
    """Whether a command-line tool shows progress: not ``quiet`` (``--no-progress``) and
    ``stream`` (default: stderr) a terminal."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return not quiet and callable(isatty) and bool(isatty())


def progress_bar(**options: Any) -> Any:
    """``tqdm(**options)``: the notebook widget where ipywidgets is importable, else the text
    bar (on stderr)."""
    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm(**options)


@contextmanager
def ticking(bar: Any, interval: float = 1.0) -> Iterator[Any]:
    """``bar`` redrawn every ``interval`` seconds (its elapsed and remaining times) until the
    block ends; a disabled bar is left alone."""
    if getattr(bar, "disable", True):
        yield bar
        return
    stop = threading.Event()

    def redraw() -> None:
        while not stop.wait(interval):
            bar.refresh()

    thread = threading.Thread(target=redraw, name="progress-ticker", daemon=True)
    thread.start()
    try:
        yield bar
    finally:
        stop.set()
        thread.join()
