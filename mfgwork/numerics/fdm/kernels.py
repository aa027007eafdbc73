"""Which kernels run the finite-difference scheme: one table of strategies for every
(backend, device).

Each entry is a strategy object (:class:`FDKernels`) holding the HJB sweep, the FP sweep and
the tridiagonal solve that :class:`~mfgwork.numerics.fdm.sweeps.FiniteDifferences` runs there,
and declaring which Hamiltonians it carries: the compiled loops carry every model whose value
can be traced (:mod:`mfgwork.problems.symbolic`: one template scheme with the model's
generated functions, its fields and the frozen density as arguments), the fused Triton sweeps
every traced model whose expression Triton can print (the same mechanism: templates with the
model's generated ``@triton.jit`` functions), the array-API sweeps take any
:class:`~mfgwork.problems.hamiltonians.Hamiltonian`. A key lists its entries in
order of preference; the first that carries the problem's Hamiltonian and whose requirement
is met is chosen, so every model runs on every backend and device.

=====================  ====================================================================
(backend, device)      kernels (Hamiltonians carried)
=====================  ====================================================================
numpy, cpu             compiled loops (numba), LAPACK ``gtsv`` (every traced model);
                       array-API sweeps with LAPACK (any)
torch, cpu             compiled loops on zero-copy NumPy views, LAPACK ``gtsv`` (every
                       traced model); array-API sweeps with LAPACK (any)
torch, cuda            fused Triton sweeps (time loop and Newton inside one launch; every
                       traced model that Triton can print);
                       array-API sweeps with parallel cyclic reduction, CUDA graphs (any)
torch, mps             array-API sweeps with parallel cyclic reduction (any)
torch, mps-emulation   the MPS path on the CPU (float32; any)
=====================  ====================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...core.backend import Backend
from ...problems.hamiltonians import Hamiltonian, Quadratic
from .tridiag import (
    TridiagonalSolver,
    solve_lapack,
    solve_lapack_torch,
    solve_pcr,
    solve_pcr_zero_ends,
)


@dataclass(frozen=True)
class FDKernels:
    """The kernels of the scheme on one (backend, device): a strategy whose :meth:`hjb`
    (``U_T, F, guess, density -> U``) and :meth:`fp` (``U, mu0, density -> mu``, cell masses)
    run the sweeps for a :class:`~mfgwork.numerics.fdm.sweeps.FiniteDifferences` solver,
    with the tridiagonal solve ``tridiagonal``. ``carried``: the Hamiltonian classes its
    kernels have built in (exact types; None: any Hamiltonian). ``cuda_graphs``: its sweeps
    may be recorded as CUDA graphs. ``requires``: whether what the kernels need is
    installed."""

    name: str
    tridiagonal: TridiagonalSolver
    carried: tuple[type[Hamiltonian], ...] | None = None
    cuda_graphs: bool = False
    requires: Callable[[], bool] = lambda: True

    def carries(self, hamiltonian: Hamiltonian) -> bool:
        """Whether these kernels run the scheme of ``hamiltonian``."""
        return self.carried is None or type(hamiltonian) in self.carried

    @property
    def carries_what(self) -> str:
        """The Hamiltonians carried, in words."""
        return ("any Hamiltonian" if self.carried is None
                else ", ".join(c.__name__ for c in self.carried))

    def hjb(self, fd: Any, U_T: Any, F: Any, guess: Any, density: Any) -> Any:
        """The generic sweep: adaptive Newton per time step (host reads allowed)."""
        return fd._hjb_array(U_T, F, guess, density=density)[0]

    def fp(self, fd: Any, U: Any, mu0: Any, density: Any) -> Any:
        return fd._fp_array(U, mu0, density)


@dataclass(frozen=True)
class CompiledLoops(FDKernels):
    """numba loops for single problems, every model whose value can be traced (batches: the
    array-API sweeps with LAPACK)."""

    def carries(self, hamiltonian: Hamiltonian) -> bool:
        return hamiltonian.traced() is not None

    @property
    def carries_what(self) -> str:
        return "the models whose value can be traced"

    def hjb(self, fd: Any, U_T: Any, F: Any, guess: Any, density: Any) -> Any:
        if F.ndim != 2:
            return super().hjb(fd, U_T, F, guess, density)
        return fd._hjb_compiled(U_T, F, guess, density)

    def fp(self, fd: Any, U: Any, mu0: Any, density: Any) -> Any:
        if U.ndim != 2:
            return super().fp(fd, U, mu0, density)
        return fd._fp_compiled(U, mu0, density)


@dataclass(frozen=True)
class FusedTriton(FDKernels):
    """Batched Triton sweeps, the time loop and Newton inside one launch, for every model
    whose value can be traced and printed as Triton code."""

    def carries(self, hamiltonian: Hamiltonian) -> bool:
        from .triton_sweeps import model_kernels

        return self.requires() and model_kernels(hamiltonian) is not None

    @property
    def carries_what(self) -> str:
        return "the models whose value can be traced and printed as Triton code"

    def hjb(self, fd: Any, U_T: Any, F: Any, guess: Any, density: Any) -> Any:
        return fd._hjb_fused(U_T, F, guess, density)

    def fp(self, fd: Any, U: Any, mu0: Any, density: Any) -> Any:
        return fd._fp_fused(U, mu0, density)


@dataclass(frozen=True)
class AcceleratedArrays(FDKernels):
    """Array-API sweeps for devices: a fixed number of Newton steps per time step (checked
    once per sweep), FP matrices reduced before the sweep, CUDA graphs on CUDA."""

    cuda_graphs: bool = True

    def hjb(self, fd: Any, U_T: Any, F: Any, guess: Any, density: Any) -> Any:
        return fd._hjb_accelerated(U_T, F, guess, density)

    def fp(self, fd: Any, U: Any, mu0: Any, density: Any) -> Any:
        return fd._fp_accelerated(U, mu0, density)


COMPILED_LOOPS = CompiledLoops("compiled loops (numba)", solve_lapack)
COMPILED_LOOPS_TORCH = CompiledLoops("compiled loops (numba)", solve_lapack_torch)
HOST_ARRAYS = FDKernels("array-API sweeps (LAPACK)", solve_lapack)
HOST_ARRAYS_TORCH = FDKernels("array-API sweeps (LAPACK)", solve_lapack_torch)
def _triton_installed() -> bool:
    from ..particles.triton_kernels import triton_available

    return triton_available()


TRITON = FusedTriton("fused Triton sweeps", solve_pcr_zero_ends, requires=_triton_installed)
ARRAY_API = AcceleratedArrays("array-API sweeps (parallel cyclic reduction)", solve_pcr_zero_ends)

KERNELS: dict[tuple[str, str], tuple[FDKernels, ...]] = {
    ("numpy", "cpu"): (COMPILED_LOOPS, HOST_ARRAYS),
    ("torch", "cpu"): (COMPILED_LOOPS_TORCH, HOST_ARRAYS_TORCH),
    ("torch", "cuda"): (TRITON, ARRAY_API),
    ("torch", "mps"): (ARRAY_API,),
    ("torch", "mps-emulation"): (ARRAY_API,),
}


def device_key(backend: Backend) -> tuple[str, str]:
    """The table key of ``backend``: (name, "cpu" | "cuda" | "mps" | "mps-emulation")."""
    return backend.name, "mps-emulation" if backend.emulate_mps else backend.kind


def fdm_kernels(backend: Backend, hamiltonian: Hamiltonian | None = None) -> FDKernels:
    """The finite-difference kernels for ``backend``: the first usable entry of its key that
    carries ``hamiltonian`` (default ½|p|²)."""
    hamiltonian = Quadratic() if hamiltonian is None else hamiltonian
    for entry in KERNELS[device_key(backend)]:
        if entry.carries(hamiltonian) and entry.requires():
            return entry
    raise LookupError(f"no finite-difference kernels usable for {device_key(backend)} "
                      f"and {hamiltonian!r}")


def tridiagonal_solver(backend: Backend, *, zero_ends: bool = False) -> TridiagonalSolver:
    """The tridiagonal kernel for ``backend`` (as named by :data:`KERNELS`);
    ``zero_ends``: the caller guarantees ``lower[..., 0] == upper[..., -1] == 0``, as the
    scheme's bands do (PCR then saves two kernels per solve)."""
    solve = fdm_kernels(backend).tridiagonal
    return solve_pcr if solve is solve_pcr_zero_ends and not zero_ends else solve
