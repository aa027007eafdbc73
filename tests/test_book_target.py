"""The book builder's output folder follows the storage rules of every writer: a marker of
kind "book", refusal of foreign folders (``--force`` aside), of the checkout, the notebooks
folder, the current directory, home and their ancestors, and atomic replacement by one
rename. Notebook execution and Sphinx are replaced by small fakes here; ``test_book.py``
builds the real book."""

from __future__ import annotations

import shutil
import time

import pytest
from helpers import dead_temporaries, load_book_builder

from mfgwork.core import storage
from mfgwork.core.errors import ParameterError

builder = load_book_builder("book_build_target")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A checkout in tmp_path (two notebooks), and fakes for papermill and Sphinx."""
    checkout = tmp_path / "checkout"
    notebooks = checkout / "notebooks"
    notebooks.mkdir(parents=True)
    for name in ("01_a.ipynb", "02_b.ipynb"):
        (notebooks / name).write_text('{"cells": []}')
    calls: list[str] = []

    def execute(notebook, target, parameters, cwd):
        calls.append(notebook.name)
        assert cwd == notebook.parent and ".tmp-" in str(cwd)  # works in the temporary
        if notebook.name == fail.get("name"):
            target.write_text("partial")
            raise builder.BookError(f"{notebook.name} failed in cell In [1]: boom (partial "
                                    f"notebook: {target})")
        shutil.copy(notebook, target)
        return 0.0

    def sphinx(src, html):
        html.mkdir()
        pages = sorted(p.name for p in (src / "notebooks").iterdir())
        (html / "index.html").write_text(" ".join(pages))

    fail: dict[str, str] = {}
    monkeypatch.setattr(builder, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(builder, "PROTECT", {checkout: "the checkout",
                                             notebooks: "the notebooks folder"})
    monkeypatch.setattr(builder, "execute", execute)
    monkeypatch.setattr(builder, "sphinx", sphinx)
    home, cwd = tmp_path / "home", tmp_path / "work" / "here"
    home.mkdir()
    cwd.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    return type("Fake", (), {"checkout": checkout, "notebooks": notebooks, "calls": calls,
                             "fail": fail, "tmp": tmp_path, "home": home, "cwd": cwd})


def build(out, **kw):
    return builder.build_book(out, log=lambda line: None, **kw)


def test_book_folder_is_marked_and_replaced_whole(fake):
    out = fake.tmp / "book"
    index = build(out)
    assert index == out / "html" / "index.html" and index.read_text() == "01_a.ipynb 02_b.ipynb"
    assert storage.marker_kind(out) == "book"
    assert sorted(p.name for p in out.iterdir()) == ["html", storage.MARKER, "src", "work"]
    inode = out.stat().st_ino
    build(out)   # an unchanged book is replaced whole
    assert out.stat().st_ino != inode
    time.sleep(0.05)   # (past the clock tick of the build's last write)
    (out / "src" / "notebooks" / "03_removed.ipynb").write_text("{}")
    (out / "notes.txt").write_text("inside a book folder: never deleted")
    with pytest.raises(ParameterError, match="notes.txt.*added or changed after it was "
                       "written.*never deletes"):
        build(out)
    assert (out / "notes.txt").exists()
    with pytest.warns(UserWarning, match="kept as .*book.replaced-"):
        build(out, force=True)
    [kept] = [p for p in fake.tmp.iterdir() if p.name.startswith("book.replaced-")]
    assert (kept / "notes.txt").read_text() == "inside a book folder: never deleted"
    assert not (out / "notes.txt").exists()
    assert (out / "html" / "index.html").read_text() == "01_a.ipynb 02_b.ipynb"
    assert sorted(p.name for p in fake.tmp.iterdir() if p.name.startswith(".")) == []


def test_failed_build_leaves_the_book_and_keeps_the_partial_notebook(fake, snapshot):
    out = fake.tmp / "book"
    build(out)
    before = snapshot(out)
    fake.fail["name"] = "02_b.ipynb"
    with pytest.raises(builder.BookError) as err:
        build(out)
    assert snapshot(out) == before
    kept = [p for p in fake.tmp.iterdir() if p.name.startswith(".book.failed-") and p.is_dir()]
    assert len(kept) == 1 and str(kept[0]) in str(err.value)
    assert (kept[0] / "src" / "notebooks" / "02_b.ipynb").read_text() == "partial"
    # the next build removes it, and the leftovers of builds whose process is gone (proven
    # by their owner records), never a folder merely named like them
    dead_temporaries((out, "failed", True, ""), (out, "tmp", True, ""))
    backup = fake.tmp / ".book.old-2023-backup"
    backup.mkdir()
    fake.fail.clear()
    build(out)
    assert sorted(p.name for p in fake.tmp.iterdir() if p.name.startswith(".")) == [backup.name]


@pytest.mark.parametrize(("target", "force", "words"), [
    (lambda f: f.checkout, True, ["the checkout"]),
    (lambda f: f.notebooks, True, ["the notebooks folder"]),
    (lambda f: f.notebooks / "book", True, ["inside the notebooks folder"]),
    (lambda f: f.checkout.parent, True, ["ancestor of"]),
    (lambda f: ".", True, ["current directory"]),
    (lambda f: "..", True, ["ancestor of the current directory"]),
    (lambda f: f.home, True, ["your home folder"]),
    (lambda f: f.tmp / "foreign", False, ["not a book folder", "thesis.tex", "--force"]),
    (lambda f: f.tmp / "foreign_nb", True, ["holds a notebook", "force never"]),
    (lambda f: f.tmp / "run", True, ["a run folder, not a book folder"]),
    (lambda f: f.tmp / "file.txt", True, ["existing file"]),
    (lambda f: f.tmp / "file.txt" / "book", True, ["file.txt is a file, not a folder"]),
    (lambda f: f.tmp / "link", True, ["symbolic link"]),
], ids=["checkout", "notebooks", "inside notebooks", "ancestor of checkout", ".", "..", "home",
        "foreign", "foreign with a notebook", "a run folder", "file", "under a file", "link"])
def test_refused_targets_are_left_untouched(fake, snapshot, target, force, words):
    (fake.tmp / "foreign").mkdir()
    (fake.tmp / "foreign" / "thesis.tex").write_text("years of work")
    (fake.tmp / "foreign_nb" / "deep").mkdir(parents=True)
    (fake.tmp / "foreign_nb" / "deep" / "x.ipynb").write_text("{}")
    (fake.tmp / "run").mkdir()
    storage.write_marker(fake.tmp / "run", "run")
    (fake.tmp / "file.txt").write_text("text")
    (fake.tmp / "link").symlink_to(fake.tmp / "foreign")
    before = snapshot(fake.tmp)
    with pytest.raises(ParameterError) as err:
        build(target(fake), force=force)
    for w in words:
        assert w in str(err.value)
    assert snapshot(fake.tmp) == before and fake.calls == []


def test_command_line_refuses_with_exit_2_and_force_replaces(fake, capsys):
    foreign = fake.tmp / "foreign"
    foreign.mkdir()
    (foreign / "old.html").write_text("old")
    assert builder.main(["-o", str(foreign)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("book: error: out=") and "--force" in err
    assert (foreign / "old.html").exists() and fake.calls == []
    assert builder.main(["-o", str(foreign), "--force"]) == 0
    assert storage.marker_kind(foreign) == "book" and not (foreign / "old.html").exists()
    assert builder.main(["-o", "."]) == 2
