"""One front door: iteration schemes without state between solves, a frozen Result with a
status, one solve for every problem kind, and the modules below it without cycles."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

import mfgwork as mw

solve_module = importlib.import_module("mfgwork.solve")

SMALL = {"nx": 41, "nt": 40, "progress": False}


# -- iteration schemes hold no state between solves ---------------------------------------
def _spy_fallback(monkeypatch):
    offered = []
    original = solve_module._newton_fallback

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        offered.append(out is not None)
        return out

    monkeypatch.setattr(solve_module, "_newton_fallback", spy)
    return offered


def test_anderson_by_name_and_by_instance_are_the_same_solve(monkeypatch):
    offered = _spy_fallback(monkeypatch)
    problem = mw.SantaFeBar(eps=0.1)
    by_name = mw.solve(problem, iteration="anderson", **SMALL)
    by_instance = mw.solve(problem, iteration=mw.Anderson(), **SMALL)
    assert offered == [True, True]   # the Newton continuation is not switched off
    np.testing.assert_array_equal(by_name.U, by_instance.U)
    np.testing.assert_array_equal(by_name.M, by_instance.M)
    assert by_name.iterations == by_instance.iterations
    assert by_name.history["residual"] == by_instance.history["residual"]
    assert by_name.params["iteration"] == by_instance.params["iteration"]
    with pytest.warns(mw.ConvergenceWarning):
        mw.solve(problem, iteration=mw.Anderson(newton=False), max_iter=3, **SMALL)
    assert offered[-1] is False   # mixing alone, when asked for


@pytest.mark.parametrize("scheme", [mw.Anderson(), mw.Relaxation(0.5), mw.FictitiousPlay()],
                         ids=lambda s: type(s).__name__)
def test_a_scheme_object_reused_gives_identical_solves(scheme):
    problem = mw.SantaFeBar(eps=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)   # the same either way
        first = mw.solve(problem, iteration=scheme, max_iter=30, **SMALL)
        second = mw.solve(problem, iteration=scheme, max_iter=30, **SMALL)
    np.testing.assert_array_equal(first.U, second.U)
    assert first.history["residual"] == second.history["residual"]


def test_schemes_are_frozen_settings():
    scheme = mw.Anderson(depth=3)
    with pytest.raises(AttributeError):
        scheme.depth = 4
    a, b = scheme.start(), scheme.start(batched=True)
    assert a is not b and a.scheme is scheme
    relax = mw.Relaxation(0.3)
    assert relax.start() is relax   # no memory: the scheme is its own mixer
