"""The interactive Santa Fe Bar explorer: ipywidgets controls → :func:`mfgwork.solve` → figures.

Every change of a control re-solves the MFG system of :class:`mfgwork.SantaFeBar` (HJB
backward, FP forward, Picard on the attendance path A(t) = ∫_{θ>0} m(t, θ) dθ) and redraws
A(t), the density m(t, θ) and the convergence history with :mod:`mfgwork.analysis.plots`. Sliders
update on release (``continuous_update=False``). A failed solve shows its message in the
status line, the last good figures stay, and the controls stay live.

Figures: with ``%matplotlib inline`` (the default) each figure is rendered to PNG into an
``ipywidgets.Image``; with ipympl (``%matplotlib widget``) its canvas widget is redrawn in place.

    import mfgwork as mw
    mw.widgets.explore(threshold=0.5)

The 2-D room (:class:`mfgwork.Room`) has its own explorer, :class:`RoomExplorer`
(``mw.widgets.explore(mw.Room())``): sliders for the door width and the congestion cost
re-solve with :func:`mfgwork.solve`; a time slider picks the density m(t, x, y) shown as an
image (redrawn from the solution, without solving again).
"""

from __future__ import annotations

import html
import io
import math
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from numbers import Real
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..analysis import plots, plots2d
from ..core.backend import available_backends
from ..core.errors import (
    ConvergenceWarning,
    ParameterError,
    check_choice,
    check_int,
    check_real,
    short_repr,
)
from ..core.extras import require
from ..fdm1d import METHODS
from ..problems.room import Room
from ..problems.santa_fe import DEFAULTS, SantaFeBar
from ..results import Result
from ..results2d import Result2D
from ..solve import solve

require("ipywidgets", extra="notebooks", feature="the explorer (mw.widgets)")
import ipywidgets as w  # noqa: E402

#: name → (label, min, max, step) of each problem slider; defaults are Santa Fe's.
SLIDERS: dict[str, tuple[str, float, float, float]] = {
    "threshold": ("threshold A*", 0.05, 0.95, 0.01),
    "sigma": ("σ", 0.1, 1.5, 0.05),
    "good": ("good G", -10.0, 20.0, 0.5),
    "bad": ("bad B", -20.0, 10.0, 0.5),
    "eps": ("ε", 0.01, 0.5, 0.01),
    "T": ("T", 1.0, 20.0, 0.5),
}
#: grid sizes offered (nx = nt).
GRIDS = (52, 101, 151, 201)
#: figure name → the :mod:`mfgwork.analysis.plots` function drawing it.
PANELS: dict[str, Callable[..., Figure]] = {
    "attendance": plots.plot_attendance,
    "density": plots.plot_density_heatmap,
    "convergence": plots.plot_convergence,
}
FIGSIZE = (4.6, 3.4)
MARGINS = {"left": 0.2, "right": 0.96, "bottom": 0.16, "top": 0.91}
# Titles at a fixed height: no search for tick labels above the axes (there are none) on
# every draw.
RC = {"axes.titley": 1.0}
CACHE_SIZE = 32
#: the dots per inch allowed for the figures on screen (low, high; both included).
DPI_RANGE = (20.0, 600.0)
#: the keywords of each explorer besides its sliders (named in the message for an unknown one).
SANTA_FE_OPTIONS = ("nx", "method", "backend", "device", "tol", "max_iter", "n_particles",
                    "mode", "devices", "dpi")
ROOM_OPTIONS = ("nx", "nt", "tol", "max_iter", "dpi")


def _check_dpi(dpi: object) -> float:
    """``dpi`` as a float: a real number (not a bool) in :data:`DPI_RANGE`."""
    low, high = DPI_RANGE
    return check_real("dpi", dpi, low=low, high=high, low_open=False, high_open=False)


def _unknown(defaults: Mapping[str, Any], sliders: Mapping[str, Any], options: tuple[str, ...],
             what: str) -> None:
    """Refuse the first keyword of ``defaults`` that is not a slider of the explorer."""
    unknown = sorted(set(defaults) - set(sliders))
    if unknown:
        name = unknown[0]
        raise ParameterError(f"{name}={short_repr(defaults[name])} is not a parameter of {what}: "
                             f"must be one of {', '.join(sliders)} (the sliders' starting "
                             f"values) or {', '.join(options)}")


def _check_devices(devices: object) -> list[tuple[str, str]] | None:
    """``devices`` as a list of (backend, device) pairs of names, or None."""
    if devices is None:
        return None

    def available() -> str:
        return ", ".join(f"{b}/{d}" for b, devs in available_backends().items() for d in devs)

    if isinstance(devices, str | bytes) or not isinstance(devices, list | tuple):
        raise ParameterError(f"devices={short_repr(devices)} ({type(devices).__name__}) is "
                             "invalid: must be None or a list of (backend, device) pairs, e.g. "
                             f"[('numpy', 'cpu')] (available: {available()})")
    if not devices:
        raise ParameterError(f"devices={devices!r} is invalid: must name at least one device "
                             f"(one of {available()})")
    pairs = []
    for i, pair in enumerate(devices):
        if (not isinstance(pair, list | tuple) or len(pair) != 2
                or not all(isinstance(v, str) for v in pair)):
            raise ParameterError(f"devices[{i}]={short_repr(pair)} is invalid: must be a (backend, "
                                 f"device) pair of names, e.g. ('numpy', 'cpu') (available: "
                                 f"{available()})")
        pairs.append((pair[0], pair[1]))
    return pairs


class SantaFeExplorer:
    """Sliders for threshold, σ, G, B, ε, T; method, grid (nx = nt) and device menus.

    ``defaults`` set the sliders' starting values (within their ranges, see :data:`SLIDERS`).
    ``tol``/``max_iter`` go to :func:`mfgwork.solve`, and ``n_particles`` (with a fixed
    seed) for ``method="particles"``. ``mode``: "inline" (PNG images),
    "widget" (ipympl canvases; needs ``%matplotlib widget``) or "auto" (widget when ipympl is
    the active matplotlib backend). ``devices``: the (backend, device) pairs to offer (None:
    :func:`mfgwork.available_backends`). ``dpi``: of the figures on screen. Results of
    recently seen settings are reused.
    """

    def __init__(self, *, nx: int = 101, method: str = "fdm", backend: str = "numpy",
                 device: str = "cpu", tol: float = 1e-6, max_iter: int = 300,
                 n_particles: int = 20_000, mode: str = "auto",
                 devices: list[tuple[str, str]] | None = None, dpi: int = 80,
                 **defaults: float) -> None:
        _unknown(defaults, SLIDERS, SANTA_FE_OPTIONS, "the explorer")
        values = {}
        for name, (_, low, high, _) in SLIDERS.items():
            values[name] = check_real(name, defaults.get(name, DEFAULTS[name]), low=low,
                                      high=high, low_open=False, high_open=False)
        if isinstance(nx, bool) or not isinstance(nx, Real) or nx not in GRIDS:
            raise ParameterError(f"nx={short_repr(nx)} is invalid: must be one of {GRIDS}")
        nx = GRIDS[GRIDS.index(nx)]   # (an int, also for 52.0 or numpy's 52)
        check_choice("method", method, METHODS)
        self.dpi = _check_dpi(dpi)
        pairs = _check_devices(devices)
        if pairs is None:
            pairs = [(b, d) for b, devs in available_backends().items() for d in devs]
        if (not isinstance(backend, str) or not isinstance(device, str)
                or (backend, device) not in pairs):
            raise ParameterError(f"backend, device={short_repr(backend)}, {short_repr(device)} is "
                                 "invalid: must be "
                                 f"one of {', '.join(f'{b}/{d}' for b, d in pairs)}")
        self.tol = check_real("tol", tol, low=0.0)
        self.max_iter = check_int("max_iter", max_iter, low=1)
        self.n_particles = check_int("n_particles", n_particles, low=1)
        self.mode = _resolve_mode(mode)

        self.controls: dict[str, w.ValueWidget] = {}
        for name, (label, low, high, step) in SLIDERS.items():
            self.controls[name] = w.FloatSlider(
                value=values[name], min=low, max=high, step=step, description=label,
                continuous_update=False, readout_format=".2f", style={"description_width": "7em"},
                layout=w.Layout(width="24em"))
        self.controls["method"] = w.Dropdown(options=list(METHODS), value=method,
                                             description="method")
        self.controls["nx"] = w.Dropdown(options=[(f"{n} × {n}", n) for n in GRIDS], value=nx,
                                         description="grid")
        self.controls["device"] = w.Dropdown(options=[(f"{b} · {d}", (b, d)) for b, d in pairs],
                                             value=(backend, device), description="device")
        for name, control in self.controls.items():
            control.add_class(f"mfg-{name}")
            control.observe(self._on_change, names="value")

        self.figures: dict[str, Figure] = {name: self._new_figure() for name in PANELS}
        self.views: dict[str, w.DOMWidget] = {}
        for name, fig in self.figures.items():
            if self.mode == "widget":
                view = fig.canvas
            else:
                view = w.Image(format="png", layout=w.Layout(width="32%", height="auto"))
            view.add_class(f"mfg-{name}-plot")
            self.views[name] = view
        self.status = w.HTML().add_class("mfg-status")
        sliders = [self.controls[k] for k in SLIDERS]
        menus = [self.controls[k] for k in ("method", "nx", "device")]
        self.widget = w.VBox([
            w.HBox([w.VBox(sliders[:3]), w.VBox(sliders[3:]), w.VBox(menus)]),
            self.status,
            w.HBox(list(self.views.values()), layout=w.Layout(width="100%", flex_flow="row wrap")),
        ]).add_class("mfg-explorer")

        self.result: Result | None = None
        self.error: str | None = None
        self.timings: dict[str, float] = {}
        self._cache: OrderedDict[tuple, Result] = OrderedDict()
        self.update()

    # -- state -------------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        """The current control values: problem parameters, nx, method, backend, device."""
        out: dict[str, Any] = {k: float(self.controls[k].value) for k in SLIDERS}
        backend, device = self.controls["device"].value
        return out | {"nx": self.controls["nx"].value, "method": self.controls["method"].value,
                      "backend": backend, "device": device}

    def update(self) -> Result | None:
        """Solve at the current settings and redraw; on failure show the message and
        return None (the previous figures stay)."""
        s = self.settings()
        key = tuple(s.values())
        started = time.perf_counter()
        self.status.value = "<i>solving…</i>"
        try:
            res = self._cache.get(key) or self._solve(s)
        except Exception as err:  # any failed solve is shown in the widget, never raised
            self.error = f"{type(err).__name__}: {err}"
            self.status.value = ("<span style='color:#b00020'>" + html.escape(self.error)
                                 + "</span>")
            return None
        solved = time.perf_counter()
        self._cache[key] = res
        self._cache.move_to_end(key)
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        self._draw(res)
        drawn = time.perf_counter()
        self.result, self.error = res, None
        self.timings = {"solve": solved - started, "draw": drawn - solved,
                        "total": drawn - started}
        self.status.value = self._summary(res)
        return res

    def close(self) -> None:
        """Close the widgets (and, with ipympl, the figures)."""
        if self.mode == "widget":
            import matplotlib.pyplot as plt

            for fig in self.figures.values():
                plt.close(fig)
        _close_tree(self.widget)

    # -- internals ---------------------------------------------------------------------------
    def _on_change(self, change: Mapping[str, Any]) -> None:
        self.update()

    def _solve(self, s: Mapping[str, Any]) -> Result:
        problem = SantaFeBar(**{k: s[k] for k in SLIDERS})
        # particles: a fixed seed, so that the figures change with the parameters, not the noise
        extra = {"n_particles": self.n_particles, "seed": 0} if s["method"] == "particles" else {}
        # N particles resolve the equilibrium to about 1/√N: no finer tol (and no warning)
        tol = max(self.tol, 1.0 / math.sqrt(self.n_particles)) if extra else self.tol
        last = self.result
        if last is not None and (last.method, last.backend, last.device, len(last.x)) == (
                s["method"], s["backend"], s["device"], s["nx"]):
            extra["initial"] = last  # warm start from the previous equilibrium
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # shown in the status line
            return solve(problem, nx=s["nx"], nt=s["nx"], method=s["method"],
                         backend=s["backend"], device=s["device"], tol=tol,
                         max_iter=self.max_iter, progress=False, **extra)

    def _new_figure(self) -> Figure:
        # Fixed margins instead of a layout engine: a constrained layout costs about as much
        # as the drawing itself, on every update.
        if self.mode == "widget":
            import matplotlib.pyplot as plt

            with plt.ioff():
                fig = plt.figure(figsize=FIGSIZE, dpi=self.dpi)
            fig.canvas.header_visible = False
        else:
            fig = Figure(figsize=FIGSIZE, dpi=self.dpi)
            FigureCanvasAgg(fig)  # one renderer kept across draws: its text caches stay warm
        return fig

    def _draw(self, res: Result) -> None:
        """Redraw each figure in turn (attendance first), each shown as soon as it is ready."""
        for name, fig in self.figures.items():
            with matplotlib.rc_context(RC):
                fig.clear()
                fig.subplots_adjust(**MARGINS)
                PANELS[name](res, ax=fig.add_subplot())
                if self.mode == "widget":
                    fig.canvas.draw_idle()
                    continue
                buf = io.BytesIO()
                fig.savefig(buf, format="png", dpi=self.dpi)
            self.views[name].value = buf.getvalue()

    def _summary(self, res: Result) -> str:
        m = res.metrics()
        state = ("converged" if res.converged else
                 "<span style='color:#b36b00'>not converged (max_iter reached)</span>")
        return (f"A* = {res.params['threshold']:.2f}: {state} in {res.iterations} iterations "
                f"(residual {res.residual:.1e}) · mean A = {m['mean_attendance']:.3f}"
                f" · time A > A* = {m['time_overcrowded']:.2f} · solve "
                f"{self.timings['solve']:.3f} s · draw {self.timings['draw']:.3f} s")

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


def _close_tree(widget: w.Widget) -> None:
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    widget.close()


def _resolve_mode(mode: str) -> str:
    check_choice("mode", mode, ("auto", "inline", "widget"))
    active = matplotlib.get_backend().lower()
    ipympl_active = "ipympl" in active or active == "widget"
    if mode == "widget" and not ipympl_active:
        raise ParameterError(f"mode={mode!r} is invalid here: it needs ipympl as the matplotlib "
                             f"backend (run `%matplotlib widget`; active: {active!r})")
    if mode == "auto":
        return "widget" if ipympl_active else "inline"
    return mode


#: name → (label, min, max, step) of each slider of the room explorer; a room given with a
#: door or a congestion outside a range widens it to cover the room (the door width up to
#: the room's length at most, as :class:`mfgwork.Room` allows).
ROOM_SLIDERS: dict[str, tuple[str, float, float, float]] = {
    "door_width": ("door width", 0.05, 0.4, 0.05),
    "congestion": ("congestion κ", 0.0, 10.0, 0.5),
}


class RoomExplorer:
    """The crowd in a room (:class:`mfgwork.Room`), explored: sliders for the width of both
    doors and the congestion cost κ (each change re-solves with :func:`mfgwork.solve`
    on ``nx`` × ``nx`` nodes and ``nt`` steps, NumPy, to ``tol``), and for the time t at
    which the density m(t, x, y) is shown as a PNG image (no new solve).

    ``room``: the other parameters (default ``Room()``); ``defaults``: the sliders' starting
    values (``door_width``, ``congestion``; default those of ``room``). A room with doors of
    different widths is solved as given (the slider starts at the wider door) until the
    door-width slider is moved; from then on both doors have the slider's width. The
    sliders' ranges (:data:`ROOM_SLIDERS`) widen to cover the given room. ``dpi``: of the
    image (:data:`DPI_RANGE`). Results of recently seen settings are reused; a failed solve
    shows its message and keeps the last image.
    """

    def __init__(self, room: Room | None = None, *, nx: int = 31, nt: int = 30,
                 tol: float = 1e-6, max_iter: int = 200, dpi: int = 80,
                 **defaults: float) -> None:
        room = Room() if room is None else room
        if not isinstance(room, Room):
            raise ParameterError(f"room={_what(room)} is invalid: the 2-D explorer takes a "
                                 "mw.Room (or None: mw.Room())")
        _unknown(defaults, ROOM_SLIDERS, ROOM_OPTIONS, "the room explorer")
        self.room = room
        self.nx, self.nt = check_int("nx", nx, low=5), check_int("nt", nt, low=2)
        self.tol = check_real("tol", tol, low=0.0)
        self.max_iter = check_int("max_iter", max_iter, low=1)
        self.dpi = _check_dpi(dpi)
        widths = tuple(room.door_widths)
        # the sliders' ranges, widened to cover the room given (within what a Room allows)
        ranges = {"door_width": (min(ROOM_SLIDERS["door_width"][1], *widths),
                                 min(max(ROOM_SLIDERS["door_width"][2], *widths), room.length)),
                  "congestion": (ROOM_SLIDERS["congestion"][1],
                                 max(ROOM_SLIDERS["congestion"][2], room.congestion))}
        start = {"door_width": max(widths), "congestion": room.congestion} | defaults
        values = {name: check_real(name, start[name], low=low, high=high, low_open=False,
                                   high_open=False)
                  for name, (low, high) in ranges.items()}
        # uneven doors: solved as given until the door-width slider moves
        self._widths: tuple[float, ...] | None = (
            widths if len(set(widths)) > 1 and "door_width" not in defaults else None)
        self.controls: dict[str, w.ValueWidget] = {
            name: w.FloatSlider(value=values[name], min=ranges[name][0], max=ranges[name][1],
                                step=step, description=label, continuous_update=False,
                                readout_format=".2f", style={"description_width": "7em"},
                                layout=w.Layout(width="24em"))
            for name, (label, _, _, step) in ROOM_SLIDERS.items()}
        self.controls["time"] = w.FloatSlider(
            value=room.T / 4, min=0.0, max=room.T, step=room.T / self.nt, description="time t",
            continuous_update=False, readout_format=".3f", style={"description_width": "7em"},
            layout=w.Layout(width="24em"))
        for name, control in self.controls.items():
            control.add_class(f"mfg-{name}")
            control.observe({"time": self._on_time, "door_width": self._on_door}.get(
                name, self._on_change), names="value")
        self.figure = Figure(figsize=(4.8, 4.0), dpi=self.dpi)
        FigureCanvasAgg(self.figure)
        self.view = w.Image(format="png", layout=w.Layout(width="45%", height="auto"))
        self.view.add_class("mfg-density-plot")
        self.status = w.HTML().add_class("mfg-status")
        self.widget = w.VBox([w.HBox([w.VBox(list(self.controls.values()))]), self.status,
                              self.view]).add_class("mfg-explorer")
        self.result: Result2D | None = None
        self.error: str | None = None
        self.solves = 0
        self._cache: OrderedDict[tuple, Result2D] = OrderedDict()
        self.update()

    def door_widths(self) -> tuple[float, ...]:
        """The widths of the doors solved for: the room's own while they differ and the
        door-width slider has not moved, else the slider's width for both doors."""
        if self._widths is not None:
            return self._widths
        width = float(self.controls["door_width"].value)
        return (width,) * len(self.room.door_widths)

    def problem(self) -> Room:
        """The room at the sliders' door width (see :meth:`door_widths`) and congestion."""
        r = self.room
        ob = r.obstacle
        return Room(length=r.length, T=r.T, sigma=r.sigma,
                    congestion=float(self.controls["congestion"].value),
                    door_widths=self.door_widths(), door_centers=r.door_centers,
                    obstacle=None if ob is None else (ob.x0, ob.x1, ob.y0, ob.y1),
                    start=r.start, spread=r.spread, terminal=r.terminal,
                    hamiltonian=r.hamiltonian)

    def update(self) -> Result2D | None:
        """Solve at the sliders' values (or reuse) and redraw; on failure show the message
        and return None (the previous image stays)."""
        widths = self.door_widths()
        key = (*widths, float(self.controls["congestion"].value))
        self.status.value = "<i>solving…</i>"
        try:
            res = self._cache.get(key) or self._solve()
        except Exception as err:  # any failed solve is shown in the widget, never raised
            self.error = f"{type(err).__name__}: {err}"
            self.status.value = ("<span style='color:#b00020'>" + html.escape(self.error)
                                 + "</span>")
            return None
        self._cache[key] = res
        self._cache.move_to_end(key)
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        self.result, self.error = res, None
        self._draw()
        state = ("converged" if res.converged else
                 "<span style='color:#b36b00'>not converged (max_iter reached)</span>")
        doors = (f"door width {widths[0]:.2f}" if len(set(widths)) == 1 else
                 f"door widths {', '.join(f'{v:.2f}' for v in widths)}")
        self.status.value = (f"{doors}, κ = {key[-1]:.2f}: {state} in "
                             f"{res.iterations} iterations (residual {res.residual:.1e}) · "
                             f"mass left at T = {float(res.mass[-1]):.3f} · solve "
                             f"{res.timings['total']:.2f} s")
        return res

    def close(self) -> None:
        """Close the widgets."""
        _close_tree(self.widget)

    def _solve(self) -> Result2D:
        self.solves += 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # shown in the status line
            return solve(self.problem(), nx=self.nx, nt=self.nt, tol=self.tol,
                         max_iter=self.max_iter, progress=False)

    def _on_change(self, change: Mapping[str, Any]) -> None:
        self.update()

    def _on_door(self, change: Mapping[str, Any]) -> None:
        self._widths = None   # the slider moved: both doors take its width
        self.update()

    def _on_time(self, change: Mapping[str, Any]) -> None:
        if self.result is not None:
            self._draw()

    def _draw(self) -> None:
        fig = self.figure
        with matplotlib.rc_context(RC):
            fig.clear()
            fig.subplots_adjust(left=0.14, right=0.9, bottom=0.12, top=0.92)
            plots2d.plot_density_at(self.result, float(self.controls["time"].value),
                                    ax=fig.add_subplot())
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=self.dpi)
        self.view.value = buf.getvalue()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


def explore(problem: Room | None = None, **defaults: Any) -> SantaFeExplorer | RoomExplorer:
    """A :class:`SantaFeExplorer` with the given starting values, or, for a
    :class:`mfgwork.Room`, a :class:`RoomExplorer` of it; display it in a notebook (it is
    the last expression of a cell, or ``display(explore(...))``)."""
    if problem is None:
        return SantaFeExplorer(**defaults)
    if isinstance(problem, Room):
        return RoomExplorer(problem, **defaults)
    hint = (" (for the Santa Fe Bar give its parameters as keywords, e.g. "
            "explore(threshold=0.6, sigma=0.5))" if isinstance(problem, SantaFeBar) else "")
    raise ParameterError(f"problem={_what(problem)} is invalid: explore takes None (the Santa "
                         f"Fe Bar explorer) or a mw.Room{hint}")


def _what(value: object) -> str:
    """A short description of ``value`` for a message: its repr when short, a long string
    shortened (marked "..."), else its type's name, as ``SantaFeBar(...)``."""
    text = repr(value)
    if len(text) <= 60 or isinstance(value, str):
        return short_repr(value)
    return f"{type(value).__name__}(...)"
