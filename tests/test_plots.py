"""The standard figures: each returns a Figure, draws into given axes, and writes decodable PNGs."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

import mfgwork as mw
from mfgwork.analysis import plots

SINGLE_AXES = [plots.plot_density_heatmap, plots.plot_attendance, plots.plot_density_snapshots,
               plots.plot_value_snapshots, plots.plot_convergence, plots.plot_phase_portrait]


@pytest.fixture(scope="module")
def santa_fe() -> mw.Result:
    return mw.solve(mw.SantaFeBar(), nx=31, nt=30, progress=False)


@pytest.fixture(scope="module")
def hopf_cole() -> mw.Result:
    return mw.solve(mw.HopfColeProblem(), nx=21, nt=20, progress=False)


@pytest.mark.parametrize("plot", SINGLE_AXES, ids=lambda f: f.__name__)
def test_returns_a_figure_and_draws_into_given_axes(plot, santa_fe):
    fig = plot(santa_fe)
    assert isinstance(fig, Figure) and fig.axes
    host = Figure()
    ax = host.add_subplot()
    assert plot(santa_fe, ax=ax) is host
    assert ax.has_data()


def test_heatmap_marks_theta_zero(santa_fe):
    ax = plots.plot_density_heatmap(santa_fe).axes[0]
    assert any(np.allclose(line.get_ydata(), 0.0) for line in ax.lines)


def test_attendance_shows_the_path_and_the_zero_of_the_payoff(santa_fe):
    ax = plots.plot_attendance(santa_fe).axes[0]
    A = mw.to_numpy(santa_fe.attendance)
    assert any(np.array_equal(line.get_ydata(), A) for line in ax.lines)
    level = plots.equilibrium_attendance(santa_fe.params)
    assert abs(mw.SantaFeBar().payoff(level)) < 1e-9
    assert any(np.allclose(line.get_ydata(), level) for line in ax.lines)


def test_equilibrium_attendance_undefined_without_a_sign_change():
    assert plots.equilibrium_attendance({"threshold": 0.6, "eps": 0.05, "good": 10.0,
                                         "bad": 1.0}) is None
    assert plots.equilibrium_attendance({}) is None


def test_snapshots_one_curve_per_time(santa_fe):
    fig = plots.plot_value_snapshots(santa_fe, times=[0.0, 5.0, 10.0])
    curves = fig.axes[0].lines
    assert len(curves) == 3
    np.testing.assert_allclose(curves[0].get_ydata(), mw.to_numpy(santa_fe.U)[0])
    with pytest.raises(mw.ParameterError, match="times"):
        plots.plot_density_snapshots(santa_fe, times=[11.0])


def test_convergence_is_log_scale(santa_fe):
    ax = plots.plot_convergence(santa_fe).axes[0]
    assert ax.get_yscale() == "log"
    assert len(ax.lines) >= 2


def test_santa_fe_figures_refuse_other_problems(hopf_cole):
    with pytest.raises(mw.ParameterError, match="attendance"):
        plots.plot_attendance(hopf_cole)
    with pytest.raises(mw.ParameterError, match="attendance"):
        plots.plot_phase_portrait(hopf_cole)
    assert set(plots.standard_figures(hopf_cole)) == {
        "density_heatmap", "density_snapshots", "value_snapshots", "convergence"}


def test_save_figures_writes_decodable_pngs(santa_fe, tmp_path):
    paths = plots.save_figures(santa_fe, tmp_path / "figures")
    assert {p.stem for p in paths} == {"density_heatmap", "attendance", "density_snapshots",
                                       "value_snapshots", "convergence", "phase_portrait"}
    for path in paths:
        image = imread(path)
        assert image.ndim == 3 and min(image.shape[:2]) > 100
        assert image.std() > 0.01  # not a blank canvas


def test_backend_comparison_and_refinement(tmp_path):
    table = [{"label": "ref", "wall_time_s": 0.1, "rel_error_U": 0.0, "rel_error_M": 0.0,
              "rel_error_A": 0.0},
             {"label": "f32", "wall_time_s": 0.5, "rel_error_U": 1e-6, "rel_error_M": 2e-6,
              "rel_error_A": 3e-7}]
    fig = plots.plot_backend_comparison(table)
    assert len(fig.axes) == 2 and fig.axes[1].get_yscale() == "log"
    with pytest.raises(mw.ParameterError, match="table"):
        plots.plot_backend_comparison([{"wall_time_s": 1.0}])
    rows = [{"h": 0.1, "error_U": 1e-2, "error_M": 2e-2},
            {"h": 0.05, "error_U": 5e-3, "error_M": 1e-2}]
    ax = plots.plot_refinement(rows).axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    payoff = plots.plot_payoff(mw.SantaFeBar()).axes[0]
    F = payoff.lines[0].get_ydata()
    assert F[0] > 0 > F[-1] and math.isclose(F[0], 10.0, rel_tol=1e-3)


def test_library_leaves_pyplot_alone():
    code = ("import mfgwork as mw, sys; from mfgwork.analysis import plots;"
            "r = mw.solve(mw.SantaFeBar(), nx=21, nt=20, progress=False);"
            "plots.standard_figures(r); print('matplotlib.pyplot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
