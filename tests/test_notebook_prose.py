"""Every notebook reads as a page of the course: a title, Markdown math that MathJax can pair
up, and two or three exercises at the end."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
CODE_SPAN = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)
EXERCISE = re.compile(r"^\d+\. ", re.MULTILINE)


def markdown(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "markdown"]


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_has_a_title_and_ends_with_exercises(path):
    nb = nbformat.read(path, as_version=4)
    first, last = nb.cells[0], nb.cells[-1]
    assert first.cell_type == "markdown" and first.source.startswith("# "), \
        f"{path.name}: the first cell must be Markdown with the '# title' of the page"
    assert last.cell_type == "markdown" and last.source.startswith("## Exercises"), \
        f"{path.name}: the last cell must be a '## Exercises' Markdown cell"
    count = len(EXERCISE.findall(last.source))
    assert 2 <= count <= 3, f"{path.name}: {count} numbered exercises, expected two or three"


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_markdown_math_delimiters_pair_up(path):
    for source in markdown(path):
        text = CODE_SPAN.sub("", source)
        display = text.count("$$")
        assert display % 2 == 0, f"{path.name}: unpaired $$ in {source[:80]!r}"
        inline = text.replace("$$", "").count("$")
        assert inline % 2 == 0, f"{path.name}: unpaired $ in {source[:80]!r}"
