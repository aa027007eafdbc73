"""float32 results that claim convergence are re-certified by one best response in float64."""

from __future__ import annotations

import dataclasses
import importlib
import warnings

import numpy as np
import pytest
from test_scan_finish import independent_residual

import mfgwork as mw

torch = pytest.importorskip("torch")
solve_module = importlib.import_module("mfgwork.fdm1d")
precision = importlib.import_module("mfgwork.precision")

TOL = 3e-4
F32 = {"nx": 41, "nt": 40, "tol": TOL, "max_iter": 100, "progress": False,
       "backend": "torch", "device": "cpu", "dtype": "float32"}


def _problems() -> list[mw.SantaFeBar]:
    return [mw.SantaFeBar(threshold=thr, sigma=0.3, eps=eps)
            for thr in (0.3, 0.6, 0.9) for eps in (0.005, 0.05)]


def _easy() -> list[mw.SantaFeBar]:
    return [mw.SantaFeBar(threshold=thr, sigma=sig) for thr in (0.4, 0.7) for sig in (0.4, 0.8)]


def test_converged_float32_members_hold_in_float64(tmp_path):
    problems = _problems()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        batch = mw.solve_batch(problems, **F32)
    assert any(res.converged for res in batch)
    for p, res in zip(problems, batch, strict=True):
        if not res.converged:
            continue
        independent = independent_residual(p, mw.to_numpy(res.M))
        assert independent <= TOL
        assert res.extra["certificate"]["dtype"] == "float64"
        assert res.residual == pytest.approx(independent, rel=1e-6, abs=1e-12)
        assert res.check() == pytest.approx(res.residual, rel=1e-9)
    assert batch[0].timings["certify"] > 0
    res = next(r for r in batch if r.converged)
    loaded = mw.load(mw.save_run(tmp_path / "run", res))
    assert loaded.extra["certificate"] == res.extra["certificate"]
    assert loaded.check() == pytest.approx(res.residual, rel=1e-9)


def test_a_float32_claim_that_fails_in_float64_is_finished_in_float64(monkeypatch):
    """Newton's method told to stop at tol = 0.05 claims convergence for iterates whose
    float64 best response is far from tol = 3e-4: the recheck takes the claim back, and the
    batch finishes those members in float64 from their iterates, returned as float32 arrays
    that pass an independent float64 best response."""
    newton = solve_module._batch_newton
    monkeypatch.setattr(solve_module, "_batch_newton",
                        lambda couplings, iteration, grid, problems, be, tol:
                        newton(couplings, iteration, grid, problems, be,
                               0.05 if be.dtype == "float32" else tol))
    problems = _easy()
    batch = mw.solve_batch(problems, **F32)
    finished = [(p, r) for p, r in zip(problems, batch, strict=True) if "finished" in r.extra]
    assert finished
    for p, res in finished:
        assert "did not hold in float64" in res.extra["certificate"]["message"]
        assert res.extra["certificate"]["residual"] > TOL   # (the float32 iterate's, kept
        assert "float64 finish" in res.extra["certificate"]["superseded"]   # and superseded)
        record = res.extra["finished"]
        assert record["dtype"] == "float64" and record["held"] and record["iterations"] >= 1
        assert res.converged and res.status == "converged" and res.dtype == "float32"
        assert mw.to_numpy(res.M).dtype == np.float32
        independent = independent_residual(p, mw.to_numpy(res.M))
        assert independent <= TOL
        assert res.residual == pytest.approx(independent, rel=1e-6, abs=1e-12)
    assert batch[0].timings["finish"] > 0
    for p, res in zip(problems, batch, strict=True):
        assert res.converged and independent_residual(p, mw.to_numpy(res.M)) <= TOL


def test_recheck_of_a_perturbed_single_solve():
    problem = mw.SantaFeBar(threshold=0.6, sigma=0.5)
    res = mw.solve(problem, **F32)
    assert res.converged and res.extra["certificate"]["held"]
    M = mw.to_numpy(res.M).copy()
    M[1:] *= 1.0 + 0.2 * np.linspace(-1.0, 1.0, M.shape[1])[None, :]
    M[1:] /= (M[1:] @ res.weights)[:, None]
    bad = dataclasses.replace(res, M=torch.from_numpy(M), extra={})
    timings = {"total": 0.0}
    with pytest.warns(mw.ConvergenceWarning, match="did not hold in float64"):
        [bad] = precision.certify_in_float64([bad], [problem], mw.get_backend(
            "torch", "cpu", "float32"), TOL, timings)
    independent = independent_residual(problem, M)
    assert not bad.converged and bad.status == "failed" and independent > TOL
    assert bad.residual == pytest.approx(independent, rel=1e-6)
    assert timings["certify"] > 0 and timings["total"] == timings["certify"]


def test_float64_and_mps_keep_their_own_certificate(mps_emulation):
    problems = _easy()[:2]
    for res in (mw.solve_batch(problems, **(F32 | {"backend": mps_emulation})) +
                mw.solve_batch(problems, **(F32 | {"dtype": "float64", "tol": 1e-8}))):
        assert "certificate" not in res.extra and "certify" not in res.timings


@pytest.mark.parametrize("hamiltonian", [mw.Power(3.0), mw.Congestion(1.0, 0.5)], ids=repr)
def test_batched_float64_certificate_agrees_with_one_numpy_best_response_each(hamiltonian):
    """The float64 re-certification of a torch batch (one batched best response on the
    device) against NumPy float64 best responses member by member."""
    problems = [mw.SantaFeBar(threshold=thr, sigma=0.8, eps=0.1, hamiltonian=hamiltonian)
                for thr in (0.4, 0.7)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mw.ConvergenceWarning)
        batch = mw.solve_batch(problems, **F32)
    certified = [(p, r) for p, r in zip(problems, batch, strict=True) if "certificate" in r.extra]
    assert certified
    host = mw.get_backend("numpy", "cpu", "float64")
    for p, res in certified:
        one = importlib.import_module("mfgwork.best_response").residual_on(res, p, host)
        assert res.residual == pytest.approx(one, rel=1e-8, abs=1e-14)
        assert res.converged == (one <= TOL)


def test_a_member_whose_float64_finish_fails_from_its_iterate_is_solved_from_the_start():
    """finish_in_float64 tries the float32 iterate first, then the solver's own start."""
    problems = _easy()[:2]
    be = mw.get_backend("torch", "cpu", "float32")
    opts = {k: v for k, v in F32.items() if k not in ("backend", "device", "dtype")}
    unfinished = [dataclasses.replace(res, converged=False, status="stalled")
                  for res in mw.solve_batch(problems, **F32)]
    starts = []

    def solve_again(members, initial, float64):
        starts.append(initial is None)
        if initial is not None:   # as if the iterates were a start Newton cannot leave
            return [dataclasses.replace(r, M=r.M * 0.0 + r.M[:1]) for r in initial]
        return mw.solve_batch(members, **(opts | {"backend": float64, "tol": 0.1 * TOL}))

    timings = {"total": 0.0}
    out = precision.finish_in_float64(unfinished, problems, be, TOL, timings, solve_again)
    assert starts == [False, True]
    for p, res in zip(problems, out, strict=True):
        assert res.converged and res.extra["finished"]["start"] == "solver"
        assert independent_residual(p, mw.to_numpy(res.M)) <= TOL
    assert timings["finish"] > 0


def test_a_batch_with_no_member_left_open_is_not_copied_to_finish():
    """With every member converged, finish_in_float64 solves nothing, books no phase and
    returns the results as they are (no pass over the batch to add a timing)."""
    problems = _easy()[:2]
    be = mw.get_backend("torch", "cpu", "float32")
    batch = mw.solve_batch(problems, **F32)
    assert all(res.converged for res in batch) and "finish" not in batch[0].timings

    def solve_again(members, initial, float64):
        raise AssertionError("nothing is left to finish")

    timings = {"total": 0.0}
    assert precision.finish_in_float64(batch, problems, be, TOL, timings, solve_again) is batch
    assert "finish" not in timings
