"""Tridiagonal solves, one kernel per backend.

Band layout (the same everywhere): row i reads
``lower[..., i] x[i-1] + diag[..., i] x[i] + upper[..., i] x[i+1] = rhs[..., i]``,
with ``lower[..., 0]`` and ``upper[..., -1]`` ignored. Leading axes are a batch.

- NumPy and torch on the CPU: LAPACK ``gtsv`` through SciPy (torch CPU tensors are viewed
  as NumPy arrays without copying).
- torch on CUDA and MPS (and MPS emulation): parallel cyclic reduction (PCR) written in
  plain tensor ops, ⌈log2 n⌉ levels, no host round trip. Rows are scaled to a unit
  diagonal, a_i x_{i−s} + x_i + c_i x_{i+s} = d_i, and (a, c, d) are kept stacked in one
  (..., 3, n) array, so a level costs ten kernels whatever the batch. For many
  right-hand sides with the same matrix (the FP sweep, whose matrices are all known before
  it starts), :func:`pcr_factor` computes the level coefficients once and
  :func:`pcr_apply` costs four kernels per level.

The matrices met here (implicit HJB and FP steps) are diagonally dominant M-matrices, so
no pivoting is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...core.backend import Backend

TridiagonalSolver = Callable[[Any, Any, Any, Any], Any]


def solve_lapack(lower: np.ndarray, diag: np.ndarray, upper: np.ndarray,
                 rhs: np.ndarray) -> np.ndarray:
    """LAPACK ``?gtsv`` on each matrix of the batch."""
    from scipy.linalg import lapack  # imported on first use: keeps ``import mfgwork`` light

    gtsv = lapack.get_lapack_funcs("gtsv", (diag,))
    batch = diag.shape[:-1]
    out = np.empty(np.broadcast_shapes(diag.shape, rhs.shape), dtype=diag.dtype)
    for idx in np.ndindex(*batch):
        _, _, _, x, info = gtsv(lower[idx][1:], diag[idx], upper[idx][:-1], rhs[idx])
        if info != 0:
            raise np.linalg.LinAlgError(f"gtsv failed: info={info}")
        out[idx] = x
    return out


def solve_lapack_torch(lower: Any, diag: Any, upper: Any, rhs: Any) -> Any:
    """LAPACK on CPU tensors through zero-copy NumPy views."""
    import torch

    out = solve_lapack(lower.numpy(), diag.numpy(), upper.numpy(), rhs.numpy())
    return torch.from_numpy(out)


def solve_pcr(lower: Any, diag: Any, upper: Any, rhs: Any) -> Any:
    """Parallel cyclic reduction in torch ops (any device; batched over leading axes)."""
    import torch

    lower = torch.cat([torch.zeros_like(lower[..., :1]), lower[..., 1:]], dim=-1)
    upper = torch.cat([upper[..., :-1], torch.zeros_like(upper[..., :1])], dim=-1)
    return solve_pcr_zero_ends(lower, diag, upper, rhs)


def solve_pcr_zero_ends(lower: Any, diag: Any, upper: Any, rhs: Any) -> Any:
    """PCR for bands whose ``lower[..., 0]`` and ``upper[..., -1]`` are exactly zero (as
    the scheme's are: there is no neighbour beyond a wall)."""
    import torch

    return pcr(torch.stack([lower, upper, rhs], dim=-2) * torch.reciprocal(diag)[..., None, :])


def pcr(system: Any) -> Any:
    """x of the unit-diagonal rows ``system[..., :, i] = (a_i, c_i, d_i)``, a_0 = c_{n−1} = 0.

    Level s eliminates x_{i∓s} with rows i∓s (rows beyond the ends are zero):
    x_i (1 − a_i c_{i−s} − c_i a_{i+s}) − a_i a_{i−s} x_{i−2s} − c_i c_{i+s} x_{i+2s}
    = d_i − a_i d_{i−s} − c_i d_{i+s}, then rescales to a unit diagonal.
    """
    import torch
    from torch.nn.functional import pad

    n = system.shape[-1]
    s = 1
    while s < n:
        # rows i − s and i + s of every band: (..., 3, 2, n) views of one padded copy
        neighbours = pad(system, (s, s)).unfold(-1, n, 2 * s)
        # [r, 0] = a_i · row_r(i − s), [r, 1] = c_i · row_r(i + s)
        products = system[..., None, 0:2, :] * neighbours
        minus_inv = torch.reciprocal(products[..., 1, 0, :] + products[..., 0, 1, :] - 1.0)
        reduced_rhs = products[..., 2, :, :].sum(dim=-2) - system[..., 2, :]
        system = _stack3(products[..., 0, 0, :], products[..., 1, 1, :], reduced_rhs
                         ) * minus_inv[..., None, :]
        s *= 2
    return system[..., 2, :]


def pcr_factor(lower: Any, diag: Any, upper: Any) -> tuple[Any, list[Any]]:
    """The right-hand-side-free part of PCR (bands with zero ends, as in
    :func:`solve_pcr_zero_ends`): ``(1/diag, levels)``, each level (..., 3, n) holding the
    weights of d_{i−s}, d_i, d_{i+s} in the reduced right-hand side."""
    import torch
    from torch.nn.functional import pad

    inv_diag = torch.reciprocal(diag)
    coupling = torch.stack([lower, upper], dim=-2) * inv_diag[..., None, :]   # (a, c)
    n = diag.shape[-1]
    levels = []
    s = 1
    while s < n:
        products = coupling[..., None, :, :] * pad(coupling, (s, s)).unfold(-1, n, 2 * s)
        minus_inv = torch.reciprocal(products[..., 1, 0, :] + products[..., 0, 1, :] - 1.0)
        weights = coupling * minus_inv[..., None, :]
        levels.append(_stack3(weights[..., 0, :], -minus_inv, weights[..., 1, :]))
        coupling = torch.stack([products[..., 0, 0, :], products[..., 1, 1, :]], dim=-2
                               ) * minus_inv[..., None, :]
        s *= 2
    return inv_diag, levels


def pcr_apply(levels: list[Any], d: Any) -> Any:
    """x from the unit-diagonal right-hand side ``d`` (rhs / diag) and :func:`pcr_factor`'s
    levels: per level, d_i ← w⁻_i d_{i−s} + w⁰_i d_i + w⁺_i d_{i+s}."""
    from torch.nn.functional import pad

    n = d.shape[-1]
    s = 1
    for weights in levels:
        windows = pad(d, (s, s)).unfold(-1, n, s)   # (..., 3, n): d_{i−s}, d_i, d_{i+s}
        d = (weights * windows).sum(dim=-2)
        s *= 2
    return d


def _stack3(a: Any, b: Any, c: Any) -> Any:
    import torch

    return torch.stack([a, b, c], dim=-2)


def tridiagonal_solver(backend: Backend, *, zero_ends: bool = False) -> TridiagonalSolver:
    """The tridiagonal kernel for ``backend`` (as named by the table in :mod:`.kernels`);
    ``zero_ends``: the caller guarantees ``lower[..., 0] == upper[..., -1] == 0``, as the
    scheme's bands do (PCR then saves two kernels per solve)."""
    from .kernels import fdm_kernels

    solve = fdm_kernels(backend).tridiagonal
    return solve_pcr if solve is solve_pcr_zero_ends and not zero_ends else solve


def factor_many(lower: Any, diag: Any, upper: Any) -> Callable[[int, Any], Any]:
    """PCR for many right-hand sides per matrix: for bands (B, L, n) with zero ends (a batch
    of B problems, L matrices each), ``solve(l, rhs)`` with ``rhs`` (B, k, n) returns x
    (B, k, n) for the matrices of index l. The levels are computed once for all L matrices,
    so a solve is four kernels per level whatever B and k."""
    inv_diag, levels = pcr_factor(lower, diag, upper)

    def solve(level: int, rhs: Any) -> Any:
        return pcr_apply([w[:, level, None] for w in levels], rhs * inv_diag[:, level, None])
    return solve
