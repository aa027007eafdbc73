"""The fused Triton tangent sweeps against the compiled NumPy float64 tangent, every member.

On CUDA when there is one, else under Triton's CPU interpreter (TRITON_INTERPRET=1) at tiny
sizes when Triton is installed, else skipped.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import independent_residual, triton_device

import mfgwork as mw
from mfgwork.numerics.batch_newton import BatchNewton
from mfgwork.numerics.potential import observed_path_jacobian

torch = pytest.importorskip("torch")


@pytest.fixture
def fused(monkeypatch) -> dict:
    """Where the fused kernels run here: CUDA, or the interpreter on CPU tensors (tiny)."""
    if triton_device(monkeypatch) == "cuda":
        return {"device": "cuda", "nx": 41, "nt": 37, "batch": 5, "directions": 32}
    return {"device": "cpu", "nx": 7, "nt": 6, "batch": 3, "directions": 4}


def _best_responses(grid: mw.Grid, problems: list, rng: np.random.Generator) -> tuple:
    """U and the cell masses μ of each problem's best response to a random payoff path."""
    from mfgwork.numerics.fdm.sweeps import FiniteDifferences

    be = mw.get_backend("numpy")
    chi = grid.cell_fraction_above(0.0)
    Us, mus = [], []
    for p in problems:
        fd = FiniteDifferences(grid, p.nu, be)
        y = rng.uniform(-3.0, 3.0, grid.nt)
        U = fd.solve_hjb(np.zeros(grid.nx), -y[:, None] * chi[None, :])
        Us.append(U)
        mus.append(fd.solve_fp(U, p.initial_density(grid, be)) * grid.weights)
    return np.stack(Us), np.stack(mus), chi


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-12), ("float32", 1e-4)])
def test_fused_tangent_jacobian_matches_the_compiled_tangent_for_every_member(fused, dtype,
                                                                               tol):
    from mfgwork.numerics.fdm.triton_tangent import tangent_jacobian_triton

    grid = mw.SantaFeBar().grid(fused["nx"], fused["nt"])
    rng = np.random.default_rng(7)
    problems = [mw.SantaFeBar(sigma=s) for s in rng.uniform(0.3, 1.2, fused["batch"])]
    U, mu, chi = _best_responses(grid, problems, rng)
    nu = np.array([p.nu for p in problems])

    def T(a):
        return torch.as_tensor(np.asarray(a), dtype=getattr(torch, dtype),
                               device=fused["device"])

    D = tangent_jacobian_triton(T(U), T(mu), T(chi), T(nu), grid.h, grid.dt,
                                T(1.0 / (grid.h * grid.weights)),
                                directions=fused["directions"])
    D = D.cpu().numpy().astype(np.float64)
    assert grid.nt > fused["directions"]  # several direction blocks per member
    for b, p in enumerate(problems):
        ref = observed_path_jacobian(U[b], mu[b], chi, p.nu, grid)
        assert np.isfinite(D[b]).all()
        assert np.max(np.abs(D[b] - ref)) <= tol * np.max(np.abs(ref))
    assert np.max(np.abs(D[0] - D[1])) > 1e-3 * np.max(np.abs(D[0]))  # each member its own


@pytest.mark.parametrize("layout", ["thread", "program"])
def test_batch_newton_on_the_fused_tangent_certifies_every_member(fused, monkeypatch, layout):
    """The devices' Newton (dense Jacobians, batched Cholesky) with the fused tangent sweeps
    of either layout: every member certified by an independent best response."""
    from mfgwork.numerics.fdm import triton_tangent

    monkeypatch.setattr(triton_tangent, "LAYOUT", layout)
    monkeypatch.setattr(BatchNewton, "matrix_free", property(lambda self: False))
    monkeypatch.setattr(BatchNewton, "jacobian_kernels",
                        property(lambda self: "fused Triton tangent sweeps"))
    calls = []
    kernel = triton_tangent.program_sweeps if layout == "program" else triton_tangent.sweeps
    monkeypatch.setattr(triton_tangent, kernel.__name__,
                        lambda *a, **k: calls.append(1) or kernel(*a, **k))
    problems = [mw.SantaFeBar(threshold=0.4, sigma=0.8), mw.SantaFeBar(threshold=0.7)]
    size = {"nx": 9, "nt": 5} if fused["device"] == "cpu" else {"nx": 41, "nt": 40}
    out = mw.solve_batch(problems, backend="torch", device=fused["device"], tol=1e-8,
                         progress=False, **size)
    assert calls
    for p, res in zip(problems, out, strict=True):
        assert res.converged and res.residual <= 1e-8
        assert independent_residual(p, res.M) == pytest.approx(res.residual, rel=1e-4)
