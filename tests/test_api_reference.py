"""The API reference (docs/book/api.md, rendered by autosummary) lists every public name of
``mw.__all__`` and only those, and every one of them has a docstring of its own: a name
without one, or left out of the page, fails here (``tests/test_book.py`` checks the rendered
pages)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import mfgwork as mw

API = Path(__file__).resolve().parents[1] / "docs" / "book" / "api.md"
ENTRY = re.compile(r"^   (\w+)$", re.MULTILINE)


def listed(text: str) -> list[str]:
    """The names of the autosummary blocks of a MyST page."""
    blocks = re.findall(r"```\{eval-rst\}\n\.\. autosummary::\n(.*?)```", text, re.DOTALL)
    return [name for block in blocks for name in ENTRY.findall(block)]


def own_docstring(name: str, obj: object) -> str | None:
    """The object's own docstring, or None: not inherited from a base class, and not the
    signature that ``dataclasses`` writes for a class without one."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if not doc or not doc.strip() or doc.startswith(f"{name}("):
        return None
    return doc


def test_the_page_lists_every_public_name_once_and_nothing_else():
    names = listed(API.read_text(encoding="utf-8"))
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert set(names) == set(mw.__all__), {"missing": set(mw.__all__) - set(names),
                                           "not public": set(names) - set(mw.__all__)}


@pytest.mark.parametrize("name", mw.__all__)
def test_every_public_name_has_a_docstring_of_its_own(name):
    assert own_docstring(name, getattr(mw, name)), f"mw.{name} has no docstring"


def test_the_checks_catch_a_missing_name_and_an_undocumented_one():
    from dataclasses import dataclass

    @dataclass
    class Bare:
        x: int

    class Child(mw.Quadratic):
        pass

    def undocumented():
        pass

    assert own_docstring("Bare", Bare) is None
    assert own_docstring("Child", Child) is None
    assert own_docstring("undocumented", undocumented) is None
    assert own_docstring("Quadratic", mw.Quadratic)
    text = API.read_text(encoding="utf-8")
    assert "solve" in listed(text)
    assert "solve" not in listed(text.replace("   solve\n", ""))
