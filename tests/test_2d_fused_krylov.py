"""BiCGStab of the 2-D scheme as fused Triton launches (:mod:`.fused_krylov`) against the
array-operation iterations, and a whole fused 2-D solve against the eager one.

On CUDA when there is one, else under Triton's CPU interpreter at tiny sizes, else skipped.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import triton_device

import mfgwork as mw
from mfgwork.core.errors import SolverError
from mfgwork.numerics.fdm2d import krylov, sweeps
from mfgwork.numerics.fdm2d.fused_krylov import FusedBiCGStab
from mfgwork.numerics.fdm2d.stencil import Coefficients, Stencil

torch = pytest.importorskip("torch")
xp = pytest.importorskip("array_api_compat.torch")


@pytest.fixture
def device(monkeypatch) -> str:
    return triton_device(monkeypatch)


def _system(shape: tuple[int, ...], device: str, seed: int) -> tuple[Coefficients, object]:
    """A diagonally dominant M-matrix stencil with walls (zero couplings) and a right-hand
    side, float64."""
    g = torch.Generator().manual_seed(seed)
    W, E, S, N = (-torch.rand(shape, generator=g, dtype=torch.float64) for _ in range(4))
    E[..., :, 3] = 0.0   # a wall between columns 3 and 4
    W[..., :, 4] = 0.0
    diag = 2.0 - (W + E + S + N)
    b = torch.rand(shape, generator=g, dtype=torch.float64)
    return Coefficients(*(a.to(device) for a in (diag, W, E, S, N)), None), b.to(device)


def _apply(c: Coefficients, transpose: bool):
    return ((lambda v: Stencil.apply_transpose(None, c, v)) if transpose
            else (lambda v: Stencil.apply(None, c, v)))


def _relative_residuals(c, b, x, transpose):
    r = b - _apply(c, transpose)(x)
    return (torch.linalg.vector_norm(r, dim=(-2, -1))
            / torch.linalg.vector_norm(b, dim=(-2, -1)).clamp(min=1e-300))


@pytest.mark.parametrize("shape", [(7, 9), (3, 6, 5)])
@pytest.mark.parametrize("transpose", [False, True])
def test_fused_chunks_follow_the_array_iterations(device, shape, transpose):
    c, b = _system(shape, device, seed=len(shape) + transpose)
    if len(shape) == 3:
        b[1] = 0.0   # a problem already solved: every division by 0 is by 1 instead
    one = 1.0 + 0.0 * krylov._dot(b, b, xp)
    state = (0.0 * b, b, 0.0 * b, 0.0 * b, one, one, one)
    for steps in (2, 6):
        solver = FusedBiCGStab(b.shape, b, transpose, steps, graphs=False)
        solver.start(c[:5], b, None, _apply(c, transpose))
        solver.run_chunk()
        eager = krylov.iterate(_apply(c, transpose), 1.0 / c.diag, b, state, steps, xp)
        s = solver.sets[0]
        fused = (s["x"], s["r"], s["p"], s["v"],
                 *(s["scalars"][:, i].reshape(eager[4].shape) for i in range(3)))
        for a, f in zip(eager, fused, strict=True):
            assert bool(torch.isfinite(f).all())
            assert float((a - f).abs().max()) <= 1e-12 * (1.0 + float(a.abs().max()))
        worst = _relative_residuals(c, b, s["x"], transpose).max()
        assert float(solver.worst[0]) == pytest.approx(float(worst), rel=1e-6, abs=1e-14)
    if len(shape) == 3:
        assert float(s["x"][1].abs().max()) == 0.0


@pytest.mark.parametrize("transpose", [False, True])
def test_a_fused_solve_reaches_its_tolerance_from_zero_or_a_guess(device, transpose):
    c, b = _system((2, 8, 7), device, seed=5)
    solver = FusedBiCGStab(b.shape, b, transpose, 4, graphs=False)
    apply = _apply(c, transpose)
    x, k = solver.solve(c[:5], b, None, apply, rtol=1e-12, max_iter=200, fail=1e-9)
    assert float(_relative_residuals(c, b, x, transpose).max()) <= 1e-11 and k % 4 == 0
    guess = x * (1.0 + 1e-6)
    y, k_guess = solver.solve(c[:5], b, guess, apply, rtol=1e-12, max_iter=200, fail=1e-9)
    assert float(_relative_residuals(c, b, y, transpose).max()) <= 1e-11 and k_guess < k
    assert x.data_ptr() != y.data_ptr() != solver.x.data_ptr()   # results are not buffers
    with pytest.raises(SolverError, match="did not converge in 4 iterations"):
        solver.solve(c[:5], b, None, apply, rtol=1e-14, max_iter=4, fail=1e-13)
    with pytest.raises(ValueError, match="steps=3"):
        FusedBiCGStab(b.shape, b, transpose, 3, graphs=False)


def test_a_fused_room_solve_matches_the_eager_one(device, monkeypatch):
    room = mw.Room(congestion=1.0)
    size = {"nx": 7, "nt": 2} if device == "cpu" else {"nx": 31, "nt": 20}
    common = dict(**size, tol=1e-10, backend="torch", device=device, dtype="float64",
                  progress=False, max_iter=2)
    out = {}
    for fused in (False, True):
        monkeypatch.setattr(sweeps, "fused_available", lambda backend, fused=fused: fused)
        with pytest.warns(mw.ConvergenceWarning):
            out[fused] = mw.solve_2d(room, **common)
    a, b = out[False], out[True]
    assert b.extra["krylov_iterations"] > 0
    for k in ("U", "M", "outflow"):
        ref = getattr(a, k)
        assert np.max(np.abs(ref - getattr(b, k))) <= 1e-10 * (1 + np.max(np.abs(ref)))
    assert b.mass_error <= 1e-12


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA graphs")
def test_without_cuda_graphs_the_recordings_fall_back_to_eager_calls(device):
    """Asked for CUDA graphs where none can be recorded, the solver's chunks and the
    recorded steps say so once and give the eager results."""
    from mfgwork.numerics.fdm2d.fused_steps import _Recorded

    c, b = _system((2, 5, 6), device, seed=9)
    apply = _apply(c, False)
    with pytest.warns(RuntimeWarning, match="CUDA graph of the fused BiCGStab"):
        x, k = FusedBiCGStab(b.shape, b, False, 4, graphs=True).solve(
            c[:5], b, None, apply, rtol=1e-12, max_iter=200, fail=1e-9)
    y, k_eager = FusedBiCGStab(b.shape, b, False, 4, graphs=False).solve(
        c[:5], b, None, apply, rtol=1e-12, max_iter=200, fail=1e-9)
    assert k == k_eager and bool((x == y).all())
    with pytest.warns(RuntimeWarning, match="CUDA graph of the 2-D test step disabled"):
        step = _Recorded(lambda a: a * 2.0, [b], graphs=True, what="2-D test step")
    step.load(b + 1.0)
    step()
    assert bool((step.outputs == 2.0 * (b + 1.0)).all())
