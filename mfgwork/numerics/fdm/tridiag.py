"""Tridiagonal solves, one kernel per backend.

Band layout (the same everywhere): row i reads
``lower[..., i] x[i-1] + diag[..., i] x[i] + upper[..., i] x[i+1] = rhs[..., i]``,
with ``lower[..., 0]`` and ``upper[..., -1]`` ignored. Leading axes are a batch.

- NumPy and torch on the CPU: LAPACK ``gtsv`` through SciPy (torch CPU tensors are viewed
  as NumPy arrays without copying).
- torch on CUDA and MPS (and MPS emulation): parallel cyclic reduction written in plain
  tensor ops (slicing, multiply, divide), ⌈log2 n⌉ steps, no host round trip.

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

    a, b, c, d = lower, diag, upper, rhs
    n = b.shape[-1]
    a = torch.cat([torch.zeros_like(a[..., :1]), a[..., 1:]], dim=-1)
    c = torch.cat([c[..., :-1], torch.zeros_like(c[..., :1])], dim=-1)
    s = 1
    while s < n:
        zeros = torch.zeros_like(b[..., :s])
        ones = torch.ones_like(b[..., :s])
        a_m, b_m, c_m, d_m = (torch.cat([pad, v[..., :-s]], dim=-1)
                              for v, pad in ((a, zeros), (b, ones), (c, zeros), (d, zeros)))
        a_p, b_p, c_p, d_p = (torch.cat([v[..., s:], pad], dim=-1)
                              for v, pad in ((a, zeros), (b, ones), (c, zeros), (d, zeros)))
        alpha = -a / b_m
        gamma = -c / b_p
        b = b + alpha * c_m + gamma * a_p
        d = d + alpha * d_m + gamma * d_p
        a = alpha * a_m
        c = gamma * c_p
        s *= 2
    return d / b


def tridiagonal_solver(backend: Backend) -> TridiagonalSolver:
    """The tridiagonal kernel for ``backend`` (as named by the table in :mod:`.kernels`)."""
    from .kernels import fdm_kernels

    return fdm_kernels(backend).tridiagonal
