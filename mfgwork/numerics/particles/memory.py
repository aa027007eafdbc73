"""Memory needed by a particle solve, checked against what the device has before any work.

Only the current positions live in memory (never trajectories): per particle the position,
the Gaussian increments and the temporaries of one step, plus the node masses of every time
level. The estimate is deliberately generous (a few temporaries more than the kernels keep
alive at once).
"""

from __future__ import annotations

from ...core import memory
from ...core.backend import Backend


def bytes_per_particle(itemsize: int) -> int:
    """Position, increment, cell index and fraction, drift temporaries, fixed-point weights."""
    return 8 * itemsize + 48


def grid_bytes(nx: int, nt: int, itemsize: int, copies: int = 1) -> int:
    """The node masses of every time level (``copies`` private int64 copies on CUDA)."""
    return (nt + 1) * nx * (8 * copies + 4 * itemsize)


def estimate_bytes(n_particles: int, nx: int, nt: int, itemsize: int, copies: int = 1) -> int:
    """Peak bytes of a particle FP solve with ``n_particles`` on an nx × nt grid."""
    return n_particles * bytes_per_particle(itemsize) + grid_bytes(nx, nt, itemsize, copies)


def particle_parts(n_particles: int, nx: int, nt: int, backend: Backend, copies: int = 1
                   ) -> tuple[dict[str, int], str]:
    """(bytes by the parameters they grow with, what is solved) of a particle FP solve, for
    :func:`mfgwork.core.memory.check_parts`: the particles and the node masses."""
    itemsize = 4 if backend.dtype == "float32" else 8
    per = bytes_per_particle(itemsize)
    return ({"n_particles": n_particles * per, "nx, nt": grid_bytes(nx, nt, itemsize, copies)},
            f"a particle solve with n_particles={n_particles}, nx={nx}, nt={nt} ({per} bytes "
            f"per particle in {backend.dtype} plus the node masses of {nt + 1} levels of "
            f"{nx} nodes)")


def check_fits(n_particles: int, nx: int, nt: int, backend: Backend, copies: int = 1,
               max_memory: object = None) -> int:
    """The estimate in bytes (:func:`particle_parts`); refused by
    :func:`mfgwork.core.memory.check_parts` when it exceeds the free memory (or
    ``max_memory``), blaming the particles or the grid, whichever takes more."""
    parts, what = particle_parts(n_particles, nx, nt, backend, copies)
    return memory.check_parts(parts, backend, max_memory=max_memory, what=what)
