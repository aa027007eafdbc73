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
Picard iteration can converge. Same seed, backend and device → identical results. The fused
CUDA path draws its increments inside its kernel (Triton's Philox generator, keyed by the seed
and the time step), the other paths from a torch or NumPy generator: one seed gives different
draws on the two.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core import cuda_graphs
from ...core.backend import Backend
from ...core.errors import MAX_COUNT, ParameterError, check_choice, check_int, check_real, warn
from ...core.grid import Grid
from ...problems.hamiltonians import Hamiltonian, Quadratic
from .density import DENSITIES, kde_densities
from .memory import check_fits
from .paths import ParticlePath, particle_path

DEFAULT_PARTICLES = 100_000
CUDA_DEPOSIT_COPIES = 256  # fastest whole solve measured on an H200 at 1e6 particles
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
    """Particle FP solver with the interface of ``FiniteDifferences.solve_fp``; its kernels
    are the path of the table :mod:`.paths` for its (backend, device) (``path``).

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
    solve; if that fails, a warning and the plain torch ops). Compiled steps round
    differently from the plain ones (fused multiply-adds), so their results match those of
    the plain path to rounding, not bitwise; fused steps draw other normals (module doc).
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
        self.path = _path(fused, backend)
        self.fused = self.path.fused
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
        self._fused_kernels: Any = None
        self.use_cuda_graph = on_cuda and (cuda_graph is None or bool(cuda_graph))
        self.compile_step = bool(compile_step) and backend.name == "torch"
        self.path.prepare(self)

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
        return self._densities(self.path.masses(self, U, m0))

    # -- torch --------------------------------------------------------------------------------
    def _advance_checked(self, *args: Any) -> tuple[Any, ...]:
        """The step kernel; a compiled one that fails on its first call (compilation happens
        before any work, so the inputs are untouched) is replaced by the plain torch ops."""
        try:
            return self._advance(*args)
        except Exception as exc:
            if self._advance == self.kernels.advance:
                raise
            warn(f"torch.compile of the particle step failed ({type(exc).__name__}: "
                 f"{exc}); running the plain torch ops", RuntimeWarning)
            self._advance = self.kernels.advance
            return self._advance(*args)

    def _masses_graphed(self, run: Any, U: Any, m0: Any) -> Any:
        """The node masses of ``run(U, m0)`` (a seeded torch solve) from a CUDA graph of the
        whole solve (recorded on the first call and checked bitwise against the eager solve;
        dropped with a warning if it differs)."""
        if self._graph is None:
            self.generator.manual_seed(self.seed)
            eager = run(U, m0)
            self._graph = cuda_graphs.record_checked(run, eager, U, m0,
                                                     what="particle solve",
                                                     generator=self.generator, seed=self.seed)
            if self._graph is None:
                self.use_cuda_graph = False
                self.generator.manual_seed(self.seed)
                return run(U, m0)
            self._graph_offsets = self._offsets  # the recording's positions buffer
            return eager
        masses = self._graph.run(U, m0)
        self._offsets = self._graph_offsets
        return masses

    # -- densities ----------------------------------------------------------------------------
    def _densities(self, masses: Any) -> Any:
        """CIC densities m_i = μ_i / (w_i Σ μ), or the KDE of the node masses μ."""
        be = self.backend
        mu = self.path.node_masses(self, masses)
        if self.density == "kde":
            mu = be.asarray(mu)
            return kde_densities(mu, be.asarray(self.grid.x), self.weights, self.n_particles,
                                 be.xp)
        weights = self.grid.weights if be.name == "numpy" else self.weights
        return be.asarray(mu / (mu.sum(axis=1, keepdims=True) * weights))


def _path(fused: object, backend: Backend) -> ParticlePath:
    """The path of the table (:mod:`.paths`) that serves this solve: the fused Triton step
    where it can run unless ``fused`` is False (True: only that)."""
    if fused is not None and not isinstance(fused, bool):
        raise ParameterError(f"fused={fused!r} is not allowed: use True, False or None")
    try:
        return particle_path(backend, fused)
    except LookupError:
        raise ParameterError("fused=True needs a torch CUDA backend with Triton installed (the "
                             f"fused step is a Triton kernel), not {backend.name}/"
                             f"{backend.device}; use fused=None or False here") from None
