"""Refusals that say what differs: a sweep folder or a scan store made for other settings;
and error messages free of terminal colour codes."""

from __future__ import annotations

import json

import pytest
from helpers import write_notebook

import mfgwork as mw
from mfgwork.core import storage
from mfgwork.core.ansi import strip_ansi
from mfgwork.workflows import runs
from mfgwork.workflows.differences import plan_differences


def notebook(path, *body: str):
    return write_notebook(path, 'threshold = 0.6\nnx = 21\nnt = 21\nout_dir = ""', *body)


def test_plan_differences_in_words():
    earlier = {"notebook": "a.ipynb", "spec": {"sigma": [0.3, 0.6]}, "fixed": {"nx": 21}}
    now = {"notebook": "a.ipynb", "spec": {"sigma": [0.3]}, "fixed": {"nx": 41, "nt": 41}}
    assert plan_differences(earlier, now) == \
        "spec: sigma [0.3, 0.6] → [0.3]; fixed: nx 21 → 41, nt (not set) → 41"
    assert plan_differences(now, now) == ""
    assert plan_differences({"device": "cpu"}, {"device": "auto"}) == "device: cpu → auto"
    long = plan_differences({"grid": list(range(100))}, {"grid": []})
    assert len(long) < 100 and long.endswith("... → []")


def test_sweep_folder_of_other_fixed_parameters_names_them(tmp_path):
    nb = notebook(tmp_path / "nb.ipynb")
    folder = tmp_path / "sweep"
    folder.mkdir()
    storage.write_marker(folder, "sweep")
    spec = {"threshold": [0.4, 0.6]}
    (folder / "sweep.json").write_text(json.dumps({
        "notebook": str(nb.resolve()), "spec": spec, "fixed": {"nx": 21, "nt": 21},
        "parameters": ["threshold"], "runs": []}))
    with pytest.raises(mw.ParameterError) as err:
        mw.sweep(nb, spec, folder, {"nx": 41, "nt": 41}, progress=False)
    message = str(err.value)
    assert "holds a sweep with other fixed parameters" in message
    assert "(there → here: fixed: nx 21 → 41, nt 21 → 41)" in message
    with pytest.raises(mw.ParameterError) as err:
        mw.sweep(nb, {"threshold": [0.4]}, folder, {"nx": 21, "nt": 21}, progress=False)
    assert "another spec (there → here: spec: threshold [0.4, 0.6] → [0.4])" in str(err.value)
    assert sorted(p.name for p in folder.iterdir()) == ["mfgwork.json", "sweep.json"]


def test_scan_store_of_another_scan_names_what_differs(tmp_path):
    store = tmp_path / "a.zarr"
    small = {"nt": 5, "tol": 1e-6, "device": "cpu", "progress": False}
    mw.scan(mw.SantaFeBar, {"threshold": [0.5]}, store=store, nx=11, **small)
    with pytest.raises(mw.ParameterError) as err:
        mw.scan(mw.SantaFeBar, {"threshold": [0.5]}, store=store, nx=21, **small)
    assert "holds a different scan (there → here: parameters: nx 11 → 21)" in str(err.value)
    with pytest.raises(mw.ParameterError) as err:
        mw.scan(mw.SantaFeBar, {"threshold": [0.5, 0.7]}, store=store, nx=11, **small)
    assert "grid: threshold [0.5] → [0.5, 0.7]" in str(err.value)
    with pytest.raises(mw.ParameterError) as err:
        mw.scan(mw.SantaFeBar, {"sigma": [0.5]}, store=store, nx=11, **small)
    assert "grid: threshold [0.5] → (not set), sigma (not set) → [0.5]" in str(err.value)
    assert "parameters: scanned threshold → sigma" in str(err.value)


def test_strip_ansi():
    coloured = ("\x1b[0;31mValueError\x1b[0m: \x1b[1;32mbad\x1b[39m\x1b[0m \x1b[2K"
                "\x1b]8;;file:///x\x1b\\link\x1b]8;;\x1b\\")
    assert strip_ansi(coloured) == "ValueError: bad link"


def test_failing_cell_message_has_no_colour_codes(tmp_path):
    nb = notebook(tmp_path / "fails.ipynb", "raise ValueError('\\x1b[31mred\\x1b[0m value')")
    with pytest.raises(runs.NotebookError) as err:
        runs.run_notebook(nb, {}, tmp_path / "out")
    assert "\x1b" not in str(err.value) and "\x1b" not in err.value.evalue
    assert "ValueError: red value" in str(err.value)
