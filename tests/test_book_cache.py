"""The book's cache of executed notebooks: a notebook whose inputs (content, parameters, the
package's code) are unchanged is taken from the cache instead of executed; the cache removes
only the entries it wrote and refuses a folder that is not a cache. Papermill and Sphinx are
replaced by fakes (``test_book.py`` builds the real book)."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import load_book_builder

import mfgwork as mw

builder = load_book_builder("book_build_cache")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Two notebooks in a checkout in tmp_path; a fake execution that records its calls."""
    notebooks = tmp_path / "checkout" / "notebooks"
    notebooks.mkdir(parents=True)
    for name in ("01_a.ipynb", "02_b.ipynb"):
        (notebooks / name).write_text(json.dumps({"cells": [], "source": name}))
    calls: list[tuple[str, dict]] = []

    def execute(notebook, target, parameters, cwd):
        calls.append((notebook.name, parameters))
        target.write_text(notebook.read_text() + f" executed {len(calls)}")
        return 0.0

    def sphinx(src, html):
        html.mkdir()
        (html / "index.html").write_text("book")

    monkeypatch.setattr(builder, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(builder, "PROTECT", {notebooks.parent: "the checkout",
                                             notebooks: "the notebooks folder"})
    monkeypatch.setattr(builder, "execute", execute)
    monkeypatch.setattr(builder, "sphinx", sphinx)
    monkeypatch.setattr(builder, "copy_sources", lambda src: None)
    monkeypatch.setattr(builder, "small_parameters", lambda nb: {"nx": 11})
    return type("Fake", (), {"notebooks": notebooks, "calls": calls, "tmp": tmp_path})


def build(fake, **kw):
    kw.setdefault("cache", fake.tmp / "cache")
    return builder.build_book(fake.tmp / "book", log=lambda line: None, **kw)


def executed_page(fake, name):
    return (fake.tmp / "book" / "src" / "notebooks" / name).read_text()


def test_unchanged_notebooks_come_from_the_cache(fake):
    build(fake)
    first = executed_page(fake, "02_b.ipynb")
    assert [name for name, _ in fake.calls] == ["01_a.ipynb", "02_b.ipynb"]
    build(fake)
    assert len(fake.calls) == 2                          # nothing executed again
    assert executed_page(fake, "02_b.ipynb") == first    # the cached execution
    (fake.notebooks / "02_b.ipynb").write_text('{"cells": [], "edited": true}')
    build(fake)
    assert [name for name, _ in fake.calls[2:]] == ["02_b.ipynb"]
    build(fake, small=True)                              # other parameters: other keys
    assert fake.calls[3:] == [("01_a.ipynb", {"nx": 11}), ("02_b.ipynb", {"nx": 11})]
    # one entry per notebook (the previous one removed) and the manifest
    cache = fake.tmp / "cache"
    manifest = json.loads((cache / builder.ExecutionCache.MANIFEST).read_text())
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [builder.ExecutionCache.MANIFEST, *manifest.values()])


def test_a_change_of_the_package_executes_again(fake, monkeypatch):
    build(fake)
    monkeypatch.setattr(builder, "package_digest", lambda: "another version of the code")
    build(fake)
    assert len(fake.calls) == 4


def test_the_package_digest_follows_the_code():
    digest = builder.package_digest()
    assert len(digest) == 64 and digest == builder.package_digest()
    assert mw.__version__  # part of the digest: a release changes it too


def test_no_cache_executes_everything_and_writes_nothing(fake):
    build(fake, cache=None)
    build(fake, cache=None)
    assert len(fake.calls) == 4
    assert not (fake.tmp / "cache").exists()


def test_a_folder_that_is_not_a_cache_is_refused_before_any_work(fake):
    mine = fake.tmp / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(mw.ParameterError, match="not a book cache"):
        build(fake, cache=mine)
    assert fake.calls == [] and [p.name for p in mine.iterdir()] == ["notes.txt"]
    (fake.tmp / "book").mkdir()
    with pytest.raises(mw.ParameterError, match="inside the book's output"):
        build(fake, cache=fake.tmp / "book" / "cache")
    with pytest.raises(mw.ParameterError, match="inside the notebooks folder"):
        build(fake, cache=fake.notebooks / "cache")
    broken = fake.tmp / "broken"
    broken.mkdir()
    (broken / builder.ExecutionCache.MANIFEST).write_text("{not json")
    with pytest.raises(mw.ParameterError, match="not a JSON object"):
        build(fake, cache=broken)
    link = fake.tmp / "link"
    link.symlink_to(mine)
    with pytest.raises(mw.ParameterError, match="not a folder"):
        build(fake, cache=link)
    assert fake.calls == []


def test_a_manifest_naming_other_files_never_makes_the_cache_read_or_remove_them(fake):
    cache = fake.tmp / "cache"
    cache.mkdir()
    outside = fake.tmp / "precious.ipynb"
    outside.write_text("precious")
    (cache / "notes.ipynb").write_text("not an entry")
    (cache / builder.ExecutionCache.MANIFEST).write_text(json.dumps(
        {"01_a.ipynb": "../precious.ipynb", "02_b.ipynb": "notes.ipynb"}))
    build(fake)
    assert len(fake.calls) == 2                      # neither listed file was read
    assert outside.read_text() == "precious"         # nor removed
    assert (cache / "notes.ipynb").read_text() == "not an entry"


def test_the_command_line_keeps_its_cache_beside_the_book(fake, monkeypatch):
    monkeypatch.chdir(fake.tmp)
    assert builder.main(["-o", str(fake.tmp / "out")]) == 0
    assert builder.main(["-o", str(fake.tmp / "out")]) == 0
    assert len(fake.calls) == 2
    assert (fake.tmp / "out-cache" / builder.ExecutionCache.MANIFEST).is_file()
    assert builder.main(["-o", str(fake.tmp / "out"), "--no-cache"]) == 0
    assert len(fake.calls) == 4
    shutil.rmtree(fake.tmp / "out-cache")
