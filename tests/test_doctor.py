"""The doctor's two-process path: the CPU checks in a spawned child, side by side with the
accelerator checks here; the same rows, in the same order, and failures as rows."""

from __future__ import annotations

import importlib
import sys
import textwrap
import time

import pytest

import mfgwork as mw
from mfgwork.apps import doctor
from mfgwork.apps.doctor import CHILD_ROW, child_backends, format_report, run_checks

torch = pytest.importorskip("torch")

#: Checks with a kernel each (tridiagonal: Numba on NumPy, compiled once into its disk cache).
FEW = ["elementwise", "conversion", "tridiagonal"]


def _key(row: dict) -> tuple:
    return row["check"], row["backend"], row["device"], row["dtype"], row["ok"]


def test_child_rows_match_in_process_rows_in_the_same_order():
    bes = [mw.get_backend("numpy"), mw.get_backend("torch", "cpu", "float64"),
           mw.get_backend("torch", "cpu", "float32")]
    serial = run_checks(bes, checks=FEW)
    # NumPy and torch float32 in the child, torch float64 here: the rows interleave
    mixed = run_checks(bes, checks=FEW, in_child=[bes[0], bes[2]])
    assert [_key(r) for r in mixed] == [_key(r) for r in serial]
    assert [(r["check"], r["backend"], r["dtype"]) for r in serial] == \
        [(c, be.name, be.dtype) for be in bes for c in FEW]
    assert all(r["ok"] for r in mixed), mixed
    assert all(r["first_s"] > 0 and r["time_s"] > 0 for r in mixed)
    for a, b in zip(serial, mixed, strict=True):   # the same comparison in both
        assert b["max_abs_diff"] == pytest.approx(a["max_abs_diff"], abs=1e-15)


PROBE = textwrap.dedent('''
    import os
    import time

    from mfgwork.apps.doctor import register_check


    @register_check("probe raises")
    def _raises(be):
        raise RuntimeError(f"probe failure on {be.name} {be.dtype}")


    @register_check("probe exits")
    def _exits(be):
        os._exit(3)


    @register_check("probe sleeps")
    def _sleeps(be):
        time.sleep(60)


    def register_late():
        """A check this process has and a child (which only imports the module) lacks."""
        register_check("probe late")(lambda be: (be.asarray([0.0]), [0.0]))
''')


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A module registering failing checks, importable by a spawned child (its sys.path is
    the parent's); the registry is restored afterwards."""
    (tmp_path / "doctor_probe_checks.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(doctor, "CHECKS", dict(doctor.CHECKS))
    monkeypatch.setattr(doctor, "APPLIES", dict(doctor.APPLIES))
    yield importlib.import_module("doctor_probe_checks")
    sys.modules.pop("doctor_probe_checks", None)


def test_a_check_failing_in_the_child_is_a_failed_row(probe):
    probe.register_late()
    be = mw.get_backend("numpy")
    rows = run_checks([be], checks=["elementwise", "probe raises", "probe late"], in_child=[be])
    assert [r["check"] for r in rows] == ["elementwise", "probe raises", "probe late"]
    assert rows[0]["ok"] and not rows[1]["ok"] and not rows[2]["ok"]
    assert rows[1]["error"] == "RuntimeError: probe failure on numpy float64"
    assert "'probe late' is not registered in this process" in rows[2]["error"]


def test_a_child_that_dies_gives_a_failed_row_per_backend(probe):
    be = mw.get_backend("numpy")
    rows = run_checks([be], checks=["elementwise", "probe exits"], in_child=[be])
    assert [_key(r) for r in rows] == [(CHILD_ROW, "numpy", "cpu", "float64", False)]
    assert rows[0]["error"] == "the child process exited with code 3 before finishing"


def test_a_child_that_hangs_is_stopped_at_the_timeout(probe):
    be = mw.get_backend("numpy")
    t0 = time.perf_counter()
    rows = run_checks([be], checks=["probe sleeps"], in_child=[be], timeout_s=2.0)
    assert time.perf_counter() - t0 < 15.0
    assert [_key(r) for r in rows] == [(CHILD_ROW, "numpy", "cpu", "float64", False)]
    assert rows[0]["error"] == "the child process did not finish within 2 s and was stopped"


def test_bad_arguments_are_refused_before_any_work():
    be = mw.get_backend("numpy")
    with pytest.raises(mw.ParameterError, match=r"checks=\['nope'\] are not registered"):
        run_checks([be], checks=["nope"])
    other = mw.get_backend("torch", "cpu", "float32")
    with pytest.raises(mw.ParameterError, match="in_child=.*must be among the backends"):
        run_checks([be], checks=FEW, in_child=[other])
    with pytest.raises(mw.ParameterError, match="without MPS emulation"):
        run_checks([mw.mps_emulation()], checks=FEW, in_child=[mw.mps_emulation()])


def test_the_cpu_group_goes_to_a_child_only_beside_an_accelerator():
    cpu = [mw.get_backend("numpy"), mw.Backend("torch", "cpu", "float64")]
    cuda = [mw.Backend("torch", "cuda", "float64"), mw.Backend("torch", "cuda", "float32")]
    assert child_backends(cpu) == []
    assert child_backends(cuda) == []
    assert child_backends(cuda + cpu) == cpu
    assert child_backends([cpu[0], mw.Backend("torch", "mps", "float32"), cpu[1]]) == cpu


def test_the_child_does_not_run_the_callers_script_again(monkeypatch):
    """The child is a new program: a caller's script read from standard input (or without a
    main guard) is not run again there, and the rows come back."""
    monkeypatch.setattr(sys.modules["__main__"], "__file__", "<stdin>", raising=False)
    bes = [mw.get_backend("numpy"), mw.get_backend("torch", "cpu", "float32")]
    rows = run_checks(bes, checks=FEW[:2], in_child=bes[:1])
    assert [r["ok"] for r in rows] == [True] * 4, rows


def test_the_report_says_when_the_checks_ran_side_by_side():
    rep = {"versions": {"python": "3.11"}, "devices": [doctor.cpu_info()], "checks": []}
    assert "side by side" not in format_report(rep | {"side_by_side": False})
    assert "side by side" in format_report(rep | {"side_by_side": True})
