"""The standard figures of a solve, as functions returning a matplotlib ``Figure``.

Figures are built with the object-oriented API (``matplotlib.figure.Figure``), not pyplot:
nothing is drawn on screen, no global figure list grows in long batch runs, and the PNGs
render with Agg wherever the code runs. In a notebook, ``%matplotlib inline`` displays a
returned figure. Single-axes figures accept ``ax=`` to draw into existing axes (the figure of
those axes is returned). Arrays are converted to NumPy here, at the plotting boundary.

Conventions follow :mod:`mfgwork.problems`: ``result.M[n, i]`` is m(t_n, x_i); for the Santa
Fe Bar the state is the preference θ and A(t) = ∫_{θ>0} m(t, θ) dθ. Every figure is drawn in
the package style (:mod:`mfgwork.analysis.style`); :func:`write_figures` writes PNG and PDF.
A function refuses a result of a kind it does not draw (:data:`FIGURES`) or an array it draws
without a finite value, with a :class:`~mfgwork.ParameterError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..core import storage
from ..core.backend import to_numpy
from ..core.errors import ParameterError
from ..core.figures import save_figure
from ..results import Result, check_figures
from ..results2d import Result2D
from .style import DPI, TIME, state_label, styled

__all__ = ["DPI", "SCHEME_NAMES", "describe_iteration", "equilibrium_attendance",
           "plot_attendance", "plot_attendance_fan", "plot_backend_comparison", "plot_convergence",
           "plot_density_heatmap", "plot_density_snapshots", "plot_payoff",
           "plot_phase_portrait", "plot_refinement", "plot_value_snapshots", "save_figures",
           "standard_figures", "write_figures"]
PAYOFF = "F(A): payoff of going at attendance A"


def figure_axes(ax: Axes | None, size: tuple[float, float] = (6.4, 4.0)) -> tuple[Figure, Axes]:
    """``ax`` and its figure, or a new figure of ``size`` inches (house DPI) and its axes."""
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    return fig, fig.add_subplot()


def host_float64(a: Any) -> np.ndarray:
    """``a`` (any backend's array) as a float64 NumPy array."""
    return np.asarray(to_numpy(a), dtype=np.float64)


def _state_label(result: Result) -> str:
    return state_label(result.state_name)


def _path(result: Result, name: str, dims: tuple[str, ...] = ("t",)) -> bool:
    """Whether ``result`` observes the path ``name`` along the axes ``dims``."""
    return name in result.observables and result.observable_dims(name) == dims


def _one_density(result: Result) -> bool:
    return result.dims == ("t", result.state_name)


def _any(result: Result) -> bool:
    return True


_DENSITY = ("of one density over time and a 1-D state, dims ('t', state) (2-D results: "
            "mw.plots2d; several populations or scenarios: their attendance figures)")
_SANTA_FE = "of shape (nt+1,), as Santa Fe Bar results have"
#: function → (what it draws, whether a result's kind is one it draws, the arrays it draws),
#: checked by :func:`_require`.
FIGURES: dict[str, tuple[str, Callable[[Result], bool], tuple[str, ...]]] = {
    "plot_density_heatmap": (f"draws m(t, x) as a heatmap {_DENSITY}", _one_density, ("M",)),
    "plot_attendance": (f"draws an attendance path A(t) {_SANTA_FE}",
                        lambda r: _path(r, "attendance"), ("attendance",)),
    "plot_attendance_fan": ("draws the attendance of every scenario of a common-noise result "
                            "(solve an mw.CommonNoise)",
                            lambda r: "probability" in r.arrays
                            and _path(r, "attendance", ("scenario", "t")), ("attendance",)),
    "plot_density_snapshots": (f"draws m(t, ·) at some times {_DENSITY}", _one_density, ("M",)),
    "plot_value_snapshots": (f"draws u(t, ·) at some times {_DENSITY}", _one_density, ("U",)),
    "plot_convergence": ("draws the residual history of a solve", _any, ()),
    "plot_phase_portrait": (f"draws the attendance path against the mean_state path, each "
                            f"{_SANTA_FE}",
                            lambda r: _path(r, "attendance") and _path(r, "mean_state"),
                            ("attendance", "mean_state")),
    "describe_iteration": ("describes the iteration that solved a result", _any, ()),
    "standard_figures": ("draws the figures of a 1-D result (2-D results: "
                         "mw.plots2d.standard_figures_2d)",
                         lambda r: not isinstance(r, Result2D), ()),
}


def check_result(result: Any, figure: str, what: str, fits: Callable[[Result], bool],
                 arrays: Sequence[str] = (), name: str = "result") -> None:
    """Refuse (:class:`~mfgwork.ParameterError`) as the argument ``name`` of ``figure``, which
    ``what``: anything but a :class:`~mfgwork.Result` of a kind that ``fits``, or one with
    no finite value in one of the ``arrays`` drawn."""
    if not isinstance(result, Result):
        raise ParameterError(f"{name}={result!r:.80} is invalid for {figure}: it takes an "
                             f"mw.Result (from mw.solve or mw.load) and {what}")
    described = (f"{name}={type(result).__name__}(problem={result.params.get('problem')!r}, "
                 f"dims={result.dims!r})")
    if not fits(result):
        raise ParameterError(f"{described} is invalid for {figure}: it {what}")
    for array in arrays:
        if not np.isfinite(np.asarray(to_numpy(getattr(result, array)))).any():  # (no copy)
            raise ParameterError(f"{described} is invalid for {figure}: its {array} has no "
                                 "finite value (all NaN or infinite): it draws finite values")


def _require(result: Any, figure: str) -> None:
    """:func:`check_result` for ``figure``, a function of this module (:data:`FIGURES`)."""
    check_result(result, figure, *FIGURES[figure])


def time_indices(result: Result, times: Sequence[float] | None) -> list[int]:
    """Indices of the time levels nearest to ``times`` (default: 5 evenly spaced in [0, T])."""
    t = host_float64(result.t)
    if times is None:
        times = np.linspace(t[0], t[-1], 5)
    values = [float(v) for v in np.atleast_1d(np.asarray(times, dtype=object))]
    bad = [v for v in values if not (math.isfinite(v) and t[0] <= v <= t[-1])]
    if bad or not values:
        raise ParameterError(f"times={list(times)!r} is invalid: must be a non-empty list of "
                             f"times in [{t[0]:g}, {t[-1]:g}]")
    return [int(np.argmin(np.abs(t - v))) for v in values]


@styled
def plot_density_heatmap(result: Result, ax: Axes | None = None) -> Figure:
    """m(t, θ) as a heatmap over (t, θ), with the θ = 0 line (attend above, stay home below).
    Each node fills its control volume, cut at the domain's walls and at 0 and T, so the
    heatmap spans the domain exactly."""
    _require(result, "plot_density_heatmap")
    fig, ax = figure_axes(ax)
    x, t, M = host_float64(result.x), host_float64(result.t), host_float64(result.M)
    s = result.state_name
    mesh = ax.pcolormesh(_cell_edges(t), _cell_edges(x), M.T, shading="flat", cmap="viridis",
                         rasterized=True)
    fig.colorbar(mesh, ax=ax, label=f"density m(t, {s})")
    if x[0] < 0.0 < x[-1]:
        ax.axhline(0.0, color="white", lw=1.0, ls="--", label=f"{s} = 0")
        ax.legend(loc="upper right")
    ax.set(xlabel=TIME, ylabel=_state_label(result), title=f"Density m(t, {s})")
    return fig


def _cell_edges(nodes: np.ndarray) -> np.ndarray:
    """The edges of the nodes' control volumes: midpoints inside, the end nodes at the ends."""
    return np.concatenate([nodes[:1], (nodes[1:] + nodes[:-1]) / 2, nodes[-1:]])


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


@styled
def plot_attendance(result: Result, ax: Axes | None = None) -> Figure:
    """A(t) against the threshold band A* ± ε, the threshold A* and the level where the payoff
    of going F(A) vanishes; the legend sits below the axes, off the curve."""
    _require(result, "plot_attendance")
    A = host_float64(result.attendance)
    fig, ax = figure_axes(ax)
    t = host_float64(result.t)
    a_star, eps = result.params.get("threshold"), result.params.get("eps")
    if a_star is not None and eps is not None:
        ax.axhspan(a_star - eps, a_star + eps, color="tab:red", alpha=0.15,
                   label=f"band A* ± ε = {a_star:g} ± {eps:g}")
    if a_star is not None:
        ax.axhline(a_star, color="tab:red", lw=1.0, label="threshold A*")
    level = equilibrium_attendance(result.params)
    if level is not None:
        ax.axhline(level, color="k", lw=1.0, ls=":",
                   label=f"F(A) = 0 at A = {level:.4f}")
    ax.plot(t, A, color="tab:blue", lw=2.0, label="A(t)")
    ax.set(xlabel=TIME, ylabel="attendance A(t)", title="Attendance", xlim=(t[0], t[-1]))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2,
              title=PAYOFF if level is not None else None, title_fontsize="small")
    return fig


def plot_attendance_fan(result: Result, ax: Axes | None = None,
                        band: tuple[float, float] = (0.1, 0.9)) -> Figure:
    """The attendance of every scenario of a common-noise result (``mw.CommonNoise``), each
    line as opaque as the scenario is likely, the band between the quantiles ``band`` of the
    scenarios' law at each time, the expected attendance, and the epochs' starts (where the
    noise state is revealed)."""
    _require(result, "plot_attendance_fan")
    A = host_float64(result.attendance)
    p = host_float64(result.arrays["probability"])
    t = host_float64(result.t)
    fig, ax = figure_axes(ax)
    for path, weight in zip(A, p / p.max(), strict=True):
        ax.plot(t, path, color="tab:blue", lw=0.8, alpha=0.1 + 0.6 * weight)
    low, high = weighted_quantiles(A, p, band)
    ax.fill_between(t, low, high, color="tab:blue", alpha=0.2,
                    label=f"{band[0]:.0%}–{band[1]:.0%} of the scenarios' law")
    ax.plot(t, p @ A, color="k", lw=2.0, label="expected attendance")
    for start in host_float64(result.t)[:: (t.size - 1) // len(result.labels["epoch"])][1:-1]:
        ax.axvline(start, color="0.5", lw=0.8, ls=":")
    a_star = result.params.get("model", {}).get("threshold")
    if a_star is not None:
        ax.axhline(a_star, color="tab:red", lw=1.0, label="threshold A*")
    ax.set(xlabel=TIME, ylabel="attendance A(t)", xlim=(t[0], t[-1]),
           title=f"Attendance over {A.shape[0]} scenarios")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2)
    return fig


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, levels: Sequence[float]
                       ) -> list[np.ndarray]:
    """The quantiles ``levels`` at each column of ``values`` (scenarios, times) under the law
    ``weights`` (scenarios,): the smallest value whose cumulative weight reaches the level."""
    order = np.argsort(values, axis=0)
    sorted_values = np.take_along_axis(values, order, axis=0)
    cumulative = np.cumsum(weights[order], axis=0) / np.sum(weights)
    return [np.take_along_axis(sorted_values, np.argmax(cumulative >= q - 1e-12, axis=0)[None],
                               axis=0)[0] for q in levels]


def _snapshots(result: Result, values: np.ndarray, times: Sequence[float] | None,
               ax: Axes | None, ylabel: str, title: str) -> Figure:
    fig, ax = figure_axes(ax)
    x, t = host_float64(result.x), host_float64(result.t)
    idx = time_indices(result, times)
    colors = [_cmap(k / max(len(idx) - 1, 1)) for k in range(len(idx))]
    for n, color in zip(idx, colors, strict=True):
        ax.plot(x, values[n], color=color, label=f"t = {t[n]:.3g}")
    ax.set(xlabel=_state_label(result), ylabel=ylabel, title=title)
    ax.legend(loc="best")
    return fig


def _cmap(v: float) -> Any:
    from matplotlib import colormaps

    return colormaps["viridis"](0.9 * v)


@styled
def plot_density_snapshots(result: Result, times: Sequence[float] | None = None,
                           ax: Axes | None = None) -> Figure:
    """m(t, ·) at the time levels nearest to ``times`` (default: 5 evenly spaced in [0, T])."""
    _require(result, "plot_density_snapshots")
    s = result.state_name
    return _snapshots(result, host_float64(result.M), times, ax, f"density m(t, {s})",
                      "Density snapshots")


@styled
def plot_value_snapshots(result: Result, times: Sequence[float] | None = None,
                         ax: Axes | None = None) -> Figure:
    """u(t, ·) at the time levels nearest to ``times`` (default: 5 evenly spaced in [0, T])."""
    _require(result, "plot_value_snapshots")
    s = result.state_name
    return _snapshots(result, host_float64(result.U), times, ax, f"value (cost to go) u(t, {s})",
                      "Value function snapshots")


#: How figures and notebooks name each iteration scheme (``Result.scheme``).
SCHEME_NAMES = {"newton": "Newton's method on the coupling state",
                "anderson": "Anderson mixing", "relaxation": "damped Picard iteration",
                "fictitious_play": "fictitious play"}


def describe_iteration(result: Result) -> str:
    """The iteration that solved ``result``, in words, from what the result records
    (:attr:`~mfgwork.Result.scheme` and its settings; plain Picard for relaxation with
    ω = 1; "then Newton's method as fallback" where a fallback took steps), never from a
    default assumed here."""
    _require(result, "describe_iteration")
    scheme = result.scheme
    if scheme is None:
        return "the solver's fixed-point iteration"
    described = result.params.get("iteration") or result.extra.get("iteration") or {}
    if scheme == "relaxation" and described.get("omega") == 1.0:
        return "Picard iteration"
    text = SCHEME_NAMES.get(scheme, scheme)
    n = len(result.history.get("residual") or [])
    if scheme != "newton" and _newton_steps(result.history, n).any():
        text += ", then Newton's method as fallback"
    return text


@styled
def plot_convergence(result: Result, ax: Axes | None = None, changes: bool = False) -> Figure:
    """The fixed-point residual per iteration on a log scale, with ``tol`` and the phases.

    The residual r(z) = ‖Φ(z) − z‖ / ‖Φ(z)‖ decides convergence. Two series: the residual
    of each new iterate z_k of the iteration that solved the result (named in the legend by
    :func:`describe_iteration`), and the *certificates* (``history["certificate"]``): the
    residual of the densities an iterate gives, Φ evaluated once more, which is what the
    solve returns and what must be ≤ ``tol`` (an iterate below ``tol`` is not yet a
    solution: the solve goes on to certify it, and past a refused certificate, iterates
    closer still). Steps of a Newton fallback (no HJB or FP time of their own) are shaded
    where there are any. The star is the certified residual of the returned solution
    (``result.residual``), which converged means is ≤ ``tol`` (dotted line). ``changes``:
    also the relative changes of U and M between iterates (grey, dashed), which stop
    nothing. Zero or non-finite values are left out (a log axis cannot show them).
    """
    _require(result, "plot_convergence")
    fig, ax = figure_axes(ax)
    history = result.history
    residual = _series(history, "residual")
    k = np.arange(1, residual.size + 1)
    certificate = _certificates(history, residual.size)
    newton = _newton_steps(history, residual.size)
    _semilogy(ax, k, residual, color="0.75", lw=0.8, zorder=1)
    _semilogy(ax, k[~certificate], residual[~certificate], color="tab:blue", marker=".",
              ls="none", label=f"residual of the iterate ({describe_iteration(result)})")
    if certificate.any():
        _semilogy(ax, k[certificate], residual[certificate], color="tab:orange", marker="D",
                  ms=5, ls="none", label="certificate: residual of the iterate's densities")
    if newton.any():
        ax.axvspan(k[newton][0] - 0.5, k[newton][-1] + 0.5, color="tab:purple", alpha=0.08,
                   label="Newton steps (fallback)")
    if changes:
        for key, style in (("change_U", "--"), ("change_M", ":")):
            values = _series(history, key)
            _semilogy(ax, np.arange(1, values.size + 1), values, color="0.5", ls=style,
                      label=f"‖Δ{key[-1]}‖ / ‖{key[-1]}‖ between iterates")
    tol = result.params.get("tol")
    if isinstance(tol, int | float) and tol > 0:
        ax.axhline(tol, color="k", lw=1.0, ls=":", label=f"tol = {tol:g}")
    certified = result.residual
    if certified is not None and math.isfinite(certified) and certified > 0:
        at = min(max(int(result.iterations), 1), max(residual.size, 1))
        ax.plot([at], [certified], marker="*", ms=12, color="tab:red", ls="none",
                label=f"certified residual of the result: {certified:.2g}")
    ax.set_yscale("log")
    ax.set(xlabel="iteration k", title=_convergence_title(result, tol),
           ylabel="relative residual or change" if changes else
           "residual ‖Φ(z) − z‖ / ‖Φ(z)‖")
    ax.legend(loc="best")
    return fig


def _certificates(history: Mapping[str, Any], n: int) -> np.ndarray:
    """Which iterations certified densities (``history["certificate"]``; none where the
    solver did not record it)."""
    flags = np.asarray(history.get("certificate") or [], dtype=bool)
    return flags if flags.size == n else np.zeros(n, dtype=bool)


def _series(history: Mapping[str, Any], key: str) -> np.ndarray:
    return np.asarray(history.get(key) or [], dtype=np.float64)


def _semilogy(ax: Axes, k: np.ndarray, values: np.ndarray, **style: Any) -> None:
    """Plot the positive, finite values only."""
    keep = np.isfinite(values) & (values > 0)
    if keep.any():
        ax.plot(k[keep], values[keep], **style)


def _newton_steps(history: Mapping[str, Any], n: int) -> np.ndarray:
    """Which iterations were Newton steps of the fallback: they record no HJB or FP time,
    only a coupling time (see :class:`mfgwork.numerics.iteration.History`)."""
    hjb, fp, coupling = (_series(history, key) for key in ("time_hjb", "time_fp",
                                                           "time_coupling"))
    if not hjb.size == fp.size == coupling.size == n:
        return np.zeros(n, dtype=bool)
    return (hjb == 0.0) & (fp == 0.0) & (coupling > 0.0)


def _convergence_title(result: Result, tol: Any) -> str:
    iterations = f"{result.iterations} iterations"
    certified = result.residual
    if certified is None or not math.isfinite(certified):
        return f"Convergence ({iterations}; no certified residual)"
    if result.converged and isinstance(tol, int | float) and certified <= tol:
        return f"Converged in {iterations}: residual {certified:.1e} ≤ tol"
    return f"Not converged after {iterations}: residual {certified:.1e}"


@styled
def plot_phase_portrait(result: Result, ax: Axes | None = None) -> Figure:
    """A(t) against the mean preference E[θ](t), coloured by time, with the threshold A*."""
    _require(result, "plot_phase_portrait")
    A = host_float64(result.attendance)
    fig, ax = figure_axes(ax, size=(5.6, 4.4))
    mean, t = host_float64(result.mean_state), host_float64(result.t)
    ax.plot(mean, A, color="0.6", lw=1.0, zorder=1)
    points = ax.scatter(mean, A, c=t, s=10, cmap="viridis", zorder=2)
    fig.colorbar(points, ax=ax, label=TIME)
    ax.plot(mean[0], A[0], "o", color="tab:green", ms=7, label="t = 0", zorder=3)
    ax.plot(mean[-1], A[-1], "s", color="tab:red", ms=7, label="t = T", zorder=3)
    if "threshold" in result.params:
        ax.axhline(result.params["threshold"], color="tab:red", lw=1.0, ls="--",
                   label="threshold A*")
    ax.set(xlabel="mean preference E[θ](t)", ylabel="attendance A(t)", title="Phase portrait")
    ax.legend(loc="best")
    return fig


TABLE_ERRORS = ("rel_error_U", "rel_error_M", "rel_error_A")


@styled
def plot_backend_comparison(table: Sequence[Mapping[str, Any]]) -> Figure:
    """Points of a backend comparison: wall time, and relative errors (log scales).

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
    times = [float(r["wall_time_s"]) for r in rows]
    ax_time.plot(pos, times, "o", ms=8, color="tab:blue")
    for x, y in zip(pos, times, strict=True):
        ax_time.annotate(f"{y:.3g} s", (x, y), textcoords="offset points", xytext=(8, 0),
                         va="center", fontsize="small")
    ax_time.set_yscale("log")
    ax_time.set(xticks=pos, xlim=(-0.5, len(rows) - 0.3), ylabel="wall time of one solve [s]",
                xlabel="backend, device, dtype", title="Wall time of the solve")
    ax_time.set_xticklabels(labels, rotation=15, ha="right")
    for k, (key, marker) in enumerate(zip(TABLE_ERRORS, "osD", strict=True)):
        vals = np.array([r.get(key) or np.nan for r in rows], dtype=np.float64)
        vals[~(vals > 0)] = np.nan
        ax_err.plot(pos + (k - 1) * 0.12, vals, marker, ms=7, ls="none",
                    label=f"e_{key.replace('rel_error_', '')}")
    if np.isfinite([r.get(k) or np.nan for r in rows for k in TABLE_ERRORS]).any():
        ax_err.set_yscale("log")
    ax_err.set(xticks=pos, xlim=(-0.5, len(rows) - 0.5), xlabel="backend, device, dtype",
               ylabel="relative error e_X = max |X − X_ref| / max |X_ref|",
               title="Relative error against the float64 reference")
    ax_err.set_xticklabels(labels, rotation=15, ha="right")
    ax_err.legend(title="X = U, M, A")
    return fig


@styled
def plot_refinement(rows: Sequence[Mapping[str, Any]], ax: Axes | None = None) -> Figure:
    """Log–log errors of U and M against h (rows of
    :func:`mfgwork.analysis.studies.refinement_study`), with a slope-1 guide for first order."""
    if len(rows) < 2 or any(k not in r for r in rows for k in ("h", "error_U", "error_M")):
        raise ParameterError(f"rows={list(rows)!r} is invalid: must be at least two rows with "
                             "'h', 'error_U' and 'error_M'")
    fig, ax = figure_axes(ax, size=(5.6, 4.4))
    h = np.array([r["h"] for r in rows], dtype=np.float64)
    for key, label, marker in (("error_U", "max |U − u|", "o"), ("error_M", "max |M − m|", "s")):
        ax.loglog(h, [r[key] for r in rows], marker=marker, label=label)
    top = max(max(r["error_U"], r["error_M"]) for r in rows)
    ax.loglog(h, 1.5 * top * h / h.max(), "k:", label="slope 1 (first order)")
    ax.set(xlabel="grid step h (with Δt = T / (nx − 1))",
           ylabel="error against the exact solution", title="Convergence of the scheme")
    ax.legend(loc="best")
    return fig


@styled
def plot_payoff(problem: Any, ax: Axes | None = None) -> Figure:
    """The payoff of attending F(A) for A in [0, 1] (``problem``: a
    :class:`mfgwork.SantaFeBar`), with the threshold A* and the zero F(A) = 0."""
    if not callable(getattr(problem, "payoff", None)):
        raise ParameterError(f"problem={problem!r} is invalid: plot_payoff needs a problem with "
                             "a payoff F(A), e.g. mw.SantaFeBar()")
    fig, ax = figure_axes(ax)
    A = np.linspace(0.0, 1.0, 501)
    ax.plot(A, problem.payoff(A), lw=2.0, label="F(A)")
    ax.axhline(0.0, color="0.5", lw=1.0)
    ax.axvline(problem.threshold, color="tab:red", lw=1.0, label="threshold A*")
    level = equilibrium_attendance(problem.params())
    if level is not None:
        ax.axvline(level, color="k", lw=1.0, ls=":", label=f"F(A) = 0 at A = {level:.4f}")
    ax.set(xlabel="attendance A", ylabel="payoff of going F(A)", title="Payoff of going")
    ax.legend(loc="best")
    return fig


#: The standard set of :func:`standard_figures`, in order.
STANDARD = (plot_density_heatmap, plot_attendance, plot_attendance_fan, plot_density_snapshots,
            plot_value_snapshots, plot_convergence, plot_phase_portrait)


def standard_figures(result: Result) -> dict[str, Figure]:
    """The standard set of a 1-D result, by file stem (``plot_`` left out): the figures of
    :data:`STANDARD` that draw its kind (:data:`FIGURES`; Santa Fe: all but the attendance
    fan; common noise: the fan and convergence). 2-D results:
    :func:`mfgwork.analysis.plots2d.standard_figures_2d`."""
    _require(result, "standard_figures")
    return {plot.__name__.removeprefix("plot_"): plot(result) for plot in STANDARD
            if FIGURES[plot.__name__][1](result)}


def write_figures(figures: Mapping[str, Figure], folder: str | Path, *,
                  force: bool = False) -> list[Path]:
    """Save each figure as ``folder/<name>.png`` and, vector at print size,
    ``folder/<name>.pdf`` (:func:`mfgwork.core.figures.save_figure`), atomically; returns the
    paths. ``folder`` may be new, empty or an earlier figures folder, which is replaced (see
    :func:`mfgwork.core.storage.check_target`; ``force`` for any other folder). Each name
    must be a plain file name and each figure have ``savefig``, checked before any write."""
    figures = check_figures(figures)
    with storage.atomic_folder(folder, "figures", name="folder", force=force) as tmp:
        names = [p.name for name, fig in figures.items() for p in save_figure(fig, tmp, name)]
    return [Path(folder).absolute() / name for name in names]


def save_figures(result: Result, folder: str | Path, *, force: bool = False) -> list[Path]:
    """Write the standard set (:func:`standard_figures`) as PNG and PDF files into ``folder``
    (see :func:`write_figures`)."""
    return write_figures(standard_figures(result), folder, force=force)
