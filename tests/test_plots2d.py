"""The 2-D figures and the animation: labelled axes, drawn data equal to the result's arrays,
the outflow through each door against the scheme's total, the mass balance and the fluxes
across the doors' edges, an offline player with the expected frames, and a writer that
replaces only its own pages."""

from __future__ import annotations

import os

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.quiver import Quiver

import mfgwork as mw
from mfgwork.analysis import plots2d

GRID = {"nx": 13, "nt": 12}


@pytest.fixture(scope="module")
def room() -> mw.Result2D:
    return mw.solve_2d(mw.Room(door_widths=(0.1, 0.3)), **GRID, progress=False)


@pytest.fixture(scope="module")
def bars() -> mw.Result2D:
    return mw.solve_2d(mw.TwoBars(thresholds=(0.6, 0.4), T=1.0), nx=11, nt=8, progress=False)


def plot_axes(fig: Figure) -> list:
    """The axes of a figure other than its colour bars."""
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]


def test_mw_plots2d_is_the_module():
    assert mw.plots2d is plots2d


@pytest.mark.parametrize("name", ["density_2d", "velocity_field", "exit_flux"])
def test_room_figures_label_every_axes(room, name):
    fig = plots2d.standard_figures_2d(room)[name]
    assert isinstance(fig, Figure)
    for ax in plot_axes(fig):
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert name == "exit_flux" or any("density m(t, x, y)" in ax.get_ylabel() for ax in bars)


def test_density_snapshots_draw_the_result_at_the_chosen_times(room):
    fig = plots2d.plot_density_2d(room, times=[0.0, 0.5, 1.0])
    axes = plot_axes(fig)
    assert len(axes) == 3 and axes[0].get_xlabel() == "state x"
    for ax, n in zip(axes, (0, 6, 12), strict=True):
        image, = ax.images
        drawn = image.get_array()
        np.testing.assert_array_equal(np.ma.getdata(drawn)[~room.obstacle],
                                      room.M[n][~room.obstacle])
        assert np.ma.getmaskarray(drawn).reshape(room.obstacle.shape).tolist() == \
            room.obstacle.tolist()
        # the exits are marked at the exit nodes
        marks, = [ln for ln in ax.get_lines() if ln.get_label() == "exit"]
        X, Y = np.meshgrid(room.x, room.y)
        np.testing.assert_array_equal(marks.get_xdata(), X[room.exit])
        assert f"t = {room.t[n]:.3g}" in ax.get_title()
    with pytest.raises(mw.ParameterError, match="times="):
        plots2d.plot_density_2d(room, times=[2.0])


def test_quiver_shows_the_velocity_of_the_result_at_its_nodes(room):
    fig = plots2d.plot_velocity_field(room, time=0.25, arrows=6)
    ax, = plot_axes(fig)
    quiver, = [c for c in ax.collections if isinstance(c, Quiver)]
    n = int(np.argmin(np.abs(room.t - 0.25)))
    xy = quiver.get_offsets()
    i = np.searchsorted(room.x, xy[:, 0])
    j = np.searchsorted(room.y, xy[:, 1])
    np.testing.assert_allclose(room.x[i], xy[:, 0], atol=1e-12)
    np.testing.assert_array_equal(quiver.U, room.velocity_x[n, j, i])
    np.testing.assert_array_equal(quiver.V, room.velocity_y[n, j, i])
    assert not (room.obstacle[j, i] | room.exit[j, i]).any() and 10 < len(i) < 60
    assert np.abs(quiver.U).max() > 0  # the crowd moves
    assert ax.get_xlabel() == "state x" and ax.get_ylabel() == "state y"


def test_exit_flux_per_door_adds_up_to_the_scheme_outflow(room):
    doors = room.door_outflow
    assert doors.shape == (room.t.size, 2) and (doors >= 0).all() and (doors[0] == 0).all()
    assert room.doors == ("right wall y=0.25, width 0.1", "right wall y=0.75, width 0.3")
    np.testing.assert_allclose(doors.sum(axis=1), room.outflow, rtol=0, atol=1e-14)
    # mass in the room + what left through the doors = the initial mass
    balance = room.mass + np.cumsum(doors.sum(axis=1))
    assert np.max(np.abs(balance - room.mass[0])) <= 1e-12 and room.mass[0] == pytest.approx(1)
    assert doors[:, 1].sum() > 1.2 * doors[:, 0].sum()  # the wider door lets more out
    fig = plots2d.plot_exit_flux(room)
    left, right = plot_axes(fig)
    lines = {ln.get_label(): ln for ln in left.get_lines()}
    dt = room.t[1] - room.t[0]
    np.testing.assert_array_equal(lines["all doors"].get_ydata(), room.exit_flux[1:])
    door_lines = [ln for label, ln in lines.items() if label.startswith("door")]
    assert [ln.get_label() for ln in door_lines] == [
        f"door {d + 1} ({room.doors[d]})" for d in range(2)]
    for d, ln in enumerate(door_lines):
        np.testing.assert_allclose(ln.get_ydata(), doors[1:, d] / dt, rtol=1e-15)
    balance, = [ln for ln in right.get_lines() if ln.get_label().startswith("sum")]
    assert np.max(np.abs(balance.get_ydata() - 1.0)) <= 1e-12


def test_door_outflow_is_the_flux_across_the_edges_into_each_door(room):
    """Recomputed edge by edge from U and M (½|p|²: the upwind coefficient of node k
    towards an exit node e is −ν/(h w) + min(q, 0)/h with q the gradient from k to e)."""
    p = room.problem
    g = p.grid(room.x.size, room.y.size, room.t.size - 1)
    door = g.door_index
    expected = np.zeros_like(room.door_outflow)
    for n in range(g.nt):
        u, mu = room.U[n], room.M[n + 1] * g.volumes
        for j, i in zip(*np.nonzero(g.active), strict=True):
            for dj, di in ((0, -1), (0, 1), (-1, 0), (1, 0)):
                jj, ii = j + dj, i + di
                if not (0 <= jj < g.ny and 0 <= ii < g.nx) or door[jj, ii] < 0:
                    continue
                h, w = (g.hx, g.wx[i]) if di else (g.hy, g.wy[j])
                q = (u[jj, ii] - u[j, i]) / h  # the gradient towards the exit
                coefficient = -p.nu / (h * w) + min(q, 0.0) / h
                expected[n + 1, door[jj, ii]] -= g.dt * coefficient * mu[j, i]
    np.testing.assert_allclose(room.door_outflow, expected, rtol=1e-12, atol=1e-16)


def test_symmetric_doors_take_equal_shares():
    # to a tolerance whose (inexact) sweeps resolve the mirror symmetry below 1e-9
    r = mw.solve_2d(mw.Room(), nx=11, nt=6, tol=1e-10, progress=False)
    np.testing.assert_allclose(r.door_outflow[:, 0], r.door_outflow[:, 1], rtol=1e-9,
                               atol=1e-15)
    assert r.door_outflow[1:].min() > 0


def test_door_outflow_is_saved_and_labelled(room, tmp_path):
    room.save(tmp_path / "r")
    loaded = mw.load(tmp_path / "r")
    np.testing.assert_array_equal(loaded.door_outflow, room.door_outflow)
    assert loaded.doors == room.doors
    plots2d.plot_exit_flux(loaded)  # the split by door needs no problem
    ds = room.to_xarray()
    assert ds["door_outflow"].dims == ("t", "door")
    assert list(ds["door"].values) == list(room.doors)
    bars = mw.solve_2d(mw.TwoBars(T=1.0), nx=9, nt=4, progress=False)
    assert bars.door_outflow.shape == (5, 0) and bars.doors == () and (bars.outflow == 0).all()


def test_bar_attendance_draws_both_paths_and_refuses_a_room(bars, room):
    fig = plots2d.plot_bar_attendance(bars, references={"1-D": (bars.t, bars.attendance[:, 0])})
    ax, = plot_axes(fig)
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    for j in range(2):
        np.testing.assert_array_equal(lines[f"bar {j + 1}: A$_{j + 1}$(t)"].get_ydata(),
                                      bars.attendance[:, j])
    assert lines["threshold A*$_2$ = 0.4"].get_ydata()[0] == 0.4
    assert "1-D" in lines and ax.get_ylabel() and ax.get_xlabel() == "time t"
    density = plots2d.plot_density_2d(bars, times=[0.5])
    assert plot_axes(density)[0].get_xlabel() == "preference θ1 for bar 1"
    with pytest.raises(mw.ParameterError, match="attendance pair"):
        plots2d.plot_bar_attendance(room)


def test_animation_has_the_frames_asked_for_and_nothing_from_the_network(room):
    page = plots2d.animation_html(room, frames=5, dpi=30)
    assert page.count("data:image/png;base64,") == 5
    assert "://" not in page and "<link" not in page and "fa-" not in page
    assert "<script" in page and "▶" in page
    short = mw.solve_2d(mw.Room(), nx=7, nt=3, progress=False)
    every = plots2d.animation_html(short, frames=100, dpi=20)
    assert every.count("data:image/png;base64,") == 4  # no more frames than time levels
    assert plots2d.frame_indices(12, 5) == [0, 3, 6, 9, 12]
    with pytest.raises(mw.ParameterError, match="frames=1"):
        plots2d.animation_html(room, frames=1)


def test_animation_writer_replaces_only_its_own_pages(room, tmp_path):
    page = plots2d.animation_html(room, frames=3, dpi=30)
    target = tmp_path / "anim" / "room.html"
    assert plots2d.write_animation(page, target) == target
    text = target.read_text(encoding="utf-8")
    assert text.startswith(plots2d.ANIMATION_HEAD) and page in text
    plots2d.write_animation(page, target)  # its own page: replaced
    other = tmp_path / "notes.html"
    other.write_text("<p>mine</p>")
    with pytest.raises(mw.ParameterError, match="did not write"):
        plots2d.write_animation(page, other)
    assert other.read_text() == "<p>mine</p>"
    with pytest.raises(mw.ParameterError, match="folder"):
        plots2d.write_animation(page, tmp_path / "anim")
    link = tmp_path / "link.html"
    os.symlink(target, link)
    with pytest.raises(mw.ParameterError, match="link"):
        plots2d.write_animation(page, link)
    with pytest.raises(mw.ParameterError, match="html="):
        plots2d.write_animation("no player", tmp_path / "x.html")
    plots2d.write_animation(page, other, force=True)
    assert other.read_text(encoding="utf-8").startswith(plots2d.ANIMATION_HEAD)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["anim", "link.html", "notes.html"]


def test_density_at_a_time_and_the_evacuation_draw_the_result(room):
    fig = plots2d.plot_density_at(room, time=0.5)
    ax, = plot_axes(fig)
    image, = ax.images
    np.testing.assert_array_equal(np.ma.getdata(image.get_array())[~room.obstacle],
                                  room.M[6][~room.obstacle])
    assert "t = 0.5" in ax.get_title() and ax.get_xlabel() == "state x"
    fig = plots2d.plot_evacuation({"a": room})
    left, right = plot_axes(fig)
    np.testing.assert_array_equal(left.get_lines()[0].get_ydata(), room.mass)
    np.testing.assert_array_equal(right.get_lines()[0].get_ydata(), room.exit_flux[1:])
    with pytest.raises(mw.ParameterError, match="results is empty"):
        plots2d.plot_evacuation({})
