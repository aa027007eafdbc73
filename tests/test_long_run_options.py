"""The options of the long run (``mw.solve(problem, stationary=True)``): those it does not take
refused, those it takes checked as a finite horizon checks them (``max_memory`` enforced in
1-D too), a running cost that depends on t refused, all before any work; and a scan's NetCDF
export refuses what is no scan."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import mfgwork as mw


@pytest.fixture
def no_work(monkeypatch):
    """Fail a test whose solve starts the ergodic system's work (1-D or 2-D)."""
    def fail(*args, **kwargs):
        pytest.fail("work started")

    monkeypatch.setattr(importlib.import_module("mfgwork.long_run"), "ErgodicSystem", fail)
    monkeypatch.setattr(importlib.import_module("mfgwork.solve2d"), "ErgodicSystem2D", fail)


@pytest.mark.parametrize("option", [
    {"iteration": "garbage"}, {"iteration": "anderson"}, {"initial": "garbage"},
    {"n_particles": 5}, {"seed": 1}, {"compile_steps": "garbage"}, {"coarse": False}])
def test_options_the_1d_long_run_does_not_take_are_refused(option, no_work):
    name = next(iter(option))
    with pytest.raises(mw.ParameterError,
                       match=rf"^{name}=.* is invalid with stationary=True: it does not apply"):
        mw.solve(mw.SantaFeBar(), nx=41, stationary=True, **option)


@pytest.mark.parametrize("option", [{"solver": "garbage"}, {"solver": "direct"},
                                    {"iteration": "garbage"}])
def test_options_the_2d_long_run_does_not_take_are_refused(option, no_work):
    name = next(iter(option))
    with pytest.raises(mw.ParameterError,
                       match=rf"^{name}=.* is invalid with stationary=True: it does not apply"):
        mw.solve(mw.TwoBars(), nx=9, stationary=True, **option)


@pytest.mark.parametrize(("problem", "option", "pattern"), [
    (mw.SantaFeBar(), {"nt": "x"}, r"^nt='x' \(str\) is invalid"),
    (mw.SantaFeBar(), {"nt": 0}, r"^nt=0 is invalid"),
    (mw.SantaFeBar(), {"progress": "garbage"}, r"^progress='garbage' \(str\) is invalid"),
    (mw.SantaFeBar(), {"max_memory": "lots"}, r"^max_memory='lots' is invalid"),
    (mw.TwoBars(), {"nt": "x"}, r"^nt='x' \(str\) is invalid"),
    (mw.TwoBars(), {"progress": 3}, r"^progress=3 is invalid"),
])
def test_options_the_long_run_takes_are_checked(problem, option, pattern, no_work):
    with pytest.raises(mw.ParameterError, match=pattern):
        mw.solve(problem, nx=9, stationary=True, **option)


def test_max_memory_bounds_the_1d_long_run_and_valid_options_still_solve(no_work, monkeypatch):
    with pytest.raises(mw.ParameterError, match="nx too large: the long run on nx=41 nodes"):
        mw.solve(mw.SantaFeBar(), nx=41, stationary=True, max_memory=10)
    monkeypatch.undo()
    res = mw.solve(mw.SantaFeBar(), nx=41, stationary=True, nt=10, progress=False,
                   max_memory="1 GiB", iteration=None, coarse=True, compile_steps="auto",
                   objective="equilibrium")
    assert res.converged and res.params["stationary"] is True


def test_a_running_cost_that_depends_on_t_is_refused(no_work, monkeypatch):
    def problem(f):
        return mw.MFGProblem(x_min=-1, x_max=1, T=5.0, sigma=0.4,
                             m0=lambda x: np.exp(-8 * x**2), g=lambda x: x**2, f=f)

    with pytest.raises(mw.ParameterError, match=r"^f=.* is invalid with stationary=True: the "
                                                "long run needs a running cost independent"):
        mw.solve(problem(lambda t, x, m: 2 * m + t), nx=41, stationary=True)
    room = mw.MFGProblem2D(-1, 1, -1, 1, 2.0, 0.6, m0=lambda x, y: np.exp(-(x**2 + y**2)),
                           g=lambda x, y: 0 * x, f=lambda t, x, y, m: m + t * x)
    monkeypatch.undo()   # (the 2-D refusal comes once its grid is built)
    with pytest.raises(mw.ParameterError, match="^f=.* independent of t"):
        mw.solve(room, nx=9, stationary=True)
    steady = mw.solve(problem(lambda t, x, m: 2 * m + 0 * t), nx=41, stationary=True)
    assert steady.converged


@pytest.mark.parametrize("what", [42, "result"])
def test_a_netcdf_export_refuses_what_is_no_scan(what, tmp_path):
    from mfgwork.workflows import scan as scan_module

    pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    given = mw.solve(mw.SantaFeBar(), nx=21, stationary=True) if what == "result" else what
    with pytest.raises(mw.ParameterError, match=r"^scan_or_path=.* is invalid: must be a "
                                                "scan's xarray.Dataset"):
        scan_module.to_netcdf(given, tmp_path / "out.nc")
    assert not (tmp_path / "out.nc").exists()


@pytest.mark.parametrize("max_iter", [7, 40])
def test_the_2d_long_run_keeps_to_its_budget_of_best_responses(max_iter):
    """Each Krylov product is a best response: a direction takes no more than the budget
    leaves (one direction could take 200 before, 225 responses against max_iter=200)."""
    problem = mw.MFGProblem2D(-1.0, 1.0, -1.0, 1.0, 1.0, 0.3,
                              m0=lambda x, y: np.exp(-(x**2 + y**2)),
                              g=lambda x, y: 0.0 * x, f=lambda t, x, y, m: m)
    with pytest.warns(mw.ConvergenceWarning, match=f"max_iter={max_iter}"):
        res = mw.solve(problem, nx=15, stationary=True, max_iter=max_iter)
    assert not res.converged and res.iterations <= max_iter


def test_gmres_closing_check_is_no_best_response_past_the_budget():
    """GMRES checks the true residual at the end of its last cycle, one product more than
    the cycle's: past the budget that product is not computed (asymmetric bars at σ = 0.2
    took 203 and 93 best responses against max_iter 200 and 90)."""
    for nx, max_iter in ((21, 200), (31, 90)):
        with pytest.warns(mw.ConvergenceWarning, match=f"max_iter={max_iter}"):
            res = mw.solve(mw.TwoBars(thresholds=(0.3, 0.9), sigma=0.2), nx=nx,
                           stationary=True, max_iter=max_iter)
        assert res.iterations == max_iter
