"""The matrix-free tangent products of Newton–Krylov (alternating eliminations, pipelined)
against the dense tangent Jacobian D of the same scheme."""

from __future__ import annotations

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.numerics.fdm.tangent import tangent_jacobian, tangent_product
from mfgwork.numerics.potential import product_operands, tangent_operands


def _operands(hamiltonian: mw.Hamiltonian, nx: int, nt: int) -> tuple:
    problem = mw.SantaFeBar(hamiltonian=hamiltonian, sigma=0.4)
    grid = problem.grid(nx, nt)
    res = mw.solve(problem, nx=nx, nt=nt, tol=1e-6, progress=False)
    chi = grid.cell_fraction_above(0.0)
    mu = np.asarray(res.M) * grid.weights
    return grid, tangent_operands(np.asarray(res.U), mu, chi, problem.nu, grid, hamiltonian)


@pytest.mark.parametrize("hamiltonian", [mw.Quadratic(), mw.Power(1.5)], ids=["quad", "1.5"])
@pytest.mark.parametrize("nx, nt", [(21, 16), (20, 15), (9, 1), (9, 2)])
def test_products_are_the_columns_of_the_tangent_jacobian(hamiltonian, nx, nt):
    grid, ops = _operands(hamiltonian, nx, nt)
    D = tangent_jacobian(*ops, grid.dt)
    factored = product_operands(ops)
    rng = np.random.default_rng(nx + nt)
    V = np.column_stack([np.eye(nt), rng.standard_normal((nt, 3))])
    products = np.column_stack([tangent_product(*factored, grid.dt, v.copy()) for v in V.T])
    assert np.max(np.abs(products - D @ V)) <= 1e-12 * np.max(np.abs(D @ V))
    assert np.max(np.abs(D)) > 0.0

