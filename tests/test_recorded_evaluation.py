"""A device batch's Newton iterations evaluated by a recorded CUDA graph
(:mod:`mfgwork.numerics.recorded_evaluation`) give the eager iterations' results, bitwise.

On CUDA with the recording itself; else under Triton's CPU interpreter at tiny sizes, where a
stand-in "recording" replays the same evaluation eagerly through the replay's path (inputs
copied in, outputs copied out, the status read with the sums)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import triton_device

import mfgwork as mw

torch = pytest.importorskip("torch")


class _Replayed:
    """A stand-in for a recorded graph: copies in, the evaluation, copies out."""

    def __init__(self, evaluate, replays):
        self.evaluate, self.replays = evaluate, replays

    def run(self, *inputs):
        self.replays.append(1)
        return tuple(o.clone() for o in self.evaluate(*(a.clone() for a in inputs)))


@pytest.fixture
def fused(monkeypatch) -> dict:
    from mfgwork.numerics.fdm import kernels, sweeps

    if triton_device(monkeypatch) == "cuda":
        return {"device": "cuda", "nx": 21, "nt": 20, "batch": 70}
    table = sweeps.fdm_kernels  # torch on the CPU takes the fused sweeps, NumPy stays
    monkeypatch.setattr(sweeps, "fdm_kernels",
                        lambda be, H=None: kernels.TRITON if be.name == "torch" else table(be, H))
    return {"device": "cpu", "nx": 11, "nt": 4, "batch": 2}


def _solve(fused, dtype):
    problems = [mw.SantaFeBar(threshold=0.3 + 0.5 * b / fused["batch"], sigma=0.8)
                for b in range(fused["batch"])]
    return mw.solve(problems, nx=fused["nx"], nt=fused["nt"], backend="torch",
                    device=fused["device"], dtype=dtype, tol=1e-3 if dtype == "float32"
                    else 1e-8, progress=False)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_recorded_iterations_give_the_eager_results(fused, monkeypatch, dtype):
    from mfgwork.numerics import batch_newton, recorded_evaluation

    replays: list[int] = []
    if fused["device"] == "cpu":   # the replay's path, the recording's stand-in
        monkeypatch.setattr(batch_newton, "recorded_sweeps",
                            lambda hjb, fp, be, levels, nodes, batch: hjb.__self__)
        monkeypatch.setattr(recorded_evaluation, "record_checked",
                            lambda fn, eager, *inputs, what: _Replayed(fn, replays))
    else:
        real = recorded_evaluation.record_checked

        def counted(fn, eager, *inputs, what):
            graphed = real(fn, eager, *inputs, what=what)
            assert graphed is not None, "the recording differs from the eager evaluation"
            run = graphed.run
            graphed.run = lambda *a: replays.append(1) or run(*a)
            return graphed

        monkeypatch.setattr(recorded_evaluation, "record_checked", counted)
    recorded = _solve(fused, dtype)
    assert replays   # (the batch took more than two iterations)
    monkeypatch.setattr(batch_newton, "recorded_sweeps", lambda *args: None)
    eager = _solve(fused, dtype)
    for a, b in zip(recorded, eager, strict=True):
        assert a.converged and b.converged
        assert (a.iterations, a.residual) == (b.iterations, b.residual)
        assert a.extra["newton_iterations"] == b.extra["newton_iterations"]
        for name in ("U", "M"):
            assert torch.equal(torch.as_tensor(getattr(a, name)),
                               torch.as_tensor(getattr(b, name)))


def test_only_coarse_device_batches_of_fused_sweeps_are_recorded():
    from mfgwork.numerics.fdm.sweeps import FiniteDifferences
    from mfgwork.numerics.recorded_evaluation import RECORDED_FROM, recorded_sweeps

    grid = mw.SantaFeBar().grid(51, 51)
    for be in (mw.get_backend("numpy"), mw.get_backend("torch", "cpu", "float32")):
        fd = FiniteDifferences(grid, np.ones((RECORDED_FROM, 1)), be)
        assert recorded_sweeps(fd.solve_hjb, fd.solve_fp, be, 52, 51, RECORDED_FROM) is None
