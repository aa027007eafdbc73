"""The performance page is generated from the JSON files of benchmarks/baselines: every file
there is drawn, named by what and where (not by when), and the page shows what the files
hold; a missing file or a column no row has fails the build."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASELINES = ROOT / "benchmarks" / "baselines"
spec = importlib.util.spec_from_file_location("performance_page",
                                              ROOT / "docs" / "book" / "performance.py")
performance = sys.modules["performance_page"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(performance)

#: words of a file name that say when it was measured rather than what or where
WHEN = re.compile(r"(^|_)(before|after|stop\d*|v\d+|old|new|\d{4}-\d\d-\d\d|[0-9a-f]{7})(_|$)")


def test_every_baseline_is_on_the_page_and_named_by_what_and_where():
    files = {p.name for p in BASELINES.glob("*.json")}
    drawn = {s.name for s in performance.SECTIONS}
    assert files == drawn, {"not drawn": files - drawn, "missing": drawn - files}
    assert not [f for f in files if WHEN.search(Path(f).stem)]
    assert WHEN.search("room_h100_stop37_before") and not WHEN.search("room_h100")


def test_the_page_shows_the_numbers_of_the_files():
    page = performance.render(BASELINES)
    assert page.count("\n|---") == len(performance.SECTIONS)
    rows = json.loads((BASELINES / "room_h100.json").read_text())["rows"]
    warm = [r for r in rows if r["case"] == "batch-64" and r["run_in_process"] > 1]
    assert warm and all(performance.seconds(r["wall_s"]) in page for r in warm)
    cold = [r for r in rows if r["case"] == "batch-64" and r["run_in_process"] == 1]
    assert cold and not any(performance.seconds(r["wall_s"]) in page for r in cold)


def test_a_missing_file_or_column_fails(tmp_path):
    shutil.copytree(BASELINES, tmp_path, dirs_exist_ok=True)
    data = json.loads((tmp_path / "room_h100.json").read_text())
    for row in data["rows"]:
        row["seconds"] = row.pop("wall_s")
    (tmp_path / "room_h100.json").write_text(json.dumps(data))
    with pytest.raises(performance.PerformanceError, match="room_h100.json: no row has"):
        performance.render(tmp_path)
    (tmp_path / "room_h100.json").unlink()
    with pytest.raises(performance.PerformanceError, match="room_h100.json"):
        performance.render(tmp_path)


def test_durations_are_written_at_a_readable_unit():
    assert [performance.seconds(v) for v in (294, 1.3218, 0.0271, 6.1e-5)] == [
        "4 min 54 s", "1.32 s", "27.1 ms", "61 µs"]


def test_the_readme_states_the_book_times_of_the_baseline():
    """The README's build times are those of commands_2core.json (two notebooks at a time,
    and a rebuild from the cache)."""
    rows = json.loads((BASELINES / "commands_2core.json").read_text())["rows"]
    book = [r for r in rows if r["command"] == "make book"]
    first, = [r["time_s"] for r in book if r["condition"].startswith("first") and "-j 2" in
              r["condition"]]
    again, = [r["time_s"] for r in book if r["condition"].startswith("rebuild")]
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"a first build took {performance.seconds(first)}" in readme
    assert f"a rebuild with no notebook changed {round(again)} s" in readme
