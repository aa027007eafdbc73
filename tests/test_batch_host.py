"""Host work of batches done once for all members: the Results' observables, the warm
start from a coarse batch, the Santa Fe price slopes of Newton's system, and no
``torch.compile`` before a compiled step first runs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.backend import get_backend
from mfgwork.core.frozen import freeze
from mfgwork.fdm1d import _member_observables, _results
from mfgwork.numerics.batch_newton import member_potentials
from mfgwork.numerics.iteration import FixedPointResult, History
from mfgwork.problems.base import ScalarPotential, member_summaries
from mfgwork.results import Result
from mfgwork.warm_start import _path, _result_paths


class OwnObservables(mw.SantaFeBar):
    """Observables that read the problem (its threshold): never computed together."""

    def observables(self, grid, M, backend):
        return {"above": backend.xp.sum(M, axis=-1) * 0 + self.threshold}


def _problems():
    return [mw.SantaFeBar(threshold=a, sigma=s) for a, s in ((0.4, 0.5), (0.7, 0.9))]


def test_observables_of_a_batch_equal_each_members_own():
    problems = _problems() + [OwnObservables(threshold=0.55), mw.SantaFeBar(threshold=0.8)]
    grid = problems[0].grid(31, 21)
    rng = np.random.default_rng(3)
    for be in (get_backend("numpy"), get_backend("torch", "cpu", "float64")):
        Ms = be.asarray(rng.random((len(problems), grid.nt + 1, grid.nx)))
        together, stacked = _member_observables(problems, grid, Ms, be)
        assert stacked == {}   # (not one call for every member)
        for b, p in enumerate(problems):
            own = p.observables(grid, Ms[b], be)
            assert together[b].keys() == own.keys()
            for k in own:
                np.testing.assert_allclose(np.asarray(together[b][k]), np.asarray(own[k]),
                                           rtol=1e-14, atol=0)
        assert float(together[2]["above"][0]) == 0.55


def test_observables_of_one_call_for_every_member_come_stacked_and_read_only():
    problems = _problems() + [mw.SantaFeBar(threshold=0.8)]
    grid = problems[0].grid(31, 21)
    Ms = np.random.default_rng(5).random((len(problems), grid.nt + 1, grid.nx))
    together, stacked = _member_observables(problems, grid, Ms, get_backend("numpy"))
    assert set(stacked) == {"attendance", "mean_state"}
    for b, own in enumerate(together):
        for k, v in own.items():
            np.testing.assert_array_equal(v, stacked[k][b])
            assert not v.flags.writeable and not stacked[k].flags.writeable


class XState(mw.SantaFeBar):
    """A bar whose state axis is named x: a batch member of another state name."""

    state_name = "x"


def test_results_of_a_batch_equal_results_built_one_by_one():
    problems = [mw.SantaFeBar(threshold=0.4), XState(threshold=0.5),
                mw.SantaFeBar(threshold=0.55), mw.SantaFeBar(threshold=0.7, sigma=0.9)]
    grid = problems[0].grid(31, 21)
    rng = np.random.default_rng(6)
    B, settings = len(problems), {"method": "fdm", "tol": 1e-6, "max_iter": 50}
    for be in (get_backend("numpy"), get_backend("torch", "cpu", "float64")):
        U, M = (be.asarray(rng.random((B, grid.nt + 1, grid.nx))) for _ in range(2))
        out = FixedPointResult(U=U, M=M, converged=np.array([True, False, True, False]),
                               residual=np.array([1e-7, 0.1, 5e-7, 0.2]),
                               iterations=np.array([7, 50, 9, 12]), history=History(
                                   residual=[0.5, 1e-7]))
        timings = freeze({"total": 1.0})
        extras = [{"member": b, "nested": {"list": [b]}} for b in range(B)]
        results = _results(problems, grid, be, out, True, settings, timings, extras)
        for b, (p, res) in enumerate(zip(problems, results, strict=True)):
            own = Result(x=be.asarray(grid.x), t=be.asarray(grid.t), U=U[b], M=M[b],
                         converged=bool(out.converged[b]), residual=float(out.residual[b]),
                         iterations=int(out.iterations[b]), history=out.history.as_dict(),
                         params=p.params() | {"nx": 31, "nt": 21} | settings | {
                             "backend": be.name, "device": be.device, "dtype": be.dtype},
                         timings=timings, backend=be.name, device=be.device, dtype=be.dtype,
                         observables=p.observables(grid, M[b], be), state_name=p.state_name,
                         summary=p.summary(grid, {k: np.asarray(v) for k, v in
                                                  p.observables(grid, M[b], be).items()}),
                         extra=extras[b])
            assert (res.dims, res.status, res.params, res.summary, res.extra, res.history) == (
                own.dims, own.status, own.params, own.summary, own.extra, own.history)
            assert res.observables.keys() == own.observables.keys()
            for k in own.observables:
                np.testing.assert_allclose(np.asarray(res.observables[k]),
                                           np.asarray(own.observables[k]), rtol=1e-14)
            assert res.U is not None and float(abs(res.M - M[b]).max()) == 0.0
            assert res.timings is results[0].timings
            for mapping in (res.params, res.extra, res.extra["nested"], res.observables):
                with pytest.raises(TypeError):
                    mapping["new"] = 1
            if be.name == "numpy":
                assert not res.M.flags.writeable and not res.attendance.flags.writeable
        assert results[1].dims == ("t", "x") and results[3].dims == ("t", "θ")


class OwnSummary(mw.SantaFeBar):
    """A summary of its own below the class whose ``summaries`` computes a batch at once."""

    def summary(self, grid, observables):
        return {"peak": float(np.max(observables["attendance"])) + self.threshold}


def test_summaries_of_a_batch_equal_each_members_own():
    problems = _problems() + [OwnSummary(threshold=0.5), mw.SantaFeBar(threshold=0.65),
                              OwnSummary(threshold=0.2)]
    grid = problems[0].grid(31, 21)
    be = get_backend("numpy")
    Ms = np.random.default_rng(4).random((len(problems), grid.nt + 1, grid.nx))
    observables, _ = _member_observables(problems, grid, Ms, be)
    host = {k: (list(range(len(problems))), np.stack([o[k] for o in observables]))
            for k in observables[0]}
    together = member_summaries(problems, grid, host)   # each class's rows picked out
    for b, p in enumerate(problems):
        assert together[b] == p.summary(grid, observables[b])
    assert set(together[2]) == {"peak"} and together[1]["time_overcrowded"] >= 0.0


def test_price_slopes_of_members_in_one_call_equal_one_by_one():
    problems = [mw.SantaFeBar(threshold=0.3 + 0.1 * k, eps=0.01 * (k + 1), good=5.0 + k)
                for k in range(4)]
    grid = problems[0].grid(41, 30)
    be = get_backend("numpy")
    potentials = [p.coupling(grid, be).potential() for p in problems]
    z = np.random.default_rng(0).random((3, grid.nt))
    members = [3, 0, 2]
    batch = member_potentials(potentials).price_slope(z, members)
    alone = np.stack([potentials[b].price_slope(z[i]) for i, b in enumerate(members)])
    assert np.array_equal(batch, alone)
    # a slope of another form among them: the members are evaluated one by one
    mixed = potentials[:3] + [ScalarPotential(chi=potentials[0].chi,
                                              price_slope=lambda A: -2.0 * np.ones_like(A))]
    out = member_potentials(mixed).price_slope(z, [3, 1, 0])
    assert np.array_equal(out[0], -2.0 * np.ones(grid.nt))
    assert np.array_equal(out[1:], np.stack([potentials[1].price_slope(z[1]),
                                             potentials[0].price_slope(z[2])]))


def test_warm_start_paths_of_a_coarse_batch_equal_each_results_own():
    problems = _problems()
    be = get_backend("torch", "cpu", "float64")
    coarse = mw.solve_batch(problems, nx=21, nt=21, backend=be, tol=1e-8, progress=False)
    grid = problems[0].grid(41, 37)
    batch = _result_paths(be.stack([r.M for r in coarse]), problems, grid, be)
    alone = np.stack([_path(r, p, grid) for r, p in zip(coarse, problems, strict=True)])
    assert batch.shape == (2, grid.nt)
    np.testing.assert_allclose(batch, alone, rtol=1e-13, atol=1e-15)


def test_a_checked_compile_imports_dynamo_only_when_first_called():
    code = ("import sys; from mfgwork.core.compiling import CheckedCompile; "
            "c = CheckedCompile(lambda x: x + 1, 'default', 'step', 1e-6); "
            "print('torch._dynamo' in sys.modules, c.compiled is None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True"]


def test_the_coarse_stage_of_a_batch_hands_on_arrays_not_results(monkeypatch):
    """A batch's coarse start builds no Results (what it hands on is each member's arrays and
    iterations), and those are the arrays of the same coarse batch solved on its own."""
    import importlib

    from mfgwork.pipeline import run
    from mfgwork.warm_start import Start

    solve_module = importlib.import_module("mfgwork.fdm1d")

    problems = _problems()
    be = get_backend("torch", "cpu", "float64")
    built = []
    results = solve_module._results
    monkeypatch.setattr(solve_module, "_results", lambda problems, *a, **k: built.append(
        len(problems)) or results(problems, *a, **k))
    fine = mw.solve(problems, nx=103, nt=103, backend=be, tol=1e-8, progress=False)
    assert built == [len(problems)] and all(r.converged for r in fine)
    starts = run(solve_module.CoarseBatch(problems, nx=51, nt=51, backend=be, tol=1e-5,
                                          max_iter=200, coarse=False, progress=False))
    alone = mw.solve(problems, nx=51, nt=51, backend=be, tol=1e-5, coarse=False,
                     progress=False)
    for start, res, coarse in zip(starts, alone, fine, strict=True):
        assert isinstance(start, Start) and start.iterations == res.iterations
        assert start.iterations == coarse.extra["coarse_iterations"]
        assert np.array_equal(start.M.numpy(), res.M.numpy())
