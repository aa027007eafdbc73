"""Figures of a sweep (see :mod:`mfgwork.workflows.sweeps`), as functions returning a matplotlib
``Figure`` built without pyplot. Only finished runs are drawn; arrays come from the run
folders through :func:`mfgwork.load` (NPZ + JSON, no pickle).

For the Santa Fe Bar: mean attendance ⟨A⟩ = mean over the time levels of A(t), and the time
overcrowded = total time with A(t) > A*.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ..analysis.style import DPI, TIME, styled
from ..core.errors import ParameterError
from ..results import load
from .sweeps import SweepIndex

LABELS = {"mean_attendance": "mean attendance ⟨A⟩", "time_overcrowded": "time with A > A*",
          "iterations": "iterations (best responses)", "wall_time": "wall time per run [s]",
          "solve_time": "solve time [s]"}


def _done(index: SweepIndex, *columns: str) -> list[dict[str, Any]]:
    rows = [r for r in index if r["status"] == "done"]
    if not rows:
        raise ParameterError(f"index={index!r} has no finished run to plot")
    missing = [c for c in columns if all(r.get(c) is None for r in rows)]
    if missing:
        raise ParameterError(f"column(s) {', '.join(map(repr, missing))} are not in the sweep: "
                             f"its columns are {', '.join(index.columns)}")
    return rows


def _key(value: Any) -> tuple[int, Any]:
    """Sort numbers before strings, None last, without comparing across types."""
    if value is None:
        return (2, "")
    return (0, value) if isinstance(value, int | float) else (1, str(value))


@styled
def plot_sweep_metrics(index: SweepIndex, x: str = "threshold", by: str | None = "sigma",
                       metrics: Sequence[str] = ("mean_attendance", "time_overcrowded")
                       ) -> Figure:
    """One panel per metric against the parameter ``x``, one line per value of ``by``.
    Against the threshold, the mean-attendance panel also shows the diagonal ⟨A⟩ = A*."""
    rows = _done(index, x, *metrics, *([by] if by else []))
    fig = Figure(figsize=(5.0 * len(metrics), 3.8), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    groups = sorted({r.get(by) if by else None for r in rows}, key=_key)
    for ax, metric in zip(axes, metrics, strict=True):
        for g in groups:
            sel = sorted((r for r in rows if not by or r.get(by) == g), key=lambda r: _key(r[x]))
            pts = [(r[x], r[metric]) for r in sel if r[metric] is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", ms=3,
                        label=f"{by} = {g}" if by else None)
        if x == "threshold" and metric == "mean_attendance":
            xs = sorted(r[x] for r in rows)
            ax.plot([xs[0], xs[-1]], [xs[0], xs[-1]], color="k", lw=0.8, ls=":",
                    label="⟨A⟩ = A*")
        ax.set(xlabel=x, ylabel=LABELS.get(metric, metric), title=LABELS.get(metric, metric))
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    return fig


@styled
def plot_attendance_grid(index: SweepIndex, rows: str = "sigma", cols: str = "threshold",
                         max_cols: int = 6) -> Figure:
    """A(t) of each finished run on a grid of panels: ``rows`` × ``cols`` values (at most
    ``max_cols`` evenly picked columns), with the threshold A* dashed."""
    done = _done(index, rows, cols)
    row_vals = sorted({r[rows] for r in done}, key=_key)
    col_vals = sorted({r[cols] for r in done}, key=_key)
    if len(col_vals) > max_cols:
        col_vals = [col_vals[i] for i in np.linspace(0, len(col_vals) - 1, max_cols).round()
                    .astype(int)]
    fig = Figure(figsize=(2.4 * len(col_vals), 2.0 * len(row_vals) + 0.6), dpi=DPI,
                 layout="constrained")
    axes = fig.subplots(len(row_vals), len(col_vals), squeeze=False, sharex=True, sharey=True)
    for i, rv in enumerate(row_vals):
        for j, cv in enumerate(col_vals):
            ax = axes[i, j]
            match = [r for r in done if r[rows] == rv and r[cols] == cv]
            if match:
                res = load(index.run_folder(match[0]))
                if "attendance" in res.observables:
                    ax.plot(res.t, res.attendance, color="tab:blue", lw=1.5)
                if "threshold" in res.params:
                    ax.axhline(res.params["threshold"], color="tab:red", lw=0.8, ls="--")
            ax.set_title(f"{rows}={rv}, {cols}={cv}", fontsize="small")
            ax.set_xlabel(TIME if i == len(row_vals) - 1 else "")
            ax.set_ylabel("attendance A(t)" if j == 0 else "")
    fig.suptitle("Attendance A(t) per run (dashed: A*)")
    return fig


@styled
def plot_wall_time(index: SweepIndex, by: str = "device") -> Figure:
    """Wall time per run (kernel start and papermill included) and solve time, per value of
    ``by``: median with the range of the runs."""
    done = _done(index, "wall_time")
    groups = sorted({str(r.get(by)) for r in done})
    fig = Figure(figsize=(max(4.0, 1.6 * len(groups) + 2.0), 3.6), dpi=DPI,
                 layout="constrained")
    ax = fig.add_subplot()
    pos = np.arange(len(groups))
    for k, (col, color) in enumerate((("wall_time", "tab:blue"), ("solve_time", "tab:orange"))):
        values = [[r[col] for r in done if str(r.get(by)) == g and r.get(col) is not None]
                  for g in groups]
        med = [float(np.median(v)) if v else math.nan for v in values]
        lo = [m - min(v) if v else 0.0 for m, v in zip(med, values, strict=True)]
        hi = [max(v) - m if v else 0.0 for m, v in zip(med, values, strict=True)]
        ax.bar(pos + (k - 0.5) * 0.38, med, width=0.38, color=color, yerr=[lo, hi],
               capsize=3, label=LABELS[col])
    ax.set_xticks(pos, groups)
    ax.set(xlabel=by, ylabel="time per run [s]", title="Time per run (median, range)")
    ax.legend()
    return fig
