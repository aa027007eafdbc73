"""The notebook runner: parameter checks, atomic run folders, failing cells, the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from helpers import write_notebook
from nbformat.v4 import new_code_cell, new_notebook

import mfgwork as mw
from mfgwork.workflows import runs

ROOT = Path(__file__).resolve().parents[1]


def make_notebook(path: Path, *body: str) -> Path:
    """A notebook with a parameters cell (x, n, name, flag, out_dir) and ``body`` cells."""
    return write_notebook(path, 'x = 1.0\nn = 3\nname = "a"\nflag = False\nout_dir = ""', *body)


WRITER = ("import mfgwork as mw\n"
          "mw.save_run(out_dir, parameters={'x': x, 'n': n}, metrics={'double': 2 * x})")


@pytest.fixture
def writer(tmp_path) -> Path:
    return make_notebook(tmp_path / "writer.ipynb", WRITER)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize(("text", "value"), [
    ("0.6", 0.6), ("201", 201), ("1e-8", 1e-8), ("-2.5E3", -2500.0), ("true", True),
    ("cpu", "cpu"), ("[1, 2]", [1, 2]), ("nan_value", "nan_value"), ("inf", "inf")])
def test_parse_value(text, value):
    assert runs.parse_value(text) == value
    assert type(runs.parse_value(text)) is type(value)


def test_parameters_come_from_the_tagged_cell(writer):
    assert runs.notebook_parameters(writer) == {"x": 1.0, "n": 3, "name": "a", "flag": False,
                                                "out_dir": ""}


def test_unknown_parameter_lists_the_notebook_parameters(writer):
    with pytest.raises(mw.ParameterError, match="'y' is unknown") as err:
        runs.check_parameters(writer, {"y": 1})
    for name in ("x=1.0", "n=3", "name='a'", "flag=False", "out_dir=''"):
        assert name in str(err.value)


@pytest.mark.parametrize(("name", "value"), [
    ("x", "1.0"), ("n", 2.5), ("n", True), ("flag", 1), ("name", 3), ("x", None)])
def test_wrong_type_is_named(writer, name, value):
    with pytest.raises(mw.ParameterError, match=f"{name}=.*invalid.*expects"):
        runs.check_parameters(writer, {name: value})


def test_int_is_accepted_for_float(writer):
    assert runs.check_parameters(writer, {"x": 2, "n": 4}) == {"x": 2, "n": 4}


def test_notebook_without_parameters_cell_is_refused(tmp_path):
    path = tmp_path / "plain.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("x = 1")]), path)
    with pytest.raises(mw.ParameterError, match="no cell tagged 'parameters'"):
        runs.run_notebook(path, {}, tmp_path / "out")
    with pytest.raises(mw.ParameterError, match="existing .ipynb"):
        runs.run_notebook(tmp_path / "missing.ipynb", {}, tmp_path / "out")


def test_run_writes_the_folder_atomically_and_replaces_an_old_run(writer, tmp_path):
    out = tmp_path / "runs" / "one"
    runs.run_notebook(writer, {"x": 1.5}, out)
    assert runs.run_notebook(writer, {"x": 2.5}, out) == out.absolute()
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "mfgwork.json",
                                                     "parameters.json", "writer.ipynb"]
    assert json.loads((out / "mfgwork.json").read_text())["kind"] == "run"
    assert json.loads((out / "parameters.json").read_text()) == {"x": 2.5, "n": 3}
    assert json.loads((out / "metrics.json").read_text())["double"] == 5.0
    executed = nbformat.read(out / "writer.ipynb", as_version=4)
    assert executed.metadata.papermill.parameters["x"] == 2.5
    assert leftovers(out.parent) == []


def test_failing_cell_keeps_the_partial_notebook_and_no_folder(tmp_path):
    path = make_notebook(tmp_path / "fails.ipynb", "y = 2 * x",
                         "# the broken step\nraise ValueError(f'boom {y}')", WRITER)
    out = tmp_path / "runs" / "broken"
    with pytest.raises(runs.NotebookError) as err:
        runs.run_notebook(path, {"x": 4.0}, out)
    message = str(err.value)
    assert "cell 2" in message and "# the broken step" in message
    assert "ValueError: boom 8.0" in message
    assert err.value.cell_index == 2 and err.value.ename == "ValueError"
    kept = err.value.failed_notebook
    assert kept == out.with_name("broken.failed.ipynb") and str(kept) in message
    assert "boom 8.0" in kept.read_text()
    assert not out.exists()
    assert leftovers(out.parent) == []


FLAKY_LAUNCHER = """
import runpy, sys
from pathlib import Path
starts = Path(__file__).with_name("starts")
n = int(starts.read_text()) if starts.exists() else 0
starts.write_text(str(n + 1))
if n < int(Path(__file__).with_name("deaths").read_text()):
    sys.exit(1)  # as a kernel whose port was taken before it could bind it
sys.argv = ["ipykernel_launcher", *sys.argv[1:]]
runpy.run_module("ipykernel_launcher", run_name="__main__")
"""


@pytest.mark.parametrize("deaths", [2, runs.KERNEL_STARTS])
def test_a_kernel_dying_before_its_first_cell_is_started_again(writer, tmp_path, monkeypatch,
                                                               deaths):
    spec = tmp_path / "jupyter" / "kernels" / "flaky"
    spec.mkdir(parents=True)
    (spec / "launcher.py").write_text(FLAKY_LAUNCHER)
    (spec / "deaths").write_text(str(deaths))
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(spec / "launcher.py"), "-f", "{connection_file}"],
        "display_name": "flaky", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    out = tmp_path / "runs" / "flaky"
    if deaths < runs.KERNEL_STARTS:
        runs.run_notebook(writer, {"x": 1.5}, out, kernel_name="flaky")
        assert json.loads((out / "metrics.json").read_text())["double"] == 3.0
    else:
        with pytest.raises(runs.NotebookError, match="could not be executed"):
            runs.run_notebook(writer, {"x": 1.5}, out, kernel_name="flaky")
        assert not out.exists()
    assert int((spec / "starts").read_text()) == min(deaths + 1, runs.KERNEL_STARTS)
    assert leftovers(out.parent) == []


def test_out_dir_is_set_by_the_runner(writer, tmp_path):
    with pytest.raises(mw.ParameterError, match="out_dir is set by run_notebook"):
        runs.run_notebook(writer, {"out_dir": "elsewhere"}, tmp_path / "out")


def test_solve_options_check_before_work():
    ok = runs.solve_options(nx=41, nt=40, method="fdm", backend="numpy", device="cpu",
                            tol=1e-6, max_iter=10, n_particles=100, seed=1)
    assert ok == {"nx": 41, "nt": 40, "method": "fdm", "backend": "numpy", "device": "cpu",
                  "tol": 1e-6, "max_iter": 10}
    bad = [({"nx": 2}, "nx=2"), ({"method": "magic"}, "method='magic'"),
           ({"tol": -1.0}, "tol=-1.0"), ({"device": "tpu"}, "device='tpu'"),
           ({"n_particles": 0}, "n_particles=0"), ({"seed": -1}, "seed=-1")]
    base = {"nx": 41, "nt": 40, "method": "fdm", "backend": "numpy", "device": "cpu",
            "tol": 1e-6, "max_iter": 10}
    for change, named in bad:
        with pytest.raises(ValueError, match=named.replace("(", r"\(")):
            runs.solve_options(**(base | change))


def test_command_line_failure_is_one_line(tmp_path):
    path = make_notebook(tmp_path / "fails.ipynb", "assert x < 2, f'x={x} is too large'")
    out = subprocess.run([sys.executable, "-m", "mfgwork", "run", str(path), "-p", "x", "3",
                          "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: fails.ipynb failed in cell 1")
    # the int 3 reaches the notebook as 3.0, the type of its default x = 1.0
    assert "AssertionError: x=3.0 is too large" in lines[0] and "out.failed.ipynb" in lines[0]
    assert not (tmp_path / "out").exists() and (tmp_path / "out.failed.ipynb").is_file()


def test_save_run_round_trip(tmp_path):
    from matplotlib.image import imread

    from mfgwork.analysis import plots
    from mfgwork.core.storage import load_table

    res = mw.solve(mw.SantaFeBar(threshold=0.5), nx=21, nt=20, progress=False)
    out = mw.save_run(tmp_path / "run", res, parameters={"seed": 3, "out_dir": "elsewhere"},
                      metrics={"note": "hi"}, figures={"attendance": plots.plot_attendance(res)},
                      tables={"rows": [{"a": 1, "b": None}, {"a": 2, "c": "x"}]})
    back = mw.load(out)
    for key in ("x", "t", "U", "M", "attendance"):
        assert (getattr(back, key) == getattr(res, key)).all()
    assert back.params["seed"] == 3 and back.params["threshold"] == 0.5
    assert "out_dir" not in back.params
    assert (back.iterations, back.converged) == (res.iterations, True)
    assert back.summary == res.summary and set(back.observables) == set(res.observables)
    assert json.loads((out / "metrics.json").read_text())["note"] == "hi"
    assert load_table(out / "rows.json") == [{"a": 1, "b": None}, {"a": 2, "c": "x"}]
    assert (out / "rows.csv").read_text().splitlines() == ["a,b,c", "1,,", "2,,x"]
    assert imread(out / "figures" / "attendance.png").std() > 0.01


def test_save_run_that_fails_leaves_nothing(tmp_path):
    class Broken:
        def savefig(self, *args, **kwargs):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        mw.save_run(tmp_path / "run", parameters={"a": 1}, figures={"f": Broken()})
    assert list(tmp_path.iterdir()) == []


def test_command_line_bad_input_exits_2_before_running(tmp_path):
    path = make_notebook(tmp_path / "nb.ipynb", "print(x)")
    for args in (["-p", "y", "1"], ["-p", "x", "'text'"]):
        out = subprocess.run([sys.executable, "-m", "mfgwork", "run", str(path), *args,
                              "-o", str(tmp_path / "out")], capture_output=True, text=True)
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ")
        assert f"{args[1]!r}" in lines[0] or f"{args[1]}=" in lines[0]
    missing = subprocess.run([sys.executable, "-m", "mfgwork", "run",
                              str(tmp_path / "absent.ipynb")], capture_output=True, text=True,
                             cwd=tmp_path)
    assert missing.returncode == 2, missing.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


def test_command_line_version():
    out = subprocess.run([sys.executable, "-m", "mfgwork", "--version"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == f"mfgwork {mw.__version__}"
