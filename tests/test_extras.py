"""A feature whose optional packages are missing says in one line which extra installs them,
before it creates anything (the packages are made unimportable here: ``sys.modules[name] =
None`` makes ``import name`` fail as if it were not installed)."""

from __future__ import annotations

import importlib
import sys

import pytest

import mfgwork as mw
from mfgwork.__main__ import main as cli
from mfgwork.core.extras import MissingExtraError, require


def missing(monkeypatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def test_the_error_names_the_feature_the_packages_and_the_extra(monkeypatch):
    missing(monkeypatch, "xarray", "zarr")
    with pytest.raises(MissingExtraError) as info:
        require("numpy", "xarray", "zarr.storage", extra="scan", feature="mw.scan")
    message = str(info.value)
    assert message.startswith("mw.scan needs xarray and zarr, not installed here")
    assert "pip install -e '.[scan]'" in message and "\n" not in message
    assert isinstance(info.value, ImportError) and isinstance(info.value, mw.ParameterError)
    assert info.value.name == "xarray"
    require("numpy", extra="scan", feature="mw.scan")                  # installed: nothing


def test_a_scan_without_xarray_creates_nothing(monkeypatch, tmp_path):
    missing(monkeypatch, "xarray")
    store = tmp_path / "scans" / "a.zarr"
    with pytest.raises(MissingExtraError, match=r"mw.scan needs xarray.*'scan' extra"):
        mw.scan(mw.SantaFeBar, {"eps": [0.05]}, store=store, nx=21, nt=20, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_the_scan_command_without_zarr_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    missing(monkeypatch, "zarr")
    store = tmp_path / "scans" / "a.zarr"
    code = cli(["scan", "--problem", "santa_fe", "--grid", "{eps: [0.05]}", "-o", str(store),
                "-p", "nx", "21", "-p", "nt", "20", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "mw.scan needs zarr" in err
    assert list(tmp_path.iterdir()) == []


def test_a_dask_scan_without_distributed_says_so_before_work(monkeypatch, tmp_path):
    missing(monkeypatch, "distributed")
    with pytest.raises(MissingExtraError, match=r"needs distributed.*'dask' extra"):
        mw.scan(mw.SantaFeBar, {"eps": [0.05]}, store=tmp_path / "a.zarr", dask=True,
                nx=21, nt=20, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_open_scan_and_to_xarray_name_the_scan_extra(monkeypatch, tmp_path):
    res = mw.solve(mw.SantaFeBar(), nx=21, nt=20, progress=False)
    missing(monkeypatch, "xarray")
    with pytest.raises(MissingExtraError, match="mw.open_scan needs xarray"):
        mw.open_scan(tmp_path / "a.zarr")
    with pytest.raises(MissingExtraError, match="Result.to_xarray needs xarray"):
        res.to_xarray()


def test_a_sweep_or_a_run_without_papermill_creates_nothing(monkeypatch, tmp_path):
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text("{}")
    missing(monkeypatch, "papermill", "nbformat")
    with pytest.raises(MissingExtraError, match=r"mw.sweep needs papermill and nbformat.*make run"):
        mw.sweep(notebook, {"a": [1]}, tmp_path / "sweep", progress=False)
    from mfgwork.workflows.runs import run_notebook

    with pytest.raises(MissingExtraError, match=r"running a notebook needs papermill and nbf"):
        run_notebook(notebook, {}, tmp_path / "run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nb.ipynb"]


def test_the_explorer_and_the_lab_without_their_packages(monkeypatch, capsys):
    missing(monkeypatch, "ipywidgets", "jupyterlab")
    monkeypatch.delitem(sys.modules, "mfgwork.apps.explorer", raising=False)
    with pytest.raises(MissingExtraError, match=r"explorer \(mw.widgets\) needs ipywidgets"):
        importlib.import_module("mfgwork.apps.explorer")
    assert cli(["lab"]) == 2
    assert "python -m mfgwork lab needs jupyterlab" in capsys.readouterr().err
