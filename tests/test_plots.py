"""The figures of the package: each returns a Figure, draws into given axes, labels every
axes; the convergence plot shows the deciding residual; writers give PNG and print-size PDF."""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

import mfgwork as mw
from mfgwork.analysis import game_plots, plots
from mfgwork.core.figures import PRINT_WIDTH, save_figure

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


def _plotted(ax):
    """The y values of every line of ``ax`` that carries data (not the axhline of tol)."""
    return [np.asarray(line.get_ydata(), dtype=float) for line in ax.lines]


def _with_history(result, **history):
    return dataclasses.replace(result, history=result.history | history)


def test_convergence_plots_the_residual_against_tol(santa_fe):
    ax = plots.plot_convergence(santa_fe).axes[0]
    assert ax.get_yscale() == "log"
    assert "residual" in ax.get_ylabel() and "change" not in ax.get_ylabel()
    assert ax.get_xlabel().startswith("iteration")
    tol = santa_fe.params["tol"]
    assert any(np.allclose(y, tol) for y in _plotted(ax)), "no tolerance line"
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert any("certified residual of the result" in label for label in labels)
    assert santa_fe.converged and ax.get_title().startswith("Converged")
    star = [line for line in ax.lines if line.get_marker() == "*"]
    assert len(star) == 1 and star[0].get_ydata()[0] == pytest.approx(santa_fe.residual)


def test_convergence_leaves_out_what_a_log_axis_cannot_show(santa_fe):
    n = len(santa_fe.history["residual"])
    zeros = _with_history(santa_fe, residual=[0.0] + santa_fe.history["residual"][1:],
                          change_U=[0.0] * n, change_M=[float("nan")] * n)
    ax = plots.plot_convergence(zeros, changes=True).axes[0]
    values = np.concatenate(_plotted(ax))
    assert values.size and np.all(np.isfinite(values)) and np.all(values > 0)
    assert "change" in ax.get_ylabel()


def test_convergence_never_says_converged_above_tol(santa_fe):
    tol = santa_fe.params["tol"]
    worse = dataclasses.replace(santa_fe, residual=10 * tol, converged=False,
                                status="max_iter")
    title = plots.plot_convergence(worse).axes[0].get_title()
    assert title.startswith("Not converged") and "converged in" not in title.lower()
    lying = dataclasses.replace(santa_fe, residual=10 * tol, converged=True)
    assert plots.plot_convergence(lying).axes[0].get_title().startswith("Not converged")


def test_convergence_marks_the_newton_steps(santa_fe):
    n = len(santa_fe.history["residual"])
    newton = 3
    hjb = santa_fe.history["time_hjb"][:n - newton] + [0.0] * newton
    fp = santa_fe.history["time_fp"][:n - newton] + [0.0] * newton
    ax = plots.plot_convergence(_with_history(santa_fe, time_hjb=hjb, time_fp=fp)).axes[0]
    spans = [p for p in ax.patches if p.get_label() == "Newton steps (fallback)"]
    assert len(spans) == 1
    x0, x1 = spans[0].get_x(), spans[0].get_x() + spans[0].get_width()
    assert (x0, x1) == pytest.approx((n - newton + 0.5, n + 0.5))
    plain = plots.plot_convergence(santa_fe).axes[0]
    assert not [p for p in plain.patches if p.get_label().startswith("Newton steps")]


def test_attendance_legend_leaves_the_curve_free(santa_fe):
    fig = plots.plot_attendance(santa_fe)
    ax = fig.axes[0]
    fig.canvas.draw()
    box = ax.get_legend().get_window_extent()
    curve = next(line for line in ax.lines if line.get_label() == "A(t)")
    points = ax.transData.transform(np.column_stack([curve.get_xdata(), curve.get_ydata()]))
    inside = ((points[:, 0] >= box.x0) & (points[:, 0] <= box.x1)
              & (points[:, 1] >= box.y0) & (points[:, 1] <= box.y1))
    assert not inside.any()
    assert "payoff of going" in ax.get_legend().get_title().get_text()


def test_santa_fe_figures_refuse_other_problems(hopf_cole):
    with pytest.raises(mw.ParameterError, match="attendance"):
        plots.plot_attendance(hopf_cole)
    with pytest.raises(mw.ParameterError, match="attendance"):
        plots.plot_phase_portrait(hopf_cole)
    assert set(plots.standard_figures(hopf_cole)) == {
        "density_heatmap", "density_snapshots", "value_snapshots", "convergence"}


def test_save_figures_writes_pngs_and_print_size_pdfs(santa_fe, tmp_path):
    paths = plots.save_figures(santa_fe, tmp_path / "figures")
    stems = {"density_heatmap", "attendance", "density_snapshots", "value_snapshots",
             "convergence", "phase_portrait"}
    assert sorted(p.name for p in paths) == sorted(f"{s}.{e}" for s in stems
                                                   for e in ("png", "pdf"))
    for path in paths:
        if path.suffix == ".png":
            image = imread(path)
            assert image.ndim == 3 and min(image.shape[:2]) > 100
            assert image.std() > 0.01  # not a blank canvas
        else:
            assert _pdf_width_points(path) <= 72 * PRINT_WIDTH + 0.5


def _pdf_width_points(path) -> float:
    data = path.read_bytes()
    assert data.startswith(b"%PDF")
    box = re.search(rb"/MediaBox \[\s*([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+)", data)
    return float(box.group(3)) - float(box.group(1))


def test_wide_figures_print_at_page_width_and_keep_their_size(tmp_path):
    fig = plots.plot_backend_comparison([{"label": "a", "wall_time_s": 0.1}])
    size = tuple(fig.get_size_inches())
    assert size[0] > PRINT_WIDTH
    png, pdf = save_figure(fig, tmp_path, "wide")
    assert _pdf_width_points(pdf) == pytest.approx(72 * PRINT_WIDTH)
    assert tuple(fig.get_size_inches()) == size and png.stat().st_size > 0


def _package_figures(santa_fe, hopf_cole):
    """Every figure the package draws, at small sizes."""
    yield from plots.standard_figures(santa_fe).values()
    yield from plots.standard_figures(hopf_cole).values()
    yield plots.plot_payoff(mw.SantaFeBar())
    yield plots.plot_refinement([{"h": 0.1, "error_U": 1e-2, "error_M": 2e-2},
                                 {"h": 0.05, "error_U": 5e-3, "error_M": 1e-2}])
    yield plots.plot_backend_comparison([{"label": "a", "wall_time_s": 0.1, "rel_error_U": 1e-6,
                                          "rel_error_M": 1e-6, "rel_error_A": 1e-7}])
    study = [mw.n_player(mw.SantaFeBar(), santa_fe, n, n_samples=3, seed=1, gap=False)
             for n in (10, 100)]
    yield game_plots.plot_n_player_paths(study)
    rows = [{"n_players": n, "distance": 0.1 / n**0.5, "distance_se": 0.01, "bias": 1e-3,
             "cost_error": 0.2 / n**0.5, "cost_error_se": 0.01, "gap": 1.0 / n,
             "gap_se": 0.01} for n in (10, 100, 1000)]
    yield game_plots.plot_n_player_convergence(rows)
    yield game_plots.plot_attendance_paths({"θ": (santa_fe.t, santa_fe.attendance)},
                                           level=0.63, threshold=0.6)
    yield game_plots.plot_switching(mw.solve_two_state(mw.TwoStateElFarol(), nt=40))
    panel = [{"c": c, "time_to_plateau": 1.0 * c, "attendance_mid": 0.6} for c in (0.5, 1.0)]
    yield game_plots.plot_plateau_study({"two states": ("c", panel)}, level=0.63)
    yield mw.crossover.plot_crossover([
        {"method": m, "source": "shipped", "target": "cpu", "size": n, "seconds": 0.1 * n}
        for m in ("fdm_batch", "particles") for n in (1, 10)])


def test_every_axes_of_every_figure_is_labelled(santa_fe, hopf_cole):
    count = 0
    for fig in _package_figures(santa_fe, hopf_cole):
        for ax in fig.axes:
            if ax.get_label() == "<colorbar>" or not ax.get_visible():
                continue
            what = f"{ax.get_title()!r} of {fig}"
            assert ax.get_xlabel().strip() and ax.get_ylabel().strip(), what
            count += 1
    assert count >= 20


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
