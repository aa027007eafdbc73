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


@pytest.mark.parametrize("hamiltonian", [mw.Quadratic(), mw.Power(1.5), mw.Congestion(1.0, 0.5)],
                         ids=["quad", "1.5", "congestion"])
def test_compiled_operands_are_those_of_the_array_operators(monkeypatch, hamiltonian):
    """The model's compiled ``tangent_bands`` (bands of J and Jᵀ, capped curvature, a frozen
    density) against the array operators of :mod:`mfgwork.numerics.fdm.operators`."""
    from mfgwork.numerics import potential

    problem = mw.SantaFeBar(hamiltonian=hamiltonian, sigma=0.4)
    grid = problem.grid(17, 12)
    res = mw.solve(problem, nx=17, nt=12, tol=1e-6, progress=False)
    U, M = np.asarray(res.U), np.asarray(res.M)
    density = M[1:] if hamiltonian.depends_on_m else None
    args = (U, M * grid.weights, grid.cell_fraction_above(0.0), problem.nu, grid, hamiltonian,
            density)
    compiled = potential.tangent_operands(*args)
    monkeypatch.setattr(potential, "compiled_model", lambda h: None)
    reference = potential.tangent_operands(*args)
    for mine, theirs in zip(compiled, reference, strict=True):
        assert mine.shape == theirs.shape
        assert np.max(np.abs(mine - theirs)) <= 1e-13 * max(np.max(np.abs(theirs)), 1e-300)
    assert np.max(np.abs(reference[5])) > 0.0
