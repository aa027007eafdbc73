"""A writer deletes only what it wrote: ``force`` never removes a repository (a ``.git`` folder
or file, or any other version-control marker) or any mfgwork output (a result folder, a scan
or zarr store) at any depth; a result is never written inside another, nor replaced while it
holds a foreign one; hidden siblings named like temporaries are left alone unless an owner
record proves them stale; a damaged marker is named for what it is."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import dead_temporaries, load_book_builder, write_notebook

import mfgwork as mw
from mfgwork.__main__ import main as cli
from mfgwork.core import storage
from mfgwork.core.errors import ParameterError
from mfgwork.workflows import runs

builder = load_book_builder("book_builder_ownership")



@pytest.fixture(scope="module")
def notebook(tmp_path_factory) -> Path:
    """A notebook that must never run here (every target below is refused)."""
    folder = tmp_path_factory.mktemp("nb")
    return write_notebook(folder / "nb.ipynb", "a = 1\nout_dir = ''", "raise SystemExit(1)")


#: Folder writers that take force: name -> call(target, force, notebook).
FORCED = {
    "save_run": lambda t, f, nb: mw.save_run(t, parameters={"a": 1}, force=f),
    "figures": lambda t, f, nb: mw.plots.write_figures({}, t, force=f),
    "book": lambda t, f, nb: builder.check_out(t, force=f),
    "run_notebook": lambda t, f, nb: runs.run_notebook(nb, {}, t, force=f),
}


def _git_file(folder: Path) -> None:
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "code.py").write_text("print('years of work')")
    (folder / "src" / ".git").write_text("gitdir: /elsewhere/.git/worktrees/src\n")


def _scan_store(folder: Path) -> None:
    (folder / "scans" / "s.zarr" / "M").mkdir(parents=True)
    meta = {"zarr_format": 3, "node_type": "group",
            "attributes": {storage.SCAN_ATTR: "0123abcd"}}
    (folder / "scans" / "s.zarr" / "zarr.json").write_text(json.dumps(meta))
    (folder / "notes.txt").write_text("beside the store")


def _marked(kind: str):
    def make(folder: Path) -> None:
        (folder / "deep" / "er" / kind).mkdir(parents=True)
        storage.write_marker(folder / "deep" / "er" / kind, kind)
        (folder / "notes.txt").write_text("mine")
    return make


#: What a folder holds: name -> (make(folder), words of the refusal).
HELD = {
    ".git file (worktree)": (_git_file, "a repository"),
    ".git folder, deep": (lambda f: (f / "a" / "b" / ".git").mkdir(parents=True),
                          "a repository"),
    **{vcs: ((lambda v: lambda f: (f / "sub").mkdir(parents=True) or
              (f / "sub" / v).mkdir())(vcs), "a repository")
       for vcs in (".hg", ".svn", ".bzr", "_darcs", ".jj")},
    ".fslckout file": (lambda f: (f / "sub").mkdir(parents=True) or
                       (f / "sub" / ".fslckout").write_text(""), "a repository"),
    "scan store beside files": (_scan_store, "a scan store"),
    "zarr store": (lambda f: (f / "z.zarr").mkdir(parents=True) or
                   (f / "z.zarr" / ".zgroup").write_text("{}"), "a zarr store"),
    **{f"{kind} folder, deep": (_marked(kind), f"a result folder (a {kind} folder")
       for kind in ("run", "sweep", "book", "figures")},
    "FIFO marker, deep": (lambda f: (f / "r").mkdir(parents=True) or
                          os.mkfifo(f / "r" / storage.MARKER), "named pipe (FIFO)"),
}


@pytest.mark.parametrize("writer", list(FORCED))
@pytest.mark.parametrize("held", list(HELD))
def test_force_never_removes_a_repository_or_an_output(tmp_path, snapshot, notebook, writer,
                                                       held):
    target = tmp_path / "target"
    target.mkdir()
    make, words = HELD[held]
    make(target)
    before = snapshot(tmp_path)
    with pytest.raises(ParameterError) as err:
        FORCED[writer](target, True, notebook)
    assert words in str(err.value) and "force never replaces" in str(err.value)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("held", [".git file (worktree)", ".hg", "scan store beside files",
                                  "run folder, deep"])
def test_a_previous_result_holding_a_repository_or_an_output_is_not_replaced(tmp_path,
                                                                            snapshot, held):
    target = mw.save_run(tmp_path / "run", parameters={"a": 1})
    HELD[held][0](target)
    before = snapshot(tmp_path)
    words = re.escape(f"a run folder that holds {HELD[held][1]}")
    with pytest.raises(ParameterError, match=words):
        mw.save_run(target, parameters={"a": 2})
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["scan", "zarr"])
def test_a_store_is_never_replaced_by_another_writer(tmp_path, snapshot, notebook, kind):
    target = tmp_path / "s.zarr"
    target.mkdir()
    attrs = {storage.SCAN_ATTR: "0123abcd"} if kind == "scan" else {}
    (target / "zarr.json").write_text(json.dumps({"attributes": attrs}))
    before = snapshot(tmp_path)
    for call in FORCED.values():
        with pytest.raises(ParameterError, match=f"it is a {kind} store, not a"):
            call(target, True, notebook)
    assert snapshot(tmp_path) == before


# -- nesting ---------------------------------------------------------------------------------------
@pytest.fixture
def outer(tmp_path) -> Path:
    """A run folder ``runs/santa_fe_bar``."""
    return mw.save_run(tmp_path / "runs" / "santa_fe_bar", parameters={"a": 1})


@pytest.mark.parametrize(("writer", "part"), [
    ("save_run", "sub"), ("save_run", "figures/deeper"), ("figures", "plots"),
    ("book", "book"), ("run_notebook", "sub"), ("sweep", "sweep"), ("scan", "s.zarr")])
def test_a_result_is_never_written_inside_another(outer, snapshot, notebook, writer, part):
    target = outer / part
    calls = {**FORCED,
             "sweep": lambda t, f, nb: mw.sweep(nb, {"a": [1]}, t),
             "scan": lambda t, f, nb: mw.scan("santa_fe", {"threshold": [0.4]}, store=t,
                                              device="cpu", progress=False, nx=21, nt=20)}
    before = snapshot(outer)
    with pytest.raises(ParameterError) as err:
        calls[writer](target, True, notebook)
    message = str(err.value)
    assert f"inside a run folder ({outer})" in message and "never written inside" in message
    assert repr(str(target)) in message and snapshot(outer) == before


def test_the_command_line_refuses_a_nested_run_before_any_work(outer, notebook, capsys,
                                                                 snapshot):
    before = snapshot(outer)
    assert cli(["run", str(notebook), "-o", str(outer / "sub")]) == 2
    err = capsys.readouterr().err
    assert "out_dir=" in err and f"inside a run folder ({outer})" in err
    assert snapshot(outer) == before


def test_a_run_holding_a_foreign_run_is_not_replaced(outer, snapshot):
    inner = outer / "sub"
    inner.mkdir()
    storage.write_marker(inner, "run")
    before = snapshot(outer.parent)
    with pytest.raises(ParameterError, match=r"holds a result folder \(a run folder: .*sub\)"):
        mw.save_run(outer, parameters={"a": 2})
    assert snapshot(outer.parent) == before


def test_own_parts_are_still_written(outer):
    assert mw.plots.write_figures({}, outer / "figures") == []  # a run's own figures folder
    assert storage.marker_kind(outer / "figures") == "figures"
    assert mw.save_run(outer, parameters={"a": 2}) == outer  # replaced with its figures
    book = storage.check_target(outer.parent / "book", "book")
    (book / "work" / "sweeps" / "demo").mkdir(parents=True)
    storage.write_marker(book / "work" / "sweeps" / "demo", "sweep")
    storage.write_marker(book, "book")
    assert storage.check_target(book, "book") == book  # what its notebooks wrote in work/


def test_results_written_into_a_run_being_written_become_its_parts(tmp_path):
    target = tmp_path / "run"
    tmp = storage.temporary_sibling(target, "tmp")  # as run_notebook fills it
    storage.write_marker(tmp, "run")
    mw.save_run(tmp / "room", parameters={"a": 1})  # the notebook's own result, inside
    storage.write_marker(tmp, "run", parts=True)
    storage.replace_folder(tmp, target)
    storage.release_temporary(tmp)
    assert storage.marked_parts(target) == {("room",)}
    assert mw.save_run(target, parameters={"a": 2}) == target  # replaced with its part
    with pytest.raises(ParameterError, match="never written inside"):
        mw.save_run(target / "room", parameters={"a": 3})  # finished: no more parts
    killed, = dead_temporaries((tmp_path / "other", "tmp", True, ""))
    storage.write_marker(killed, "run")
    with pytest.raises(ParameterError, match="never written inside"):
        mw.save_run(killed / "room", parameters={"a": 1})  # its writer is gone


def test_save_run_writes_results_as_its_parts(tmp_path):
    res = mw.solve(mw.SantaFeBar(), nx=21, nt=10, tol=1e-6)
    target = tmp_path / "run"
    mw.save_run(target, parameters={"a": 1}, results={"room": res})
    assert storage.marked_parts(target) == {("room",)}
    back = mw.load(target / "room")
    assert back.converged and np.array_equal(back.M, mw.to_numpy(res.M))
    assert mw.save_run(target, parameters={"a": 2}, results={"room": res}) == target
    for name in ("../x", ".hidden", "figures", "t", "a.npz", ""):
        with pytest.raises(ParameterError, match="results="):
            mw.save_run(tmp_path / "other", results={name: res}, tables={"t": []})
    with pytest.raises(ParameterError, match=r"results\['room'\]=dict"):
        mw.save_run(tmp_path / "other", results={"room": {}})
    assert not (tmp_path / "other").exists()


# -- temporaries -----------------------------------------------------------------------------------
def test_a_run_replacement_leaves_hidden_siblings_named_like_temporaries(tmp_path):
    f = tmp_path / "f"
    backups = [f / ".results.old-2023-backup", f / ".results.tmp-mybackup",
               f / ".results.tmp-1-abcdefgh"]
    for p in backups:
        (p / "data").mkdir(parents=True)
        (p / "data" / "years.txt").write_text("of work")
    stale, = dead_temporaries((f / "results", "old", True, ""))
    mw.save_run(f / "results", parameters={"a": 1})
    mw.save_run(f / "results", parameters={"a": 2})  # replaces: renames the old aside
    assert sorted(p.name for p in f.iterdir()) == sorted(["results", *(p.name for p in backups)])
    assert all((p / "data" / "years.txt").read_text() == "of work" for p in backups)
    assert not stale.exists()


def test_a_file_writer_removes_only_its_own_stale_temporaries(tmp_path):
    target = tmp_path / "x.json"
    theirs = tmp_path / ".x.json.tmp-12-abcdefgh"
    theirs.write_text("a user's file")
    stale, = dead_temporaries((target, "tmp", False, ""))
    storage.write_json(target, {"a": 1}, atomic=True)
    assert theirs.read_text() == "a user's file" and not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([theirs.name, "x.json"])


def test_a_failed_swap_puts_the_old_folder_back(tmp_path, monkeypatch):
    target = mw.save_run(tmp_path / "run", parameters={"a": 1})
    tmp = storage.temporary_sibling(target, "tmp")
    real = os.replace

    def failing(src, dst):
        if Path(src) == tmp:
            raise OSError("disk full")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="disk full"):
        storage.replace_folder(tmp, target)
    monkeypatch.undo()
    assert json.loads((target / "parameters.json").read_text()) == {"a": 1}
    storage.discard_temporary(tmp)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


# -- markers that are none -------------------------------------------------------------------------
@pytest.mark.parametrize("force", [False, True])
def test_a_fifo_marker_is_named_for_what_it_is(tmp_path, snapshot, force):
    target = tmp_path / "target"
    target.mkdir()
    os.mkfifo(target / storage.MARKER)
    (target / "keep.txt").write_text("mine")
    before = snapshot(tmp_path)
    with pytest.raises(ParameterError) as err:
        mw.save_run(target, parameters={"a": 1}, force=force)
    assert "its mfgwork.json is a named pipe (FIFO)" in str(err.value)
    assert snapshot(tmp_path) == before


def test_a_partial_notebook_is_a_runs_own_only_by_its_mark(tmp_path):
    nb = write_notebook(tmp_path / "out.failed.ipynb", "x = 1")
    notebook = json.loads(nb.read_text())
    notebook["metadata"]["papermill"] = {}  # executed by papermill, but not kept by a run
    nb.write_text(json.dumps(notebook))
    assert not runs._is_partial_notebook(nb, tmp_path / "out")
    runs._mark_partial(nb, tmp_path / "out")
    assert runs._is_partial_notebook(nb, tmp_path / "out")
    assert not runs._is_partial_notebook(nb, tmp_path / "other")
