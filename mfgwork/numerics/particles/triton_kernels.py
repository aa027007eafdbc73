"""A fused particle step + CIC deposit in one Triton kernel (CUDA).

The plain torch step is a chain of some fifteen element-wise kernels and two ``index_add_``
scatters per time step, each reading and writing arrays of N values. Here one kernel per
time step reads each position once, moves it (drift interpolated in its cell, Gaussian
increment ξ from the backend's generator, fold into [0, L]), writes it back and deposits it
with one relaxed integer atomic into private copy p mod ``copies`` of the cells.

Deposit in fixed point, packed: particle p in cell i at fraction f adds
``2^shift + r_p`` to slot i, where r_p = ⌊f 2^k⌋. A slot receives at most P = ⌈N/copies⌉
particles, so with shift = k + bits(P) the low field (Σ r_p < P 2^k) never carries into the
count c_i above it. After the time loop the fields are split and summed over the copies,
and the node masses are μ_i = 2^k c_i − R_i + R_{i−1}: the same integers as adding 2^k − r_p
to node i and r_p to node i + 1, with half the atomics. Integer addition is associative, so
the masses are bitwise reproducible whatever the order of the atomics.

Scalars (1/h, Δt, the noise scale, L) travel in a small tensor of the working dtype:
Triton would pass Python floats as float32, which costs float64 runs eight digits.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from ...core.backend import Backend
from ...core.errors import ParameterError
from .torch_kernels import FIXED_POINT_MAX_BITS

BLOCK = 1024
NUM_WARPS = 4
HI_BITS = 20  # bits of f taken first; k ≤ 40 leaves at most 20 for the rest


def triton_available() -> bool:
    """Whether Triton is installed (it ships with the Linux CUDA builds of torch)."""
    return importlib.util.find_spec("triton") is not None


def fused_available(backend: Backend) -> bool:
    """Whether the fused kernel can run on ``backend``: torch on CUDA, Triton installed."""
    return backend.name == "torch" and backend.kind == "cuda" and triton_available()


def _kernel() -> Any:
    """The jitted kernel (defined on first use, so importing this module needs no Triton)."""
    global _STEP_DEPOSIT
    if _STEP_DEPOSIT is not None:
        return _STEP_DEPOSIT
    import triton
    import triton.language as tl

    @triton.jit
    def step_deposit(y_ptr, xi_ptr, b0_ptr, db_ptr, mass_ptr, params_ptr, n, n_cells, nx,
                     copies, count_one, hi_scale, lo_scale, lo_unit, MOVE: tl.constexpr,
                     BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        valid = offs < n
        inv_h = tl.load(params_ptr)
        y = tl.load(y_ptr + offs, mask=valid, other=0.0)
        if MOVE:
            dt = tl.load(params_ptr + 1)
            noise = tl.load(params_ptr + 2)
            length = tl.load(params_ptr + 3)
            s = y * inv_h
            i = tl.minimum(tl.maximum(s.to(tl.int32), 0), n_cells - 1)
            f = s - i
            drift = tl.load(b0_ptr + i) + f * tl.load(db_ptr + i)
            xi = tl.load(xi_ptr + offs, mask=valid, other=0.0)
            y = y + drift * dt + noise * xi
            period = 2.0 * length
            folded = y - tl.floor(y / period) * period
            y = tl.maximum(tl.minimum(folded, period - folded), 0.0)
            tl.store(y_ptr + offs, y, mask=valid)
        s = y * inv_h
        i = tl.minimum(tl.maximum(s.to(tl.int32), 0), n_cells - 1)
        # r = ⌊f 2^k⌋ = hi 2^(k−j) + ⌊(f 2^j − hi) 2^(k−j)⌋ with int32 conversions only (f 2^j
        # and the rest are exact); a direct float → int64 conversion of f 2^40 lost particles
        # in float32 on an H100
        scaled = (s - i) * hi_scale
        hi = scaled.to(tl.int32)
        lo = ((scaled - hi) * lo_scale).to(tl.int32)
        right = hi.to(tl.int64) * lo_unit + lo
        slot = (offs % copies) * nx + i
        tl.atomic_add(mass_ptr + slot, count_one + right, mask=valid, sem="relaxed")

    _STEP_DEPOSIT = step_deposit
    return step_deposit


_STEP_DEPOSIT: Any = None


def packing_bits(n_particles: int, copies: int) -> tuple[int, int]:
    """(k, shift) of the packed deposit: 2^k units per particle and the count field's
    offset, such that no field overflows an int64 (see the module doc)."""
    per_slot = -(-int(n_particles) // int(copies))
    bits = per_slot.bit_length()
    k = min(FIXED_POINT_MAX_BITS, 62 - int(n_particles).bit_length(), 63 - 2 * bits)
    if k < 12:
        raise ParameterError(f"n_particles={n_particles} with deposit_copies={copies} leaves "
                             f"only {k} bits for the packed CIC weights (at least 12 needed): "
                             "use more deposit_copies, or fused=False")
    return k, k + bits


class FusedKernels:
    """Step + deposit of one grid, particle count, Δt and noise scale on one torch device.

    ``like``: a tensor of the working dtype and device. Node masses accumulate in a packed
    int64 buffer of shape (levels, copies · nx) (:meth:`mass_buffer`), which
    :meth:`node_masses` turns into the node masses μ (levels, nx) in units of 2^k.
    """

    def __init__(self, nx: int, length: float, n_particles: int, dt: float, noise: float,
                 like: Any, copies: int = 1, block: int = BLOCK,
                 num_warps: int = NUM_WARPS) -> None:
        import torch

        self.torch = torch
        self.nx, self.n, self.copies = nx, int(n_particles), int(copies)
        self.k, self.shift = packing_bits(self.n, self.copies)
        self.hi_bits = min(self.k, HI_BITS)
        self.dtype, self.device = like.dtype, like.device
        self.block, self.num_warps = int(block), int(num_warps)
        self.programs = -(-self.n // self.block)
        self.params = torch.tensor([(nx - 1) / length, dt, noise, length],
                                   dtype=self.dtype, device=self.device)

    def mass_buffer(self, levels: int) -> Any:
        """Zeroed packed accumulators, shape (levels, copies · nx), int64."""
        return self.torch.zeros((levels, self.copies * self.nx), dtype=self.torch.int64,
                                device=self.device)

    def integer_node_masses(self, masses: Any) -> Any:
        """μ (levels, nx), int64 in units of 2^-k particles, from the packed buffer: split
        the count and weight fields, sum over the copies, then μ_i = 2^k c_i − R_i + R_{i−1}."""
        packed = masses.reshape(masses.shape[0], self.copies, self.nx)
        counts = (packed >> self.shift).sum(dim=1)
        rights = (packed & ((1 << self.shift) - 1)).sum(dim=1)
        mu = counts * (1 << self.k) - rights
        mu[:, 1:] += rights[:, :-1]
        return mu

    def node_masses(self, masses: Any) -> Any:
        """:meth:`integer_node_masses` in the working dtype."""
        return self.integer_node_masses(masses).to(self.dtype)

    def deposit(self, y: Any, out: Any) -> None:
        """Add the CIC masses of offsets y to the packed row ``out``."""
        self._launch(y, y, y, y, out, move=False)

    def step_deposit(self, y: Any, xi: Any, b0: Any, db: Any, out: Any) -> None:
        """y ← fold(y + (b0_i + f db_i) Δt + noise ξ) in place, then deposit into ``out``."""
        self._launch(y, xi, b0, db, out, move=True)

    def _launch(self, y: Any, xi: Any, b0: Any, db: Any, out: Any, move: bool) -> None:
        _kernel()[(self.programs,)](
            y, xi, b0, db, out, self.params, self.n, self.nx - 1, self.nx, self.copies,
            1 << self.shift, 2.0**self.hi_bits, 2.0 ** (self.k - self.hi_bits),
            1 << (self.k - self.hi_bits), MOVE=move, BLOCK=self.block, num_warps=self.num_warps)
