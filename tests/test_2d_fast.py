"""The fast paths of the 2-D CPU solver against plain references: the compiled ILU-BiCGStab
against a sparse direct solve, inexact Newton updates against tight ones."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import mfgwork as mw
from mfgwork.numerics.fdm2d import equilibrium as eq
from mfgwork.numerics.fdm2d import sweeps
from mfgwork.numerics.fdm2d.ilu_kernels import ilu_bicgstab, transpose_stencil


def stencil_matrix(nx, D, W, E, S, N):
    """The 5-point matrix of a flattened stencil (rows k = j·nx + i)."""
    n = D.size
    k = np.arange(n)
    A = sp.diags(D) + sp.csr_matrix((W[1:], (k[1:], k[1:] - 1)), shape=(n, n))
    A = A + sp.csr_matrix((E[:-1], (k[:-1], k[:-1] + 1)), shape=(n, n))
    A = A + sp.csr_matrix((S[nx:], (k[nx:], k[nx:] - nx)), shape=(n, n))
    return (A + sp.csr_matrix((N[:-nx], (k[:-nx], k[:-nx] + nx)), shape=(n, n))).tocsc()


@pytest.mark.parametrize("relax", [0.0, 0.9])
@pytest.mark.parametrize("transpose", [False, True])
def test_ilu_bicgstab_matches_a_sparse_direct_solve(relax, transpose):
    nx, ny = 13, 9
    rng = np.random.default_rng(3)
    W, E, S, N = (-rng.random((ny, nx)) for _ in range(4))
    W[:, 0] = E[:, -1] = S[0, :] = N[-1, :] = 0.0  # no neighbours beyond the grid
    D = 5.0 - (W + E + S + N)
    if transpose:
        W, E, S, N = transpose_stencil(W, E, S, N)
    flat = [np.ascontiguousarray(a).reshape(-1) for a in (D, W, E, S, N)]
    b = rng.standard_normal(nx * ny)
    x = np.zeros_like(b)
    its, rel = ilu_bicgstab(nx, *flat, b, x, 1e-13, 500, relax)
    exact = sla.spsolve(stencil_matrix(nx, *flat), b)
    assert 0 < its < 60 and rel <= 1e-13
    assert np.max(np.abs(x - exact)) <= 1e-11 * np.max(np.abs(exact))


def test_inexact_newton_gives_the_tight_best_response(monkeypatch):
    n, nt = 31, 30
    setup = eq.build(mw.Room(congestion=1.0), n, n, nt, mw.get_backend("numpy"), "ilu")
    M = np.stack([setup.m0] * (nt + 1), axis=-3)
    U1, M1, _ = eq.best_response(setup, M)
    loose = setup.scheme.krylov_iterations
    monkeypatch.setattr(sweeps, "NEWTON_ETA_MAX", setup.scheme.newton_rtol)  # tight updates
    setup.scheme.krylov_iterations = 0
    U2, M2, _ = eq.best_response(setup, M)
    tight = setup.scheme.krylov_iterations
    assert loose < tight
    assert np.max(np.abs(U1 - U2)) <= 1e-10 * (1 + np.max(np.abs(U2)))
    assert np.max(np.abs(M1 - M2)) <= 1e-10 * np.max(M2)
