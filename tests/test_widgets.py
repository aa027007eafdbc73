"""The Santa Fe explorer without a browser: controls drive solves, figures and messages."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("ipywidgets")

import mfgwork as mw  # noqa: E402
from mfgwork.apps import explorer as widgets  # noqa: E402
from mfgwork.fdm1d import METHODS  # noqa: E402

NUMPY_ONLY = [("numpy", "cpu")]
# ipympl's toolbar passes an argument traitlets deprecates; not ours to fix
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Passing unrecognized arguments to super\(Toolbar\):DeprecationWarning")


def make(**kw) -> widgets.SantaFeExplorer:
    kw = {"nx": 52, "devices": NUMPY_ONLY, "dpi": 40} | kw
    return widgets.SantaFeExplorer(**kw)


@pytest.fixture(scope="module")
def explorer():
    ex = make()
    yield ex
    ex.close()


def png_size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return im.size


def test_opens_with_a_solution_and_three_pngs(explorer):
    res = explorer.result
    assert res is not None and res.converged and explorer.error is None
    assert res.params["threshold"] == pytest.approx(0.6)
    assert np.shape(res.M) == (53, 52)
    for name in widgets.PANELS:
        w, h = png_size(explorer.views[name].value)
        assert w > 100 and h > 100
    assert "converged" in explorer.status.value
    assert explorer.timings["total"] >= explorer.timings["solve"] > 0


def test_threshold_slider_resolves_and_redraws(explorer):
    before_png = explorer.views["attendance"].value
    before_A = mw.to_numpy(explorer.result.attendance).copy()
    explorer.controls["threshold"].value = 0.4
    res = explorer.result
    assert res.params["threshold"] == pytest.approx(0.4)
    assert np.max(np.abs(mw.to_numpy(res.attendance) - before_A)) > 0.05
    assert explorer.views["attendance"].value != before_png
    # the equilibrium level sits near the new threshold, not the old one
    assert abs(float(mw.to_numpy(res.attendance)[-5]) - 0.4) < 0.1


@pytest.mark.parametrize(("name", "value"), [("sigma", 0.8), ("good", 6.0), ("bad", -9.0),
                                             ("eps", 0.1), ("T", 4.0)])
def test_each_slider_reaches_the_problem(explorer, name, value):
    explorer.controls[name].value = value
    assert explorer.error is None
    assert explorer.result.params[name] == pytest.approx(value)
    if name == "T":
        assert float(mw.to_numpy(explorer.result.t)[-1]) == pytest.approx(value)


def test_grid_menu_changes_the_grid(explorer):
    explorer.controls["nx"].value = 101
    assert np.shape(explorer.result.M) == (102, 101)
    assert explorer.settings()["nx"] == 101
    explorer.controls["nx"].value = 52
    assert np.shape(explorer.result.M) == (53, 52)


def test_invalid_combination_shows_the_message_and_recovers(explorer):
    explorer.controls["bad"].value = -5.0
    good_png, good_result = explorer.views["attendance"].value, explorer.result
    explorer.controls["good"].value = -8.0     # below bad: not a valid Santa Fe problem
    assert explorer.error is not None and explorer.error.startswith("ParameterError")
    assert "good=-8.0" in explorer.status.value and "bad" in explorer.status.value
    assert explorer.result is good_result and explorer.views["attendance"].value == good_png
    explorer.controls["bad"].value = -10.0     # fixes it: the explorer is still live
    assert explorer.error is None and explorer.result.params["bad"] == -10.0
    assert explorer.views["attendance"].value != good_png


def test_solver_error_is_shown_not_raised(explorer, monkeypatch):
    def diverge(*args, **kwargs):
        raise mw.SolverError("non-finite values in U at Picard iteration 3: the iteration "
                             "diverged")

    monkeypatch.setattr(widgets, "solve", diverge)
    explorer.controls["threshold"].value = 0.3
    assert explorer.error.startswith("SolverError") and "diverged" in explorer.status.value
    monkeypatch.undo()
    explorer.controls["threshold"].value = 0.35
    assert explorer.error is None and explorer.result.params["threshold"] == pytest.approx(0.35)


def test_not_converged_is_reported_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ex = make(max_iter=3)
    assert not ex.result.converged and ex.result.iterations == 3
    assert "not converged" in ex.status.value
    ex.close()


def test_returning_to_earlier_settings_reuses_the_result(explorer):
    first, start = explorer.result, explorer.controls["threshold"].value
    explorer.controls["threshold"].value = start + 0.1
    assert explorer.result is not first
    explorer.controls["threshold"].value = start
    assert explorer.result is first


def test_menus_offer_methods_and_available_devices(monkeypatch):
    monkeypatch.setattr(widgets, "available_backends",
                        lambda: {"numpy": ["cpu"], "torch": ["cuda", "cpu"]})
    ex = widgets.SantaFeExplorer(nx=52, dpi=40)
    assert list(ex.controls["method"].options) == list(METHODS)
    assert [v for _, v in ex.controls["device"].options] == [
        ("numpy", "cpu"), ("torch", "cuda"), ("torch", "cpu")]
    ex.close()


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"threshold": 1.2}, ["threshold=1.2", "0.95"]),
    ({"sigma": float("nan")}, ["sigma", "finite"]),
    ({"beta": 1.0}, ["beta=1.0", "threshold"]),
    ({"nx": 77}, ["nx=77", "101"]),
    ({"method": "spectral"}, ["method='spectral'", "'fdm'"]),
    ({"backend": "torch", "device": "cuda"}, ["'cuda'", "numpy/cpu"]),
    ({"mode": "widget"}, ["mode='widget'", "%matplotlib widget"]),
    ({"max_iter": 0}, ["max_iter=0", ">= 1"]),
])
def test_bad_arguments_are_named_before_any_solve(kwargs, words, monkeypatch):
    monkeypatch.setattr(widgets, "solve", lambda *a, **k: pytest.fail("solved"))
    with pytest.raises(mw.ParameterError) as info:
        make(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_ipympl_canvases_are_redrawn_in_place():
    pytest.importorskip("ipympl")
    import matplotlib
    import matplotlib.pyplot as plt

    previous = matplotlib.get_backend()
    plt.switch_backend("module://ipympl.backend_nbagg")
    try:
        ex = make()
        assert ex.mode == "widget"
        canvas = ex.views["attendance"]
        assert canvas is ex.figures["attendance"].canvas
        line = ex.figures["attendance"].axes[0].lines[-1].get_ydata().copy()
        ex.controls["threshold"].value = 0.45
        assert ex.views["attendance"] is canvas
        new = ex.figures["attendance"].axes[0].lines[-1].get_ydata()
        assert np.max(np.abs(new - line)) > 0.05
        ex.close()
        assert not any(plt.fignum_exists(f.number) for f in ex.figures.values())
    finally:
        plt.switch_backend(previous)


def test_displays_as_the_widget(explorer):
    bundle = explorer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == \
        explorer.widget.model_id


@pytest.mark.skipif("particles" not in METHODS, reason="mw.solve has no particle method")
def test_method_menu_switches_to_particles():
    ex = make(n_particles=2000)
    ex.controls["method"].value = "particles"
    assert ex.error is None, ex.error
    assert ex.result.method == "particles" and ex.result.params["seed"] == 0
    ex.close()


@pytest.mark.slow
def test_explorer_notebook_headless_writes_its_figures(notebook_runs):
    """03_explorer under papermill: the explorer is built and its figures written."""
    out = notebook_runs("03_explorer.ipynb").folder  # threshold 0.5, nx 52
    params = json.loads((out / "parameters.json").read_text())
    assert params["threshold"] == 0.5 and params["nx"] == params["nt"] == 52
    assert sorted(p.name for p in (out / "figures").iterdir()) == [
        f"{name}.{ext}" for name in ("attendance", "convergence", "density")
        for ext in ("pdf", "png")]
    for png in (out / "figures").glob("*.png"):
        w, h = png_size(png.read_bytes())
        assert w > 300 and h > 200
    with np.load(out / "arrays.npz") as data:
        assert data["attendance"].shape == (53,)
        assert abs(float(data["attendance"][-5]) - 0.5) < 0.1


def test_mw_widgets_loads_on_first_use_only():
    assert mw.widgets is widgets and mw.widgets.explore is widgets.explore
    code = ("import sys, mfgwork; assert 'ipywidgets' not in sys.modules; "
            "mfgwork.widgets; assert 'ipywidgets' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the 2-D room --------------------------------------------------------------------------
ROOM_GRID = {"nx": 11, "nt": 8, "dpi": 40}


@pytest.fixture(scope="module")
def room_explorer():
    ex = mw.widgets.explore(mw.Room(), door_width=0.1, **ROOM_GRID)
    yield ex
    ex.close()


def test_room_explorer_opens_with_the_density_as_an_image(room_explorer):
    ex = room_explorer
    assert isinstance(ex, widgets.RoomExplorer) and ex.error is None
    res = ex.result
    assert res.converged and np.shape(res.M) == (9, 11, 11)
    w, h = png_size(ex.view.value)
    assert w > 100 and h > 100
    assert "converged" in ex.status.value and "door width 0.10" in ex.status.value
    # the same room solved directly gives the same densities
    direct = mw.solve_2d(mw.Room(door_widths=(0.1, 0.1)), nx=11, nt=8, progress=False)
    np.testing.assert_array_equal(res.M, direct.M)


def test_room_sliders_reach_the_problem_and_time_only_redraws(room_explorer):
    ex = room_explorer
    narrow, png = ex.result, ex.view.value
    ex.controls["door_width"].value = 0.3
    assert ex.result.params["door_widths"] == [0.3, 0.3]
    assert ex.result.mass[-1] < narrow.mass[-1]  # wider doors: fewer left at T
    ex.controls["congestion"].value = 4.0
    assert ex.result.params["congestion"] == 4.0 and ex.view.value != png
    solves, result, png = ex.solves, ex.result, ex.view.value
    ex.controls["time"].value = 0.75
    assert ex.solves == solves and ex.result is result and ex.view.value != png
    ex.controls["congestion"].value = 1.0
    ex.controls["door_width"].value = 0.1
    assert ex.result is narrow and ex.solves == solves  # earlier results reused


def test_room_explorer_refuses_bad_arguments_before_any_solve(monkeypatch):
    monkeypatch.setattr(widgets, "solve", lambda *a, **k: pytest.fail("solved"))
    with pytest.raises(mw.ParameterError, match="door_width=0.9"):
        widgets.RoomExplorer(door_width=0.9, **ROOM_GRID)
    with pytest.raises(mw.ParameterError, match="sigma=0.2 is not a parameter"):
        widgets.RoomExplorer(sigma=0.2, **ROOM_GRID)
    with pytest.raises(mw.ParameterError, match="problem=TwoBars"):
        mw.widgets.explore(mw.TwoBars())


def test_room_explorer_shows_a_failed_solve(room_explorer, monkeypatch):
    def fail(*args, **kwargs):
        raise mw.SolverError("non-finite values in U")

    monkeypatch.setattr(widgets, "solve", fail)
    png = room_explorer.view.value
    room_explorer.controls["congestion"].value = 9.5
    assert room_explorer.error.startswith("SolverError") and room_explorer.view.value == png
    assert "non-finite" in room_explorer.status.value
