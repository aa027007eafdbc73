"""Seconds Triton spends compiling kernels in this process, so that solves report them apart.

Triton compiles a kernel at its first launch for a new specialisation (or loads the build from
its cache folder). A listener on its compilations (``triton.knobs.compilation.listener``,
Triton ≥ 3.4) adds each build's own duration to :func:`compile_clock`; loads of cached builds
add nothing. The listener is set at the first reading after Triton is imported (a solve reads
the clock when its kernels are loaded), chained to any listener already set. Solves subtract
the clock's advance from the phase it happened in and report the sum as
``timings["compile"]``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

_STATE = {"seconds": 0.0, "watching": False}


def compile_clock() -> float:
    """Seconds Triton has spent building kernels in this process so far (0.0 while Triton
    is not imported, or where it has no compilation listener)."""
    if not _STATE["watching"] and "triton" in sys.modules:
        _watch(sys.modules["triton"])
    return float(_STATE["seconds"])


def _watch(triton: Any) -> None:
    _STATE["watching"] = True
    knobs = getattr(getattr(triton, "knobs", None), "compilation", None)
    if knobs is None or not hasattr(knobs, "listener"):
        return
    previous = knobs.listener

    def listener(*, times: Any, cache_hit: bool, **kwargs: Any) -> None:
        if not cache_hit:
            _STATE["seconds"] += float(times.total) / 1e6   # (microseconds)
        if previous is not None:
            previous(times=times, cache_hit=cache_hit, **kwargs)

    knobs.listener = listener


def seconds_since(started: float, built: float) -> float:
    """The seconds since ``started`` (``time.perf_counter``) less Triton's builds since
    ``built`` (:func:`compile_clock`)."""
    return time.perf_counter() - started - (compile_clock() - built)


def book_phase(timings: dict[str, float], name: str, started: float, built: float) -> None:
    """Add the phase ``name`` to ``timings`` (and to its ``total``): :func:`seconds_since`
    ``started`` and ``built``; Triton's builds since go to ``timings["compile"]``."""
    compiled = compile_clock() - built
    timings[name] = seconds_since(started, built)
    timings["compile"] = timings.get("compile", 0.0) + compiled
    timings["total"] += timings[name] + compiled
