"""A bad notebook parameter stops a run in the cell right after the parameters cell (the
checks, whose first line is ``# check the parameters``), before any solve or sweep: the
message names the notebook's parameter, and the partial notebook's executed cells end at the
checks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from mfgwork.workflows import runs

pytest.importorskip("papermill")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
CHECKS = "# check the parameters"


def copy(name: str, tmp_path: Path) -> Path:
    """The notebook alone in a folder of its own: a run that got past its checks would find
    nothing beside it (no sweep, no writes into the checkout)."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    return Path(shutil.copy(NOTEBOOKS / name, folder / name))


def assert_stopped_at_the_checks(failed: Path) -> None:
    """The executed cells of the partial notebook end with the error in the checks cell, the
    first code cell after the parameters (and the parameters papermill injected)."""
    cells = [c for c in nbformat.read(failed, as_version=4).cells if c.cell_type == "code"]
    tags = [c.metadata.get("tags", []) for c in cells]
    first = max(i for i, t in enumerate(tags)
                if "parameters" in t or "injected-parameters" in t) + 1
    assert cells[first].source.startswith(CHECKS)
    assert [o.ename for o in cells[first].outputs if o.output_type == "error"] == \
        ["ParameterError"]
    assert all(c.execution_count is not None for c in cells[:first + 1])
    assert all(c.execution_count is None and not c.outputs for c in cells[first + 1:])


CASES = [
    ("04_sweep_summary.ipynb", {"x": "bogus"},
     "x='bogus' is invalid: must be one of 'threshold', 'sigma'"),
    ("08_accelerator_payoff.ipynb", {"repeats": "0"},
     "repeats=0 is invalid: must be an integer >= 1"),
    ("13_long_run.ipynb", {"steps_per_unit": "0"},
     "steps_per_unit=0 is invalid: must be an integer >= 1"),
    ("14_common_noise.ipynb", {"persistence": "1.5"},
     "persistence=1.5 is invalid: must be a finite real number >= 0 and <= 1"),
]


@pytest.mark.parametrize(("name", "parameters", "message"), CASES,
                         ids=[c[0].split("_")[0] for c in CASES])
def test_command_line_run_stops_at_the_checks_cell(tmp_path, name, parameters, message):
    notebook, out = copy(name, tmp_path), tmp_path / "out"
    values = [a for k, v in parameters.items() for a in ("-p", k, v)]
    proc = subprocess.run([sys.executable, "-m", "mfgwork", "run", str(notebook), *values,
                           "-o", str(out), "--no-progress"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, env=os.environ | {"OMP_NUM_THREADS": "1"})
    # (1 today: a cell that raised; 2, bad input, once the command line tells a
    # ParameterError raised by the notebook's checks apart)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert f"('{CHECKS}" in proc.stderr and "ParameterError" in proc.stderr
    assert not out.exists()
    assert_stopped_at_the_checks(tmp_path / "out.failed.ipynb")


@pytest.mark.parametrize(("name", "parameters", "message"), [
    ("03_explorer.ipynb", {"nx": 7}, "nx=7 is invalid: must be one of 52, 101, 151, 201"),
    ("12_planner.ipynb", {"n_players": 0}, "n_players=0 is invalid: must be an integer >= 1"),
    ("06_n_patrons.ipynb", {"fit_max_n": -5}, "fit_max_n=-5 is invalid: must be an integer"),
    ("07_two_state.ipynb", {"plateau_tol": -1.0}, "plateau_tol=-1.0 is invalid"),
], ids=["03", "12", "06", "07"])
def test_run_notebook_names_the_checks_cell(tmp_path, name, parameters, message):
    notebook = copy(name, tmp_path)
    with pytest.raises(runs.NotebookError) as err:
        runs.run_notebook(notebook, parameters, tmp_path / "out")
    assert err.value.ename == "ParameterError" and message in err.value.evalue
    first_code = [i for i, c in enumerate(nbformat.read(notebook, as_version=4).cells)
                  if c.cell_type == "code"]
    assert err.value.cell_index == first_code[1]   # the cell right after the parameters
    assert f"failed in cell {first_code[1]} ('{CHECKS}" in str(err.value)
    assert_stopped_at_the_checks(err.value.failed_notebook)
