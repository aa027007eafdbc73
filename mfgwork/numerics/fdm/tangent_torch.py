"""The tangent linear model of the HJB–FP sweeps in torch ops, batched over problems.

The same derivative as the compiled :mod:`.tangent` (see there): for running costs
F^n = −y_n χ and the observed path z_n = χ·μ^{n+1}, D[b, n, j] = ∂z_n/∂y_j of problem b. The
backward sweep solves J_n δu^n = δu^{n+1}/Δt + δF^n, the forward sweep
J_nᵀ δμ^{n+1} = δμ^n/Δt − K_n δu^n, for all nt directions of all problems at once: each level
is one wide batch of tridiagonal solves (B problems × up to nt right-hand sides per matrix,
:func:`.tridiag.factor_many`, parallel cyclic reduction). Direction j vanishes in δu^n for
n > j, so level n carries only the directions n..nt−1 of the backward sweep. Plain torch
ops, for CUDA and MPS (and MPS emulation); on the CPU the compiled loops of :mod:`.tangent`
are faster (one problem at a time).
"""

from __future__ import annotations

from typing import Any

from ...problems.hamiltonians import Hamiltonian
from .operators import QUADRATIC, jacobian_bands, tangent_weights, transpose_bands
from .tridiag import factor_many


def tangent_jacobian_torch(U: Any, mu: Any, chi: Any, nu: Any, h: float, dt: float,
                           inv_hw: Any, hamiltonian: Hamiltonian = QUADRATIC, x: Any = None,
                           m: Any = None) -> Any:
    """D (B, nt, nt) from U (B, nt+1, nx), the cell masses mu (B, nt+1, nx), χ (nx,), ν (B,),
    1/(h w) (nx,), the nodes x (nx,) and, where H depends on m, the frozen densities
    m^1..m^nt (nt, nx) it sees, all tensors of one dtype and device."""
    import torch

    B, levels, nx = U.shape
    nt = levels - 1
    lower, diag, upper, terms = jacobian_bands(U[:, :-1], nu[:, None, None], h, dt, inv_hw,
                                               torch, hamiltonian, x, m)
    lower_t, _, upper_t = transpose_bands(lower, diag, upper, torch)
    solve = factor_many(lower, diag, upper)
    du: list[Any] = [None] * nt   # du[n]: (B, nt − n, nx), directions n..nt−1
    later = U.new_zeros((B, 0, nx))
    for n in range(nt - 1, -1, -1):
        rhs = torch.cat([(-chi).expand(B, 1, nx), later / dt], dim=1)
        du[n] = later = solve(n, rhs)
    del solve
    solve_t = factor_many(lower_t, diag, upper_t)
    # K_n δu: upwind edge weights (½|p|²: c_e = μ_{e+1} 1{q_e > 0} + μ_e 1{q_e < 0}), over h²
    c = tangent_weights(terms, mu[:, 1:], x, m, h, hamiltonian, torch)
    dmu = U.new_zeros((B, nt, nx))
    D = U.new_empty((B, nt, nt))
    for n in range(nt):
        flux = c[:, n, None, :] * (du[n][..., 1:] - du[n][..., :-1])   # (B, nt − n, nx − 1)
        source = torch.nn.functional.pad(flux, (0, 1)) - torch.nn.functional.pad(flux, (1, 0))
        rhs = dmu / dt + torch.nn.functional.pad(source, (0, 0, n, 0))
        dmu = solve_t(n, rhs)
        du[n] = None
        D[:, n, :] = dmu @ chi
    return D
