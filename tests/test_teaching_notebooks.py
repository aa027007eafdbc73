"""Notebooks 06 (N patrons against the mean field) and 07 (the two-state El Farol game),
executed once per test run by papermill at small parameters into run folders (the
``notebook_runs`` fixture of conftest.py) whose files are checked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import nbformat
import numpy as np
from matplotlib.image import imread

import mfgwork as mw


def check_run_folder(folder: Path, notebook: str, figures: set[str]) -> dict:
    """The executed notebook, parameters, metrics with provenance, and readable figures."""
    executed = nbformat.read(folder / notebook, as_version=4)
    assert not executed.metadata.papermill.exception
    assert "out_dir" not in json.loads((folder / "parameters.json").read_text())
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["provenance"]["versions"]["mfgwork"] == mw.__version__
    assert {p.stem for p in (folder / "figures").glob("*.png")} == figures
    for png in (folder / "figures").glob("*.png"):
        image = imread(png)
        assert image.ndim == 3 and min(image.shape[:2]) > 100 and image.std() > 0.01
    return metrics


def test_n_patrons_notebook(notebook_runs):
    run = notebook_runs("06_n_patrons.ipynb")  # 61 × 60, N = 100, 1000, 10000, 8 samples
    out, sizes = run.folder, run.parameters["sizes"]
    metrics = check_run_folder(out, "06_n_patrons.ipynb",
                               {"n_player_paths", "n_player_convergence"})
    rows = json.loads((out / "n_player.json").read_text())
    assert [r["n_players"] for r in rows] == sizes
    distance = [r["distance"] for r in rows]
    assert distance[0] > distance[1] > distance[2] > 0
    assert rows[0]["gap"] > rows[-1]["gap"] > 0
    assert -0.8 < metrics["slopes"]["distance"] < -0.2
    assert metrics["slopes"]["gap"] < 0 and metrics["slopes"]["cost_error"] < 0
    reading = metrics["reading_100"]
    assert reading["n_players"] == 100
    assert math.isclose(reading["typical_max_deviation_patrons"], 100 * distance[0])
    with np.load(out / "arrays.npz") as data:  # the mean-field solve
        assert data["U"].shape == (61, 61) and data["attendance"].shape == (61,)


def test_two_state_notebook(notebook_runs):
    # nx 41, nt 40, nt_two_state 100, sigmas 0.5 and 1.0, switching costs 1, 3 and 10
    out = notebook_runs("07_two_state.ipynb").folder
    metrics = check_run_folder(out, "07_two_state.ipynb",
                               {"attendance_two_models", "switching_rates",
                                "noise_vs_switching_cost"})
    level = 0.6 + 0.05 * math.log(2.0)
    assert math.isclose(metrics["plateau_level"], level)
    assert metrics["converged"] and metrics["mass_error"] < 1e-13
    assert abs(metrics["attendance_mid"] - level) < 1e-6
    by_cost = json.loads((out / "switching_cost_scan.json").read_text())
    times = [r["time_to_plateau"] for r in by_cost]
    assert all(r["converged"] for r in by_cost) and times[0] < times[1] < times[2]
    by_sigma = json.loads((out / "sigma_scan.json").read_text())
    assert by_sigma[0]["time_to_plateau"] < by_sigma[1]["time_to_plateau"]
    assert all(abs(r["attendance_mid"] - level) < 0.02 for r in by_sigma)
    comparison = json.loads((out / "comparison.json").read_text())
    assert [r["model"] for r in comparison] == ["two states", "continuous θ"]
    with np.load(out / "arrays.npz") as data:  # the two-state solve
        assert data["M"].shape == (101, 2)
        np.testing.assert_allclose(data["M"].sum(axis=1), 1.0, rtol=0, atol=1e-13)
