"""Which kernels run the particle FP solver: one table of strategy objects for every
(backend, device), in the style of the finite-difference kernel table.

A key lists its paths in order of preference; the first usable one is chosen (``fused=False``
skips the fused Triton path, ``fused=True`` insists on it).

=====================  ====================================================================
(backend, device)      path
=====================  ====================================================================
numpy, cpu             compiled loops (numba): sampling, then one step + CIC deposit per time
                       step, particle by particle
torch, cpu             torch tensor ops (optionally the step through ``torch.compile``)
torch, cuda            fused Triton step + deposit, one launch per time step; without Triton
                       the torch tensor ops; either recorded once as a CUDA graph
torch, mps             torch tensor ops
torch, mps-emulation   the MPS path on the CPU (float32)
=====================  ====================================================================

A path holds no state: what a solve keeps (kernels, the generator, buffers) lives on the
:class:`~mfgwork.numerics.particles.ParticleFP` it serves, which :meth:`ParticlePath.prepare`
equips and :meth:`ParticlePath.masses` runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.backend import Backend
from ...problems.hamiltonians import Hamiltonian


class ParticlePath:
    """The kernels of the particle solver on one (backend, device)."""

    name = "particle path"
    fused = False

    def usable(self, backend: Backend) -> bool:
        """Whether this path can run on ``backend``."""
        return True

    def prepare(self, fp: Any) -> None:
        """Equip the solver ``fp`` with what this path needs (kernels, generator)."""

    def masses(self, fp: Any, U: Any, m0: Any) -> Any:
        """The accumulated node masses of the levels 0..nt of one FP solve of ``fp``."""
        raise NotImplementedError

    def node_masses(self, fp: Any, masses: Any) -> Any:
        """Node masses μ (nt + 1, nx) from what :meth:`masses` accumulated."""
        return masses


class CompiledLoops(ParticlePath):
    """NumPy: numba loops over the particles, a PCG64 generator restarted from the seed."""

    name = "compiled loops (numba)"

    def masses(self, fp: Any, U: Any, m0: Any) -> Any:
        from .numba_kernels import cic_deposit, sample_offsets, step_deposit
        U, m0 = np.asarray(U), np.asarray(m0)
        g, n = fp.grid, fp.n_particles
        dtype = np.dtype(fp.backend.dtype)
        rng = np.random.Generator(np.random.PCG64(fp.seed))
        y = sample_offsets(m0, rng.random(n, dtype=dtype), g.h)
        masses = np.zeros((g.nt + 1, g.nx))
        inv_h = (g.nx - 1) / fp.length
        cic_deposit(y, inv_h, masses[0])
        b = nodal_drift(U[:-1], g.h, fp.hamiltonian, g.x, fp._density).astype(dtype)
        xi = np.empty(n, dtype=dtype)
        consts = (inv_h, g.dt, fp.noise, fp.length)
        for k in range(g.nt):
            rng.standard_normal(dtype=dtype, out=xi)
            step_deposit(y, xi, b[k], *consts, masses[k + 1])
        fp._offsets = y
        return masses


class TorchOps(ParticlePath):
    """torch tensor ops on any torch device, a torch generator restarted from the seed; on
    CUDA the whole solve is recorded once as a CUDA graph (see ``ParticleFP``)."""

    name = "torch tensor ops"

    def prepare(self, fp: Any) -> None:
        import torch

        from .torch_kernels import TorchKernels

        g, be = fp.grid, fp.backend
        fp.kernels = TorchKernels(g.nx, g.h, fp.length, fp.n_particles, be, fp.deposit_copies)
        fp.generator = torch.Generator(device=be.native_device)
        fp._advance = fp.kernels.advance
        if fp.compile_step:
            fp._advance = torch.compile(fp.kernels.advance, fullgraph=True, dynamic=False)

    def masses(self, fp: Any, U: Any, m0: Any) -> Any:
        if fp.use_cuda_graph:
            return fp._masses_graphed(lambda U, m0: self.run(fp, U, m0), U, m0)
        fp.generator.manual_seed(fp.seed)
        return self.run(fp, U, m0)

    def run(self, fp: Any, U: Any, m0: Any) -> Any:
        """The node masses of an FP solve; the generator must be seeded."""
        import torch

        g, k, n = fp.grid, fp.kernels, fp.n_particles
        y = k.sample(m0, torch.rand(n, generator=fp.generator, **_options(fp)))
        masses = k.mass_buffer(g.nt + 1)
        i, f = k.locate(y)
        k.deposit(i, f, masses[0])
        b0, db = k.drift_tables(U, fp.hamiltonian, fp._x, fp._density)
        xi = torch.empty(n, **_options(fp))
        for step in range(g.nt):
            self.normals(fp, step, xi)
            i, f, *cic = fp._advance_checked(y, xi, b0[step], db[step], i, f, g.dt, fp.noise)
            k.scatter(masses[step + 1], *cic)
        fp._offsets = y
        return masses

    def normals(self, fp: Any, step: int, out: Any) -> None:
        """``out`` filled with the Gaussian increments of time step ``step`` (from the
        solver's seeded generator)."""
        import torch

        torch.randn(out.shape, generator=fp.generator, out=out)

    def node_masses(self, fp: Any, masses: Any) -> Any:
        return fp.kernels.node_masses(masses)


class FusedTriton(TorchOps):
    """One Triton kernel per time step (step + CIC deposit, see :mod:`.triton_kernels`)."""

    name = "fused Triton step + deposit"
    fused = True

    def usable(self, backend: Backend) -> bool:
        from .triton_kernels import fused_available

        return fused_available(backend)

    def prepare(self, fp: Any) -> None:
        from .triton_kernels import FusedKernels

        super().prepare(fp)
        fp._fused_kernels = FusedKernels(fp.grid.nx, fp.length, fp.n_particles, fp.grid.dt,
                                         fp.noise, fp.weights, fp.deposit_copies, fp.seed)

    def run(self, fp: Any, U: Any, m0: Any) -> Any:
        import torch

        g, fk = fp.grid, fp._fused_kernels
        y = fp.kernels.sample(m0, torch.rand(fp.n_particles, generator=fp.generator,
                                             **_options(fp)))
        masses = fk.mass_buffer(g.nt + 1)
        fk.deposit(y, masses[0])
        b0, db = fp.kernels.drift_tables(U, fp.hamiltonian, fp._x, fp._density)
        for step in range(g.nt):
            fk.step_deposit(y, b0[step], db[step], masses[step + 1], step)
        fp._offsets = y
        return masses

    def node_masses(self, fp: Any, masses: Any) -> Any:
        return fp._fused_kernels.node_masses(masses)


def nodal_drift(U: np.ndarray, h: float, hamiltonian: Hamiltonian | None = None,
                x: np.ndarray | None = None, density: Any = None) -> np.ndarray:
    """b = −∂p H(x, ∂x u, m) at the nodes of each row of U (default H = ½|p|²: b = −∂x u):
    ∂x u by central differences, b = 0 at the walls; ``density`` (rows like U's) where H
    depends on m."""
    b = np.zeros_like(U)
    grad = (U[..., 2:] - U[..., :-2]) / (2 * h)
    if hamiltonian is None:
        b[..., 1:-1] = -grad
    else:
        m = None if density is None else np.asarray(density)[..., 1:-1]
        b[..., 1:-1] = -hamiltonian.dp(x[1:-1], grad, m, np)
    return b


def _options(fp: Any) -> dict[str, Any]:
    return {"dtype": fp.backend.native_dtype, "device": fp.backend.native_device}


COMPILED_LOOPS = CompiledLoops()
TORCH_OPS = TorchOps()
FUSED_TRITON = FusedTriton()

PATHS: dict[tuple[str, str], tuple[ParticlePath, ...]] = {
    ("numpy", "cpu"): (COMPILED_LOOPS,),
    ("torch", "cpu"): (TORCH_OPS,),
    ("torch", "cuda"): (FUSED_TRITON, TORCH_OPS),
    ("torch", "mps"): (TORCH_OPS,),
    ("torch", "mps-emulation"): (TORCH_OPS,),
}


def device_key(backend: Backend) -> tuple[str, str]:
    """The table key of ``backend``: (name, "cpu" | "cuda" | "mps" | "mps-emulation")."""
    return backend.name, "mps-emulation" if backend.emulate_mps else backend.kind


def particle_path(backend: Backend, fused: bool | None = None) -> ParticlePath:
    """The particle path for ``backend``: the first usable entry of its key (``fused``:
    False skips fused paths; True takes only those; None: either)."""
    for path in PATHS[device_key(backend)]:
        if (fused is None or path.fused == fused) and path.usable(backend):
            return path
    raise LookupError(f"no particle path usable for {device_key(backend)} with fused={fused}")
