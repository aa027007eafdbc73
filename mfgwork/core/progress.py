"""Progress bars: where they show, and which tqdm draws them.

A command-line tool shows progress on stderr only when stderr is a terminal and the user did
not ask for quiet (:func:`wanted_on_terminal`): pipes, logs and tests stay silent.
:func:`progress_bar` builds a tqdm bar: tqdm's notebook widget where ipywidgets is installed
(``tqdm.auto``, which in a terminal is the text bar anyway), else the text bar, so that a
Jupyter kernel without ipywidgets shows text instead of warning "IProgress not found".
:func:`delayed_bar` is a bar shown only once a run has lasted a while: it builds its tqdm bar
at the first update after its delay, so that a short solve pays for no bar at all.
:func:`ticking` redraws a bar every second while one long step (a run, a block of a scan)
is under way, so that its elapsed time runs.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import threading
import time
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
    if _widgets_importable():
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm(**options)


@functools.cache
def _widgets_importable() -> bool:
    """Whether ipywidgets can be imported (looked up once per process)."""
    return importlib.util.find_spec("ipywidgets") is not None


class DelayedBar:
    """A progress bar shown once ``delay`` seconds have passed: its tqdm bar
    (:func:`progress_bar` of ``options``) is built at the first :meth:`update` after the
    delay, with the count, postfix and start time so far. Before that it is only a count."""

    def __init__(self, delay: float, **options: Any) -> None:
        self.n, self._delay, self._options = 0, delay, options
        self._started, self._postfix, self._bar = time.time(), {}, None

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
        elif time.time() - self._started >= self._delay:
            self._bar = progress_bar(initial=self.n, **self._options)
            self._bar.start_t = self._started   # (tqdm's clock: time.time)
            if self._postfix:
                self._bar.set_postfix(self._postfix, refresh=False)
            self._bar.refresh()

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any
                    ) -> None:
        self._postfix = dict(ordered_dict or {}, **kwargs)
        if self._bar is not None:
            self._bar.set_postfix(self._postfix, refresh=refresh)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def delayed_bar(delay: float, **options: Any) -> Any:
    """A bar of ``options`` shown after ``delay`` seconds (:class:`DelayedBar`), or at once
    when ``delay`` is 0 (:func:`progress_bar`)."""
    return DelayedBar(delay, **options) if delay > 0 else progress_bar(**options)


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
