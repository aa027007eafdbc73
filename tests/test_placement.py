"""Placement by measurement: mw.placement with mocked devices, the shipped crossover table,
and device="auto" in solve / solve_batch."""

from __future__ import annotations

import copy
import json
import warnings

import pytest

import mfgwork as mw
from mfgwork.analysis.crossover import crossover
from mfgwork.placement import FALLBACK_FDM_BATCH, FALLBACK_PARTICLES

GRID = {"nx": 31, "nt": 30, "tol": 1e-6, "progress": False}


def _batch(n: int) -> list[mw.SantaFeBar]:
    return [mw.SantaFeBar(threshold=0.3 + 0.5 * i / max(n - 1, 1)) for i in range(n)]


def _measured_table(kind: str, fdm: int | None, particles: int | None) -> dict:
    """The shipped table with ``kind`` marked measured at the given crossovers."""
    table = copy.deepcopy(mw.crossover_table())
    table["accelerators"][kind] = {
        "measured": True, "machine": {"name": "Test GPU"},
        "fdm_batch": {"sizes": [1, 8, 64], "seconds": [1.0, 1.0, 1.0], "crossover": fdm},
        "particles": {"sizes": [10, 1000], "seconds": [1.0, 1.0], "crossover": particles}}
    return table


def test_no_accelerator_means_cpu(mock_accelerators):
    mock_accelerators(cuda=0, mps=False)
    choice = mw.placement(_batch(500))
    assert (choice.backend, choice.device) == ("numpy", "cpu")
    assert "no CUDA or MPS device" in choice.reason and choice.row is None


@pytest.mark.parametrize(("cuda", "mps", "kind"), [(1, False, "cuda"), (0, True, "mps"),
                                                   (2, True, "cuda")])
def test_fallback_rule_when_the_accelerator_was_not_measured(mock_accelerators, cuda, mps,
                                                             kind):
    mock_accelerators(cuda=cuda, mps=mps)
    table = copy.deepcopy(mw.crossover_table())
    table["accelerators"][kind] = {"measured": False, "note": "not on this machine"}
    single = mw.placement(mw.SantaFeBar(), table=table)
    assert single.device == "cpu" and "single finite-difference solve" in single.reason
    big = mw.placement(_batch(FALLBACK_FDM_BATCH), table=table)
    assert (big.backend, big.device) == ("torch", kind)
    assert "fallback rule" in big.reason and "not on this machine" in big.reason
    assert mw.placement(_batch(FALLBACK_FDM_BATCH - 1), table=table).device == "cpu"
    many = mw.placement(mw.SantaFeBar(), "particles", n_particles=FALLBACK_PARTICLES,
                        table=table)
    assert many.device == kind and not many.row["measured"]
    few = mw.placement(mw.SantaFeBar(), "particles", n_particles=FALLBACK_PARTICLES - 1,
                       table=table)
    assert few.device == "cpu"


def test_measured_crossovers_decide(mock_accelerators):
    mock_accelerators(cuda=1)
    table = _measured_table("cuda", fdm=8, particles=1000)
    assert mw.placement(_batch(8), table=table).device == "cuda"
    below = mw.placement(_batch(7), table=table)
    assert below.device == "cpu" and "7 problems < crossover 8" in below.reason
    assert "Test GPU" in below.reason and below.row["crossover"] == 8
    assert mw.placement(mw.SantaFeBar(), table=table).device == "cpu"   # one solve: CPU
    assert mw.placement(mw.SantaFeBar(), "particles", n_particles=1000,
                        table=table).device == "cuda"
    never = _measured_table("cuda", fdm=None, particles=None)
    choice = mw.placement(_batch(64), table=never)
    assert choice.device == "cpu" and "did not beat the CPU at any size up to 64" in choice.reason


def test_numpy_backend_stays_on_the_cpu_and_says_where_torch_would_go(mock_accelerators):
    mock_accelerators(cuda=1)
    choice = mw.placement(_batch(16), backend="numpy", table=_measured_table("cuda", 8, 10))
    assert (choice.backend, choice.device) == ("numpy", "cpu")
    assert "backend='numpy' runs on the CPU only" in choice.reason and "cuda" in choice.reason


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"problems": []}, r"problems=\[\] is invalid"),
    ({"problems": ["x"]}, r"problems\[0\]='x' is invalid"),
    ({"problems": mw.SantaFeBar(), "method": "monte-carlo"}, r"method='monte-carlo'"),
    ({"problems": mw.SantaFeBar(), "n_particles": 10}, r"n_particles=10 is invalid"),
    ({"problems": mw.SantaFeBar(), "method": "particles", "n_particles": 0},
     r"n_particles=0 is invalid"),
    ({"problems": _batch(2), "method": "particles"}, r"one problem at a time"),
    ({"problems": mw.SantaFeBar(), "nx": 2}, r"nx=2 is invalid"),
    ({"problems": mw.SantaFeBar(), "backend": "jax"}, r"backend='jax' is invalid"),
])
def test_bad_input_is_a_parameter_error(kwargs, pattern):
    problems = kwargs.pop("problems")
    with pytest.raises(mw.ParameterError, match=pattern):
        mw.placement(problems, **kwargs)


def test_crossover_is_the_start_of_the_winning_tail():
    cpu = {"sizes": [1, 2, 4, 8, 16], "seconds": [1, 2, 4, 8, 16]}
    acc = {"sizes": [1, 2, 4, 8, 16], "seconds": [5, 1.5, 5, 7, 9]}   # wins at 2, loses at 4
    assert crossover(cpu, acc) == 8
    assert crossover(cpu, {"sizes": [1, 16], "seconds": [9, 17]}) is None
    assert crossover(cpu, {"sizes": [1, 16], "seconds": [0.5, 1]}) == 1


def test_shipped_table_is_a_real_measurement_with_its_machine():
    table = mw.crossover_table()
    cpu = table["cpu"]
    assert cpu["measured"] and cpu["machine"]["host"] and cpu["machine"]["cores"] >= 1
    for method in ("fdm_batch", "particles"):
        series = cpu[method]
        assert len(series["sizes"]) == len(series["seconds"]) >= 3
        assert all(t > 0 for t in series["seconds"])
    for kind, entry in table["accelerators"].items():
        if not entry["measured"]:
            assert entry["note"]
            continue
        assert entry["machine"]["name"]
        for method in ("fdm_batch", "particles"):   # the stored B*, N* follow from the times
            if entry.get(method):
                assert entry[method]["crossover"] == crossover(cpu[method], entry[method]), kind


def test_auto_device_records_the_placement(mock_accelerators):
    pytest.importorskip("torch")
    mock_accelerators(cuda=1)
    res = mw.solve(mw.SantaFeBar(), backend="torch", device="auto", **GRID)
    placed = res.params["placement"]
    assert res.device == "cpu" and placed["device"] == "cpu" and placed["backend"] == "torch"
    assert "single finite-difference solve" in placed["reason"]
    assert placed["table_entry"]["kind"] == "cuda"
    assert "placement" not in mw.solve(mw.SantaFeBar(), **GRID).params   # explicit device


def test_auto_device_in_solve_batch_and_particles(mock_accelerators):
    pytest.importorskip("torch")
    mock_accelerators(cuda=0, mps=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        batch = mw.solve_batch(_batch(2), device="auto", **GRID)
        particles = mw.solve(mw.SantaFeBar(), method="particles", n_particles=2000, seed=1,
                             device="auto", max_iter=2, **(GRID | {"tol": 0.1}))
    for res in batch + [particles]:
        assert res.params["placement"]["device"] == "cpu"
        assert "no CUDA or MPS device" in res.params["placement"]["reason"]
    assert particles.params["placement"]["size"] == 2000


@pytest.mark.parametrize("cuda", [0, 1], ids=["cpu-only", "cuda-below-crossover"])
def test_auto_batch_on_the_cpu_runs_the_compiled_numpy_loops(mock_accelerators, cuda):
    """backend="torch", device="auto": a batch that no accelerator pays off for runs on NumPy
    (a torch batch on the CPU is many times slower), and the record says why."""
    pytest.importorskip("torch")
    mock_accelerators(cuda=cuda, mps=False)
    results = mw.solve_batch(_batch(2), backend="torch", device="auto", **GRID)
    for res in results:
        placed = res.params["placement"]
        assert (res.backend, res.device) == ("numpy", "cpu") and res.converged
        assert (placed["backend"], placed["device"]) == ("numpy", "cpu")
        assert "compiled NumPy loops" in placed["reason"]
    explicit = mw.solve_batch(_batch(2), backend="torch", device="cpu", **GRID)
    assert explicit[0].backend == "torch" and "placement" not in explicit[0].params


@pytest.mark.parametrize("table, problem", [
    ("x", "it is a str"), ({"accelerators": "x"}, "'accelerators' must be a dict of dicts"),
    ({"cases": {"fdm_batch": 3}}, "'cases' must be a dict of dicts"),
    ({"accelerators": {"cuda": {"machine": "h200"}}}, r"\['machine'\] must be a dict"),
    ({"accelerators": {"cuda": {"fdm_batch": {"crossover": "64"}}}},
     r"\['crossover'\] must be an int or null"),
    ({"accelerators": {"cuda": {"particles": {"sizes": [1, 2.5]}}}},
     r"\['sizes'\] must be a list of ints"),
])
def test_a_table_that_is_no_crossover_table_is_refused_here_too(table, problem, tmp_path):
    """Refused whether or not an accelerator is present (where one is, its lookups would
    fail inside the rule): as an argument, and as the file crossover_table reads."""
    with pytest.raises(mw.ParameterError, match=f"table=.* is invalid: must be a crossover "
                       f"table .*{problem}"):
        mw.placement(mw.SantaFeBar(), table=table)
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    with pytest.raises(mw.LoadError, match=problem):
        mw.crossover_table(path)
