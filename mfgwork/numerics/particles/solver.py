"""The particle Fokker–Planck solver: Euler–Maruyama with reflecting walls, CIC or KDE density.

N agents follow dX = b dt + σ dW, b = −∂p H(x, ∂x u, m) (½|p|²: −∂x u), on [x_min, x_max] with
reflection at the walls:

    X^{n+1} = fold(X^n + b(t_n, X^n) Δt + σ √Δt ξ^n),   ξ^n ~ N(0, 1) i.i.d.,

where b(t_n, ·) is −∂p H at the nodes of the central difference of U[n] (0 at the walls,
Neumann; where H depends on m, with m^{n+1} frozen as in the FDM step) interpolated linearly
in x (step n → n + 1 uses U[n], as the implicit FDM step does), and fold
reflects into the domain exactly for any excursion (period 2L), so no particle ever leaves it.
X^0 is sampled from the piecewise-linear m0 by inverse CDF. The density at each level is the
cloud-in-cell deposit (default) or a reflected Gaussian KDE (see :mod:`.density`); every level
has Σ_i w_i m_i = 1 exactly up to rounding. Only the positions are kept, never trajectories.

Common random numbers: every call of :meth:`ParticleFP.solve_fp` restarts the generator from
the same seed, so inside one ``mw.solve`` the fixed-point map U ↦ M is deterministic and the
Picard iteration can converge. Same seed, backend and device → identical results.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ...core import cuda_graphs
from ...core.backend import Backend
from ...core.errors import MAX_COUNT, ParameterError, check_choice, check_int, check_real
from ...core.grid import Grid
from ...problems.hamiltonians import Hamiltonian, Quadratic
from .density import DENSITIES, kde_densities
from .memory import check_fits

DEFAULT_PARTICLES = 100_000
CUDA_DEPOSIT_COPIES = 256  # fastest measured on an H100 at 1e6 particles (1.6x over 64)
COPIES_MAX_BYTES = 2**28  # ... unless the node masses of every level would exceed this


def default_copies(on_cuda: bool, nx: int, nt: int) -> int:
    """Private deposit copies: 1 off CUDA; on CUDA as many as the measurements favour, while
    the int64 node masses of nt + 1 levels stay within COPIES_MAX_BYTES."""
    if not on_cuda:
        return 1
    return max(1, min(CUDA_DEPOSIT_COPIES, COPIES_MAX_BYTES // (8 * nx * (nt + 1))))


def check_particle_args(n_particles: object, seed: object) -> tuple[int, int | None]:
    """Validated (n_particles, seed): an integer >= 1 and None or an integer >= 0."""
    n = check_int("n_particles", DEFAULT_PARTICLES if n_particles is None else n_particles,
                  low=1, high=MAX_COUNT)
    return n, None if seed is None else check_int("seed", seed, low=0)


def fresh_seed() -> int:
    """A seed from the operating system's entropy (recorded so the run can be repeated)."""
    return int(np.random.SeedSequence().entropy % 2**63)


class ParticleFP:
    """Particle FP solver with the interface of ``FiniteDifferences.solve_fp``.

    ``density``: "cic" (cloud in cell) or "kde" (reflected Gaussian, Silverman bandwidth).
    ``fused``: on CUDA, run each time step as one Triton kernel (step + CIC deposit, see
    :mod:`.triton_kernels`); default: whenever Triton is installed. ``False`` keeps the plain
    torch ops, which every torch device runs.
    ``deposit_copies``: private node copies for the torch deposit (default: see
    :func:`default_copies`).
    ``cuda_graph``: on CUDA, record the whole FP solve once as a CUDA graph and replay it
    (default True); it is checked bitwise against an eager solve the first time and dropped,
    with a warning, if it differs or cannot be recorded. ``compile_step`` (torch, plain ops
    only): fuse the element-wise part of a step with ``torch.compile`` (compiled on the first
    solve; if that fails, a warning and the plain torch ops). Compiled and fused steps round
    differently from the plain ones (fused multiply-adds), so their results match those of
    the plain path to rounding, not bitwise.
    """

    def __init__(self, grid: Grid, sigma: float, backend: Backend,
                 n_particles: int = DEFAULT_PARTICLES, seed: int | None = None,
                 density: str = "cic", deposit_copies: int | None = None,
                 cuda_graph: bool | None = None, compile_step: bool = False,
                 fused: bool | None = None, max_memory: object = None,
                 hamiltonian: Hamiltonian | None = None) -> None:
        self.hamiltonian = Quadratic() if hamiltonian is None else hamiltonian
        self.n_particles, seed = check_particle_args(n_particles, seed)
        self.seed = fresh_seed() if seed is None else seed
        self.density = check_choice("density", density, DENSITIES)
        self.sigma = check_real("sigma", sigma, low=0.0, low_open=False)
        self.grid, self.backend = grid, backend
        on_cuda = backend.name == "torch" and backend.kind == "cuda"
        self.fused = _use_fused(fused, backend)
        copies = (deposit_copies if deposit_copies is not None
                  else default_copies(on_cuda, grid.nx, grid.nt))
        self.deposit_copies = check_int("deposit_copies", copies, low=1)
        self.memory_estimate = check_fits(self.n_particles, grid.nx, grid.nt, backend,
                                          self.deposit_copies, max_memory)
        self.length = grid.x_max - grid.x_min
        self.noise = self.sigma * grid.dt**0.5
        self.weights = backend.asarray(grid.weights)
        self._x = backend.asarray(grid.x)
        self._density: Any = None
        self._offsets: Any = None
        self._graph: Any = None
        self._graph_offsets: Any = None
        self.use_cuda_graph = on_cuda and (cuda_graph is None or bool(cuda_graph))
        self.compile_step = bool(compile_step) and backend.name == "torch"
        if backend.name == "torch":
            from .torch_kernels import TorchKernels

            self.kernels = TorchKernels(grid.nx, grid.h, self.length, self.n_particles,
                                        backend, self.deposit_copies)
            import torch

            self.generator = torch.Generator(device=backend.native_device)
            self._fused_kernels = self._make_fused() if self.fused else None
            self._advance = self.kernels.advance
            if self.compile_step:
                self._advance = torch.compile(self.kernels.advance, fullgraph=True,
                                              dynamic=False)

    @property
    def positions(self) -> Any:
        """Particle positions after the last solve, shape (n_particles,), on the backend."""
        if self._offsets is None:
            raise ParameterError("positions is not available yet: call solve_fp first")
        return self._offsets + self.grid.x_min

    def solve_fp(self, U: Any, m0: Any, density: Any | None = None) -> Any:
        """Densities M (levels 0..nt, shape (nt + 1, nx)) of particles driven by
        −∂p H(x, ∂x u, m) of U (``density``: m^1..m^nt, where H depends on m)."""
        g = self.grid
        if self.hamiltonian.depends_on_m and density is None:
            raise ParameterError(f"density=None is invalid with hamiltonian="
                                 f"{self.hamiltonian!r}, which depends on m: pass the "
                                 "densities m^1..m^nt that H sees")
        self._density = density if self.hamiltonian.depends_on_m else None
        if tuple(U.shape) != (g.nt + 1, g.nx):
            raise ParameterError(f"U has shape {tuple(U.shape)}: the particle solver needs "
                                 f"(nt + 1, nx) = ({g.nt + 1}, {g.nx})")
        if tuple(m0.shape) != (g.nx,):
            raise ParameterError(f"m0 has shape {tuple(m0.shape)}: must be (nx,) = ({g.nx},)")
        if self.backend.name == "numpy":
            return self._densities(self._masses_numpy(np.asarray(U), np.asarray(m0)))
        if self.use_cuda_graph:
            return self._densities(self._masses_graphed(U, m0))
        self.generator.manual_seed(self.seed)
        return self._densities(self._masses_torch(U, m0))

    # -- NumPy --------------------------------------------------------------------------------
    def _masses_numpy(self, U: np.ndarray, m0: np.ndarray) -> np.ndarray:
        from .numba_kernels import cic_deposit, sample_offsets, step_deposit

        g, n = self.grid, self.n_particles
        dtype = np.dtype(self.backend.dtype)
        rng = np.random.Generator(np.random.PCG64(self.seed))
        y = sample_offsets(m0, rng.random(n, dtype=dtype), g.h)
        masses = np.zeros((g.nt + 1, g.nx))
        inv_h = (g.nx - 1) / self.length
        cic_deposit(y, inv_h, masses[0])
        b = nodal_drift(U[:-1], g.h, self.hamiltonian, g.x, self._density).astype(dtype)
        xi = np.empty(n, dtype=dtype)
        consts = (inv_h, g.dt, self.noise, self.length)
        for k in range(g.nt):
            rng.standard_normal(dtype=dtype, out=xi)
            step_deposit(y, xi, b[k], *consts, masses[k + 1])
        self._offsets = y
        return masses

    # -- torch --------------------------------------------------------------------------------
    def _masses_torch(self, U: Any, m0: Any) -> Any:
        """The accumulated node masses of an FP solve; the generator must be seeded."""
        import torch

        g, k, n = self.grid, self.kernels, self.n_particles
        dt, noise = g.dt, self.noise
        opts = {"dtype": self.backend.native_dtype, "device": self.backend.native_device}
        y = k.sample(m0, torch.rand(n, generator=self.generator, **opts))
        if self._fused_kernels is not None:
            return self._masses_fused(y, U)
        masses = k.mass_buffer(g.nt + 1)
        i, f = k.locate(y)
        k.deposit(i, f, masses[0])
        b0, db = k.drift_tables(U, self.hamiltonian, self._x, self._density)
        xi = torch.empty(n, **opts)
        for step in range(g.nt):
            torch.randn(n, generator=self.generator, out=xi)
            i, f, *cic = self._advance_checked(y, xi, b0[step], db[step], i, f, dt, noise)
            k.scatter(masses[step + 1], *cic)
        self._offsets = y
        return masses

    def _make_fused(self) -> Any:
        from .triton_kernels import FusedKernels

        return FusedKernels(self.grid.nx, self.length, self.n_particles, self.grid.dt,
                            self.noise, self.weights, self.deposit_copies)

    def _masses_fused(self, y: Any, U: Any) -> Any:
        """The loop of :meth:`_masses_torch` with one fused kernel per time step."""
        import torch

        g, fk = self.grid, self._fused_kernels
        masses = fk.mass_buffer(g.nt + 1)
        fk.deposit(y, masses[0])
        b0, db = self.kernels.drift_tables(U, self.hamiltonian, self._x, self._density)
        xi = torch.empty_like(y)
        for step in range(g.nt):
            torch.randn(y.shape, generator=self.generator, out=xi)
            fk.step_deposit(y, xi, b0[step], db[step], masses[step + 1])
        self._offsets = y
        return masses

    def _advance_checked(self, *args: Any) -> tuple[Any, ...]:
        """The step kernel; a compiled one that fails on its first call (compilation happens
        before any work, so the inputs are untouched) is replaced by the plain torch ops."""
        try:
            return self._advance(*args)
        except Exception as exc:
            if self._advance == self.kernels.advance:
                raise
            warnings.warn(f"torch.compile of the particle step failed ({type(exc).__name__}: "
                          f"{exc}); running the plain torch ops", RuntimeWarning, stacklevel=4)
            self._advance = self.kernels.advance
            return self._advance(*args)

    def _masses_graphed(self, U: Any, m0: Any) -> Any:
        """The node masses from a CUDA graph of the whole solve (recorded on the first call
        and checked bitwise against the eager solve; dropped with a warning if it differs)."""
        if self._graph is None:
            self.generator.manual_seed(self.seed)
            eager = self._masses_torch(U, m0)
            self._graph = cuda_graphs.record_checked(self._masses_torch, eager, U, m0,
                                                     what="particle solve",
                                                     generator=self.generator, seed=self.seed)
            if self._graph is None:
                self.use_cuda_graph = False
                self.generator.manual_seed(self.seed)
                return self._masses_torch(U, m0)
            self._graph_offsets = self._offsets  # the recording's positions buffer
            return eager
        masses = self._graph.run(U, m0)
        self._offsets = self._graph_offsets
        return masses

    # -- densities ----------------------------------------------------------------------------
    def _densities(self, masses: Any) -> Any:
        """CIC densities m_i = μ_i / (w_i Σ μ), or the KDE of the node masses μ."""
        be = self.backend
        if be.name == "numpy":
            mu = masses
        else:
            kernels = self._fused_kernels or self.kernels
            mu = kernels.node_masses(masses)
        if self.density == "kde":
            mu = be.asarray(mu)
            return kde_densities(mu, be.asarray(self.grid.x), self.weights, self.n_particles,
                                 be.xp)
        weights = self.grid.weights if be.name == "numpy" else self.weights
        return be.asarray(mu / (mu.sum(axis=1, keepdims=True) * weights))


def _use_fused(fused: object, backend: Backend) -> bool:
    """Whether the fused Triton step serves this solve (``fused`` None: when it can)."""
    from .triton_kernels import fused_available

    if fused is None:
        return fused_available(backend)
    if not isinstance(fused, bool):
        raise ParameterError(f"fused={fused!r} is not allowed: use True, False or None")
    if fused and not fused_available(backend):
        raise ParameterError("fused=True needs a torch CUDA backend with Triton installed (the "
                             f"fused step is a Triton kernel), not {backend.name}/"
                             f"{backend.device}; use fused=None or False here")
    return fused


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
