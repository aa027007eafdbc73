"""The guard of conftest.py that fails a test writing into the checkout sees new files and
folders anywhere in it, and nothing inside the caches or the opaque folders."""

from __future__ import annotations

from conftest import ROOT, checkout_files


def test_new_files_are_seen_and_caches_are_not(tmp_path):
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "build" / "book").mkdir(parents=True)
    (tmp_path / "pkg" / "mod.py").write_text("")
    before = checkout_files(tmp_path)
    assert before == {"pkg", "pkg/mod.py", "build"}
    (tmp_path / "pkg" / "__pycache__" / "mod.nbc").write_text("")  # numba's cache
    (tmp_path / "build" / "book" / "index.html").write_text("")    # make book's output
    (tmp_path / ".hypothesis").mkdir()
    assert checkout_files(tmp_path) == before
    (tmp_path / "sweeps" / "demo").mkdir(parents=True)
    (tmp_path / "pkg" / "stray.json").write_text("{}")
    assert checkout_files(tmp_path) - before == {"sweeps", "sweeps/demo", "pkg/stray.json"}


def test_the_guard_looks_at_this_checkout():
    files = checkout_files()
    assert {"Makefile", "tests/conftest.py", "notebooks/01_santa_fe_bar.ipynb"} <= files
    assert not any("__pycache__" in f for f in files)
    assert (ROOT / "tests" / "conftest.py").is_file()
