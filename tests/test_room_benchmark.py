"""benchmarks/room.py at a tiny size: its table's rows and the tail of a batch."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _room_benchmark():
    spec = importlib.util.spec_from_file_location("room_benchmark", ROOT / "benchmarks/room.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_a_batch_case_records_each_room_and_its_tail_solves_the_slowest(tmp_path):
    out = tmp_path / "room.json"
    assert _room_benchmark().main(["--device", "cpu", "--cases", "batch-64", "--nx", "11",
                                   "--nt", "4", "--tail", "3,1", "--out", str(out)]) == 0
    rows = {r["case"]: r for r in json.loads(out.read_text())["rows"]}
    full = rows["batch-64"]
    assert len(full["iterations_per_problem"]) == 64 and full["converged"]
    assert max(full["iterations_per_problem"]) == full["iterations"]
    assert len(full["iteration_s"]) == full["iterations"]
    assert all(t > 0 for t in full["iteration_s"])
    for k in (3, 1):
        tail = rows[f"batch-64-tail{k}"]
        assert tail["batch"] == k and len(tail["iterations_per_problem"]) == k
        assert tail["converged"]
    # the tail holds the slowest rooms: alone, they take longer than the batch's median room
    median = sorted(full["iterations_per_problem"])[32]
    assert min(rows["batch-64-tail3"]["iterations_per_problem"]) > median
    assert rows["batch-64-tail1"]["iterations"] > median
