"""Replacing a result never deletes what mfgwork did not write: a previous result changed
since it was written is refused (kept aside under force), a folder without a marker is kept
aside under force, a project's sources are refused even then, and a target name leaves room
for the writer's temporaries."""

import os
import time

import pytest

import mfgwork as mw
from mfgwork.core import storage


@pytest.fixture(scope="module")
def result():
    return mw.solve(mw.SantaFeBar(T=1.0), nx=21, nt=10, progress=False)


def _later():
    """Past the clock tick of the last write (file times step by a few ms)."""
    time.sleep(0.05)


def _asides(path):
    return sorted(p.name for p in path.parent.iterdir() if ".replaced-" in p.name)


def test_an_unchanged_run_is_replaced_and_nothing_is_kept(result, tmp_path):
    run = tmp_path / "run"
    mw.save_run(run, result)
    _later()
    (run / ".ipynb_checkpoints").mkdir()        # opening its notebook is no change
    (run / ".ipynb_checkpoints" / "a-checkpoint.ipynb").write_text("{}")
    mw.save_run(run, result, metrics={"again": 1})
    assert mw.load(run) is not None and _asides(run) == []
    assert '"again"' in (run / "metrics.json").read_text()


@pytest.mark.parametrize("change", ["add a file", "add a folder", "edit a file",
                                    "add into figures", "move in an old file"])
def test_a_run_changed_since_it_was_written_is_refused_and_kept_under_force(result, tmp_path,
                                                                           change):
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(1, 1))
    run = tmp_path / "run"
    mw.save_run(run, result, figures={"f": fig})
    plt.close(fig)
    old = tmp_path / "old.txt"     # written long ago elsewhere, moved in: mv keeps its time
    old.write_text("my own words")
    os.utime(old, (time.time() - 1e6, time.time() - 1e6))
    _later()
    mine = {"add a file": run / "notes.txt", "add a folder": run / "mydata" / "x.csv",
            "edit a file": run / "parameters.json",
            "add into figures": run / "figures" / "mine.png",
            "move in an old file": run / "figures" / "old.txt"}[change]
    mine.parent.mkdir(exist_ok=True)
    if change == "move in an old file":
        os.rename(old, mine)
    else:
        mine.write_text("my own words")
    with pytest.raises(mw.ParameterError, match="added or changed after it was written.*"
                       "never deletes what it did not write.*force"):
        mw.save_run(run, result)
    assert mine.read_text() == "my own words" and _asides(run) == []
    with pytest.warns(UserWarning, match="kept as .*run.replaced-"):
        mw.save_run(run, result, force=True)
    [aside] = _asides(run)
    assert (tmp_path / aside / mine.relative_to(run)).read_text() == "my own words"
    assert storage.marker_kind(run) == "run"
    if change != "edit a file":
        assert not (run / mine.relative_to(run)).exists()


def test_a_folder_without_a_marker_is_kept_aside_under_force(result, tmp_path):
    folder = tmp_path / "results"
    (folder / "old").mkdir(parents=True)
    (folder / "old" / "data.csv").write_text("1,2\n")
    with pytest.raises(mw.ParameterError, match="without mfgwork.json.*force"):
        mw.save_run(folder, result)
    with pytest.warns(UserWarning, match="was not a result as mfgwork wrote it"):
        mw.save_run(folder, result, force=True)
    [aside] = _asides(folder)
    assert (tmp_path / aside / "old" / "data.csv").read_text() == "1,2\n"
    assert storage.marker_kind(folder) == "run"
    _later()
    (folder / "later.txt").write_text("x")
    with pytest.warns(UserWarning):   # a second one gets a name of its own
        mw.save_run(folder, result, force=True)
    assert len(_asides(folder)) == 2


@pytest.mark.parametrize("source", ["__init__.py", "conf.py", "pyproject.toml", "Makefile"])
def test_a_project_s_sources_are_refused_even_with_force(result, tmp_path, source):
    folder = tmp_path / "pkg"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / source).write_text("# source\n")
    (folder / "module.py").write_text("x = 1\n")
    with pytest.raises(mw.ParameterError, match="holds .*(Python package|Sphinx|project root)"
                       ".*force never replaces"):
        mw.save_run(folder, result, force=True)
    assert (folder / "module.py").read_text() == "x = 1\n" and _asides(folder) == []


def test_a_target_name_leaves_room_for_the_temporaries(result, tmp_path):
    long = tmp_path / ("r" * (storage.MAX_TARGET_BYTES + 1))
    with pytest.raises(mw.ParameterError, match="161 bytes long.*at most 160 bytes"):
        mw.save_run(long, result)
    with pytest.raises(mw.ParameterError, match="at most 160 bytes"):
        storage.check_target(tmp_path / ("é" * 81), "run")   # (bytes, not characters)
    with pytest.raises(mw.ParameterError, match="at most 160 bytes"):
        storage.check_file(tmp_path / ("f" * 300), name="path")
    assert not any(tmp_path.iterdir())
    mw.save_run(tmp_path / ("r" * storage.MAX_TARGET_BYTES), result)
    assert mw.load(tmp_path / ("r" * storage.MAX_TARGET_BYTES)) is not None


def test_a_run_being_written_is_no_changed_result(tmp_path):
    """A notebook run fills a temporary run folder, marked at its start: the notebook's own
    files, then its save_run into that folder, replace it without keeping anything aside."""
    target = tmp_path / "run"
    tmp = storage.temporary_sibling(target, "tmp")   # as run_notebook makes it
    storage.write_marker(tmp, "run")
    _later()
    (tmp / "written_by_the_notebook.txt").write_text("x")
    mw.save_run(tmp, parameters={"a": 1})
    storage.replace_folder(tmp, target)
    storage.release_temporary(tmp)
    assert storage.marker_kind(target) == "run" and _asides(target) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
