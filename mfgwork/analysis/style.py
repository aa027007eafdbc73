"""The figure style of the package: one set of fonts and sizes, readable at the width of a
book page, and axis labels that say what a symbol means ("attendance A(t)", not "A").

Every figure function of :mod:`mfgwork.analysis.plots`, :mod:`mfgwork.analysis.game_plots`
and :mod:`mfgwork.workflows.sweep_plots` is wrapped in :func:`styled`; notebooks may use
``with mpl.rc_context(STYLE):`` for their own figures.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

DPI = 110
#: matplotlib settings of every package figure (fonts in points).
STYLE: dict[str, Any] = {
    "font.size": 10.0,
    "axes.titlesize": 11.0,
    "axes.labelsize": 10.0,
    "xtick.labelsize": 9.0,
    "ytick.labelsize": 9.0,
    "legend.fontsize": 9.0,
    "legend.framealpha": 0.9,
    "figure.titlesize": 12.0,
    "lines.linewidth": 1.6,
}

#: what a state symbol means, for axis labels.
STATE_MEANING = {"θ": "preference θ", "x": "state x", "y": "state y",
                 "θ1": "preference θ1 for bar 1", "θ2": "preference θ2 for bar 2"}
TIME = "time t"

F = TypeVar("F", bound=Callable[..., Any])


def styled(fn: F) -> F:
    """Run the figure function ``fn`` under :data:`STYLE`."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from matplotlib import rc_context

        with rc_context(STYLE):
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]


def state_label(symbol: str) -> str:
    """The axis label of a state variable: its meaning and symbol."""
    return STATE_MEANING.get(symbol, f"state {symbol}")
