"""Self-checks of the particle kernels against vectorized NumPy float64 references.

Fixed inputs (seeded): offsets on a 201-point grid of [−5, 5] including particles exactly on
nodes and walls, Gaussian increments, and a smooth drift with steps large enough to reflect.
Each check returns (value on the backend, reference), as :func:`mfgwork.apps.doctor.register_check`
expects.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.backend import Backend
from ...core.grid import Grid

GRID = Grid(-5.0, 5.0, 201, 1.0, 1)
N_CHECK = 20_000
DT, NOISE = 0.05, 0.8


def reference_locate(y: np.ndarray, grid: Grid) -> tuple[np.ndarray, np.ndarray]:
    """Cell index i ∈ [0, nx − 2] and fraction f ∈ [0, 1] of offsets y (float64)."""
    s = np.clip(y / grid.h, 0.0, grid.nx - 1)
    i = np.minimum(np.floor(s).astype(np.int64), grid.nx - 2)
    return i, s - i


def reference_deposit(y: np.ndarray, grid: Grid) -> np.ndarray:
    """CIC densities (nx,) of particles at offsets y, with Σ_i w_i m_i = 1."""
    i, f = reference_locate(y, grid)
    mu = np.bincount(i, 1 - f, grid.nx) + np.bincount(i + 1, f, grid.nx)
    return mu / (mu.sum() * grid.weights)


def reference_step(y: np.ndarray, xi: np.ndarray, b: np.ndarray, grid: Grid, dt: float,
                   noise: float) -> np.ndarray:
    """One Euler–Maruyama step with drift b (node values) interpolated linearly, then fold."""
    i, f = reference_locate(y, grid)
    length = grid.x_max - grid.x_min
    v = np.mod(y + (b[i] + f * (b[i + 1] - b[i])) * dt + noise * xi, 2 * length)
    return np.clip(length - np.abs(length - v), 0.0, length)


def _inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(20261122)
    g = GRID
    length = g.x_max - g.x_min
    y = rng.uniform(0.0, length, N_CHECK)
    y[:g.nx] = g.x - g.x_min  # exactly on the nodes, both walls included
    xi = rng.standard_normal(N_CHECK)
    b = 8.0 * np.sin(g.x) + 3.0
    b[0] = b[-1] = 0.0
    return y, xi, b


def deposit_check(be: Backend) -> tuple[Any, np.ndarray]:
    """CIC deposit of fixed positions on ``be`` against :func:`reference_deposit`."""
    y, _, _ = _inputs()
    g = GRID
    ref = reference_deposit(y, g)
    y_be = y.astype(be.dtype)
    if be.name == "numpy":
        from .numba_kernels import cic_deposit

        mu = np.zeros(g.nx)
        cic_deposit(y_be, (g.nx - 1) / (g.x_max - g.x_min), mu)
        return mu / (mu.sum() * g.weights), ref
    from .torch_kernels import TorchKernels

    k = TorchKernels(g.nx, g.h, g.x_max - g.x_min, y.size, be, copies=3)
    masses = k.mass_buffer(1)
    i, f = k.locate(be.asarray(y_be))
    k.deposit(i, f, masses[0])
    mu = k.node_masses(masses)[0]
    return mu / (mu.sum() * be.asarray(g.weights)), ref


def step_check(be: Backend) -> tuple[Any, np.ndarray]:
    """One particle step with given increments on ``be`` against :func:`reference_step`."""
    y, xi, b = _inputs()
    g = GRID
    ref = reference_step(y, xi, b, g, DT, NOISE)
    length = g.x_max - g.x_min
    if be.name == "numpy":
        from .numba_kernels import step_deposit

        dtype = np.dtype(be.dtype)
        out = y.astype(dtype)
        step_deposit(out, xi.astype(dtype), b.astype(dtype), (g.nx - 1) / length, DT, NOISE,
                     length, np.zeros(g.nx))
        return out, ref
    from .torch_kernels import TorchKernels

    k = TorchKernels(g.nx, g.h, length, y.size, be)
    y_be = be.asarray(y)
    b_be = be.asarray(b)
    i, f = k.locate(y_be)
    return k.step(y_be, be.asarray(xi), b_be[:-1], b_be[1:] - b_be[:-1], i, f, DT, NOISE), ref


def _fused(be: Backend, n: int) -> Any:
    from .triton_kernels import FusedKernels

    g = GRID
    return FusedKernels(g.nx, g.x_max - g.x_min, n, DT, NOISE, be.asarray(g.weights),
                        copies=64, seed=20261122)


def fused_deposit_check(be: Backend) -> tuple[Any, np.ndarray]:
    """The fused Triton kernel's CIC deposit (torch CUDA) against :func:`reference_deposit`."""
    y, _, _ = _inputs()
    g = GRID
    fused = _fused(be, y.size)
    masses = fused.mass_buffer(1)
    fused.deposit(be.asarray(y), masses[0])
    mu = fused.node_masses(masses)[0]
    return mu / (mu.sum() * be.asarray(g.weights)), reference_deposit(y, g)


def fused_step_check(be: Backend) -> tuple[Any, np.ndarray]:
    """The fused Triton kernel's step (torch CUDA) against :func:`reference_step` with the
    normals the kernel draws (:meth:`~.triton_kernels.FusedKernels.normals`)."""
    y, _, b = _inputs()
    g = GRID
    fused = _fused(be, y.size)
    step = 3
    xi = fused.normals(step, be.zeros(y.shape))   # (a buffer on the device: no host cast)
    ref = reference_step(y, xi.cpu().numpy().astype(np.float64), b, g, DT, NOISE)
    y_be, b_be = be.asarray(y.copy()), be.asarray(b)
    fused.step_deposit(y_be, b_be[:-1].contiguous(), (b_be[1:] - b_be[:-1]).contiguous(),
                       fused.mass_buffer(1)[0], step)
    return y_be, ref
