"""The standard figures of a solve, as functions returning a matplotlib ``Figure``.

Figures are built with the object-oriented API (``matplotlib.figure.Figure``), not pyplot:
nothing is drawn on screen, no global figure list grows in long batch runs, and the PNGs
render with Agg wherever the code runs. In a notebook, ``%matplotlib inline`` displays a
returned figure. Single-axes figures accept ``ax=`` to draw into existing axes (the figure of
those axes is returned). Arrays are converted to NumPy here, at the plotting boundary.

Conventions follow :mod:`mfgwork.problems`: ``result.M[n, i]`` is m(t_n, x_i); for the Santa
Fe Bar the state is the preference θ and A(t) = ∫_{θ>0} m(t, θ) dθ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..core import storage
from ..core.backend import to_numpy
from ..core.errors import ParameterError
from ..results import Result

DPI = 110


def _axes(ax: Axes | None, size: tuple[float, float] = (6.4, 4.0)) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    return fig, fig.add_subplot()


def _np(a: Any) -> np.ndarray:
    return np.asarray(to_numpy(a), dtype=np.float64)


def _state_label(result: Result) -> str:
    return result.state_name


def _need_attendance(result: Result, figure: str) -> np.ndarray:
    if "attendance" not in result.observables:
        raise ParameterError(f"result={type(result).__name__}(problem="
                             f"{result.params.get('problem')!r}) is invalid for {figure}: it "
                             "needs an attendance path A(t), which only Santa Fe Bar results have")
    return _np(result.attendance)


def _time_indices(result: Result, times: Sequence[float] | None) -> list[int]:
    """Indices of the time levels nearest to ``times`` (default: 5 evenly spaced in [0, T])."""
    t = _np(result.t)
    if times is None:
        times = np.linspace(t[0], t[-1], 5)
    values = [float(v) for v in np.atleast_1d(np.asarray(times, dtype=object))]
    bad = [v for v in values if not (math.isfinite(v) and t[0] <= v <= t[-1])]
    if bad or not values:
        raise ParameterError(f"times={list(times)!r} is invalid: must be a non-empty list of "
                             f"times in [{t[0]:g}, {t[-1]:g}]")
    return [int(np.argmin(np.abs(t - v))) for v in values]


def plot_density_heatmap(result: Result, ax: Axes | None = None) -> Figure:
    """m(t, θ) as a heatmap over (t, θ), with the θ = 0 line (attend above, stay home below)."""
    fig, ax = _axes(ax)
    x, t, M = _np(result.x), _np(result.t), _np(result.M)
    mesh = ax.pcolormesh(t, x, M.T, shading="nearest", cmap="viridis", rasterized=True)
    fig.colorbar(mesh, ax=ax, label="m(t, " + _state_label(result) + ")")
    if x[0] < 0.0 < x[-1]:
        ax.axhline(0.0, color="white", lw=1.0, ls="--", label=_state_label(result) + " = 0")
        ax.legend(loc="upper right", fontsize="small")
    ax.set(xlabel="t", ylabel=_state_label(result), title="Density m(t, " +
           _state_label(result) + ")")
    return fig


def equilibrium_attendance(params: Mapping[str, Any]) -> float | None:
    """The attendance where the payoff vanishes, F(A) = 0: A = A* + ε log(G / (−B)).

    Defined when G > 0 > B; ``params`` holds ``threshold`` (A*), ``eps``, ``good``, ``bad``.
    """
    try:
        good, bad = float(params["good"]), float(params["bad"])
        a_star, eps = float(params["threshold"]), float(params["eps"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (good > 0.0 > bad):
        return None
    return a_star + eps * math.log(good / -bad)


def plot_attendance(result: Result, ax: Axes | None = None) -> Figure:
    """A(t) against the threshold band A* ± ε, the threshold A* and the level where F(A) = 0."""
    A = _need_attendance(result, "plot_attendance")
    fig, ax = _axes(ax)
    t = _np(result.t)
    a_star, eps = result.params.get("threshold"), result.params.get("eps")
    if a_star is not None and eps is not None:
        ax.axhspan(a_star - eps, a_star + eps, color="tab:red", alpha=0.15,
                   label=f"threshold band A* ± ε = {a_star:g} ± {eps:g}")
    if a_star is not None:
        ax.axhline(a_star, color="tab:red", lw=1.0, label="A*")
    level = equilibrium_attendance(result.params)
    if level is not None:
        ax.axhline(level, color="k", lw=1.0, ls=":", label=f"F(A) = 0 at A = {level:.4f}")
    ax.plot(t, A, color="tab:blue", lw=2.0, label="A(t)")
    ax.set(xlabel="t", ylabel="attendance A(t)", title="Attendance", xlim=(t[0], t[-1]))
    ax.legend(loc="best", fontsize="small")
    return fig


def _snapshots(result: Result, values: np.ndarray, times: Sequence[float] | None,
               ax: Axes | None, ylabel: str, title: str) -> Figure:
    fig, ax = _axes(ax)
    x, t = _np(result.x), _np(result.t)
    idx = _time_indices(result, times)
    colors = [_cmap(k / max(len(idx) - 1, 1)) for k in range(len(idx))]
    for n, color in zip(idx, colors, strict=True):
        ax.plot(x, values[n], color=color, label=f"t = {t[n]:.3g}")
    ax.set(xlabel=_state_label(result), ylabel=ylabel, title=title)
    ax.legend(loc="best", fontsize="small")
    return fig


def _cmap(v: float) -> Any:
    from matplotlib import colormaps

    return colormaps["viridis"](0.9 * v)


def plot_density_snapshots(result: Result, times: Sequence[float] | None = None,
                           ax: Axes | None = None) -> Figure:
    """m(t, ·) at the time levels nearest to ``times`` (default: 5 evenly spaced in [0, T])."""
    s = _state_label(result)
    return _snapshots(result, _np(result.M), times, ax, f"m(t, {s})", "Density snapshots")


def plot_value_snapshots(result: Result, times: Sequence[float] | None = None,
                         ax: Axes | None = None) -> Figure:
    """u(t, ·) at the time levels nearest to ``times`` (default: 5 evenly spaced in [0, T])."""
    s = _state_label(result)
    return _snapshots(result, _np(result.U), times, ax, f"u(t, {s})", "Value function snapshots")


def plot_convergence(result: Result, ax: Axes | None = None) -> Figure:
    """Relative changes of U and M (and the fixed-point residual) per iteration, log scale."""
    fig, ax = _axes(ax)
    labels = {"change_U": "‖ΔU‖ / ‖U‖", "change_M": "‖ΔM‖ / ‖M‖", "residual": "residual"}
    for key, label in labels.items():
        values = np.asarray(result.history.get(key) or [], dtype=np.float64)
        keep = values > 0
        if keep.any():
            ax.semilogy(np.arange(1, values.size + 1)[keep], values[keep], label=label)
    tol = result.params.get("tol")
    if isinstance(tol, int | float) and tol > 0:
        ax.axhline(tol, color="k", lw=1.0, ls=":", label=f"tol = {tol:g}")
    ax.set_yscale("log")
    status = "converged" if result.converged else "not converged"
    ax.set(xlabel="iteration", ylabel="relative change",
           title=f"Convergence ({result.iterations} iterations, {status})")
    ax.legend(loc="best", fontsize="small")
    return fig


def plot_phase_portrait(result: Result, ax: Axes | None = None) -> Figure:
    """A(t) against the mean preference E[θ](t), coloured by time, with the threshold A*."""
    A = _need_attendance(result, "plot_phase_portrait")
    fig, ax = _axes(ax, size=(5.6, 4.4))
    mean, t = _np(result.mean_state), _np(result.t)
    ax.plot(mean, A, color="0.6", lw=1.0, zorder=1)
    points = ax.scatter(mean, A, c=t, s=10, cmap="viridis", zorder=2)
    fig.colorbar(points, ax=ax, label="t")
    ax.plot(mean[0], A[0], "o", color="tab:green", ms=7, label="t = 0", zorder=3)
    ax.plot(mean[-1], A[-1], "s", color="tab:red", ms=7, label="t = T", zorder=3)
    if "threshold" in result.params:
        ax.axhline(result.params["threshold"], color="tab:red", lw=1.0, ls="--", label="A*")
    ax.set(xlabel="mean preference E[θ](t)", ylabel="attendance A(t)", title="Phase portrait")
    ax.legend(loc="best", fontsize="small")
    return fig


TABLE_ERRORS = ("rel_error_U", "rel_error_M", "rel_error_A")


def plot_backend_comparison(table: Sequence[Mapping[str, Any]]) -> Figure:
    """Bar charts of a backend comparison: wall time, and relative errors (log scale).

    ``table`` is a list of rows with ``label``, ``wall_time_s`` and the relative errors
    ``rel_error_U``, ``rel_error_M``, ``rel_error_A`` (as written by
    :func:`mfgwork.analysis.studies.compare_backends`); a missing or zero error is not drawn.
    """
    rows = list(table)
    if not rows or any("label" not in r or "wall_time_s" not in r for r in rows):
        raise ParameterError(f"table={rows!r} is invalid: must be a non-empty list of rows with "
                             "'label' and 'wall_time_s' (and rel_error_U/M/A)")
    labels = [str(r["label"]) for r in rows]
    pos = np.arange(len(rows))
    fig = Figure(figsize=(10.0, 4.0), dpi=DPI, layout="constrained")
    ax_time, ax_err = fig.subplots(1, 2)
    bars = ax_time.bar(pos, [float(r["wall_time_s"]) for r in rows], color="tab:blue")
    ax_time.bar_label(bars, fmt="%.3g s", fontsize="small")
    ax_time.set_yscale("log")
    ax_time.set(xticks=pos, ylabel="wall time [s]", title="Wall time of the solve")
    ax_time.set_xticklabels(labels, rotation=15, ha="right")
    width = 0.8 / len(TABLE_ERRORS)
    for k, key in enumerate(TABLE_ERRORS):
        vals = np.array([r.get(key) or np.nan for r in rows], dtype=np.float64)
        vals[~(vals > 0)] = np.nan
        ax_err.bar(pos + (k - 1) * width, vals, width, label=key.replace("rel_error_", ""))
    if np.isfinite([r.get(k) or np.nan for r in rows for k in TABLE_ERRORS]).any():
        ax_err.set_yscale("log")
    ax_err.set(xticks=pos, ylabel="max |X − X_ref| / max |X_ref|",
               title="Relative error against the float64 reference")
    ax_err.set_xticklabels(labels, rotation=15, ha="right")
    ax_err.legend(fontsize="small")
    return fig


def plot_refinement(rows: Sequence[Mapping[str, Any]], ax: Axes | None = None) -> Figure:
    """Log–log errors of U and M against h (rows of
    :func:`mfgwork.analysis.studies.refinement_study`), with a slope-1 guide for first order."""
    if len(rows) < 2 or any(k not in r for r in rows for k in ("h", "error_U", "error_M")):
        raise ParameterError(f"rows={list(rows)!r} is invalid: must be at least two rows with "
                             "'h', 'error_U' and 'error_M'")
    fig, ax = _axes(ax, size=(5.6, 4.4))
    h = np.array([r["h"] for r in rows], dtype=np.float64)
    for key, label, marker in (("error_U", "max |U − u|", "o"), ("error_M", "max |M − m|", "s")):
        ax.loglog(h, [r[key] for r in rows], marker=marker, label=label)
    top = max(max(r["error_U"], r["error_M"]) for r in rows)
    ax.loglog(h, 1.5 * top * h / h.max(), "k:", label="slope 1 (first order)")
    ax.set(xlabel="h (with Δt = T / (nx − 1))", ylabel="error",
           title="Convergence against the exact solution")
    ax.legend(loc="best", fontsize="small")
    return fig


def plot_payoff(problem: Any, ax: Axes | None = None) -> Figure:
    """The payoff of attending F(A) for A in [0, 1] (``problem``: a
    :class:`mfgwork.SantaFeBar`), with the threshold A* and the zero F(A) = 0."""
    if not callable(getattr(problem, "payoff", None)):
        raise ParameterError(f"problem={problem!r} is invalid: plot_payoff needs a problem with "
                             "a payoff F(A), e.g. mw.SantaFeBar()")
    fig, ax = _axes(ax)
    A = np.linspace(0.0, 1.0, 501)
    ax.plot(A, problem.payoff(A), lw=2.0, label="F(A)")
    ax.axhline(0.0, color="0.5", lw=1.0)
    ax.axvline(problem.threshold, color="tab:red", lw=1.0, label="A*")
    level = equilibrium_attendance(problem.params())
    if level is not None:
        ax.axvline(level, color="k", lw=1.0, ls=":", label=f"F(A) = 0 at A = {level:.4f}")
    ax.set(xlabel="attendance A", ylabel="payoff of attending F(A)", title="Payoff")
    ax.legend(loc="best", fontsize="small")
    return fig


def standard_figures(result: Result) -> dict[str, Figure]:
    """The standard set, by file stem: heatmap, snapshots, convergence, and for Santa Fe
    also attendance and the phase portrait."""
    figures = {"density_heatmap": plot_density_heatmap(result)}
    attendance = "attendance" in result.observables
    if attendance:
        figures["attendance"] = plot_attendance(result)
    figures["density_snapshots"] = plot_density_snapshots(result)
    figures["value_snapshots"] = plot_value_snapshots(result)
    figures["convergence"] = plot_convergence(result)
    if attendance:
        figures["phase_portrait"] = plot_phase_portrait(result)
    return figures


def write_png(figures: Mapping[str, Figure], folder: str | Path, *,
              force: bool = False) -> list[Path]:
    """Save each figure as ``folder/<name>.png``, atomically; returns the paths. ``folder``
    may be new, empty or an earlier figures folder, which is replaced (see
    :func:`mfgwork.core.storage.check_target`; ``force`` for any other folder)."""
    with storage.atomic_folder(folder, "figures", name="folder", force=force) as tmp:
        for name, fig in figures.items():
            fig.savefig(tmp / f"{name}.png", dpi=DPI)
    return [Path(folder).absolute() / f"{name}.png" for name in figures]


def save_figures(result: Result, folder: str | Path, *, force: bool = False) -> list[Path]:
    """Write the standard set (:func:`standard_figures`) as PNG files into ``folder`` (see
    :func:`write_png`)."""
    return write_png(standard_figures(result), folder, force=force)
