"""The compiled-kernel cache: where it is, what it holds, clearing it, the first-use notice."""

from __future__ import annotations

import pytest

from mfgwork.apps.doctor import cpu_info, format_report
from mfgwork.core import compiling

ENTRY = "A" * 21 + "BCDEFGHIJKLMNOPQRSTUVWXYZ234567"   # a SHA-256 in base32, as Triton 3 names


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(folder))
    monkeypatch.setattr(compiling, "_ANNOUNCED", set())
    return folder


def _compiled(folder, name: str, entry: str = ENTRY) -> None:
    (folder / entry).mkdir(parents=True)
    (folder / entry / f"{name}.json").write_text("{}")
    (folder / entry / f"{name}.cubin").write_bytes(b"\0" * 2048)


def test_the_cache_folder_follows_triton_and_lists_compiled_kernels(cache, tmp_path,
                                                                   monkeypatch):
    assert compiling.triton_cache_dir() == cache
    _compiled(cache, "hjb_sweep_kernel")
    assert compiling.cached_kernels(["hjb_sweep_kernel", "fp_sweep_kernel"]) == {
        "hjb_sweep_kernel"}
    summary = compiling.triton_cache_summary()
    assert summary["entries"] == 1 and summary["bytes"] >= 2048
    monkeypatch.delenv("TRITON_CACHE_DIR")
    monkeypatch.setenv("TRITON_HOME", str(tmp_path))
    assert compiling.triton_cache_dir() == tmp_path / ".triton" / "cache"


def test_clearing_removes_compiled_entries_only(cache):
    _compiled(cache, "hjb_sweep_kernel")
    _compiled(cache, "fp_sweep_kernel", entry="Z" * 52)
    (cache / "notes").mkdir()
    (cache / "README").write_text("kept")
    assert compiling.clear_triton_cache() == 2
    assert sorted(p.name for p in cache.iterdir()) == ["README", "notes"]
    assert compiling.clear_triton_cache() == 0


def test_clearing_keeps_what_only_looks_like_an_entry(cache):
    _compiled(cache, "hjb_sweep_kernel")
    _compiled(cache, "fp_sweep_kernel", entry="0123456789abcdef" * 4)    # an older hex name
    (cache / ENTRY / "tmp.pid_12_34").mkdir()                          # a write cut short
    (cache / ENTRY / "tmp.pid_12_34" / "fp.cubin").write_bytes(b"\0")
    kept = {"important_results_2024": "thesis.tex", "Simulation-Data-Final": "run.csv",
            "Q" * 52: "thesis.tex", "R" * 52: "data/x.json", "S" * 52: None}
    for name, file in kept.items():
        (cache / name).mkdir()
        if file is not None:
            (cache / name / file).parent.mkdir(exist_ok=True)
            (cache / name / file).write_text("mine")
    (cache / ("T" * 52)).symlink_to(cache / ENTRY)
    assert compiling.clear_triton_cache() == 2
    assert sorted(p.name for p in cache.iterdir()) == sorted([*kept, "T" * 52])
    assert (cache / "important_results_2024" / "thesis.tex").read_text() == "mine"


def test_first_use_is_announced_once_and_only_when_not_cached(cache, capsys):
    _compiled(cache, "hjb_sweep_kernel")
    assert not compiling.announce_compilation(["hjb_sweep_kernel"])   # loaded, not built
    assert capsys.readouterr().err == ""
    assert compiling.announce_compilation(["tangent_sweep_kernel"])
    err = capsys.readouterr().err
    assert "compiling the CUDA kernels (first use; cached in" in err and str(cache) in err
    assert not compiling.announce_compilation(["tangent_sweep_kernel"])   # once a process
    assert not compiling.announce_compilation(["thomas_factor_kernel"])   # one notice for all
    assert capsys.readouterr().err == ""


def test_doctor_shows_where_compiled_kernels_are_and_how_to_clear_them(cache):
    _compiled(cache, "hjb_sweep_kernel")
    rep = {"versions": {"python": "3.11"}, "devices": [cpu_info()], "checks": [],
           "caches": {"triton": compiling.triton_cache_summary(),
                      "numba": {"path": compiling.numba_cache_dir()}}}
    text = format_report(rep)
    assert f"triton  {cache} (1 entries" in text
    assert "--clear-cache" in text and "TRITON_CACHE_DIR" in text
