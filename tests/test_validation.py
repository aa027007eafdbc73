"""Bad input: an error naming the parameter, its value and what is allowed, before any work."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.errors import BackendError, ParameterError


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"sigma": 0.0}, r"sigma=0\.0 is invalid: must be a finite real number > 0"),
    ({"sigma": -1}, r"sigma=-1\.0 is invalid"),
    ({"T": 0}, r"T=0\.0 is invalid: must be .* > 0"),
    ({"T": math.inf}, r"T=inf is invalid"),
    ({"sigma": math.nan}, r"sigma=nan is invalid"),
    ({"theta_max": 0}, r"theta_max=0\.0 is invalid"),
    ({"eps": -0.1}, r"eps=-0\.1 is invalid"),
    ({"good": -10.0}, r"good=-10\.0 is invalid: must be >= bad=-5\.0"),
    ({"threshold": 1.0}, r"threshold=1\.0 is invalid: must be .* > 0 and < 1"),
    ({"threshold": 0.0}, r"threshold=0\.0 is invalid"),
    ({"threshold": "0.5"}, r"threshold='0\.5' \(str\) is invalid"),
    ({"good": True}, r"good=True \(bool\) is invalid"),
])
def test_santa_fe_parameters(kwargs, pattern):
    with pytest.raises(ParameterError, match=pattern):
        mw.SantaFeBar(**kwargs)


@pytest.mark.parametrize(("kwargs", "error", "pattern"), [
    ({"nx": 2}, ParameterError, r"nx=2 is invalid: must be an integer >= 3"),
    ({"nx": 10.5}, ParameterError, r"nx=10\.5 is invalid: must be an integer >= 3"),
    ({"nt": 0}, ParameterError, r"nt=0 is invalid: must be an integer >= 1"),
    ({"tol": 0.0}, ParameterError, r"tol=0\.0 is invalid: must be .* > 0"),
    ({"tol": math.nan}, ParameterError, r"tol=nan is invalid"),
    ({"max_iter": 0}, ParameterError, r"max_iter=0 is invalid: must be an integer >= 1"),
    ({"method": "spectral"}, ParameterError, r"method='spectral' is invalid: must be one of"),
    ({"backend": "cupy"}, BackendError, r"backend='cupy' is unknown"),
    ({"device": "cuda"}, BackendError, r"device='cuda' is not available"),
    ({"iteration": "newton"}, ParameterError, r"iteration='newton' is invalid"),
])
def test_solve_arguments(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        mw.solve(mw.SantaFeBar(), **kwargs)


def test_problem_must_be_an_mfg_problem():
    with pytest.raises(ParameterError, match="problem=.* must be an mfgwork.MFGProblem"):
        mw.solve({"threshold": 0.6})


def _generic(**over):
    kw = {"x_min": -1.0, "x_max": 1.0, "T": 1.0, "sigma": 0.4,
          "m0": lambda x: 1.0 + 0.0 * x, "g": lambda x: 0.0 * x, "f": lambda t, x, m: m}
    return mw.MFGProblem(**(kw | over))


@pytest.mark.parametrize(("over", "pattern"), [
    ({"m0": lambda x: 0.0 * x}, r"m0 is invalid: its mass .* is 0\.0; it must be finite and > 0"),
    ({"m0": lambda x: np.inf + 0.0 * x}, r"m0 returned non-finite values"),
    ({"m0": lambda x: -1.0 + 0.0 * x}, r"m0 is invalid: it takes negative values"),
    ({"g": lambda x: x[:-1]}, r"g returned shape \(20,\): must return an array shaped like x"),
    ({"f": lambda t, x, m: m[:3]}, r"f returned shape \(3,\)"),
    ({"f": lambda t, x, m: np.log(m - 1.0)}, r"f returned non-finite values"),
    ({"g": lambda x: undefined_name}, r"g raised NameError"),  # noqa: F821
])
def test_generic_problem_callables(over, pattern):
    with np.errstate(all="ignore"), pytest.raises(ParameterError, match=pattern):
        mw.solve(_generic(**over), nx=21, nt=10, progress=False)


@pytest.mark.parametrize(("over", "pattern"), [
    ({"x_max": -2.0}, r"x_max=-2\.0 is invalid: must be a finite real number > -1"),
    ({"m0": 3.0}, r"m0=3\.0 is invalid: must be a callable"),
])
def test_generic_problem_fields(over, pattern):
    with pytest.raises(ParameterError, match=pattern):
        _generic(**over)


def test_diverging_coupling_stops_with_iteration_and_quantity():
    """A coupling that blows up after the first iterate is a SolverError, never a NaN result."""
    def f(t, x, m):
        return np.where(m > 1.0, np.inf, 0.0) + 0.0 * m

    with np.errstate(all="ignore"), pytest.raises(
            mw.SolverError, match=r"non-finite values in running cost F at Picard iteration 2"):
        mw.solve(_generic(m0=lambda x: np.exp(-(x**2)), g=lambda x: 5 * x**2, f=f), nx=41,
                 nt=20, iteration="picard", progress=False)


@pytest.mark.parametrize(("sweep", "name"), [("solve_hjb", "U"), ("solve_fp", "M")])
def test_a_non_finite_sweep_stops_picard_naming_the_quantity(monkeypatch, sweep, name):
    """A batch (torch: no kernel warm-up calls the sweeps) whose second sweep of one kind
    turns non-finite is stopped at iteration 2, naming the quantity."""
    pytest.importorskip("torch")
    from mfgwork.numerics.fdm.sweeps import FiniteDifferences

    original = getattr(FiniteDifferences, sweep)
    calls = []

    def poisoned(self, *args, **kwargs):
        calls.append(1)
        out = original(self, *args, **kwargs)
        return out * float("nan") if len(calls) == 2 else out

    monkeypatch.setattr(FiniteDifferences, sweep, poisoned)
    with pytest.raises(mw.SolverError, match=rf"non-finite values in {name} at Picard "
                                             r"iteration 2"):
        mw.solve_batch([mw.SantaFeBar(), mw.SantaFeBar(threshold=0.7)], nx=31, nt=20,
                       backend="torch", iteration=mw.Anderson(newton=False), progress=False)
