"""The cooperative tangent sweeps (layout "program": a program per problem and block of
directions, chunks of x across the lanes, parallel cyclic reduction) against the compiled
NumPy float64 tangent and against the per-thread kernels (layout "thread"), every member.

On CUDA when there is one, else under Triton's CPU interpreter (TRITON_INTERPRET=1) at tiny
sizes when Triton is installed, else skipped.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import tangent_planes, triton_device
from test_triton_tangent import _best_responses

import mfgwork as mw
from mfgwork.numerics.fdm import triton_tangent
from mfgwork.numerics.potential import observed_path_jacobian

torch = pytest.importorskip("torch")


@pytest.fixture
def device(monkeypatch) -> str:
    """CUDA, or the interpreter on CPU tensors."""
    return triton_device(monkeypatch)


def _jacobians(nx: int, nt: int, B: int, dtype: str, device: str, directions: int,
               layouts: tuple[str, ...]) -> tuple[dict, list[np.ndarray]]:
    """D of each layout (float64 copies) and the compiled float64 tangent of each member."""
    grid = mw.SantaFeBar().grid(nx, nt)
    rng = np.random.default_rng(11)
    problems = [mw.SantaFeBar(sigma=s) for s in rng.uniform(0.3, 1.2, B)]
    U, mu, chi = _best_responses(grid, problems, rng)
    nu = np.array([p.nu for p in problems])

    def T(a):
        return torch.as_tensor(np.asarray(a), dtype=getattr(torch, dtype), device=device)

    args = (T(U), T(mu), T(chi), T(nu), grid.h, grid.dt, T(1.0 / (grid.h * grid.weights)))
    D = {layout: triton_tangent.tangent_jacobian_triton(*args, directions=directions,
                                                        layout=layout
                                                        ).cpu().numpy().astype(np.float64)
         for layout in layouts}
    refs = [observed_path_jacobian(U[b], mu[b], chi, p.nu, grid)
            for b, p in enumerate(problems)]
    return D, refs


def _rel(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


@pytest.mark.parametrize("nx, nt, B, directions", [
    (17, 7, 3, 4),   # 4 chunks of 5 rows (3 padding), 2 direction blocks, the last one short
    (16, 5, 2, 8),   # 4 chunks of 4 rows, one block wider than nt
])
@pytest.mark.parametrize("dtype, tol", [("float64", 1e-12), ("float32", 1e-4)])
def test_program_layout_matches_the_compiled_tangent_and_the_thread_layout(
        device, nx, nt, B, directions, dtype, tol):
    # the thread layout in float64 only: under the interpreter it costs 3x the program's
    layouts = ("program", "thread") if dtype == "float64" or device == "cuda" else ("program",)
    out, refs = _jacobians(nx, nt, B, dtype, device, directions, layouts)
    D = out["program"]
    for b, ref in enumerate(refs):
        assert np.isfinite(D[b]).all()
        assert _rel(D[b], ref) <= tol
        if "thread" in out:
            assert _rel(D[b], out["thread"][b]) <= 2 * tol
    assert _rel(D[0], D[1]) > 1e-3  # each member its own
    assert np.abs(np.triu(D[0], 1)).max() > 1e-3 * np.abs(D[0]).max()  # later directions act


@pytest.mark.parametrize("nx", [3, 7, 16, 17, 33, 96, 97, 201, 1000])
def test_chunking_covers_the_grid_with_warp_sized_reductions(nx):
    P, log_c = triton_tangent.chunking(nx)
    chunks = 1 << log_c
    assert P >= 3 and P * chunks >= nx and chunks <= triton_tangent.MAX_CHUNKS
    assert P == 3 or P * chunks - nx < chunks  # under one padding row a chunk
    assert chunks == triton_tangent.MAX_CHUNKS or 6 * chunks > nx  # as many lanes as can be


def test_an_unknown_layout_or_a_bad_block_is_refused_before_any_work():
    with pytest.raises(ValueError, match="layout='warp'"):
        triton_tangent.tangent_jacobian_triton(None, None, None, None, 0.1, 0.1, None,
                                               layout="warp")
    with pytest.raises(ValueError, match="layout='warp'"):
        triton_tangent.workspace_items(9, 5, layout="warp")
    with pytest.raises(ValueError, match="directions=6"):
        triton_tangent.program_kernel(torch.zeros((5, 7, 9)), torch.zeros(9), 0.1, 1, 3, 1,
                                      directions=6)


@pytest.mark.parametrize("nx, nt", [(17, 4), (9, 3)])
def test_the_planes_launch_matches_the_bands_of_the_torch_path(device, nx, nt):
    """The one-launch planes (program layout) equal the bands of ``tangent_bands`` in
    chunk-major order, with flat stretches (q = 0: no transport weight) and walls."""
    grid = mw.SantaFeBar().grid(nx, nt)
    rng = np.random.default_rng(3)
    B = 2
    U = rng.normal(size=(B, nt + 1, nx))
    U[:, :, 2:5] = 0.25                     # q = 0 on two edges
    mu = rng.uniform(0.1, 1.0, (B, nt + 1, nx))
    nu = np.array([0.3, 0.7])
    inv_hw = 1.0 / (grid.h * grid.weights)

    def T(a):
        return torch.as_tensor(np.asarray(a), dtype=torch.float64, device=device)

    P, log_c = triton_tangent.chunking(nx)
    planes = triton_tangent.chunk_planes(T(U), T(mu), T(nu), grid.h, grid.dt, T(inv_hw), P,
                                         log_c).cpu().numpy()
    lower, diag, upper, c = torch.unbind(triton_tangent.tangent_bands(
        T(U).cpu(), T(mu).cpu(), T(nu).cpu(), grid.h, grid.dt, T(inv_hw).cpu()), 1)
    lower, diag, upper, c = (a.numpy() for a in (lower, diag, upper, c))
    expected = tangent_planes(lower, diag, upper, c, P, log_c, nx)
    assert np.abs(c).max() > 0 and (c[:, 2:4] == 0).all()
    np.testing.assert_allclose(planes, expected, rtol=1e-14, atol=1e-14 * np.abs(expected).max())
