"""The explorers' constructor arguments: the room given is kept, and every bad argument is a
ParameterError naming it, raised before any solve or drawing."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("ipywidgets")

import mfgwork as mw  # noqa: E402
from mfgwork.apps import explorer as widgets  # noqa: E402

ROOM_GRID = {"nx": 11, "nt": 8, "dpi": 40}
SANTA_FE = {"nx": 52, "devices": [("numpy", "cpu")], "dpi": 40}


@pytest.fixture
def no_work(monkeypatch):
    """Any solve or figure fails the test: the refusal must come first."""
    monkeypatch.setattr(widgets, "solve", lambda *a, **k: pytest.fail("solved"))
    monkeypatch.setattr(widgets, "Figure", lambda *a, **k: pytest.fail("drew"))


def refused(make, *words):
    with pytest.raises(mw.ParameterError) as info:
        make()
    for word in words:
        assert word in str(info.value), str(info.value)
    return str(info.value)


# -- 1. the room given is the room explored ----------------------------------------------
def test_room_explorer_keeps_uneven_doors_until_the_slider_moves():
    ex = widgets.RoomExplorer(mw.Room(door_widths=(0.2, 0.1)), **ROOM_GRID)
    assert ex.problem().door_widths == (0.2, 0.1)
    assert ex.error is None and ex.result.params["door_widths"] == [0.2, 0.1]
    assert "door widths 0.20, 0.10" in ex.status.value
    assert ex.controls["door_width"].value == 0.2
    ex.controls["door_width"].value = 0.3     # moved: both doors take the slider's width
    assert ex.problem().door_widths == (0.3, 0.3)
    assert ex.result.params["door_widths"] == [0.3, 0.3]
    ex.controls["door_width"].value = 0.2
    assert ex.result.params["door_widths"] == [0.2, 0.2]
    assert "door width 0.20," in ex.status.value
    ex.close()


def test_room_explorer_door_width_keyword_sets_both_doors_of_an_uneven_room(monkeypatch):
    monkeypatch.setattr(widgets.RoomExplorer, "update", lambda self: None)
    ex = widgets.RoomExplorer(mw.Room(door_widths=(0.2, 0.05)), door_width=0.1, **ROOM_GRID)
    assert ex.problem().door_widths == (0.1, 0.1)
    ex.close()


def test_room_explorer_slider_ranges_cover_the_room_given(monkeypatch):
    monkeypatch.setattr(widgets.RoomExplorer, "update", lambda self: None)
    ex = widgets.RoomExplorer(mw.Room(door_widths=(0.5, 0.02), congestion=20.0), **ROOM_GRID)
    assert ex.problem().door_widths == (0.5, 0.02) and ex.problem().congestion == 20.0
    door, kappa = ex.controls["door_width"], ex.controls["congestion"]
    assert (door.min, door.max, door.value) == (0.02, 0.5, 0.5)
    assert (kappa.max, kappa.value) == (20.0, 20.0)
    ex.close()
    # within the room's own validity: no door wider than the room
    small = mw.Room(length=0.3, door_widths=(0.1, 0.1), door_centers=(0.1, 0.2),
                    obstacle=None, start=(0.1, 0.1), spread=0.05)
    ex = widgets.RoomExplorer(small, **ROOM_GRID)
    assert ex.controls["door_width"].max == 0.3
    ex.close()


def test_room_explorer_still_refuses_a_door_width_outside_the_range(no_work):
    refused(lambda: widgets.RoomExplorer(door_width=0.9, **ROOM_GRID),
            "door_width=0.9", "<= 0.4")
    refused(lambda: widgets.RoomExplorer(mw.Room(door_widths=(0.5, 0.5)), door_width=0.6,
                                         **ROOM_GRID), "door_width=0.6", "<= 0.5")


# -- 2. dpi --------------------------------------------------------------------------------
BAD_DPI = [0, -5, "x", True, float("nan"), math.inf, 5000, 19.9, 601, None, [80]]


@pytest.mark.parametrize("dpi", BAD_DPI, ids=repr)
@pytest.mark.parametrize("which", ["santa_fe", "room", "explore", "explore_room"])
def test_dpi_is_checked_before_any_solve_or_drawing(no_work, which, dpi):
    make = {"santa_fe": lambda: widgets.SantaFeExplorer(**(SANTA_FE | {"dpi": dpi})),
            "room": lambda: widgets.RoomExplorer(nx=11, nt=8, dpi=dpi),
            "explore": lambda: widgets.explore(**(SANTA_FE | {"dpi": dpi})),
            "explore_room": lambda: widgets.explore(mw.Room(), nx=11, nt=8, dpi=dpi)}[which]
    refused(make, "dpi=", ">= 20", "<= 600")


def test_dpi_in_range_is_accepted():
    ex = widgets.RoomExplorer(nx=11, nt=8, dpi=20.5)
    assert ex.dpi == 20.5 and ex.error is None and ex.view.value
    ex.close()


# -- 3. explore's refusal, whole ----------------------------------------------------------
def test_explore_refusal_message_is_whole(no_work):
    text = refused(lambda: widgets.explore(mw.SantaFeBar()), "problem=SantaFeBar(...) is "
                   "invalid", "mw.Room", "explore(threshold=")
    assert "bad=" not in text and text.endswith(")")
    refused(lambda: widgets.explore(mw.TwoBars()), "problem=TwoBars")
    text = refused(lambda: widgets.RoomExplorer(mw.SantaFeBar()),
                   "room=SantaFeBar(...) is invalid", "takes a mw.Room")
    refused(lambda: widgets.RoomExplorer(3), "room=3 is invalid")


# -- 4. devices ----------------------------------------------------------------------------
def test_empty_devices_list_names_the_devices_allowed(no_work, monkeypatch):
    monkeypatch.setattr(widgets, "available_backends",
                        lambda: {"numpy": ["cpu"], "torch": ["cuda", "cpu"]})
    text = refused(lambda: widgets.SantaFeExplorer(**(SANTA_FE | {"devices": []})),
                   "devices=[]", "must name at least one device",
                   "numpy/cpu, torch/cuda, torch/cpu")
    assert "one of )" not in text


@pytest.mark.parametrize(("devices", "words"), [
    ("numpy", ["devices='numpy'", "(backend, device) pairs"]),
    (5, ["devices=5", "(backend, device) pairs"]),
    (["numpy"], ["devices[0]='numpy'", "(backend, device) pair"]),
    ([("numpy", "cpu", "x")], ["devices[0]=", "pair"]),
    ([("numpy", 1)], ["devices[0]=('numpy', 1)", "pair of names"]),
])
def test_bad_devices_are_refused(no_work, devices, words):
    refused(lambda: widgets.SantaFeExplorer(**(SANTA_FE | {"devices": devices})), *words)


def test_devices_given_as_lists_are_pairs():
    ex = widgets.SantaFeExplorer(**(SANTA_FE | {"devices": [["numpy", "cpu"]], "max_iter": 2}))
    assert ex.settings()["backend"] == "numpy" and ex.settings()["device"] == "cpu"
    ex.close()


# -- 5. the other arguments ------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "words"), [
    ({"nx": np.array([52, 101])}, ["nx=", "52, 101, 151, 201"]),
    ({"nx": True}, ["nx=True", "52"]),
    ({"backend": np.array(["numpy"])}, ["backend, device=", "numpy/cpu"]),
    ({"backend": None}, ["backend, device=None", "numpy/cpu"]),
    ({"tol": float("nan")}, ["tol=nan", "finite"]),
    ({"max_iter": True}, ["max_iter=True", "integer"]),
    ({"threshold": True}, ["threshold=True", "0.95"]),
    ({"mode": None}, ["mode=None", "'inline'"]),
    ({"beta": "x" * 500}, ["beta='xxx", "is not a parameter", "threshold", "dpi"]),
])
def test_other_santa_fe_arguments_are_refused(no_work, kwargs, words):
    text = refused(lambda: widgets.SantaFeExplorer(**(SANTA_FE | kwargs)), *words)
    assert len(text) < 400


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"nx": 11.5}, ["nx=11.5", "integer"]),
    ({"nt": True}, ["nt=True", "integer"]),
    ({"tol": -1.0}, ["tol=-1.0", "> 0"]),
    ({"congestion": float("nan")}, ["congestion=nan", "finite"]),
    ({"door_width": "wide"}, ["door_width='wide'", "real number"]),
    ({"devices": []}, ["devices=[] is not a parameter of the room explorer", "door_width",
                       "nx, nt"]),
])
def test_other_room_arguments_are_refused(no_work, kwargs, words):
    refused(lambda: widgets.RoomExplorer(**(ROOM_GRID | kwargs)), *words)


def test_nx_as_a_whole_float_is_the_grid_int(monkeypatch):
    monkeypatch.setattr(widgets.SantaFeExplorer, "update", lambda self: None)
    ex = widgets.SantaFeExplorer(**(SANTA_FE | {"nx": 52.0}))
    assert type(ex.settings()["nx"]) is int
    ex.close()
