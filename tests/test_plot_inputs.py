"""What the figure functions take: each refuses, with a ParameterError naming the result's
kind and what it draws, a result of a kind it does not draw, anything but a result, and an
array with no finite value; the standard set of each kind has the figures that draw it."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.analysis import plots, plots2d

PROBLEMS = {"santa_fe": "santa_fe_bar", "populations": "santa_fe_populations",
            "noise": "common_noise", "two_state": "two_state_el_farol", "room": "room",
            "bars": "two_bars"}


@pytest.fixture(scope="module")
def results() -> dict[str, mw.Result]:
    """One small result of each kind."""
    groups = mw.SantaFePopulations([mw.Population("a", 0.5, mw.SantaFeBar(threshold=0.5)),
                                    mw.Population("b", 0.5, mw.SantaFeBar(threshold=0.7))])
    noise = mw.CommonNoise(mw.SantaFeBar(), "good", [12.0, 8.0],
                           transition=[[0.8, 0.2], [0.3, 0.7]], depth=1)
    return {"santa_fe": mw.solve(mw.SantaFeBar(), nx=21, nt=20, progress=False),
            "populations": mw.solve(groups, nx=21, nt=20, progress=False),
            "noise": mw.solve(noise, nx=21, nt=20),
            "two_state": mw.solve(mw.TwoStateElFarol(), nt=20),
            "room": mw.solve(mw.Room(), nx=11, nt=10, progress=False),
            "bars": mw.solve(mw.TwoBars(thresholds=(0.6, 0.4), T=1.0), nx=11, nt=8,
                             progress=False)}


def refused(kind: str, figure: str, name: str = "result"):
    """The refusal of a result of ``kind`` by ``figure``."""
    return pytest.raises(mw.ParameterError,
                         match=rf"^{re.escape(name)}=Result(2D)?\(problem='{PROBLEMS[kind]}', "
                               rf"dims=\(.*\)\) is invalid for {figure}: it draws ")


ONE_D_REFUSED = [(plots.plot_density_heatmap, k) for k in ("populations", "noise", "room", "bars")]
ONE_D_REFUSED += [(plot, k) for plot in (plots.plot_density_snapshots, plots.plot_value_snapshots)
                  for k in ("populations", "noise", "room", "bars")]
ONE_D_REFUSED += [(plots.plot_attendance, k) for k in ("noise", "bars")]
ONE_D_REFUSED += [(plots.plot_phase_portrait, k) for k in ("noise", "two_state", "bars")]


@pytest.mark.parametrize(("plot", "kind"), ONE_D_REFUSED,
                         ids=[f"{p.__name__}-{k}" for p, k in ONE_D_REFUSED])
def test_one_d_figures_refuse_the_kinds_they_do_not_draw(results, plot, kind):
    with refused(kind, plot.__name__):
        plot(results[kind])


TWO_D = [plots2d.plot_density_2d, plots2d.plot_density_at, plots2d.plot_velocity_field,
         plots2d.plot_exit_flux, plots2d.standard_figures_2d, plots2d.animation_html]


@pytest.mark.parametrize("kind", ["santa_fe", "populations", "noise", "two_state"])
def test_two_d_figures_refuse_other_kinds(results, kind):
    for plot in TWO_D:
        with refused(kind, plot.__name__):
            plot(results[kind])
    with refused(kind, "plot_evacuation", name=f"results[{kind!r}]"):
        plots2d.plot_evacuation({"room": results["room"], kind: results[kind]})


TAKE_A_RESULT = [plots.plot_density_heatmap, plots.plot_attendance, plots.plot_attendance_fan,
                 plots.plot_density_snapshots, plots.plot_value_snapshots,
                 plots.plot_convergence, plots.plot_phase_portrait, plots.describe_iteration,
                 plots.standard_figures, plots2d.plot_bar_attendance, *TWO_D]


@pytest.mark.parametrize("value", [None, 3, "x"])
def test_figures_refuse_what_is_not_a_result(value):
    for plot in TAKE_A_RESULT:
        with pytest.raises(mw.ParameterError, match=rf"^result={value!r} is invalid for "
                           rf"{plot.__name__}: it takes an mw.Result .* and (draws|describes)"):
            plot(value)
    with pytest.raises(mw.ParameterError, match=r"^results\['a'\]=None is invalid"):
        plots2d.plot_evacuation({"a": None})


def test_standard_figures_are_those_that_draw_the_kind(results):
    assert set(plots.standard_figures(results["populations"])) == {
        "attendance", "convergence", "phase_portrait"}
    assert set(plots.standard_figures(results["two_state"])) == {
        "density_heatmap", "attendance", "density_snapshots", "value_snapshots", "convergence"}
    for kind in ("room", "bars"):
        with refused(kind, "standard_figures"):
            plots.standard_figures(results[kind])


@pytest.mark.parametrize(("kind", "array", "plot"), [
    ("santa_fe", "M", plots.plot_density_heatmap),
    ("santa_fe", "U", plots.plot_value_snapshots),
    ("santa_fe", "attendance", plots.plot_attendance),
    ("noise", "attendance", plots.plot_attendance_fan),
    ("room", "M", plots2d.plot_density_2d),
    ("bars", "attendance", plots2d.plot_bar_attendance),
], ids=lambda v: getattr(v, "__name__", v))
def test_an_array_without_a_finite_value_is_named(results, kind, array, plot):
    result = results[kind]
    if array in ("U", "M"):
        empty = dataclasses.replace(result, **{array: np.full(np.shape(result.M), np.nan)})
    else:
        observables = dict(result.observables)
        observables[array] = np.full(np.shape(observables[array]), np.nan)
        empty = dataclasses.replace(result, observables=observables)
    with pytest.raises(mw.ParameterError, match=rf"is invalid for {plot.__name__}: its "
                       rf"{array} has no finite value"):
        plot(empty)
