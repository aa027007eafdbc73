"""Particle kernels in plain torch ops (CPU, CUDA, MPS): no host round trip, no float64 on MPS.

Positions are offsets y = x − x_min ∈ [0, L]. A position is located by its cell index i (int32)
and its fraction f ∈ [0, 1] inside cell [x_i, x_{i+1}]; the same (i, f) serve the drift
interpolation of the next step and the cloud-in-cell deposit of this one.

Deposit: every particle adds (1 − f) to node i and f to node i + 1 with ``index_add_``.
Off MPS the weights are fixed-point integers (f scaled by 2^k, int64 accumulators): integer
additions are associative, so the node masses are bitwise reproducible on CUDA despite the
atomics, and every particle carries exactly 2^k units of mass. On MPS (and its emulation) the
weights are float32. ``copies`` > 1 spreads the deposit over that many private copies of the
nodes (particle p writes to copy p mod copies), which cuts contention between the atomics of
neighbouring GPU threads; the copies are summed once after the time loop.
"""

from __future__ import annotations

from typing import Any

from ...core.backend import Backend

FIXED_POINT_MAX_BITS = 40


def fixed_point_bits(n_particles: int) -> int:
    """Bits k of the fixed-point CIC weights: the total N 2^k must stay below 2^62."""
    return min(FIXED_POINT_MAX_BITS, 62 - int(n_particles).bit_length())


class TorchKernels:
    """The particle kernels of one grid, one particle count and one torch backend."""

    def __init__(self, nx: int, h: float, length: float, n_particles: int, backend: Backend,
                 copies: int = 1) -> None:
        import torch

        self.torch = torch
        self.nx, self.h, self.length = nx, float(h), float(length)
        self.n, self.copies = int(n_particles), int(copies)
        self.dtype, self.device = backend.native_dtype, backend.native_device
        self.fixed_point = not (backend.kind == "mps" or backend.emulate_mps)
        self.bits = fixed_point_bits(self.n)
        self.unit = float(2**self.bits)
        self.inv_h = (nx - 1) / self.length
        self.mass_dtype = torch.int64 if self.fixed_point else self.dtype
        if self.copies > 1:
            lane = torch.arange(self.n, device=self.device, dtype=torch.int64) % self.copies
            self.lane = (lane * nx).to(torch.int32)
        else:
            self.lane = None

    # -- set-up -------------------------------------------------------------------------------
    def mass_buffer(self, levels: int) -> Any:
        """Zeroed node-mass accumulators, shape (levels, copies · nx)."""
        return self.torch.zeros((levels, self.copies * self.nx), dtype=self.mass_dtype,
                                device=self.device)

    def node_masses(self, masses: Any) -> Any:
        """Node masses (levels, nx) in the working dtype: the copies summed (exactly, in
        integers, on the fixed-point path), then converted."""
        return masses.reshape(masses.shape[0], self.copies, self.nx).sum(dim=1).to(self.dtype)

    def drift_tables(self, U: Any, hamiltonian: Any = None, x: Any = None, density: Any = None
                     ) -> tuple[Any, Any]:
        """b = −∂p H(x, ∂x u, m) (default ½|p|²: −∂x u) at the nodes of levels 0..nt−1
        (central differences, 0 at the walls; the nodes ``x``, and ``density`` m^1..m^nt where H
        depends on m),
        returned as (b_i, b_{i+1} − b_i) per cell, each of shape (nt, nx − 1)."""
        torch = self.torch
        grad = (U[:-1, 2:] - U[:-1, :-2]) * (0.5 / self.h)
        if hamiltonian is not None:
            grad = hamiltonian.dp(x[1:-1], grad, None if density is None else density[:, 1:-1],
                                  torch)
        zero = torch.zeros_like(grad[:, :1])
        b = torch.cat([zero, -grad, zero], dim=1)
        return b[:, :-1].contiguous(), (b[:, 1:] - b[:, :-1]).contiguous()

    def sample(self, m0: Any, u: Any) -> Any:
        """Offsets distributed as the piecewise-linear m0, from uniforms u (inverse CDF)."""
        torch = self.torch
        cells = 0.5 * self.h * (m0[:-1] + m0[1:])
        cdf = torch.cumsum(cells, dim=0)
        target = u * cdf[-1]
        j = torch.searchsorted(cdf, target, right=True).clamp_(max=self.nx - 2)
        below = torch.where(j > 0, cdf[(j - 1).clamp_(min=0)], torch.zeros_like(target))
        tiny = torch.finfo(self.dtype).tiny
        v = ((target - below) / cells[j].clamp(min=tiny)).clamp_(0.0, 1.0)
        a, b = m0[j], m0[j + 1]
        den = a + torch.sqrt(a * a + (b * b - a * a) * v)
        t = torch.where(den > 0, (a + b) * v / torch.where(den > 0, den, 1.0), v)
        return ((j.to(self.dtype) + t) * self.h).clamp_(0.0, self.length)

    # -- per step -----------------------------------------------------------------------------
    def locate(self, y: Any) -> tuple[Any, Any]:
        """Cell index i ∈ [0, nx − 2] (int32) and fraction f ∈ [0, 1] of each offset."""
        s = y * self.inv_h  # y ∈ [0, L] after a fold, so s ∈ [0, nx − 1] up to rounding
        i = s.to(self.torch.int32).clamp_(0, self.nx - 2)  # 0 also for NaN: never out of range
        return i, s.sub_(i)

    def weights(self, i: Any, f: Any) -> tuple[Any, Any, Any, Any]:
        """CIC targets and masses: (index of node i, index of node i + 1, 1 − f, f)."""
        if self.lane is not None:
            i = i + self.lane
        if self.fixed_point:
            right = (f * self.unit).to(self.torch.int64)
            left = int(self.unit) - right
        else:
            right = f
            left = 1.0 - f
        return i, i + 1, left, right

    @staticmethod
    def scatter(out: Any, index_left: Any, index_right: Any, left: Any, right: Any) -> None:
        """Add the CIC masses to the row ``out`` (atomics on a GPU)."""
        out.index_add_(0, index_left, left)
        out.index_add_(0, index_right, right)

    def deposit(self, i: Any, f: Any, out: Any) -> None:
        """Add the CIC masses (1 − f at node i, f at node i + 1) to the row ``out``."""
        self.scatter(out, *self.weights(i, f))

    def step(self, y: Any, xi: Any, b0: Any, db: Any, i: Any, f: Any, dt: float,
             noise: float) -> Any:
        """y ← fold(y + b(y) dt + noise ξ), b interpolated in cell i at fraction f; in place."""
        torch = self.torch
        drift = torch.addcmul(b0.index_select(0, i), f, db.index_select(0, i))
        y.add_(drift, alpha=dt).add_(xi, alpha=noise)
        return fold_(y, self.length)

    def advance(self, y: Any, xi: Any, b0: Any, db: Any, i: Any, f: Any, dt: float,
                noise: float) -> tuple[Any, ...]:
        """One step, then the new (i, f) and the CIC weights of the new positions: the
        element-wise part of a time step (what ``torch.compile`` fuses), before the scatter."""
        self.step(y, xi, b0, db, i, f, dt, noise)
        i, f = self.locate(y)
        return (i, f, *self.weights(i, f))


def fold_(y: Any, length: float) -> Any:
    """Reflect offsets into [0, L] in place: r = y mod 2L, y = min(r, 2L − r) (any excursion;
    the clamp only catches a remainder rounded just below 0)."""
    import torch

    r = y.remainder_(2.0 * length)
    return torch.minimum(r, 2.0 * length - r, out=y).clamp_(min=0.0)
