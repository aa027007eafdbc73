"""The pieces of a scan block between the solve and the store: a batch's Results copied with
new entries (``results.updated``, as ``dataclasses.replace`` copies them), and the block's
arrays built from its points' outcomes (``block_arrays``: the batch's host arrays used as
they are, the rows the single path replaced written over them, fill values where a point
failed)."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.frozen import FrozenDict
from mfgwork.results import updated
from mfgwork.workflows import scan as scan_module
from mfgwork.workflows.scan_solve import BatchRows, block_arrays


@pytest.fixture(scope="module")
def result() -> mw.Result:
    return mw.solve(mw.SantaFeBar(), nx=11, nt=10, progress=False)


def _same(a: mw.Result, b: mw.Result) -> None:
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y) and not x.flags.writeable, f.name
        else:
            assert x == y and type(x) is type(y), f.name


def test_updated_copies_as_replace_does(result):
    timings = {"total": 1.0, "results": 0.5}
    copies = updated([result, result], timings=timings)
    for copy in copies:
        _same(copy, dataclasses.replace(result, timings=timings))
    assert isinstance(copies[0].timings, FrozenDict)
    assert copies[0].timings is copies[1].timings        # (frozen once, shared)
    with pytest.raises(TypeError):
        copies[0].timings["total"] = 2.0
    changes = [{"residual": 0.5, "extra": result.extra | {"certificate": {"held": False}},
                "converged": False, "status": "failed"}]
    _same(updated([result], changes, timings=timings)[0],
          dataclasses.replace(result, timings=timings, **changes[0]))
    assert updated([result], changes)[0].status == mw.results.Status.FAILED


def test_updated_checks_what_a_construction_checks(result):
    with pytest.raises(mw.ParameterError, match="status='failed' is invalid"):
        dataclasses.replace(result, status="failed")
    with pytest.raises(mw.ParameterError, match="status='failed' is invalid"):
        updated([result], [{"status": "failed"}])
    with pytest.raises(mw.ParameterError, match="dims="):
        updated([result], [{"dims": ("t",)}])
    with pytest.raises(TypeError, match="no field 'colour'"):
        updated([result], colour="red")


def _layout():
    plan = scan_module.make_plan(mw.SantaFeBar, {"threshold": [0.4, 0.6], "sigma": [0.5, 0.7]},
                                 None, {"nx": 11, "nt": 10}, ("M", "U"), build_points=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return scan_module.make_layout(plan, mw.get_backend("numpy"))


def test_block_arrays_take_the_batch_rows_and_fill_the_rest():
    layout = _layout()
    levels = (11, 11)
    rows = BatchRows({name: np.arange(4 * 11 * 11, dtype=np.float64).reshape(4, *levels) + k
                      for k, name in enumerate(("M", "U"))})
    rows["attendance"] = np.ones((4, 11), dtype=np.float32)   # (a float32 batch's path)
    kept = {name: v.copy() for name, v in rows.items()}
    outcomes = [{"status": "converged", "converged": True, "iterations": 3, "residual": 1e-9,
                 "finished_by": "batch"} | {name: rows.row(name, b) for name in rows}
                for b in range(4)]
    outcomes[2]["U"] = rows["U"][2] + 100.0   # (another array in a batch's outcome: taken)
    single = np.full(levels, 7.0)
    outcomes[1] |= {"M": single, "U": single, "attendance": np.zeros(11),
                    "finished_by": "single"}
    outcomes[3] = {"status": "failed", "converged": False, "finished_by": "single",
                   "message": "ValueError: no"}
    arrays = block_arrays(layout, (2, 2), outcomes, rows)
    assert np.shares_memory(arrays["M"], rows["M"]) and arrays["M"].shape == (2, 2, *levels)
    assert np.array_equal(arrays["M"][0, 0], kept["M"][0])
    assert np.array_equal(arrays["M"][0, 1], single)
    assert np.array_equal(arrays["U"][1, 0], kept["U"][2] + 100.0)
    assert np.array_equal(arrays["M"][1, 0], kept["M"][2])
    assert np.isnan(arrays["M"][1, 1]).all() and np.isnan(arrays["U"][1, 1]).all()
    assert arrays["attendance"].dtype == np.float64
    assert np.array_equal(arrays["attendance"][0, 0], np.ones(11))
    assert np.array_equal(arrays["attendance"][0, 1], np.zeros(11))
    assert np.isnan(arrays["mean_state"]).all()             # (no outcome has it)
    assert arrays["status"].tolist() == [["converged", "converged"], ["converged", "failed"]]
    assert arrays["iterations"].tolist() == [[3, 3], [3, 0]]
    assert arrays["message"][1, 1] == "ValueError: no" and arrays["message"][0, 0] == ""
    assert not arrays["done"].any()
    assert {name: a.dtype.name for name, a in arrays.items()} == {
        name: np.dtype(dtype).name for name, (_, dtype, _) in layout.variables().items()}
    empty = block_arrays(layout, (2, 2), outcomes)
    for name, a in arrays.items():
        assert np.array_equal(a, empty[name], equal_nan=a.dtype.kind == "f"), name
