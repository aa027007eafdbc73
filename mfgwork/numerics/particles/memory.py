"""Memory needed by a particle solve, checked against what the device has before any work.

Only the current positions live in memory (never trajectories): per particle the position,
the Gaussian increments and the temporaries of one step, plus the node masses of every time
level. The estimate is deliberately generous (a few temporaries more than the kernels keep
alive at once).
"""

from __future__ import annotations

import os

from ...core.backend import Backend
from ...core.errors import ParameterError

HOST_FRACTION = 0.8  # share of the host's available memory a CPU run may plan to use


def bytes_per_particle(itemsize: int) -> int:
    """Position, increment, cell index and fraction, drift temporaries, fixed-point weights."""
    return 8 * itemsize + 48


def estimate_bytes(n_particles: int, nx: int, nt: int, itemsize: int, copies: int = 1) -> int:
    """Peak bytes of a particle FP solve with ``n_particles`` on an nx × nt grid."""
    grids = (nt + 1) * nx * (8 * copies + 4 * itemsize)
    return n_particles * bytes_per_particle(itemsize) + grids


def available_bytes(backend: Backend) -> int | None:
    """Free memory on the backend's device (None if it cannot be told)."""
    if backend.name == "torch" and backend.kind == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(backend.native_device)
        idx = backend.native_device.index or 0
        return free + torch.cuda.memory_reserved(idx) - torch.cuda.memory_allocated(idx)
    if backend.name == "torch" and backend.kind == "mps":
        import torch

        recommended = getattr(torch.mps, "recommended_max_memory", None)
        if recommended is None:
            return None
        return recommended() - torch.mps.driver_allocated_memory()
    return _host_available()


def _host_available() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(HOST_FRACTION * int(line.split()[1]) * 1024)
    except OSError:
        pass
    try:
        return int(HOST_FRACTION * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(n_particles: int, nx: int, nt: int, backend: Backend, copies: int = 1) -> int:
    """The estimate in bytes; raises :class:`ParameterError` if it exceeds the free memory."""
    itemsize = 4 if backend.dtype == "float32" else 8
    need = estimate_bytes(n_particles, nx, nt, itemsize, copies)
    free = available_bytes(backend)
    if free is not None and need > free:
        raise ParameterError(
            f"n_particles={n_particles} does not fit: a particle solve needs about "
            f"{need / 2**30:.3g} GiB ({bytes_per_particle(itemsize)} bytes per particle in "
            f"{backend.dtype} plus the node masses of {nt + 1} levels) but about "
            f"{free / 2**30:.3g} GiB is free on {backend.name}/{backend.device}; "
            f"use at most about {max(1, int(free / need * n_particles)):.3g} particles")
    return need
