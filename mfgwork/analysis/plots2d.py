"""Figures and the animation of a 2-D solve (:class:`~mfgwork.results2d.Result2D`, also one
read back by :func:`mfgwork.load`).

Arrays are (t, y, x): ``result.M[n, j, i]`` is m(t_n, x_i, y_j). Densities are drawn as images,
one pixel per node (the grid is uniform), obstacle nodes grey, exit nodes as red squares
on the wall. The functions return a matplotlib ``Figure`` in the package style
(:mod:`mfgwork.analysis.style`, object-oriented API as :mod:`mfgwork.analysis.plots`);
:func:`mfgwork.analysis.plots.write_figures` writes them as PNG and PDF. Other results are
refused (:data:`FIGURES_2D`).

The animation of m(t) is a ``matplotlib.animation.FuncAnimation`` rendered by ``to_jshtml``:
one HTML fragment with its player script and the frames as embedded PNGs, nothing loaded from
the network, so it plays in a notebook (``IPython.display.HTML(animation_html(result))``) and
in the book. :func:`write_animation` writes it as a stand-alone page.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..core import storage
from ..core.errors import ParameterError, check_int, check_real
from ..results2d import Result2D
from .plots import check_result, equilibrium_attendance, figure_axes, host_float64, time_indices
from .style import DPI, STYLE, TIME, state_label, styled

__all__ = ["animation_html", "animation_page", "plot_bar_attendance", "plot_density_2d",
           "plot_density_at", "plot_evacuation", "plot_exit_flux", "plot_velocity_field",
           "standard_figures_2d", "write_animation"]
#: The first lines of a page written by :func:`write_animation` (how it recognises its own).
ANIMATION_HEAD = "<!DOCTYPE html>\n<!-- mfgwork animation of a 2-D density -->\n"
#: Frames of an animation at most (each an embedded PNG).
MAX_FRAMES = 200
#: matplotlib's player links an icon font from a CDN; its buttons get text glyphs instead.
_ICON_FONT = re.compile(r"<link[^>]*font-awesome[^>]*>\s*")
_ICONS = {"fa-minus": "−", "fa-fast-backward": "|◀◀", "fa-step-backward": "|◀",
          "fa-play fa-flip-horizontal": "◀", "fa-pause": "❚❚", "fa-play": "▶",
          "fa-step-forward": "▶|", "fa-fast-forward": "▶▶|", "fa-plus": "+"}
_ICON = re.compile(r'<i class="fa (?P<name>[a-z -]+)"></i>')


def _two_d(result: Any) -> bool:
    return isinstance(result, Result2D)


_2D = "of a 2-D result (mw.Result2D, dims ('t', 'y', 'x'): mw.solve of an mw.Room or mw.TwoBars)"
#: function → (what it draws, whether a result's kind is one it draws, the arrays it draws),
#: checked by :func:`_require`.
FIGURES_2D: dict[str, tuple[str, Callable[[Any], bool], tuple[str, ...]]] = {
    "plot_density_2d": (f"draws m(t, ·) at some times {_2D}", _two_d, ("M",)),
    "plot_density_at": (f"draws m(t, ·) at one time {_2D}", _two_d, ("M",)),
    "plot_velocity_field": (f"draws the optimal velocity over the density {_2D}", _two_d,
                            ("M", "velocity_x", "velocity_y")),
    "plot_exit_flux": (f"draws the exit flux and the mass balance {_2D}", _two_d,
                       ("mass", "exit_flux")),
    "plot_evacuation": (f"draws the mass left and the exit flux {_2D}", _two_d,
                        ("mass", "exit_flux")),
    "plot_bar_attendance": ("draws the attendance pair A(t) of shape (nt+1, 2) of a two-bar "
                            "result (mw.solve of an mw.TwoBars)",
                            lambda r: _two_d(r)
                            and np.shape(r.observables.get("attendance"))[1:] == (2,),
                            ("attendance",)),
    "standard_figures_2d": (f"draws the standard figures {_2D}", _two_d, ()),
    "animation_html": (f"draws the density m(t) as a player {_2D}", _two_d, ("M",)),
}


def _require(result: Any, figure: str, name: str = "result") -> None:
    """:func:`~mfgwork.analysis.plots.check_result` for ``figure``, a function of this module
    (:data:`FIGURES_2D`)."""
    check_result(result, figure, *FIGURES_2D[figure], name)


def _names(result: Any) -> tuple[str, str]:
    """The symbols of the two state variables (the problem's ``state_names``; x, y)."""
    return tuple(getattr(getattr(result, "problem", None), "state_names", ("x", "y")))


def _label_axes(ax: Axes, result: Any) -> None:
    sx, sy = _names(result)
    ax.set(xlabel=state_label(sx), ylabel=state_label(sy), aspect="equal")


def _density_image(ax: Axes, result: Any, n: int, vmax: float) -> Any:
    """m(t_n) as an image, one pixel per node (the nodes are uniform), obstacle nodes grey
    (masked), exit nodes as red squares."""
    from matplotlib import colormaps

    cmap = colormaps["viridis"].with_extremes(bad="0.55")
    x, y = host_float64(result.x), host_float64(result.y)
    hx, hy = (x[1] - x[0]) / 2, (y[1] - y[0]) / 2
    image = ax.imshow(_masked(result, n), origin="lower", cmap=cmap, vmin=0.0, vmax=vmax,
                      extent=(x[0] - hx, x[-1] + hx, y[0] - hy, y[-1] + hy),
                      interpolation="nearest", aspect="equal")
    ax.set(xlim=(x[0], x[-1]), ylim=(y[0], y[-1]))   # the domain: wall nodes own half cells
    _draw_exits(ax, result)
    return image


def _masked(result: Any, n: int) -> np.ma.MaskedArray:
    """m(t_n) with the obstacle nodes masked."""
    return np.ma.masked_array(host_float64(result.M[n]), mask=np.asarray(result.obstacle))


def _draw_exits(ax: Axes, result: Any) -> None:
    exits = np.asarray(result.exit)
    if exits.any():
        X, Y = np.meshgrid(host_float64(result.x), host_float64(result.y))
        ax.plot(X[exits], Y[exits], "s", color="tab:red", ms=4, ls="none", label="exit",
                clip_on=False)


def _vmax(result: Any, idx: Sequence[int]) -> float:
    top = float(np.max(host_float64(np.asarray(result.M)[list(idx)])))
    return top if top > 0 else 1.0


def _density_label(result: Any) -> str:
    sx, sy = _names(result)
    return f"density m(t, {sx}, {sy})"


@styled
def plot_density_2d(result: Any, times: Sequence[float] | None = None, ncols: int = 3,
                    shared_scale: bool = False) -> Figure:
    """m(t, ·) at the time levels nearest to ``times`` (default: 6 evenly spaced in [0, T]),
    one panel each, obstacles grey, exits red; each panel on its own colour scale (the
    crowd spreads and leaves, so later densities are far below the first), or on one with
    ``shared_scale``."""
    _require(result, "plot_density_2d")
    ncols = check_int("ncols", ncols, low=1)
    t = host_float64(result.t)
    idx = time_indices(result, np.linspace(t[0], t[-1], 6) if times is None else times)
    cols = min(ncols, len(idx))
    rows = math.ceil(len(idx) / cols)
    fig = Figure(figsize=(3.3 * cols + (1.0 if shared_scale else 0.6), 2.9 * rows), dpi=DPI,
                 layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    top = _vmax(result, idx)
    for ax, n in zip(axes, idx, strict=False):
        image = _density_image(ax, result, n, top if shared_scale else _vmax(result, [n]))
        _label_axes(ax, result)
        ax.set_title(f"t = {t[n]:.3g}, mass {float(host_float64(result.mass)[n]):.3f}")
        if not shared_scale:
            fig.colorbar(image, ax=ax, label=_density_label(result) if ax is axes[0] else None)
    for ax in axes[len(idx):]:
        ax.set_visible(False)
    if shared_scale:
        fig.colorbar(image, ax=axes[: len(idx)].tolist(), label=_density_label(result),
                     shrink=0.9)
    if np.asarray(result.exit).any():
        axes[0].legend(loc="lower left", fontsize="small")
    notes = (["grey: obstacle"] if np.asarray(result.obstacle).any() else []) + (
        [] if shared_scale else ["colour scale per panel"])
    fig.suptitle("Density snapshots" + (f" ({'; '.join(notes)})" if notes else ""))
    return fig


def _density_panel(result: Any, time: float | None, ax: Axes | None,
                   size: tuple[float, float]) -> tuple[Figure, Axes, np.ndarray, int]:
    """(figure, axes, t, n): the density image at the level n nearest to ``time`` (default
    T/4) with its colour bar."""
    t = host_float64(result.t)
    time = float(t[-1] / 4) if time is None else check_real("time", time)
    n = time_indices(result, [time])[0]
    fig, ax = figure_axes(ax, size=size)
    image = _density_image(ax, result, n, _vmax(result, [n]))
    fig.colorbar(image, ax=ax, label=_density_label(result))
    return fig, ax, t, n


@styled
def plot_density_at(result: Any, time: float | None = None, ax: Axes | None = None) -> Figure:
    """m(t, ·) at the level nearest to ``time`` (default T/4) as an image, with a colour bar;
    obstacles grey, exits red."""
    _require(result, "plot_density_at")
    fig, ax, t, n = _density_panel(result, time, ax, (5.2, 4.4))
    _label_axes(ax, result)
    ax.set_title(f"Density at t = {t[n]:.3g} (mass {float(host_float64(result.mass)[n]):.3f})")
    return fig


def quiver_points(result: Any, n: int, arrows: int = 16
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, α_x, α_y) of the arrows of :func:`plot_velocity_field` at level ``n``: every
    s-th node in each direction (about ``arrows`` per side), obstacle and exit nodes left
    out."""
    arrows = check_int("arrows", arrows, low=2)
    x, y = host_float64(result.x), host_float64(result.y)
    sx, sy = max(1, round(x.size / arrows)), max(1, round(y.size / arrows))
    X, Y = np.meshgrid(x, y)
    keep = ~(np.asarray(result.obstacle) | np.asarray(result.exit))
    pick = (slice(None, None, sy), slice(None, None, sx))
    keep = keep[pick]
    vx, vy = host_float64(result.velocity_x[n])[pick], host_float64(result.velocity_y[n])[pick]
    return X[pick][keep], Y[pick][keep], vx[keep], vy[keep]


@styled
def plot_velocity_field(result: Any, time: float | None = None, ax: Axes | None = None,
                        arrows: int = 16) -> Figure:
    """The optimal velocity α* = −∂p H(x, ∇u, m) at the level nearest to ``time`` (default
    T/4) as arrows over the density m there (about ``arrows`` per side)."""
    _require(result, "plot_velocity_field")
    fig, ax, t, n = _density_panel(result, time, ax, (5.6, 4.6))
    X, Y, vx, vy = quiver_points(result, n, arrows)
    ax.quiver(X, Y, vx, vy, color="white", angles="xy", pivot="mid", width=0.004,
              label="optimal velocity α*")
    _label_axes(ax, result)
    speed = float(np.max(np.hypot(vx, vy))) if vx.size else 0.0
    ax.set_title(f"Optimal velocity α* at t = {t[n]:.3g} (max |α*| = {speed:.2g})")
    ax.legend(loc="lower left", fontsize="small")
    return fig


@styled
def plot_exit_flux(result: Any) -> Figure:
    """Left: the rate of leaving through each door, outflow / Δt (``result.door_outflow``,
    recorded by the scheme), and their sum. Right: the mass in the room, the cumulative
    outflow, and their sum, which the scheme keeps at 1 to round-off (the check line; its
    largest deviation in the legend)."""
    _require(result, "plot_exit_flux")
    t, dt = host_float64(result.t), float(host_float64(result.t)[1] - host_float64(result.t)[0])
    doors = host_float64(result.door_outflow)
    fig = Figure(figsize=(10.0, 3.8), dpi=DPI, layout="constrained")
    left, right = fig.subplots(1, 2)
    for d, where in enumerate(result.doors):
        left.plot(t[1:], doors[1:, d] / dt, label=f"door {d + 1} ({where})")
    left.plot(t[1:], host_float64(result.exit_flux)[1:], color="k", ls="--", lw=1.2,
              label="all doors")
    left.set(xlabel=TIME, ylabel="exit flux: mass leaving per unit time",
             title="Flux through the exits")
    left.legend(loc="best")
    mass, out = host_float64(result.mass), np.cumsum(host_float64(result.outflow))
    balance = mass + out
    right.plot(t, mass, label="mass in the room Σ V m")
    right.plot(t, out, label="cumulative outflow")
    right.plot(t, balance, color="k", ls=":",
               label=f"sum (max |sum − 1| = {float(np.max(np.abs(balance - 1.0))):.1e})")
    right.set(xlabel=TIME, ylabel="mass (initial mass 1)", title="Mass balance",
              ylim=(-0.05, 1.1))
    right.legend(loc="center right")
    return fig


@styled
def plot_evacuation(results: Mapping[str, Any]) -> Figure:
    """Several solves ``{label: result}`` side by side: the mass left in the domain (left)
    and the exit flux, outflow / Δt (right), over time."""
    if not results:
        raise ParameterError("results is empty: pass {label: result} of 2-D solves")
    for label, r in results.items():
        _require(r, "plot_evacuation", f"results[{label!r}]")
    fig = Figure(figsize=(10.0, 3.6), dpi=DPI, layout="constrained")
    left, right = fig.subplots(1, 2)
    for label, r in results.items():
        t = host_float64(r.t)
        left.plot(t, host_float64(r.mass), label=label)
        right.plot(t[1:], host_float64(r.exit_flux)[1:], label=label)
    left.set(xlabel=TIME, ylabel="mass left in the room Σ V m", title="Evacuation",
             ylim=(0.0, 1.05))
    right.set(xlabel=TIME, ylabel="exit flux: mass leaving per unit time",
              title="Flux through all exits")
    left.legend(loc="best")
    right.legend(loc="best")
    return fig


@styled
def plot_bar_attendance(result: Any, ax: Axes | None = None,
                        references: Mapping[str, tuple[Any, Any]] | None = None) -> Figure:
    """The attendance paths A_1(t), A_2(t) of the two-bar game, each bar's threshold A*_j
    (dotted) and where its payoff vanishes, F_j = 0 (dashed); ``references``: further
    paths ``{label: (t, A)}`` drawn as markers (e.g. the 1-D Santa Fe solutions)."""
    _require(result, "plot_bar_attendance")
    fig, ax = figure_axes(ax, size=(6.8, 4.2))
    t, A = host_float64(result.t), host_float64(result.attendance)
    p = result.params
    colors = ("tab:blue", "tab:orange")
    for j in range(2):
        ax.plot(t, A[:, j], color=colors[j], lw=2.0, label=f"bar {j + 1}: A$_{j + 1}$(t)")
        thresholds = p.get("thresholds")
        if thresholds is not None:
            ax.axhline(thresholds[j], color=colors[j], ls=":", lw=1.0,
                       label=f"threshold A*$_{j + 1}$ = {thresholds[j]:g}")
            level = equilibrium_attendance(p | {"threshold": thresholds[j]})
            if level is not None and not p.get("spill"):
                ax.axhline(level, color=colors[j], ls="--", lw=1.0,
                           label=f"F$_{j + 1}$ = 0 at A = {level:.3f}")
    for k, (label, (tr, Ar)) in enumerate((references or {}).items()):
        tr, Ar = host_float64(tr), host_float64(Ar)
        step = max(1, tr.size // 25)
        ax.plot(tr[::step], Ar[::step], ls="none", color="k", marker="ox"[k % 2],
                mfc="none", ms=5, label=label)
    ax.set(xlabel=TIME, ylabel="attendance A$_j$(t) of bar j", title="Two bars: attendance",
           xlim=(t[0], t[-1]))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncols=2, fontsize="small")
    return fig


def standard_figures_2d(result: Any) -> dict[str, Figure]:
    """The standard set, by file stem: density snapshots, the velocity field and, with
    exits, the exit flux; for two-bar results also the attendance paths."""
    _require(result, "standard_figures_2d")
    figures = {"density_2d": plot_density_2d(result),
               "velocity_field": plot_velocity_field(result)}
    if np.asarray(result.exit).any():
        figures["exit_flux"] = plot_exit_flux(result)
    if "attendance" in getattr(result, "observables", {}):
        figures["bar_attendance"] = plot_bar_attendance(result)
    return figures


def frame_indices(nt: int, frames: int) -> list[int]:
    """At most ``frames`` time levels of 0..nt, evenly spaced, first and last included."""
    frames = check_int("frames", frames, low=2, high=MAX_FRAMES)
    return sorted({int(round(v)) for v in np.linspace(0, nt, min(frames, nt + 1))})


def animation_html(result: Any, frames: int = 40, fps: float = 8.0, dpi: int = 72) -> str:
    """The density m(t) as an HTML/JS player (``FuncAnimation.to_jshtml``): ``frames`` time
    levels at most (evenly spaced), ``fps`` frames per second, PNG frames at ``dpi``. One
    colour scale, that of the frames after the first (the initial crowd is far denser; its
    peak saturates). Plays in a notebook as ``IPython.display.HTML(...)``; loads nothing
    from the network."""
    from matplotlib import rc_context
    from matplotlib.animation import FuncAnimation

    _require(result, "animation_html")
    idx = frame_indices(np.shape(result.M)[0] - 1, frames)
    fps = check_real("fps", fps, low=0.0, high=60.0, high_open=False)
    dpi = check_int("dpi", dpi, low=20, high=300)
    t = host_float64(result.t)
    with rc_context(STYLE):
        # fixed margins: a layout engine would run again for every frame
        fig = Figure(figsize=(5.0, 4.2), dpi=dpi)
        fig.subplots_adjust(left=0.12, right=0.97, bottom=0.11, top=0.92)
        ax = fig.add_subplot()
        image = _density_image(ax, result, idx[0], _vmax(result, idx[1:]))
        fig.colorbar(image, ax=ax, label=_density_label(result), extend="max")
        _label_axes(ax, result)
        title = ax.set_title("")

        def draw(n: int) -> tuple[Any, ...]:
            image.set_data(_masked(result, n))
            title.set_text(f"Density at t = {t[n]:.3g} (mass in the domain "
                           f"{float(host_float64(result.mass)[n]):.3f})")
            return image, title

        anim = FuncAnimation(fig, draw, frames=idx, interval=1000.0 / fps, blit=False)
        page = anim.to_jshtml(fps=fps, embed_frames=True, default_mode="once")
    return offline(page)


def offline(page: str) -> str:
    """The player without its link to the CDN icon font (text glyphs on its buttons)."""
    page = _ICON_FONT.sub("", page)
    return _ICON.sub(lambda m: _ICONS.get(m["name"], m["name"].removeprefix("fa-")), page)


def _is_animation(path: Path) -> bool:
    """True for a page written by :func:`write_animation` (read: its first bytes)."""
    head = ANIMATION_HEAD.encode()
    with open(path, "rb") as fh:
        return fh.read(len(head)) == head


def animation_page(html: str, title: str = "Density m(t)") -> str:
    """The stand-alone page of the player ``html`` (from :func:`animation_html`): what
    :func:`write_animation` writes, and ``pages=`` of :func:`mfgwork.save_run` takes."""
    if not isinstance(html, str) or "<script" not in html:
        raise ParameterError(f"html={str(html)[:60]!r} is invalid: must be the player of "
                             "animation_html(result)")
    from html import escape

    return (f"{ANIMATION_HEAD}<html lang=\"en\">\n<head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title></head>\n<body>\n{html}\n</body>\n</html>\n")


def write_animation(html: str, path: str | os.PathLike, *, force: bool = False,
                    title: str = "Density m(t)") -> Path:
    """Write the player ``html`` (from :func:`animation_html`) as a stand-alone page at
    ``path``, atomically. ``path`` must be new or a page this function wrote; any other
    existing file only with ``force``; never a folder, a link, a FIFO or a file inside a
    finished run or another output (:func:`mfgwork.core.storage.check_file`). Returns the
    absolute path."""
    page = animation_page(html, title)
    target = storage.check_file(path, name="path", force=force, ours=_is_animation)
    with storage.atomic_file(target) as fh:
        fh.write(page)
    return target
