"""The notebooks: committed clean, each executed once per test run by papermill at small
parameters into a run folder (the ``notebook_runs`` fixture of conftest.py), whose files are
checked."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import nbformat
import numpy as np
import pytest
from conftest import NOTEBOOK_PARAMETERS
from matplotlib.image import imread

import mfgwork as mw
from mfgwork.workflows import runs

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
OURS = ["00_primer.ipynb", "01_santa_fe_bar.ipynb", "02_cpu_vs_accelerator.ipynb"]
SANTA_FE_PARAMETERS = ["threshold", "sigma", "T", "theta_max", "good", "bad", "eps", "nx", "nt",
                       "method", "backend", "device", "n_particles", "seed", "tol", "max_iter",
                       "out_dir"]


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_committed_notebook_is_clean_and_parameterized(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    dirty = [i for i, c in enumerate(code) if c.outputs or c.execution_count is not None]
    assert not dirty, f"{path.name}: code cells {dirty} carry outputs; clear them before commit"
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
    assert "out_dir" in runs.notebook_parameters(path)


def test_santa_fe_notebook_parameters():
    assert list(runs.notebook_parameters(NOTEBOOKS / "01_santa_fe_bar.ipynb")) == \
        SANTA_FE_PARAMETERS


def check_common(folder: Path, notebook: str, figures: set[str]) -> dict:
    """The files every run folder has; returns metrics.json."""
    assert (folder / notebook).is_file()
    executed = nbformat.read(folder / notebook, as_version=4)
    assert not executed.metadata.papermill.exception
    params = json.loads((folder / "parameters.json").read_text())
    assert "out_dir" not in params
    metrics = json.loads((folder / "metrics.json").read_text())
    versions = metrics["provenance"]["versions"]
    assert versions["mfgwork"] == mw.__version__ and versions["numpy"] == np.__version__
    assert {p.stem for p in (folder / "figures").glob("*.png")} == figures
    for png in (folder / "figures").glob("*.png"):
        image = imread(png)
        assert image.ndim == 3 and min(image.shape[:2]) > 100 and image.std() > 0.01
    assert [p.name for p in folder.parent.iterdir() if p.name.startswith(".")] == []
    return metrics


def check_arrays(folder: Path, nx: int, nt: int) -> None:
    with np.load(folder / "arrays.npz", allow_pickle=False) as data:
        shapes = {k: data[k].shape for k in data.files}
        assert shapes == {"x": (nx,), "t": (nt + 1,), "U": (nt + 1, nx), "M": (nt + 1, nx),
                          "attendance": (nt + 1,), "mean_state": (nt + 1,)}
        assert all(np.isfinite(data[k]).all() for k in data.files)
        assert data["M"].min() >= 0.0
        assert ((data["attendance"] >= 0.0) & (data["attendance"] <= 1.0)).all()


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_every_notebook_executes_at_small_parameters(path, notebook_runs):
    """Each notebook is executed by the tests (at parameters it has), every code cell without
    an error."""
    assert set(NOTEBOOK_PARAMETERS[path.name]) <= set(runs.notebook_parameters(path))
    run = notebook_runs(path.name)
    executed = nbformat.read(run.notebook, as_version=4)
    assert not executed.metadata.papermill.exception
    given = dict(executed.metadata.papermill.parameters)
    assert given.pop("out_dir") and given == NOTEBOOK_PARAMETERS[path.name]
    code = [c for c in executed.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    warned = [o.text for c in code for o in c.outputs
              if o.output_type == "stream" and "Warning" in o.text]
    assert not warned, f"{path.name} warns: {warned[0][:300]}"


def test_santa_fe_bar_through_the_command_line(notebook_runs):
    run = notebook_runs("01_santa_fe_bar.ipynb")  # python -m mfgwork run … -p nx 41 …
    out = run.folder
    assert str(out) in run.stdout
    metrics = check_common(out, "01_santa_fe_bar.ipynb", {
        "attendance", "density_heatmap", "density_snapshots", "value_snapshots", "convergence",
        "phase_portrait"})
    params = json.loads((out / "parameters.json").read_text())
    assert (params["nx"], params["nt"], params["threshold"], params["tol"]) == (41, 40, 0.5, 1e-7)
    assert params["method"] == "fdm" and params["device"] == "cpu"
    assert metrics["converged"] is True and 1 <= metrics["iterations"] <= 200
    assert metrics["residual"] <= 1e-7 and metrics["mass_error"] < 1e-10
    assert metrics["timings"]["total"] > 0 and metrics["dtype"] == "float64"
    assert len(metrics["history"]["change_U"]) == metrics["iterations"]
    # the attendance settles near the zero of the payoff (coarse grid: loose)
    level = 0.5 + 0.05 * math.log(10.0 / 5.0)
    assert abs(metrics["mean_attendance"] - level) < 0.05
    check_arrays(out, nx=41, nt=40)
    res = mw.load(out)
    assert res.U.shape == (41, 41) and res.params["threshold"] == 0.5


def test_bad_value_stops_at_the_top_with_the_library_message(tmp_path):
    out = tmp_path / "bad"
    with pytest.raises(runs.NotebookError) as err:
        runs.run_notebook(NOTEBOOKS / "01_santa_fe_bar.ipynb", {"threshold": 1.5}, out)
    assert err.value.ename == "ParameterError"
    assert "threshold=1.5 is invalid" in str(err.value)
    first_code = [i for i, c in enumerate(nbformat.read(NOTEBOOKS / "01_santa_fe_bar.ipynb",
                                                        as_version=4).cells)
                  if c.cell_type == "code"]
    assert err.value.cell_index == first_code[1]  # the cell right after the parameters
    assert err.value.failed_notebook.is_file() and not out.exists()


def test_cpu_vs_accelerator(notebook_runs):
    torch_ok = mw.core.backend.torch_installed()
    out = notebook_runs("02_cpu_vs_accelerator.ipynb").folder  # nx 16, nt 15, tol 1e-5
    metrics = check_common(out, "02_cpu_vs_accelerator.ipynb", {"backend_comparison"})
    table = json.loads((out / "comparison.json").read_text())
    with (out / "comparison.csv").open() as fh:
        assert [r["label"] for r in csv.DictReader(fh)] == [r["label"] for r in table]
    assert metrics["comparison"] == table and metrics["note"]
    ref = table[0]
    assert (ref["backend"], ref["dtype"]) == ("numpy", "float64")
    assert ref["rel_error_U"] == ref["rel_error_M"] == ref["rel_error_A"] == 0.0
    assert len(table) >= (2 if torch_ok else 1)
    for row in table[1:]:
        assert row["wall_time_s"] > 0 and row["converged"]
        assert row["tol"] == (3e-4 if row["dtype"] == "float32" else 1e-5)  # raised, quietly
        for key in ("rel_error_U", "rel_error_M", "rel_error_A"):
            tol = 1e-3 if row["dtype"] == "float32" else 1e-8
            assert 0.0 <= row[key] < tol, (row["label"], key, row[key])
    if torch_ok:
        emulated = table[1]
        assert (emulated["backend"], emulated["dtype"]) == ("torch", "float32")
        assert emulated["rel_error_U"] > 0  # float32 really differs from float64
    check_arrays(out, nx=16, nt=15)


def test_primer(notebook_runs):
    out = notebook_runs("00_primer.ipynb").folder  # sizes 11, 21, 41; Santa Fe 41 × 40
    metrics = check_common(out, "00_primer.ipynb", {"refinement", "payoff", "attendance",
                                                    "density_heatmap"})
    rows = json.loads((out / "refinement.json").read_text())
    assert [r["nx"] for r in rows] == [11, 21, 41]
    errors = [r["error_U"] for r in rows]
    assert errors[0] > errors[1] > errors[2] > 0
    assert 0.8 < metrics["order_U"] < 1.3 and 0.8 < metrics["order_M"] < 1.3
    check_arrays(out, nx=41, nt=40)


def test_sweep_summary_runs_its_demonstration_sweep_beside_the_notebook(notebook_runs):
    """Without sweep_dir, notebook 04 runs a demonstration sweep into the sweeps/ folder
    beside the notebooks' folder (here the tests' temporary copy), named by its grid so that
    the defaults and these small parameters never meet in one folder, and draws it."""
    run = notebook_runs("04_sweep_summary.ipynb")  # demo_nx 21, thresholds 0.4 and 0.8
    folder = run.folder
    figures = {p.stem for p in (folder / "figures").glob("*.png")}
    assert {"sweep_metrics", "attendance_grid", "wall_time"} <= figures
    assert len(json.loads((folder / "index.json").read_text())) == 4   # 2 thresholds × 2 σ
    sweeps = run.work.parent / "sweeps"
    demo = sweeps / "demo_21x21_A0.4-0.8"
    assert [p.name for p in sweeps.iterdir()] == [demo.name]
    index = mw.load_sweep(demo)
    assert index.counts() == {"done": 4, "failed": 0, "pending": 0}
    assert sorted({(r["threshold"], r["sigma"]) for r in index}) == [
        (a, s) for a in (0.4, 0.8) for s in (0.3, 0.6)]
    assert all(mw.load(index.run_folder(r)).U.shape == (22, 21) for r in index)


def test_accelerator_payoff(notebook_runs):
    # batches 1, 2, 4 and 1000, 4000 particles on the CPU; emulation: a batch of 1, 1000
    out = notebook_runs("08_accelerator_payoff.ipynb").folder
    metrics = check_common(out, "08_accelerator_payoff.ipynb", {"wall_time"})
    fresh = json.loads((out / "measured_here.json").read_text())
    cpu = {(r["method"], r["size"]): r["seconds"] for r in fresh if r["target"] == "cpu (numpy)"}
    assert set(cpu) == {("fdm_batch", n) for n in (1, 2, 4)} | {("particles", 1000),
                                                                ("particles", 4000)}
    assert all(t > 0 for t in cpu.values())
    shipped = json.loads((out / "shipped.json").read_text())
    table = mw.crossover_table()
    assert len(shipped) == sum(len(e[m]["sizes"]) for e in
                               [table["cpu"]] + [a for a in table["accelerators"].values()
                                                 if a["measured"]]
                               for m in ("fdm_batch", "particles") if e.get(m))
    assert metrics["crossovers_shipped"] == mw.crossover.crossovers(table)
    here = metrics["table_here"]
    assert metrics["crossovers_here"] == mw.crossover.crossovers(here)
    if mw.core.backend.torch_installed():
        emulation = here["accelerators"]["mps-emulation"]
        assert emulation["dtype"] == "float32" and emulation["fdm_batch"]["sizes"] == [1]
