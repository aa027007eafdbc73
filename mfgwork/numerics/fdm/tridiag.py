"""Tridiagonal solves, one kernel per backend.

Band layout (the same everywhere): row i reads
``lower[..., i] x[i-1] + diag[..., i] x[i] + upper[..., i] x[i+1] = rhs[..., i]``,
with ``lower[..., 0]`` and ``upper[..., -1]`` ignored. Leading axes are a batch.

- NumPy and torch on the CPU: LAPACK ``gtsv`` through SciPy (torch CPU tensors are viewed
  as NumPy arrays without copying).
- torch on CUDA and MPS (and MPS emulation): parallel cyclic reduction (PCR) written in
  plain tensor ops, ⌈log2 n⌉ levels, no host round trip. Rows are scaled to a unit
  diagonal, a_i x_{i−s} + x_i + c_i x_{i+s} = d_i, and kept as four rows (a, 1, c, d) in
  the centre of a workspace padded with zeros on both sides (:func:`pcr_workspace`), so
  that the rows i ∓ s are views. A level is three kernels whatever the batch: the twelve
  products of a_i, 1, c_i with the rows i − s, i, i + s; their combination into the reduced
  rows as one product with a constant 4 × 12 matrix (:func:`reduction_rows`, entries 0 and
  ±1: the sums of the elementwise form, in full float32, see :func:`full_float32_products`);
  the division by the new diagonal, written into the workspace (:func:`pcr_stacked`). For
  many right-hand sides with the same matrix (the FP sweep, whose matrices are all known
  before it starts), :func:`pcr_factor` computes the level coefficients once and
  :func:`pcr_apply_padded` costs two kernels per level.

The matrices met here (implicit HJB and FP steps) are diagonally dominant M-matrices, so
no pivoting is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

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

    system = torch.stack(torch.broadcast_tensors(lower, diag, upper, rhs), dim=-2)
    with full_float32_products(system):
        return pcr_stacked(system, pcr_workspace(system))


@contextmanager
def full_float32_products(like: Any) -> Iterator[None]:
    """Inside the block, matrix products of CUDA tensors in full float32 (TF32, which
    ``torch.set_float32_matmul_precision("high")`` allows, keeps 10 bits of the operands:
    the reductions of :func:`pcr_stacked` would lose all but three digits); elsewhere a
    no-op."""
    import torch

    precision = torch.get_float32_matmul_precision()
    if like.device.type != "cuda" or precision == "highest":
        yield
        return
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)


def pcr_padding(n: int) -> int:
    """The zeros on each side of a PCR workspace for n unknowns: the largest stride
    s = 2^(⌈log2 n⌉ − 1) (0 for n = 1)."""
    return (1 << (n - 1).bit_length()) >> 1


class PCRWorkspace(NamedTuple):
    """A zero-padded workspace (..., 4, n + 2 :func:`pcr_padding` (n)) of :func:`pcr_reduce`
    and its views, made once (e.g. per sweep) and reused."""

    centre: Any               # (..., 4, n): the rows (a, 1, c, d) being reduced
    windows: tuple[Any, ...]  # per level s: (..., 4, 3, n), the rows i − s, i, i + s
    full: Any                 # :func:`reduction_rows`
    last: Any


def pcr_workspace(system: Any) -> PCRWorkspace:
    """A :class:`PCRWorkspace` for systems shaped like ``system`` (..., 4, n)."""
    import torch

    n = system.shape[-1]
    pad = pcr_padding(n)
    buffer = torch.zeros(system.shape[:-1] + (n + 2 * pad,), dtype=system.dtype,
                         device=system.device)
    windows, s = [], 1
    while s < n:
        windows.append(buffer[..., pad - s:pad + n + s].unfold(-1, n, s))
        s *= 2
    return PCRWorkspace(buffer[..., pad:pad + n], tuple(windows), *reduction_rows(system))


#: Rows of a PCR level from its products P[3 r + k] = coef_k(i) · row_r(i + (k − 1) s), with
#: rows r = (a, 1, c, d) and coef = (a_i, 1, c_i): a' = −a_i a_{i−s}, the new diagonal
#: 1 − a_i c_{i−s} − c_i a_{i+s}, c' = −c_i c_{i+s}, d' = d_i − a_i d_{i−s} − c_i d_{i+s}.
_LEVEL = ({0: -1.0}, {4: 1.0, 6: -1.0, 2: -1.0}, {8: -1.0}, {10: 1.0, 9: -1.0, 11: -1.0})


@lru_cache(maxsize=16)
def _reduction_rows(dtype: Any, device: Any) -> tuple[Any, Any]:
    import torch

    full = torch.tensor([[row.get(j, 0.0) for j in range(12)] for row in _LEVEL],
                        dtype=dtype, device=device)
    return full, full[1::2].contiguous()


def reduction_rows(like: Any) -> tuple[Any, Any]:
    """The constant matrices of a PCR level for tensors like ``like``: (4, 12) giving the
    rows (a', diagonal, c', d') before rescaling, and its (diagonal, d') rows for the last
    level."""
    return _reduction_rows(like.dtype, like.device)


def pcr_stacked(system: Any, work: PCRWorkspace) -> Any:
    """x of the rows ``system[..., :, i]`` = (lower_i, diag_i, upper_i, rhs_i) (zero ends),
    by PCR in ``work`` (:func:`pcr_workspace`; its centre is overwritten, its zeros are
    kept): x = d/diagonal of :func:`pcr_reduce`."""
    if system.shape[-1] == 1:
        return system[..., 3, :] / system[..., 1, :]
    diagonal, d = pcr_reduce(system, work).unbind(-2)
    return d / diagonal


def pcr_reduce(system: Any, work: PCRWorkspace) -> Any:
    """The rows (diagonal, d) (..., 2, n) of the fully reduced system of :func:`pcr_stacked`
    (x = d / diagonal; n ≥ 2), for a caller that folds the last division into its next
    kernel.

    Level s eliminates x_{i∓s} with rows i∓s (rows beyond the ends are zero):
    x_i (1 − a_i c_{i−s} − c_i a_{i+s}) − a_i a_{i−s} x_{i−2s} − c_i c_{i+s} x_{i+2s}
    = d_i − a_i d_{i−s} − c_i d_{i+s}, then rescales to a unit diagonal. One kernel to
    scale the rows, three per level (the last one two).
    """
    import torch

    if not work.windows:
        raise ValueError(f"system of n={system.shape[-1]} unknowns is invalid for "
                         "pcr_reduce: it needs n >= 2")
    torch.div(system, system[..., 1:2, :], out=work.centre)   # (a_i, 1, c_i, d_i)
    # products[..., 3 r + k, i] = coef_k(i) · row_r(i + (k − 1) s), coef = (a_i, 1, c_i)
    coef = work.centre[..., None, :3, :]
    for windows in work.windows[:-1]:
        reduced = work.full @ (coef * windows).flatten(-3, -2)
        torch.div(reduced, reduced[..., 1:2, :], out=work.centre)
    return work.last @ (coef * work.windows[-1]).flatten(-3, -2)


def pcr_factor(lower: Any, diag: Any, upper: Any) -> tuple[Any, list[Any]]:
    """The right-hand-side-free part of PCR (bands with zero ends, as in
    :func:`solve_pcr_zero_ends`): ``(1/diag, levels)``, each level (..., 3, n) holding the
    weights w⁻, w⁰, w⁺ = (−a_i, 1, −c_i) / diagonal of d_{i−s}, d_i, d_{i+s} in the reduced
    right-hand side. The couplings (a, 1, c) of every level are kept zero-padded in one
    workspace; a level is three kernels as in :func:`pcr_reduce` (its matrix also gives
    −a_i, 1, −c_i, which the products hold at the centre k = 1)."""
    import torch

    inv_diag = torch.reciprocal(diag)
    n = diag.shape[-1]
    pad = pcr_padding(n)
    count = pad.bit_length()                        # ⌈log2 n⌉ levels
    work = diag.new_zeros(diag.shape[:-1] + (count + 1, 6, n + 2 * pad))
    centre = work[..., pad:pad + n]
    bands = torch.stack(torch.broadcast_tensors(lower, diag, upper), dim=-2)
    torch.div(bands, bands[..., 1:2, :], out=centre[..., 0, :3, :])     # (a_i, 1, c_i)
    matrix = _factor_rows(diag.dtype, diag.device)
    levels = []
    for level in range(count):
        s = 1 << level
        coef = centre[..., level, None, :3, :]
        windows = work[..., level, :3, pad - s:pad + n + s].unfold(-1, n, s)
        reduced = matrix @ (coef * windows).flatten(-3, -2)   # (a', diagonal, c', −a, 1, −c)
        torch.div(reduced, reduced[..., 1:2, :], out=centre[..., level + 1, :, :])
        levels.append(centre[..., level + 1, 3:, :])
    return inv_diag, levels


@lru_cache(maxsize=16)
def _factor_rows(dtype: Any, device: Any) -> Any:
    """:func:`pcr_factor`'s level matrix (6, 9): the rows a', diagonal, c' of a level
    (:data:`_LEVEL` without d) and −a_i, 1, −c_i (products 1, 4, 7: k = 1)."""
    import torch

    rows = (*_LEVEL[:3], {1: -1.0}, {4: 1.0}, {7: -1.0})
    return torch.tensor([[row.get(j, 0.0) for j in range(9)] for row in rows], dtype=dtype,
                        device=device)


def pcr_apply(levels: list[Any], d: Any) -> Any:
    """x from the unit-diagonal right-hand side ``d`` (rhs / diag) and :func:`pcr_factor`'s
    levels (:func:`pcr_apply_padded` on a zero-padded copy of ``d``)."""
    import torch
    from torch.nn.functional import pad as pad_with_zeros

    if not levels:
        return d
    shape = torch.broadcast_shapes(levels[0].shape[:-2], d.shape[:-1])
    row = pad_with_zeros(d, (pcr_padding(d.shape[-1]),) * 2)
    return pcr_apply_padded(levels, row, row.new_zeros(shape + row.shape[-1:]))


def pcr_apply_padded(levels: list[Any], row: Any, work: Any, out: Any = None) -> Any:
    """:func:`pcr_apply` for the right-hand side given as the centre of ``row`` (..., n + 2
    pad) with :func:`pcr_padding` zeros on each side, in the zero-padded workspace ``work``
    of the result's shape (its centre is overwritten); ``out``: where the last level writes
    (e.g. the centre of the next padded row of a sweep). Per level,
    d_i ← w⁻_i d_{i−s} + w⁰_i d_i + w⁺_i d_{i+s}: two kernels."""
    import torch

    pad = (1 << len(levels)) >> 1          # the largest stride, pcr_padding(n)
    n = row.shape[-1] - 2 * pad
    s = 1
    for level, weights in enumerate(levels):
        products = weights * row[..., pad - s:pad + n + s].unfold(-1, n, s)
        if level == len(levels) - 1:
            return torch.sum(products, dim=-2, out=out)
        row = work
        torch.sum(products, dim=-2, out=work[..., pad:pad + n])
        s *= 2
    return row[..., pad:pad + n] if out is None else out.copy_(row[..., pad:pad + n])


def factor_many(lower: Any, diag: Any, upper: Any) -> Callable[[int, Any], Any]:
    """PCR for many right-hand sides per matrix: for bands (B, L, n) with zero ends (a batch
    of B problems, L matrices each), ``solve(l, rhs)`` with ``rhs`` (B, k, n) returns x
    (B, k, n) for the matrices of index l. The levels are computed once for all L matrices,
    so a solve is four kernels per level whatever B and k."""
    inv_diag, levels = pcr_factor(lower, diag, upper)

    def solve(level: int, rhs: Any) -> Any:
        return pcr_apply([w[:, level, None] for w in levels], rhs * inv_diag[:, level, None])
    return solve
