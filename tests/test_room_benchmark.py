"""benchmarks/room.py at a tiny size: its table's rows and the tail of a batch."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _room_benchmark():
    spec = importlib.util.spec_from_file_location("room_benchmark", ROOT / "benchmarks/room.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
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


def test_the_models_of_a_case_are_compared_with_the_quadratic_in_one_run(tmp_path):
    """``--models``: each room case solved once per Hamiltonian, the quadratic first whatever
    the order asked, the other rows' ratios taken to the quadratic row of their run."""
    out = tmp_path / "room.json"
    assert _room_benchmark().main(["--cases", "room-101", "--cpu-targets", "numpy", "--nx",
                                   "11", "--nt", "2", "--models", "congestion,quadratic",
                                   "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    quad, other = data["rows"]
    assert (quad["model"], other["model"]) == ("quadratic", "congestion")
    assert data["models"] == ["quadratic", "congestion"]
    assert quad["time_ratio_to_quadratic"] == 1.0 and other["converged"]
    assert other["time_ratio_to_quadratic"] == pytest.approx(other["wall_s"] / quad["wall_s"])
    assert other["per_iteration_ratio_to_quadratic"] == pytest.approx(
        other["per_iteration_s"] / quad["per_iteration_s"])
    assert other["cpu_ratio_to_quadratic"] == pytest.approx(other["cpu_s"] / quad["cpu_s"])
    # the rooms differ by their Hamiltonian
    assert quad["residual"] != other["residual"]
