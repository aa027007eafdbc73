"""Memory needed by a particle solve, checked against what the device has before any work.

Only the current positions live in memory (never trajectories): per particle the position,
the Gaussian increments and the temporaries of one step, plus the node masses of every time
level. The estimate is deliberately generous (a few temporaries more than the kernels keep
alive at once).
"""

from __future__ import annotations

from ...core import memory
from ...core.backend import Backend
from ...core.errors import ParameterError


def bytes_per_particle(itemsize: int) -> int:
    """Position, increment, cell index and fraction, drift temporaries, fixed-point weights."""
    return 8 * itemsize + 48


def grid_bytes(nx: int, nt: int, itemsize: int, copies: int = 1) -> int:
    """The node masses of every time level (``copies`` private int64 copies on CUDA)."""
    return (nt + 1) * nx * (8 * copies + 4 * itemsize)


def estimate_bytes(n_particles: int, nx: int, nt: int, itemsize: int, copies: int = 1) -> int:
    """Peak bytes of a particle FP solve with ``n_particles`` on an nx × nt grid."""
    return n_particles * bytes_per_particle(itemsize) + grid_bytes(nx, nt, itemsize, copies)


def check_fits(n_particles: int, nx: int, nt: int, backend: Backend, copies: int = 1,
               max_memory: object = None) -> int:
    """The estimate in bytes; raises :class:`ParameterError` if it exceeds the free memory
    (or ``max_memory``), blaming the grid when its node masses alone do not fit."""
    itemsize = 4 if backend.dtype == "float32" else 8
    need = estimate_bytes(n_particles, nx, nt, itemsize, copies)
    available, where = memory.limit(backend, max_memory)
    if available is None or need <= available:
        return need
    grid = grid_bytes(nx, nt, itemsize, copies)
    if grid > available / 2:
        raise ParameterError(
            f"nx={nx}, nt={nt} do not fit: the node masses of a particle solve on this grid "
            f"need about {memory.format_bytes(grid)} ({nt + 1} levels of {nx} nodes) but "
            f"{where}; use a coarser grid (fewer time steps nt or points nx)")
    fits = max(1, int((available - grid) / bytes_per_particle(itemsize)))
    raise ParameterError(
        f"n_particles={n_particles} does not fit: a particle solve needs about "
        f"{memory.format_bytes(need)} ({bytes_per_particle(itemsize)} bytes per particle in "
        f"{backend.dtype} plus the node masses of {nt + 1} levels) but {where}; "
        f"use at most about {fits:.3g} particles")
