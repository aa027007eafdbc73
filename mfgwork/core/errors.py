"""Exceptions and warnings, and the checks that raise them before any heavy work."""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable
from numbers import Integral, Real
from pathlib import Path
from typing import Any

#: Largest count (grid points, particles, players, samples) accepted: the integers float64
#: holds exactly, far beyond any memory.
MAX_COUNT = 2**53


class ParameterError(ValueError):
    """A parameter has the wrong type or a value outside its allowed range."""


class BackendError(ValueError):
    """An unknown or unavailable backend, device or dtype."""


class SolverError(RuntimeError):
    """A solver produced non-finite values or could not proceed."""


class LoadError(ValueError):
    """A file could not be loaded: missing, unreadable, corrupt, too large, or not holding
    what it should. ``path`` is the file, ``reason`` what is wrong with it."""

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


class ConvergenceWarning(UserWarning):
    """The fixed-point iteration stopped at ``max_iter`` without reaching ``tol``."""


#: The package's folder: frames of files below it are the package's own.
PACKAGE = str(Path(__file__).resolve().parents[1]) + "/"


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first caller outside the package (the notebook
    cell or the script line that called mfgwork), however deep inside it the warning is
    raised: that line is what a reader sees, and the default filter's "once per
    location" then holds per line of the user's code."""
    frame, level = sys._getframe(1), 2   # (stacklevel 2: the caller of this function)
    while frame is not None and frame.f_code.co_filename.startswith(PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


class ResolutionWarning(UserWarning):
    """The grid is too coarse for the problem's features (its initial density, threshold,
    doors or obstacles): the solution is the equilibrium of the coarse scheme only."""


def _describe(value: object) -> str:
    plain = isinstance(value, Real) and not isinstance(value, bool)
    return short_repr(value) if plain else f"{short_repr(value)} ({type(value).__name__})"


def check_real(name: str, value: object, *, low: float | None = None,
               high: float | None = None, low_open: bool = True,
               high_open: bool = True) -> float:
    """Return ``value`` as a float if it is a finite real number inside the given bounds."""
    def allowed() -> str:   # (the message, built only for a refusal)
        bounds = []
        if low is not None:
            bounds.append(f"{'>' if low_open else '>='} {low:g}")
        if high is not None:
            bounds.append(f"{'<' if high_open else '<='} {high:g}")
        return "a finite real number" + (" " + " and ".join(bounds) if bounds else "")

    v = value
    if type(v) is not float:   # (a float needs neither the ABC's look-up nor a cast)
        if isinstance(value, bool) or not isinstance(value, Real):
            raise ParameterError(f"{name}={_describe(value)} is invalid: must be {allowed()}")
        try:
            v = float(value)
        except OverflowError:  # an integer beyond the range of float64
            raise ParameterError(f"{name}={short_repr(value)} is invalid: must be {allowed()} "
                                 "(it is beyond the range of float64)") from None
    ok = math.isfinite(v)
    if ok and low is not None:
        ok = v > low if low_open else v >= low
    if ok and high is not None:
        ok = v < high if high_open else v <= high
    if not ok:
        raise ParameterError(f"{name}={v!r} is invalid: must be {allowed()}")
    return v


def check_int(name: str, value: object, *, low: int, high: int | None = None) -> int:
    """Return ``value`` as an int if it is an integer ``>= low`` (and ``<= high``)."""
    allowed = f"an integer >= {low}" + (f" and <= {high}" if high is not None else "")
    if isinstance(value, bool) or not isinstance(value, Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ParameterError(f"{name}={_describe(value)} is invalid: must be {allowed}")
    if value < low or (high is not None and value > high):
        raise ParameterError(f"{name}={short_repr(value)} is invalid: must be {allowed}")
    return int(value)


def check_flag(name: str, value: object, *, optional: bool = False) -> bool | None:
    """Return ``value`` if it is True or False (or None when ``optional``)."""
    if value is True or value is False or (optional and value is None):
        return value
    allowed = "True, False or None" if optional else "True or False"
    raise ParameterError(f"{name}={_describe(value)} is invalid: must be {allowed}")


def short_repr(value: object) -> str:
    """``repr(value)`` shortened for a message: huge integers by their digits, else cut."""
    text = repr(value)
    if len(text) <= 60:
        return text
    return f"{text[:12]}...({len(text)} digits)" if isinstance(value, int) else text[:57] + "..."


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        shown = repr(value) if isinstance(value, str) else _describe(value)
        raise ParameterError(f"{name}={shown} is invalid: must be one of "
                             f"{', '.join(map(repr, choices))}")
    return value


def check_list(name: str, value: object, check: Callable[..., Any], *, min_len: int = 1,
               max_len: int | None = None, distinct: bool = False, **bounds: Any
               ) -> list[Any]:
    """Return ``value`` as a list if it is a list (or tuple) of ``min_len`` to ``max_len``
    items each accepted by ``check(f"{name}[i]", item, **bounds)`` (e.g. :func:`check_int`
    or :func:`check_real` and their bounds), the items converted by ``check``; with
    ``distinct``, no item twice."""
    if isinstance(value, list | tuple) and len(value) >= min_len and (
            max_len is None or len(value) <= max_len):
        items = [check(f"{name}[{i}]", item, **bounds) for i, item in enumerate(value)]
        for i, item in enumerate(items):
            if distinct and item in items[:i]:
                raise ParameterError(f"{name}[{i}]={short_repr(item)} is invalid: {name} must "
                                     "not list a value twice")
        return items
    if min_len == max_len:
        allowed = f"a list of exactly {min_len} item{'s' if min_len != 1 else ''}"
    else:
        allowed = ("a non-empty list" if min_len == 1 else "a list" if min_len <= 0
                   else f"a list of at least {min_len} items")
        allowed += f" of at most {max_len} items" if max_len is not None else ""
    raise ParameterError(f"{name}={_describe(value)} is invalid: must be {allowed}")
