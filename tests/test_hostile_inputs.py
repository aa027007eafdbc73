"""Every bad value of every public parameter is a mfgwork error, never a raw Python exception.

Hypothesis draws hostile values (None, booleans, text, lists, complex numbers, NaN, inf, huge
and negative integers, NumPy scalars and arrays, dicts) for one parameter at a time. The work
behind each entry point is replaced by a function raising :class:`Reached`, so a value that
passes the checks ends the call there: the test asserts only that nothing else escapes."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mfgwork as mw
import mfgwork.workflows.scan  # noqa: F401 - (imported on first use by mw.scan; patched below)

OURS = (mw.ParameterError, mw.BackendError, mw.SolverError, mw.LoadError)

hostile = st.one_of(
    st.none(), st.booleans(), st.text(max_size=6), st.lists(st.floats(), max_size=2),
    st.complex_numbers(), st.floats(), st.integers(min_value=-10**400, max_value=10**400),
    st.sampled_from([np.float64(np.nan), np.float32(np.inf), np.int64(-5), np.int64(2**62),
                     np.array([1.0, 2.0]), np.array(3.0), {"a": 1}, (1, 2), b"x", object()]),
)
HYPOTHESIS = settings(max_examples=300, deadline=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture,
                                             HealthCheck.too_slow])


class Reached(Exception):
    """The arguments passed every check and the heavy work would start now."""


def _reached(*args, **kwargs):
    raise Reached


def _call(fn, *args, **kwargs):
    """``fn(...)``: a mfgwork error or reaching the work are fine; anything else fails (a
    tol below the floor is raised with its documented warning, which is fine too)."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"tol=.* is below ")
            fn(*args, **kwargs)
    except (Reached, *OURS):
        pass


@pytest.fixture
def no_work(monkeypatch):
    monkeypatch.setenv("MFGWORK_MAX_MEMORY", "256 MiB")
    monkeypatch.setattr(sys.modules["mfgwork.fdm1d"], "_equilibrium", _reached)
    monkeypatch.setattr(sys.modules["mfgwork.workflows.scan"], "_run", _reached)
    monkeypatch.setattr(sys.modules["mfgwork.finite_state"], "AttendanceNewton", _reached)
    monkeypatch.setattr(sys.modules["mfgwork.analysis.n_player"], "count_above", _reached)


def _generic(**over):
    fields = dict(x_min=-1.0, x_max=1.0, T=1.0, sigma=0.5, m0=lambda x: 1.0 + 0.0 * x,
                  g=lambda x: 0.0 * x, f=lambda t, x, m: m)
    return mw.MFGProblem(**(fields | over))


@given(name=st.sampled_from(["threshold", "sigma", "T", "theta_max", "good", "bad", "eps"]),
       value=hostile)
@HYPOTHESIS
def test_santa_fe_parameters(name, value):
    _call(mw.SantaFeBar, **{name: value})


@given(name=st.sampled_from(["x_min", "x_max", "T", "sigma", "m0", "g", "f", "name"]),
       value=hostile)
@HYPOTHESIS
def test_generic_problem_parameters(name, value):
    _call(_generic, **{name: value})


@given(name=st.sampled_from(["threshold", "T", "good", "bad", "eps", "switching_cost",
                             "attendance0"]), value=hostile)
@HYPOTHESIS
def test_two_state_problem_parameters(name, value):
    _call(mw.TwoStateElFarol, **{name: value})


@given(name=st.sampled_from(["depth", "mixing", "regularization", "restart", "min_mixing"]),
       value=hostile)
@HYPOTHESIS
def test_anderson_parameters(name, value):
    _call(mw.Anderson, **{name: value})


SOLVE = ["problem", "nx", "nt", "method", "backend", "device", "dtype", "tol", "max_iter",
         "iteration", "progress", "n_particles", "seed", "compile_steps", "initial",
         "max_memory"]


@given(name=st.sampled_from(SOLVE), value=hostile)
@HYPOTHESIS
def test_solve_parameters(name, value, no_work):
    kwargs = {"nx": 21, "nt": 20, name: value}
    if name in ("n_particles", "seed"):
        kwargs["method"] = "particles"
    problem = kwargs.pop("problem", mw.SantaFeBar())
    _call(mw.solve, problem, **kwargs)


@given(name=st.sampled_from(["problems", "nx", "nt", "backend", "device", "dtype", "tol",
                             "max_iter", "iteration", "progress", "compile_steps",
                             "max_memory"]), value=hostile)
@HYPOTHESIS
def test_solve_batch_parameters(name, value, no_work):
    kwargs = {"nx": 21, "nt": 20, name: value}
    problems = kwargs.pop("problems", [mw.SantaFeBar(), mw.SantaFeBar(threshold=0.5)])
    _call(mw.solve_batch, problems, **kwargs)


@given(name=st.sampled_from(["problem", "grid", "fixed", "nx", "nt", "tol", "max_iter",
                             "dtype", "device", "backend", "iteration", "keep", "store",
                             "chunk_size", "scheduler", "dask", "workers", "progress",
                             "max_points"]), value=hostile)
@HYPOTHESIS
def test_scan_parameters(name, value, no_work):
    if name == "store" and isinstance(value, str):
        value = None  # writer targets are tested with the writers
    if name == "dask" and value is True:
        value = False  # would start a cluster
    kwargs = {"nx": 21, "nt": 20, "device": "cpu", "progress": False, name: value}
    problem = kwargs.pop("problem", "santa_fe")
    grid = kwargs.pop("grid", {"threshold": [0.5, 0.6]})
    _call(mw.scan, problem, grid, **kwargs)


@given(name=st.sampled_from(["problem", "nt", "tol", "max_iter", "iteration"]), value=hostile)
@HYPOTHESIS
def test_solve_two_state_parameters(name, value, no_work):
    kwargs = {"nt": 20, name: value}
    problem = kwargs.pop("problem", mw.TwoStateElFarol())
    _call(mw.solve_two_state, problem, **kwargs)


@pytest.fixture(scope="module")
def solved():
    problem = mw.SantaFeBar()
    return problem, mw.solve(problem, nx=21, nt=20, progress=False)


@given(name=st.sampled_from(["problem", "result", "n_players", "n_samples", "seed", "backend",
                             "device", "dtype", "gap"]), value=hostile)
@HYPOTHESIS
def test_n_player_parameters(name, value, no_work, solved):
    kwargs = {"n_players": 100, "n_samples": 3, "seed": 0, name: value}
    problem = kwargs.pop("problem", solved[0])
    result = kwargs.pop("result", solved[1])
    _call(mw.n_player, problem, result, **kwargs)
