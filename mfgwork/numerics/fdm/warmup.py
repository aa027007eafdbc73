"""Compiling the finite-difference kernels of the NumPy backend before a solve is timed.

The NumPy backend runs its HJB and FP sweeps as Numba kernels, compiled at their first call
in a process (or loaded from Numba's on-disk cache, after the first run). :func:`compile_kernels`
makes that first call on a tiny grid, so that a solve can report the compile time apart from
its phases: ``res.timings["compile"]`` (0 for every later solve in the process). The
compiled loops of each model structure are separate kernels (written and cached on disk by
:func:`.numba_kernels.compiled_model`), compiled or loaded for the model solved: the time
includes generating the module. :func:`compile_tangent` does the same for Newton's method on
the coupling state (the step of its state machine, and on the CPU its tangent sweeps).
"""

from __future__ import annotations

import time

import numpy as np

from ...core.backend import Backend
from ...core.grid import Grid
from ...problems.hamiltonians import Hamiltonian
from .kernels import CompiledLoops, fdm_kernels
from .operators import QUADRATIC
from .sweeps import FiniteDifferences

#: (dtype, model structure) whose kernels this process has compiled or loaded
_compiled: set[tuple[str, object]] = set()


def compile_kernels(backend: Backend, hamiltonian: Hamiltonian = QUADRATIC) -> float:
    """Seconds spent compiling (or loading) the NumPy sweeps of ``hamiltonian``'s model in
    ``backend``'s dtype; 0.0 when they already were in this process, when ``backend`` is not
    NumPy, or when no compiled loops carry the model (it runs the array-API sweeps)."""
    if (backend.name != "numpy"
            or not isinstance(fdm_kernels(backend, hamiltonian), CompiledLoops)):
        return 0.0
    traced = hamiltonian.traced()
    key = (backend.dtype, traced.structure.key if traced is not None else type(hamiltonian))
    if key in _compiled:
        return 0.0
    started = time.perf_counter()
    grid = Grid(-1.0, 1.0, 5, 1.0, 2)
    fd = FiniteDifferences(grid, 0.1, backend, hamiltonian=hamiltonian)
    zeros = np.zeros((grid.nt, grid.nx), dtype=backend.dtype)
    density = (np.full((grid.nt, grid.nx), 0.5, dtype=backend.dtype),) \
        if hamiltonian.depends_on_m else ()
    U = fd.solve_hjb(zeros[0], zeros, None, *density)
    fd.solve_fp(fd.solve_hjb(zeros[0], zeros, U, *density),
                np.full(grid.nx, 0.5, dtype=backend.dtype), *density)
    _compiled.add(key)
    return time.perf_counter() - started


def compile_tangent(backend: Backend, hamiltonian: Hamiltonian = QUADRATIC,
                    size: int = 1) -> float:
    """Seconds spent compiling (or loading) the compiled parts of Newton's method on the
    coupling state of ``size`` problems: the step of its state machine
    (:func:`..batch_newton.compile_step`, where :func:`..batch_newton.state_machine` runs it
    compiled) and, on the CPU, the tangent sweeps of its matrix-free systems and their
    conjugate gradients (:mod:`.tangent`, whatever the backend's dtype: the Newton system is
    float64) with ``hamiltonian``'s model's loop of their operands, on a 5 × 2 grid with the
    argument types of a solve's (devices solve their Newton systems in torch); 0.0 once done
    in this process."""
    from ..batch_newton import advance, compile_step, state_machine
    from ..potential import product_operands, tangent_operands
    from .tangent import newton_direction

    traced = hamiltonian.traced()
    key = ("float64", "tangent", traced.structure.key if traced is not None
           else type(hamiltonian))
    step = compile_step() if state_machine(backend, size) is advance else 0.0
    if backend.kind != "cpu" or backend.emulate_mps or key in _compiled:
        return step
    started = time.perf_counter()
    grid = Grid(-1.0, 1.0, 5, 1.0, 2)
    density = np.full((grid.nt, grid.nx), 0.5) if hamiltonian.depends_on_m else None
    ops = tangent_operands(np.zeros((grid.nt + 1, grid.nx)),
                           np.full((grid.nt + 1, grid.nx), 0.2), np.ones(grid.nx), 0.1, grid,
                           hamiltonian, density)
    newton_direction(*product_operands(ops), grid.dt, -np.ones(grid.nt), np.ones(grid.nt), 0.1,
                     1)
    _compiled.add(key)
    return step + time.perf_counter() - started
