"""Memory a computation will need, checked against what the device has before it allocates.

The one estimator of every entry point (solves, batches, scans, the two-state game, N-player
simulations, particles): each builds its estimate from parts, each part keyed by the
parameters it grows with, and :func:`check_parts` decides (:func:`check_fdm` for the
finite-difference solves, of the parts :func:`fdm_parts` gives; a
:class:`~mfgwork.pipeline.Discretization` declares its parts to the pipeline, which checks
them; the particle FP solver adds its per-particle bytes in
:mod:`mfgwork.numerics.particles.memory`). A solver that holds more than these estimates
declares its own bytes per problem, which count instead where larger: the batched Newton on
a device (:func:`mfgwork.numerics.batch_newton.device_bytes`), also the figure a scan's
blocks are sized by (:func:`batch_that_fits`).
Every estimate counts arrays of the working dtype on the space-time grid; the finite-difference
coefficients below were measured with ``tracemalloc`` (a generic problem with Anderson depth 5
peaks at 36 arrays of (nt + 1) × nx floats, Santa Fe, whose coupling state is A(t), at 6; the
two-state game at 62 floats per time step).
:func:`check_parts` refuses an estimate made of parts, naming the parameter behind the
largest part, in microseconds: sizes are products of Python integers, never allocated.
The limit is the free memory of the device (80 % of the host's available memory on the CPU),
or ``max_memory`` (bytes, or text such as ``"4 GiB"``; default: the environment variable
``MFGWORK_MAX_MEMORY``) when that is lower.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .errors import ParameterError

HOST_FRACTION = 0.8  # share of the host's available memory a CPU run may plan to use
ENV_MAX_MEMORY = "MFGWORK_MAX_MEMORY"
#: Arrays shaped like U held by a finite-difference solve: U, M, their next iterates, the
#: running cost and the sweeps' level lists.
FDM_GRID_ARRAYS = 6
#: Floats per time step of the two-state game besides the Anderson history: U, M, the sweeps'
#: temporaries and the iterates (measured 62 in all with depth 5, see the module docstring).
TWO_STATE_LEVEL_FLOATS = 40
#: Anderson's default depth: a larger depth is blamed for the memory it adds.
DEFAULT_DEPTH = 5
#: Bytes the dense tangent Jacobian of one problem may take (8 (nt + 1) nx nt: its tangent
#: sweeps on grids up to about 400 × 400): the Newton continuation of single float64 solves
#: and the dense Newton system of populations are used only within it.
NEWTON_MEMORY = 2**29
#: Share of the free memory one block of a scan may plan to use (the device's for its
#: batch, the host's for the block's results): room for the rest of the process and for the
#: blocks of other workers; a scan's GPU throughput was measured with it.
BLOCK_FRACTION = 0.5
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}


def format_bytes(n: float) -> str:
    """``n`` bytes in GiB, MiB or KiB, three significant digits (any size: beyond 10^12
    GiB as a power of ten)."""
    if n >= 2**30 * 1e12:
        return f"10^{len(str(int(n))) - 1} bytes"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def parse_bytes(name: str, value: object) -> int:
    """A memory size given as bytes (an integer > 0) or text like ``"512 MiB"``, ``"4GB"``."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", value)
        number = float(m[1]) * _UNITS.get(m[2].lower(), 0) if m else 0.0
        if m and m[2].lower() in _UNITS and 0 < number < math.inf:
            return max(1, int(number))
    elif isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise ParameterError(f"{name}={value!r} is invalid: must be a number of bytes > 0 or a "
                         "size such as '512 MiB' or '4 GB'")


def available_bytes(backend: Any) -> int | None:
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
    return host_available()


def host_available() -> int | None:
    """:data:`HOST_FRACTION` of the host's available memory (None if it cannot be told)."""
    try:
        fd = os.open("/proc/meminfo", os.O_RDONLY)
        try:
            text = os.read(fd, 1 << 16)
        finally:
            os.close(fd)
        at = text.find(b"\nMemAvailable:")
        if at >= 0:
            return int(HOST_FRACTION * int(text[at:].split(maxsplit=2)[1]) * 1024)
    except OSError:
        pass
    try:
        return int(HOST_FRACTION * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def limit(backend: Any, max_memory: object = None) -> tuple[int | None, Callable[[], str]]:
    """The memory a computation may use on ``backend`` and where that limit comes from (said
    by the function returned, called only to refuse)."""
    if max_memory is None and os.environ.get(ENV_MAX_MEMORY):
        cap, origin = parse_bytes(ENV_MAX_MEMORY, os.environ[ENV_MAX_MEMORY]), ENV_MAX_MEMORY
    elif max_memory is not None:
        cap, origin = parse_bytes("max_memory", max_memory), "max_memory"
    else:
        cap, origin = None, ""
    free = available_bytes(backend)
    if cap is not None and (free is None or cap <= free):
        return cap, lambda: f"the limit {origin} is {format_bytes(cap)}"
    return free, lambda: (f"about {format_bytes(free or 0)} is free on "
                          f"{backend.name}/{backend.device}")


def fdm_bytes(nx: int, nt: int, itemsize: int, coupling_size: int, depth: int = 0,
              batch: int = 1) -> int:
    """Peak bytes of a finite-difference Picard solve: the grid arrays and, per coupling
    state of ``coupling_size`` values, the iterate, its image, Anderson's ``depth + 1``
    past states and residuals with their differences and the mixing temporaries."""
    grid = FDM_GRID_ARRAYS * (nt + 1) * nx
    return batch * itemsize * grid + anderson_bytes(coupling_size, itemsize, depth, batch)


def anderson_bytes(coupling_size: int, itemsize: int, depth: int = 0, batch: int = 1) -> int:
    """The coupling states of a fixed-point iteration: the iterate, its image, Anderson's
    ``depth + 1`` past states and residuals with their differences, the mixing temporaries."""
    return batch * itemsize * (4 * depth + 10) * coupling_size


def dense_tangent_bytes(nx: int, nt: int) -> int:
    """Bytes of one problem's dense tangent Jacobian in float64 (nt + 1) × nx × nt: within
    :data:`NEWTON_MEMORY` where the CPU paths may build it."""
    return 8 * (nt + 1) * nx * nt


def batch_that_fits(budget: float, per_problem: int) -> int:
    """The most problems of ``per_problem`` bytes within ``budget`` bytes: the largest batch
    :func:`check_fdm` accepts under the limit ``budget`` where ``per_problem`` is what the
    solver declares, and the device share of a scan's block
    (``budget`` = :data:`BLOCK_FRACTION` of the free memory)."""
    return int(budget // per_problem)


def two_state_bytes(nt: int, depth: int = 0) -> int:
    """Peak bytes of a two-state solve on ``nt`` steps (float64)."""
    return 8 * TWO_STATE_LEVEL_FLOATS * (nt + 1) + anderson_bytes(nt, 8, depth)


def fdm_parts(nx: int, nt: int, backend: Any, sizes: Sequence[int], depth: int,
              batch: int = 1, per_problem: int = 0) -> tuple[dict[str, int], str]:
    """(parts, what) of a finite-difference solve of ``batch`` problems whose coupling states
    hold ``sizes`` values, with Anderson mixing of ``depth`` (0: none), for
    :func:`check_parts`: the grid (and batch) part, and the depth's beyond
    :data:`DEFAULT_DEPTH`. ``per_problem``: the bytes per problem that the solver declares
    for itself (the batched Newton on a device), counted instead of the grid arrays and
    coupling states where larger."""
    itemsize = 4 if backend.dtype == "float32" else 8
    size = max(sizes)
    base = fdm_bytes(nx, nt, itemsize, size, min(depth, DEFAULT_DEPTH), batch)
    extra = fdm_bytes(nx, nt, itemsize, size, depth, batch) - base
    what = (f"a solve on an nx={nx} x nt={nt} grid" if batch == 1 else
            f"a batch of {batch} solves on an nx={nx} x nt={nt} grid")
    grid_key = "nx, nt" if batch == 1 else "nx, nt or the batch size"
    return {grid_key: max(base, batch * per_problem), "the Anderson depth": extra}, what


def check_fdm(nx: int, nt: int, backend: Any, sizes: Sequence[int], depth: int,
              max_memory: object = None, batch: int = 1, what: str = "",
              per_problem: int = 0) -> int:
    """Bytes of a finite-difference solve (:func:`fdm_parts`), refused by
    :func:`check_parts` when they do not fit: blaming the depth beyond
    :data:`DEFAULT_DEPTH`, else the grid (and batch); ``what``: the solve as the refusal
    names it (default: its grid and batch)."""
    parts, default = fdm_parts(nx, nt, backend, sizes, depth, batch, per_problem)
    return check_parts(parts, backend, what=what or default, max_memory=max_memory)


def check_parts(parts: Mapping[str, int], backend: Any, *, what: str,
                max_memory: object = None) -> int:
    """The sum of ``parts`` (bytes, keyed by the parameters each part grows with) if it fits
    the limit of :func:`limit`; else :class:`ParameterError` naming the parameters of the
    largest part first, with every part's size and the limit."""
    need = sum(parts.values())
    available, where = limit(backend, max_memory)
    if available is None or need <= available:
        return need
    blame = max(parts, key=lambda k: parts[k])
    detail = ", ".join(f"{k}: {format_bytes(v)}" for k, v in parts.items() if v)
    raise ParameterError(f"{blame} too large: {what} needs about {format_bytes(need)} "
                         f"({detail}) but {where()}: lower {blame} (or raise the limit: max_memory "
                         f"where taken, or ${ENV_MAX_MEMORY})")
