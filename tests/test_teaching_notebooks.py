"""Notebooks 06 (N patrons against the mean field), 07 (the two-state El Farol game), 09
(your own model), 10 (congestion, power Hamiltonians and two populations), 11 (a crowd in
a room, two bars), 12 (the planner and the price of anarchy), 13 (the long run) and 14
(common noise), executed once per test run by papermill at small parameters into run folders
(the ``notebook_runs`` fixture of conftest.py) whose files are checked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import nbformat
import numpy as np
import pytest
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


def _current_problem() -> mw.MFGProblem:
    """The model of notebook 09 at its defaults, written again here: H = ½(2 (p₋)² +
    0.5 (p₊)²), f = m, g = 2 (x − 0.4)², m0 a bump around −0.5 (NumPy only)."""

    class Current(mw.Hamiltonian):
        def value(self, x, p, m, xp):
            return np.minimum(p, 0.0) ** 2 + 0.25 * np.maximum(p, 0.0) ** 2

        def dp(self, x, p, m, xp):
            return 2.0 * np.minimum(p, 0.0) + 0.5 * np.maximum(p, 0.0)

        def dpp(self, x, p, m, xp):
            return np.where(p < 0.0, 2.0, 0.5)

    return mw.MFGProblem(x_min=-1.0, x_max=1.0, T=1.0, sigma=0.3,
                         m0=lambda x: np.clip(0.04 - (x + 0.5) ** 2, 0.0, None),
                         g=lambda x: 2.0 * (x - 0.4) ** 2, f=lambda t, x, m: m,
                         hamiltonian=Current())


def test_your_model_notebook(notebook_runs):
    out = notebook_runs("09_your_model.ipynb").folder  # nx 16, nt 15
    metrics = check_run_folder(out, "09_your_model.ipynb", {
        "backend_comparison", "density_heatmap", "convergence", "mean_position"})
    assert metrics["converged"] and metrics["residual"] <= 1e-8
    assert metrics["check"] == pytest.approx(metrics["residual"], rel=1e-6)
    params = json.loads((out / "parameters.json").read_text())
    assert params["hamiltonian"] == {"name": "current", "right": 2.0, "left": 0.5}
    # the saved solution is an equilibrium of the model as written here (one best response)
    res = mw.load(out)
    assert res.U.shape == res.M.shape == (16, 16)
    assert res.mass_error < 1e-12 and res.M.min() >= 0.0
    assert res.check(_current_problem()) <= 1e-8
    table = json.loads((out / "backends.json").read_text())
    assert (table[0]["backend"], table[0]["dtype"]) == ("numpy", "float64")
    assert table[0]["rel_error_U"] == table[0]["rel_error_M"] == 0.0
    assert all(row["converged"] for row in table)
    for row in table[1:]:
        bound = 1e-3 if row["dtype"] == "float32" else 1e-10
        assert row["rel_error_U"] < bound and row["rel_error_M"] < bound
    if mw.core.backend.torch_installed():
        assert table[1]["dtype"] == "float32" and table[1]["rel_error_M"] > 0
    refused = metrics["refused"]
    assert set(refused) == {"Logarithmic", "SlippedCurrent"}
    assert "not convex" in refused["Logarithmic"]
    assert "dp does not match" in refused["SlippedCurrent"]
    # the current carries the crowd further towards the target than a symmetric cost
    assert metrics["symmetric_converged"]
    assert metrics["final_mean"]["current"] > metrics["final_mean"]["symmetric"]
    # a Hamiltonian of one's own runs the compiled loops generated from it, as the shipped one
    speed = {row["model"]: row for row in metrics["speed"]}
    assert speed["current"]["kernels"] == speed["symmetric"]["kernels"] == \
        "compiled loops (numba)"
    assert speed["current"]["iterations"] == res.iterations
    assert all(row["seconds"] > 0.0 for row in speed.values())


def test_congestion_and_populations_notebook(notebook_runs):
    out = notebook_runs("10_congestion_and_populations.ipynb").folder  # 21 × 20, tol 1e-5
    metrics = check_run_folder(out, "10_congestion_and_populations.ipynb", {
        "attendance_paths", "attendance_zoom", "densities", "two_groups"})
    level = 0.6 + 0.05 * math.log(2.0)
    assert math.isclose(metrics["plateau_level"], level)
    rows = {r["model"]: r for r in json.loads((out / "comparison.json").read_text())}
    assert list(rows) == ["quadratic", "congestion c=1, α=0.5", "power q=1.5", "power q=3",
                          "two groups"]
    assert all(r["converged"] and r["residual"] <= 1e-5 for r in rows.values())
    quad, cong = rows["quadratic"], rows["congestion c=1, α=0.5"]
    q15, q3 = rows["power q=1.5"], rows["power q=3"]
    # every model from a cold start by Newton's method on the attendance path, in few best
    # responses (what section 1 says): exact and symmetric for the potential games, an
    # approximate tangent for q = 1.5, outer Anderson on the frozen density for congestion,
    # GMRES for the two groups; congestion needs the most best responses
    assert all(1 <= r["newton_steps"] <= r["iterations"] <= 40 and r["seconds"] > 0.0
               for r in rows.values())
    assert cong["iterations"] == max(r["iterations"] for r in rows.values())
    solvers = metrics["solvers"]
    assert {how["scheme"] for how in solvers.values()} == {"newton"}
    assert solvers["two groups"]["system"] == "gmres"
    assert all(solvers[name]["system"].startswith("conjugate gradients")
               for name in rows if name != "two groups")
    assert solvers["quadratic"]["note"] is None and solvers["power q=3"]["note"] is None
    assert solvers["power q=1.5"]["note"].startswith("approximate tangent")
    assert solvers["congestion c=1, α=0.5"]["note"].startswith("outer Anderson")
    assert solvers["congestion c=1, α=0.5"]["outer_iterations"] >= 2
    # how far below the level each holds the plateau, and how it starts and ends
    assert 0.0 < q15["gap_mid"] < quad["gap_mid"] < cong["gap_mid"] < q3["gap_mid"] < 0.002
    assert q3["A_early"] == max(r["A_early"] for r in (quad, cong, q15, q3))
    assert cong["A_early"] < quad["A_early"]
    assert q15["A_end"] > quad["A_end"] > q3["A_end"]
    # two groups: the regulars take the bar, the newcomers stay home
    groups = {r["group"]: r for r in json.loads((out / "groups.json").read_text())}
    assert groups["regulars"]["A_mid"] > 0.9 and groups["newcomers"]["A_mid"] < 0.1
    assert abs(rows["two groups"]["A_mid"] - 0.6) < 0.01
    assert all(g["group_residual"] <= 1e-5 for g in groups.values())
    # the saved quadratic solution, certified again by one best response
    res = mw.load(out)
    assert res.U.shape == (21, 21) and res.check() <= 1e-5
    assert res.check() == pytest.approx(quad["residual"], rel=1e-6)


def test_crowd_in_a_room_notebook(notebook_runs):
    # room 13 × 13 × 12, accelerator rows at 11 × 11 × 8, bars 11 × 11 × 10 (T = 2), a 2 × 2
    # scan at 11 × 11 × 10
    run = notebook_runs("11_crowd_in_a_room.ipynb")
    out, frames = run.folder, run.parameters["frames"]
    metrics = check_run_folder(out, "11_crowd_in_a_room.ipynb", {
        "density_2d", "velocity_field", "exit_flux", "evacuation", "density_2d_congested",
        "bar_attendance", "bar_density"})
    assert all((out / "figures" / f"{p.stem}.pdf").is_file()
               for p in (out / "figures").glob("*.png"))
    # the certificate: the solver's residual, one independent best response, the balance
    cert = metrics["certificate"]
    assert metrics["room"]["converged"] and cert["residual"] <= 1e-6
    assert cert["check"] <= 1e-6 and abs(cert["check"] - cert["residual"]) <= 1e-9
    assert cert["mass_error"] <= 1e-12 and cert["min_density"] >= 0.0
    room = mw.load(out / "room")
    assert room.M.shape == (13, 13, 13) and room.converged and room.mass_error <= 1e-12
    assert math.isclose(room.mass[-1], cert["mass_left_at_T"])
    # the animation: its own page and the notebook's output, offline, one frame per frame
    from mfgwork.analysis.plots2d import ANIMATION_HEAD

    page = (out / "room_animation.html").read_text(encoding="utf-8")
    assert page.startswith(ANIMATION_HEAD) and "://" not in page
    assert page.count("data:image/png;base64,") == frames
    executed = nbformat.read(out / "11_crowd_in_a_room.ipynb", as_version=4)
    shown = [o["data"]["text/html"] for c in executed.cells if c.cell_type == "code"
             for o in c.outputs if "text/html" in o.get("data", {})]
    assert any(h.count("data:image/png;base64,") == frames and "<script" in h for h in shown)
    # congestion: both certified; the crowd spreads and hurries (what the text says)
    low, high = json.loads((out / "congestion.json").read_text())
    assert low["converged"] and high["converged"] and high["congestion"] > low["congestion"]
    assert high["peak_density"] < low["peak_density"] and high["peak_flux"] > low["peak_flux"]
    assert high["half_gone_at"] <= low["half_gone_at"]
    # the accelerator rows agree with the NumPy reference
    rows = json.loads((out / "accelerator.json").read_text())
    assert rows[0]["label"] == "numpy cpu float64" and rows[0]["rel_error_M"] == 0.0
    for r in rows[1:]:
        assert r["converged"] and r["solver"] == "krylov"
        assert r["rel_error_M"] < (1e-3 if "float32" in r["label"] else 1e-9), r
    # independent bars are two 1-D Santa Fe problems; the scan is symmetric in the bars
    for r in json.loads((out / "independent_bars.json").read_text()):
        assert r["converged_2d"] and r["converged_1d"]
        assert r["max_diff_attendance"] <= 1e-8 and r["max_diff_marginal"] <= 1e-8
    scan = {(r["threshold_1"], r["threshold_2"]): r
            for r in json.loads((out / "threshold_scan.json").read_text())}
    assert len(scan) == 4 and all(r["converged"] for r in scan.values())
    assert abs(scan[0.4, 0.7]["A1(T/2)"] - scan[0.7, 0.4]["A2(T/2)"]) <= 1e-5
    assert scan[0.4, 0.7]["A2(T/2)"] > scan[0.4, 0.4]["A2(T/2)"]
    assert scan[0.4, 0.7]["A1(T/2)"] < scan[0.4, 0.4]["A1(T/2)"]
    assert abs(scan[0.4, 0.4]["A1(T/2)"] - scan[0.4, 0.4]["A2(T/2)"]) <= 1e-6


def test_planner_notebook(notebook_runs):
    # 41 × 20 at T = 4, a 3 × 2 map of the price of anarchy at 21 × 20, 300 patrons
    out = notebook_runs("12_planner.ipynb").folder
    metrics = check_run_folder(out, "12_planner.ipynb", {"planner_paths", "price_of_anarchy"})
    summary, checks = metrics["summary"], metrics["checks"]
    assert summary["welfare"] > summary["equilibrium_welfare"]
    assert summary["welfare_loss"] == pytest.approx(summary["welfare"]
                                                    - summary["equilibrium_welfare"])
    assert checks["welfare_from_values"] == pytest.approx(checks["welfare_from_controls"],
                                                          rel=1e-6)
    assert checks["largest_slope_at_optimum"] < 1e-3 * checks["smallest_slope_at_equilibrium"]
    loss = np.array(metrics["welfare_loss"])
    assert loss.shape == (3, 2) and (loss > 0).all()
    assert all(r is None or r > 1 for row in metrics["price_of_anarchy"] for r in row)
    rows = {r["policy"]: r for r in json.loads((out / "n_patrons.json").read_text())}
    assert rows["planner"]["mean_attendance"] < rows["equilibrium"]["mean_attendance"]
    assert rows["planner"]["gap"] > 10 * rows["equilibrium"]["gap"]


def test_long_run_notebook(notebook_runs):
    # nx 41, horizons 10 and 40 at 3 steps per unit time, exact problem at 21, 41, 81
    out = notebook_runs("13_long_run.ipynb").folder
    metrics = check_run_folder(out, "13_long_run.ipynb", {"long_run"})
    assert 0.63 < metrics["attendance"] < 0.64 and metrics["certificate"] <= 1e-8
    assert all(0.85 < order < 1.2 for order in metrics["orders"].values()), metrics["orders"]
    rows = json.loads((out / "horizons.json").read_text())
    gaps = [abs(r["attendance_gap_at_T/2"]) for r in rows]
    assert all(r["converged"] for r in rows) and gaps[1] < gaps[0]
    # the value's slope in the middle of the longer horizon is nearer to λ
    errors = [abs(r["lambda_from_the_value"] - r["lambda_long_run"]) for r in rows]
    assert errors[1] < errors[0]


def test_common_noise_notebook(notebook_runs):
    # nx 41 (nt 42: a multiple of the depth), depth 3: 8 scenarios
    run = notebook_runs("14_common_noise.ipynb")
    out, nx, depth = run.folder, run.parameters["nx"], run.parameters["depth"]
    metrics = check_run_folder(out, "14_common_noise.ipynb", {"attendance_fan", "persistence"})
    tol = json.loads((out / "parameters.json").read_text())["tol"]
    assert metrics["converged"] is True and metrics["residual"] <= tol
    assert metrics["certificate"] == pytest.approx(metrics["residual"], rel=1e-6)
    assert metrics["probability_sum"] == pytest.approx(1.0, abs=1e-12)
    # the noiseless tree is the bar itself; a frozen chain's constant scenarios are the bar
    # with that state's payoff
    assert metrics["noiseless_difference"] < 1e-10
    assert metrics["persistent_difference"] < 1e-10
    nt = depth * math.ceil(nx / depth)
    with np.load(out / "arrays.npz") as data:
        assert data["M"].shape == (2**depth, nt + 1, nx)
        assert data["noise_state"].shape == (2**depth, depth)
        assert data["probability"].sum() == pytest.approx(1.0)
        assert (data["scenario_residual"] <= tol).all()
        A = data["attendance"]
        assert ((A > 0) & (A < 1)).all() and np.ptp(A[:, -1]) > 0
    rows = json.loads((out / "persistence.json").read_text())
    low, high = sorted(rows, key=lambda r: r["persistence"])
    assert all(r["converged"] for r in rows)
    # a persistent chain: the first news lasts (the gap between the first states' halves in the
    # middle of the second epoch nearly 2p - 1 times that of the first) and the scenarios
    # spread more; the expected attendance moves less than the spread
    for r in rows:
        assert r["gap_ratio"] == pytest.approx(r["correlation"], abs=0.05)
    assert high["gap_end_epoch_1"] > low["gap_end_epoch_1"]
    assert high["gap_mid_epoch_2"] > low["gap_mid_epoch_2"]
    assert high["mean_spread"] > low["mean_spread"]
    assert abs(high["mean_attendance"] - low["mean_attendance"]) \
        < high["mean_spread"] - low["mean_spread"]
