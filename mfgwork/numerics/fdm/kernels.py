"""Which kernels run the finite-difference scheme: one table for every (backend, device).

Each entry names the HJB sweep, the FP sweep and the tridiagonal solve that
:class:`~mfgwork.numerics.fdm.sweeps.FiniteDifferences` uses there. A key lists its entries in
order of preference; the first whose requirement is met is chosen.

=====================  ====================================================================
(backend, device)      kernels
=====================  ====================================================================
numpy, cpu             compiled loops (numba), LAPACK ``gtsv``
torch, cpu             compiled loops on zero-copy NumPy views, LAPACK ``gtsv``
torch, cuda            fused Triton sweeps (time loop and Newton inside one launch); without
                       Triton: array-API sweeps with parallel cyclic reduction, CUDA graphs
torch, mps             array-API sweeps with parallel cyclic reduction
torch, mps-emulation   the MPS path on the CPU (float32)
=====================  ====================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ...core.backend import Backend
from .tridiag import TridiagonalSolver, solve_lapack, solve_lapack_torch, solve_pcr_zero_ends


class FDKernels(NamedTuple):
    """The kernels of the scheme on one (backend, device).

    ``hjb(fd, U_T, F, guess) -> U`` and ``fp(fd, U, mu0) -> mu`` (cell masses) are methods of
    :class:`~mfgwork.numerics.fdm.sweeps.FiniteDifferences`, referred to by name here so that
    this table stays free of the solver's imports.
    """

    name: str
    hjb: str
    fp: str
    tridiagonal: TridiagonalSolver
    requires: Callable[[], bool] = lambda: True

    def bind(self, fd: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """The HJB and FP sweeps of this entry bound to the solver ``fd``."""
        return getattr(fd, self.hjb), getattr(fd, self.fp)


def _triton_installed() -> bool:
    from ..particles.triton_kernels import triton_available

    return triton_available()


COMPILED_LOOPS = FDKernels("compiled loops (numba)", "_hjb_host", "_fp_host", solve_lapack)
COMPILED_LOOPS_TORCH = COMPILED_LOOPS._replace(tridiagonal=solve_lapack_torch)
TRITON = FDKernels("fused Triton sweeps", "_hjb_fused", "_fp_fused", solve_pcr_zero_ends,
                   requires=_triton_installed)
ARRAY_API = FDKernels("array-API sweeps (parallel cyclic reduction)", "_hjb_accelerated",
                      "_fp_accelerated", solve_pcr_zero_ends)

KERNELS: dict[tuple[str, str], tuple[FDKernels, ...]] = {
    ("numpy", "cpu"): (COMPILED_LOOPS,),
    ("torch", "cpu"): (COMPILED_LOOPS_TORCH,),
    ("torch", "cuda"): (TRITON, ARRAY_API),
    ("torch", "mps"): (ARRAY_API,),
    ("torch", "mps-emulation"): (ARRAY_API,),
}


def device_key(backend: Backend) -> tuple[str, str]:
    """The table key of ``backend``: (name, "cpu" | "cuda" | "mps" | "mps-emulation")."""
    return backend.name, "mps-emulation" if backend.emulate_mps else backend.kind


def fdm_kernels(backend: Backend) -> FDKernels:
    """The finite-difference kernels for ``backend`` (the first usable entry of its key)."""
    for entry in KERNELS[device_key(backend)]:
        if entry.requires():
            return entry
    raise LookupError(f"no finite-difference kernels usable for {device_key(backend)}")
