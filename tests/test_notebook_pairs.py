"""Every notebook is paired with a jupytext ``py:percent`` twin that is committed and in sync.

Edit either file and run ``jupytext --sync notebooks/NAME.py`` (the newer file wins)."""

from __future__ import annotations

import re
from pathlib import Path

import jupytext
import nbformat
import pytest
from jupytext.compare import compare_notebooks

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
FORMATS = "ipynb,py:percent"
# the header line that records which jupytext wrote the twin; it may differ between machines
VERSION_LINE = re.compile(r"^#\s+jupytext_version: .*$", re.MULTILINE)


def pairs() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def without_version(text: str) -> str:
    return VERSION_LINE.sub("", text)


def test_every_notebook_has_a_twin_and_every_twin_a_notebook():
    notebooks = {p.stem for p in NOTEBOOKS.glob("*.ipynb")}
    twins = {p.stem for p in NOTEBOOKS.glob("*.py")}
    assert notebooks, "no notebooks found"
    assert notebooks - twins == set(), f"notebooks without a py:percent twin: {notebooks - twins}"
    assert twins - notebooks == set(), f"twins without a notebook: {twins - notebooks}"


@pytest.mark.parametrize("path", pairs(), ids=lambda p: p.name)
def test_pair_is_declared_and_in_sync(path):
    notebook = nbformat.read(path, as_version=4)
    twin_path = path.with_suffix(".py")
    assert notebook.metadata.get("jupytext", {}).get("formats") == FORMATS, (
        f"{path.name}: run `jupytext --set-formats {FORMATS} {path.relative_to(ROOT)}`")
    twin_text = twin_path.read_text(encoding="utf-8")
    twin = jupytext.reads(twin_text, fmt="py:percent")
    assert twin.metadata.get("jupytext", {}).get("formats") == FORMATS
    # the notebook rendered as a script is the committed twin ...
    expected_text = jupytext.writes(notebook, fmt="py:percent")
    assert without_version(twin_text) == without_version(expected_text), (
        f"{twin_path.name} is out of sync with {path.name}: after editing one of them run "
        f"`jupytext --sync {twin_path.relative_to(ROOT)}`; after a merge that changed only the "
        f"notebook, `jupytext --to py:percent {path.relative_to(ROOT)}`")
    # ... and the twin read back is the notebook: same cells, sources and tags
    compare_notebooks(twin, notebook, fmt="py:percent")
    assert [c.cell_type for c in twin.cells] == [c.cell_type for c in notebook.cells]


@pytest.mark.parametrize("path", pairs(), ids=lambda p: p.name)
def test_twin_keeps_the_parameters_cell(path):
    twin = jupytext.read(path.with_suffix(".py"))
    code = [c for c in twin.cells if c.cell_type == "code"]
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.stem}.py: needs exactly one cell tagged 'parameters'"
