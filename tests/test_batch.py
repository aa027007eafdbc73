"""Batched finite differences: a parameter grid solved along a leading batch axis."""

from __future__ import annotations

import numpy as np
import pytest

import mfgwork as mw

torch = pytest.importorskip("torch")

GRID = {"nx": 31, "nt": 30, "tol": 1e-9, "max_iter": 300, "progress": False}


def _problems() -> list[mw.SantaFeBar]:
    return [mw.SantaFeBar(threshold=thr, sigma=sig)
            for thr in (0.4, 0.8) for sig in (0.4, 0.7)]


def test_batch_matches_one_by_one_solves():
    problems = _problems()
    batch = mw.solve_batch(problems, backend="torch", **GRID)
    assert len(batch) == len(problems)
    for p, res in zip(problems, batch, strict=True):
        one = mw.solve(p, **GRID)
        assert res.converged and one.converged
        assert res.params["threshold"] == p.threshold and res.params["sigma"] == p.sigma
        for a, b in ((res.U, one.U), (res.M, one.M), (res.attendance, one.attendance)):
            a = mw.to_numpy(a)
            assert np.max(np.abs(a - b)) <= 1e-6 * np.max(np.abs(b))
        assert res.mass_error <= 1e-12


def test_batch_in_mps_emulation_agrees_with_float64(mps_emulation):
    problems = _problems()[:3]
    batch = mw.solve_batch(problems, backend=mps_emulation, **(GRID | {"tol": 3e-4}))
    for p, res in zip(problems, batch, strict=True):
        ref = mw.solve(p, **GRID)
        assert mw.to_numpy(res.M).dtype == np.float32
        assert np.max(np.abs(mw.to_numpy(res.M) - ref.M)) <= 1e-4 * np.max(ref.M)


def test_generic_problems_batch():
    def problem(strength: float) -> mw.MFGProblem:
        return mw.MFGProblem(x_min=-1, x_max=1, T=1, sigma=0.5,
                             m0=lambda x: 1.0 + 0.5 * x, g=lambda x: x**2,
                             f=lambda t, x, m: strength * m)
    problems = [problem(s) for s in (0.0, 1.0, 3.0)]
    batch = mw.solve_batch(problems, backend="torch", **(GRID | {"nx": 31, "nt": 20}))
    for p, res in zip(problems, batch, strict=True):
        one = mw.solve(p, **(GRID | {"nx": 31, "nt": 20}))
        assert np.max(np.abs(mw.to_numpy(res.M) - one.M)) <= 1e-6 * np.max(one.M)


def test_numpy_batch_is_a_loop_of_solves():
    problems = _problems()[:2]
    for p, res in zip(problems, mw.solve_batch(problems, **GRID), strict=True):
        assert np.array_equal(res.M, mw.solve(p, **GRID).M)


@pytest.mark.parametrize(("problems", "pattern"), [
    ([], r"problems=\[\] is invalid: must be a non-empty list"),
    ([mw.SantaFeBar(), mw.SantaFeBar(T=5.0)], r"problems\[1\]\.T=5\.0 is invalid: a batch shares"),
    ([mw.SantaFeBar(), "x"], r"problems\[1\]='x' is invalid"),
])
def test_bad_batches(problems, pattern):
    with pytest.raises(mw.ParameterError, match=pattern):
        mw.solve_batch(problems, backend="torch")


def test_iteration_adds_no_host_waits(monkeypatch):
    """Phase times come from stamps read after the loop: the only wait per iteration is the
    stopping test's read (which needs none on the CPU), and one at the end of the solve."""
    pytest.importorskip("torch")
    from mfgwork.core.backend import Backend

    waits = []
    monkeypatch.setattr(Backend, "synchronize", lambda self: waits.append(1))
    problems = [mw.SantaFeBar(threshold=t) for t in (0.4, 0.6)]
    with pytest.warns(mw.ConvergenceWarning, match="max_iter=12"):
        out = mw.solve_batch(problems, nx=21, nt=20, backend="torch", max_iter=12, tol=1e-13,
                             progress=False)
    history = out[0].history
    assert len(history["time_hjb"]) == 12 and min(history["time_fp"]) >= 0.0
    assert len(waits) <= 1


def test_long_horizons_with_little_noise_reach_tol_1e8_single_and_batched():
    """T = 80 and σ down to 0.05 at the defaults (201², tol 1e-8): the single NumPy solve
    and a torch float64 batch converge, each certified again by one best response. Each
    says first that its float64 floor may lie above tol (:mod:`mfgwork.float64_floor`)."""
    problems = [mw.SantaFeBar(T=80.0, sigma=s, threshold=a) for s, a in ((0.05, 0.7),
                                                                        (0.1, 0.4))]
    floor = "may be below what float64 resolves"
    with pytest.warns(UserWarning, match=floor):
        single = mw.solve(problems[0], progress=False)
    with pytest.warns(UserWarning, match=floor):
        batch = mw.solve(problems, backend="torch", dtype="float64", progress=False)
    for res in (single, *batch):
        assert res.converged and res.params["tol"] == 1e-8
        assert res.check() <= 1e-8
    assert abs(mw.to_numpy(batch[0].attendance) - single.attendance).max() < 1e-6
