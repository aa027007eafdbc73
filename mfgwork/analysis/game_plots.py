"""Figures of the El Farol teaching notebooks: N patrons against the mean field (06) and the
two-state game against the continuous-preference model (07). Each function returns a
matplotlib ``Figure`` (object-oriented API, as :mod:`mfgwork.analysis.plots`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ..core.backend import to_numpy
from ..core.errors import ParameterError
from ..finite_state import switching_rates
from .n_player import NPlayerResult, fitted_slope
from .style import DPI, TIME, styled

MEASURES = {"distance": "distance  max$_t$|A$_N$ − A|  (RMS)",
            "cost_error": "cost error  ∫m$_0$(v$_N$ − u)  (RMS)",
            "gap": "ε-Nash gap  ∫m$_0$(v$_N$ − u$_N^{BR}$)  (mean)"}


@styled
def plot_n_player_paths(study: Sequence[NPlayerResult], max_paths: int = 12) -> Figure:
    """One panel per N: realised attendance paths A_N(t) (thin) against the mean field A(t)."""
    if not study:
        raise ParameterError("study is empty: pass the results of mw.n_player_study")
    cols = min(len(study), 2)
    rows = -(-len(study) // cols)
    fig = Figure(figsize=(5.2 * cols, 3.2 * rows), dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True).ravel()
    for ax, res in zip(axes, study, strict=False):
        for path in res.attendance[:max_paths]:
            ax.plot(res.t, path, color="tab:blue", lw=0.6, alpha=0.5)
        ax.plot(res.t, res.mean_field, color="black", lw=1.8, label="mean field A(t)")
        ax.set_title(f"N = {res.n_players:,}  ({min(max_paths, res.n_samples)} of "
                     f"{res.n_samples} samples)")
        ax.set(xlabel=TIME, ylabel="attendance A$_N$(t)")
    for ax in axes[len(study):]:
        ax.set_visible(False)
    axes[0].legend(loc="lower right")
    return fig


@styled
def plot_n_player_convergence(rows: Sequence[Mapping[str, Any]],
                              fit_max_n: float | None = None) -> Figure:
    """Distance, cost error and ε-Nash gap against N on log-log axes, with Monte Carlo error
    bars and the least-squares slope of each over N ≤ ``fit_max_n`` (None: all N); the
    dotted line is the bias of the mean attendance path (the discretization floor)."""
    n = np.array([r["n_players"] for r in rows], dtype=float)
    keep = n <= (fit_max_n if fit_max_n is not None else np.inf)
    fig = Figure(figsize=(10.5, 3.8), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, keys in zip(axes, (("distance",), ("cost_error", "gap")), strict=True):
        for key in keys:
            if key not in rows[0]:
                continue
            v = np.array([r[key] for r in rows])
            se = np.array([r[f"{key}_se"] for r in rows])
            slope = fitted_slope(n[keep], v[keep])
            ax.errorbar(n, v, yerr=2 * se, marker="o", capsize=3,
                        label=f"{MEASURES[key]}: slope {slope:.2f}")
            if key == "distance":
                ax.plot(n, v[0] * (n / n[0]) ** -0.5, color="gray", ls="--", lw=1,
                        label="N$^{-1/2}$")
                ax.plot(n, [r["bias"] for r in rows], color="gray", ls=":", lw=1,
                        label="max$_t$|mean of A$_N$ − A| (bias + noise)")
            if key == "gap":
                ax.plot(n, v[-1] * (n / n[-1]) ** -1.0, color="gray", ls="-.", lw=1,
                        label="N$^{-1}$")
        ax.set(xscale="log", yscale="log", xlabel="number of patrons N")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=1)
    axes[0].set(title="Attendance: distance to the mean field",
                ylabel="distance max$_t$|A$_N$ − A| (RMS)")
    axes[1].set(title="Costs of following α* against A$_N$",
                ylabel="cost difference (per patron)")
    return fig


@styled
def plot_attendance_paths(paths: Mapping[str, tuple[Any, Any]], level: float | None = None,
                          threshold: float | None = None, title: str = "Attendance"
                          ) -> Figure:
    """Attendance paths ``{label: (t, A)}`` on one axes, with the level where the payoff
    vanishes (dashed) and the threshold A* (dotted)."""
    fig = Figure(figsize=(6.8, 4.0), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    for label, (t, A) in paths.items():
        ax.plot(np.asarray(to_numpy(t)), np.asarray(to_numpy(A)), label=label)
    if level is not None:
        ax.axhline(level, color="black", ls="--", lw=1,
                   label="F(A) = 0: the payoff of going F vanishes")
    if threshold is not None:
        ax.axhline(threshold, color="gray", ls=":", lw=1, label="threshold A*")
    ax.set(xlabel=TIME, ylabel="attendance A(t)", title=title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2)
    return fig


@styled
def plot_switching(result: Any) -> Figure:
    """Two-state game: the switching rates β*(t) and the value gap u_bar − u_home."""
    fig = Figure(figsize=(10.5, 3.6), dpi=DPI, layout="constrained")
    left, right = fig.subplots(1, 2)
    rates = switching_rates(result)
    left.plot(result.t, rates[:, 0], label="home → bar")
    left.plot(result.t, rates[:, 1], label="bar → home")
    left.set(xlabel=TIME, ylabel="switching rate β*(t)", title="Optimal switching rates")
    left.legend()
    right.plot(result.t, result.U[:, 1] - result.U[:, 0], color="tab:purple")
    right.axhline(0.0, color="gray", lw=0.8)
    right.set(xlabel=TIME, ylabel="value gap u_bar(t) − u_home(t)",
              title="Cost-to-go at the bar minus at home")
    return fig


@styled
def plot_plateau_study(panels: Mapping[str, tuple[str, Sequence[Mapping[str, Any]]]],
                       level: float | None = None) -> Figure:
    """One column per model ``{title: (parameter, rows)}``: the time to the plateau (top)
    and the attendance at T/2 (bottom) against the parameter (rows carry ``parameter``,
    ``time_to_plateau`` and ``attendance_mid``); dashed: the level where F vanishes."""
    fig = Figure(figsize=(5.0 * len(panels), 6.0), dpi=DPI, layout="constrained")
    axes = fig.subplots(2, len(panels), squeeze=False, sharey="row")
    for col, (title, (parameter, rows)) in enumerate(panels.items()):
        x = [r[parameter] for r in rows]
        times = [np.nan if r["time_to_plateau"] is None else r["time_to_plateau"]
                 for r in rows]
        top, bottom = axes[0, col], axes[1, col]
        top.plot(x, times, marker="o")
        top.set(xscale="log", xlabel=parameter, ylabel="time to the plateau t", title=title)
        bottom.plot(x, [r["attendance_mid"] for r in rows], marker="o")
        if level is not None:
            bottom.axhline(level, color="black", ls="--", lw=1,
                           label="F(A) = 0: the payoff of going F vanishes")
            bottom.legend()
        bottom.set(xscale="log", xlabel=parameter, ylabel="attendance at half time A(T/2)")
    return fig


@styled
def plot_planner(bar: Any, equilibrium: Any, optimum: Any) -> Figure:
    """The planner's optimum against the equilibrium of one Santa Fe ``bar``: their
    attendance paths A(t) (left), and the bar's payoff F(A) with the planner's price
    F + A F′ (right), each marked at its solve's mean attendance."""
    fig = Figure(figsize=(10.5, 3.8), dpi=DPI, layout="constrained")
    left, right = fig.subplots(1, 2)
    for res, label, color in ((equilibrium, "equilibrium", "tab:red"),
                              (optimum, "planner's optimum", "tab:blue")):
        left.plot(to_numpy(res.t), to_numpy(res.attendance), color=color, label=label)
    left.axhline(bar.threshold, color="gray", ls=":", lw=1, label="threshold A*")
    left.set(xlabel=TIME, ylabel="attendance A(t)")
    left.legend(loc="best")
    A = np.linspace(0.0, 1.0, 401)
    planner = bar.for_objective("social")
    right.plot(A, bar.payoff(A), color="tab:red", label="payoff F(A)")
    right.plot(A, planner.price(A), color="tab:blue", label="planner's price F + A F′")
    for res, color in ((equilibrium, "tab:red"), (optimum, "tab:blue")):
        right.axvline(res.summary["mean_attendance"], color=color, ls="--", lw=1)
    right.axhline(0.0, color="gray", lw=0.8)
    low = min(bar.bad, float(np.min(planner.price(A))))
    right.set(xlabel="attendance A", ylabel="payoff of going",
              ylim=(max(low, bar.bad - 3 * (bar.good - bar.bad)), bar.good + 1))
    right.legend(loc="lower left")
    return fig


@styled
def plot_price_of_anarchy(scan: Any) -> Figure:
    """A scan over two parameters solved with ``objective="social"`` (:func:`mfgwork.scan`):
    the welfare lost at the equilibrium and the price of anarchy W_opt / W_eq (blank where
    it is undefined: a welfare ≤ 0), as maps over the scan's two dimensions."""
    names = ("welfare_loss", "price_of_anarchy")
    if any(n not in scan for n in names) or len(scan["welfare_loss"].dims) != 2:
        raise ParameterError("scan is invalid: pass the Dataset of a scan over two parameters "
                             "run with objective='social'")
    dims = scan["welfare_loss"].dims
    fig = Figure(figsize=(10.5, 3.8), dpi=DPI, layout="constrained")
    for ax, name, title in zip(fig.subplots(1, 2), names,
                               ("welfare lost to selfish choices W_opt − W_eq",
                                "price of anarchy W_opt / W_eq"), strict=True):
        values = np.asarray(scan[name].transpose(*dims).values, dtype=float)
        y, x = (np.asarray(scan[d].values, dtype=float) for d in dims)
        mesh = ax.pcolormesh(x, y, values, shading="nearest", cmap="viridis")
        fig.colorbar(mesh, ax=ax)
        ax.set(xlabel=dims[1], ylabel=dims[0], title=title)
    return fig


@styled
def plot_long_run(stationary: Any, finite: Sequence[Any]) -> Figure:
    """The long run against finite horizons: each horizon's attendance A(t) with the
    stationary attendance (dashed) on the left; the stationary density m(θ) and each horizon's
    density at its middle on the right."""
    fig = Figure(figsize=(10.5, 3.8), dpi=DPI, layout="constrained")
    left, right = fig.subplots(1, 2)
    level = float(stationary.summary["mean_attendance"])
    x = np.asarray(to_numpy(stationary.x))
    for res in finite:
        t, A = np.asarray(to_numpy(res.t)), np.asarray(to_numpy(res.attendance))
        horizon = float(t[-1])
        left.plot(t / horizon, A, label=f"T = {horizon:g}")
        middle = np.asarray(to_numpy(res.M))[t.size // 2]
        right.plot(np.asarray(to_numpy(res.x)), middle, lw=1, label=f"m(T/2, θ), T = {horizon:g}")
    left.axhline(level, color="black", ls="--", lw=1, label=f"long run A = {level:.4f}")
    left.set(xlabel="t / T", ylabel="attendance A(t)")
    left.legend(loc="lower right")
    right.plot(x, np.asarray(to_numpy(stationary.M))[0], color="black", ls="--",
               label="stationary m(θ)")
    right.set(xlabel="preference θ", ylabel="density")
    right.legend(loc="upper left")
    return fig
