"""N agents under a fixed feedback: the exact count of those above a cut at every time level.

The dynamics are those of :class:`~mfgwork.numerics.particles.ParticleFP` (the same kernels):

    X^{n+1} = fold(X^n + b(t_n, X^n) Δt + σ √Δt ξ^n),   b = −∂p H(x, ∂x u, m) (∂x u by central
    differences at the nodes, 0 at the walls, linear in x; ½|p|²: b = −∂x u; where H depends
    on m, the step from t_n sees m^{n+1}),   X^0 ~ m0 (piecewise linear, inverse CDF),

but instead of depositing a density, each level records how many of the N agents lie above
``cut`` (strictly): an exact integer count, no histogram. ``n_samples`` independent groups of
N agents are simulated; sample s is drawn from its own seed (``SeedSequence(seed)``'s s-th
child on NumPy, the chunk's child on torch), so a run is reproducible on every backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.backend import Backend
from ...core.errors import ParameterError, check_int
from ...core.grid import Grid
from ...problems.hamiltonians import Hamiltonian
from .memory import check_fits
from .paths import nodal_drift

CHUNK_PARTICLES = 2**24  # torch: samples are simulated together up to this many agents


def sample_seeds(seed: int, n: int) -> list[int]:
    """n independent 63-bit seeds derived from ``seed`` (``numpy.random.SeedSequence``)."""
    return [int(s.generate_state(2, np.uint64)[0] >> np.uint64(1))
            for s in np.random.SeedSequence(seed).spawn(n)]


def count_above(U: Any, m0: Any, grid: Grid, sigma: float, backend: Backend, n_agents: int,
                n_samples: int, seed: int, cut: float = 0.0,
                hamiltonian: Hamiltonian | None = None, density: Any = None) -> np.ndarray:
    """Counts (n_samples, nt + 1) of agents with X > ``cut`` at each time level.

    ``U`` (nt + 1, nx) gives the feedback −∂p H(x, ∂x u, m) of ``hamiltonian`` (None: ½|p|²,
    −∂x u); ``density`` (nt, nx): the densities m^1..m^nt H sees where it depends on m (the
    mean field's); ``m0`` (nx,) the initial density. Runs on
    ``backend`` (NumPy: compiled loops, one sample after the other; torch: the tensor kernels
    of the particle solver, many samples in one batch); returns NumPy int64 counts.
    """
    n_agents = check_int("n_agents", n_agents, low=1)
    n_samples = check_int("n_samples", n_samples, low=1)
    seed = check_int("seed", seed, low=0)
    if not grid.x_min <= cut <= grid.x_max:
        raise ParameterError(f"cut={cut!r} is invalid: must lie in the domain "
                             f"[{grid.x_min:g}, {grid.x_max:g}]")
    if tuple(U.shape) != (grid.nt + 1, grid.nx):
        raise ParameterError(f"U has shape {tuple(U.shape)}: must be (nt + 1, nx) = "
                             f"({grid.nt + 1}, {grid.nx})")
    if hamiltonian is not None and hamiltonian.depends_on_m and (
            density is None or tuple(density.shape) != (grid.nt, grid.nx)):
        raise ParameterError(f"density={'None' if density is None else tuple(density.shape)} "
                             f"is invalid with hamiltonian={hamiltonian!r}, which depends on m:"
                             f" pass the densities m^1..m^nt, shape ({grid.nt}, {grid.nx})")
    model = (hamiltonian, density if hamiltonian is not None and hamiltonian.depends_on_m
             else None)
    per_chunk = max(1, min(n_samples, CHUNK_PARTICLES // n_agents))
    check_fits(n_agents * (1 if backend.name == "numpy" else per_chunk), grid.nx, grid.nt,
               backend)
    if backend.name == "numpy":
        return _counts_numpy(np.asarray(U, dtype=np.float64), np.asarray(m0), grid, sigma,
                             backend, n_agents, n_samples, seed, cut, model)
    return _counts_torch(backend.asarray(U), backend.asarray(m0), grid, sigma, backend,
                         n_agents, n_samples, per_chunk, seed, cut, model)


def _counts_numpy(U: np.ndarray, m0: np.ndarray, grid: Grid, sigma: float, backend: Backend,
                  n: int, n_samples: int, seed: int, cut: float,
                  model: tuple[Hamiltonian | None, Any]) -> np.ndarray:
    from .counting_kernels import step_count
    from .numba_kernels import sample_offsets

    dtype = np.dtype(backend.dtype)
    length = grid.x_max - grid.x_min
    consts = ((grid.nx - 1) / length, grid.dt, sigma * grid.dt**0.5, length,
              cut - grid.x_min)
    H, density = model
    density = None if density is None else np.asarray(density, dtype=np.float64)
    b = nodal_drift(U[:-1], grid.h, H, grid.x, density).astype(dtype)
    counts = np.empty((n_samples, grid.nt + 1), dtype=np.int64)
    xi = np.empty(n, dtype=dtype)
    for s, sample_seed in enumerate(sample_seeds(seed, n_samples)):
        rng = np.random.Generator(np.random.PCG64(sample_seed))
        y = sample_offsets(m0, rng.random(n, dtype=dtype), grid.h)
        counts[s, 0] = np.count_nonzero(y > consts[-1])
        for k in range(grid.nt):
            rng.standard_normal(dtype=dtype, out=xi)
            counts[s, k + 1] = step_count(y, xi, b[k], *consts)
    return counts


def _counts_torch(U: Any, m0: Any, grid: Grid, sigma: float, backend: Backend, n: int,
                  n_samples: int, per_chunk: int, seed: int, cut: float,
                  model: tuple[Hamiltonian | None, Any]) -> np.ndarray:
    starts = range(0, n_samples, per_chunk)
    graph = n_samples // per_chunk >= 3  # recording pays off from the third equal batch on
    counter: TorchCounter | None = None
    out = []
    for start, chunk_seed in zip(starts, sample_seeds(seed, len(starts)), strict=True):
        size = min(per_chunk, n_samples - start)
        if counter is None or counter.size != size:
            counter = TorchCounter(grid, sigma, backend, n, size, cut, cuda_graph=graph,
                                   model=model)
        out.append(counter.run(U, m0, chunk_seed).cpu().numpy())
    return np.concatenate(out, axis=0)


class TorchCounter:
    """``size`` samples of ``n_agents`` agents simulated as one batch with the torch kernels
    of the particle solver. On CUDA with ``cuda_graph`` the whole simulation is recorded as a
    CUDA graph at the first :meth:`run` (checked bitwise against the eager run, dropped with
    a warning if it differs) and replayed, reseeded, by the following ones: it removes the
    launch cost of the ~15 small kernels per time step, and pays off for repeated runs."""

    def __init__(self, grid: Grid, sigma: float, backend: Backend, n_agents: int, size: int,
                 cut: float = 0.0, cuda_graph: bool = True,
                 model: tuple[Hamiltonian | None, Any] = (None, None)) -> None:
        import torch

        from .torch_kernels import TorchKernels

        self.grid, self.size, self.noise = grid, size, sigma * grid.dt**0.5
        self.offset_cut = cut - grid.x_min
        self.kernels = TorchKernels(grid.nx, grid.h, grid.x_max - grid.x_min, n_agents * size,
                                    backend)
        self.generator = torch.Generator(device=backend.native_device)
        H, density = model   # the feedback's Hamiltonian, and the densities it sees
        self.drift = (H, backend.asarray(grid.x),
                      None if density is None else backend.asarray(density))
        self.use_graph = cuda_graph and backend.kind == "cuda"
        self._graph: Any = None

    def run(self, U: Any, m0: Any, seed: int) -> Any:
        """Counts (size, nt + 1) on the device, from the generator seeded with ``seed``."""
        from ...core import cuda_graphs

        if self._graph is not None:
            self._graph.seed = seed
            return self._graph.run(U, m0)
        self.generator.manual_seed(seed)
        counts = self._counts(U, m0)
        if self.use_graph:
            self._graph = cuda_graphs.record_checked(
                self._counts, counts, U, m0, what="attendance simulation",
                generator=self.generator, seed=seed)
            self.use_graph = self._graph is not None
        return counts

    def _counts(self, U: Any, m0: Any) -> Any:
        import torch

        k, g, size = self.kernels, self.grid, self.size
        opts = {"dtype": U.dtype, "device": U.device}
        y = k.sample(m0, torch.rand(k.n, generator=self.generator, **opts))
        counts = torch.empty((g.nt + 1, size), dtype=torch.int64, device=U.device)
        torch.sum((y > self.offset_cut).view(size, -1), dim=1, out=counts[0])
        H, x, density = self.drift
        b0, db = k.drift_tables(U, H, x, density)
        xi = torch.empty(k.n, **opts)
        for step in range(g.nt):
            torch.randn(k.n, generator=self.generator, out=xi)
            i, f = k.locate(y)
            k.step(y, xi, b0[step], db[step], i, f, g.dt, self.noise)
            torch.sum((y > self.offset_cut).view(size, -1), dim=1, out=counts[step + 1])
        return counts.T.contiguous()
