"""A fused particle step + CIC deposit in one Triton kernel (CUDA).

The plain torch step is a chain of some fifteen element-wise kernels and two ``index_add_``
scatters per time step, each reading and writing arrays of N values. Here one kernel per
time step reads each position once, moves it (drift interpolated in its cell, Gaussian
increment ξ, fold into [0, L]), writes it back and deposits it with one relaxed integer
atomic into the private copy (program mod ``copies``) of the cells: the particles of one
program share a copy, so the atomics of a warp on one cell meet at one address.

The increments are drawn inside the kernel: ξ_p of step s is Triton's Philox normal at
counter p under the key :func:`step_seed` (seed, s), so no array of N normals is written and
read back each step, and the draws are the same for every launch order, replay and device.
They are float32 Box–Muller normals (cast to float64 in float64 runs; Triton cuts the tails
beyond 5.7 σ, probability 1.2·10⁻⁸). :meth:`FusedKernels.normals` writes the same numbers, for
the references that check the kernel.

Deposit in fixed point, packed: particle p in cell i at fraction f adds
``2^shift + r_p`` to slot i, where r_p = ⌊f 2^k⌋. A slot receives at most P particles (the
programs of one copy times their size), so with shift = k + bits(P) the low field
(Σ r_p < P 2^k) never carries into the count c_i above it. After the time loop one kernel
reads the buffer once, splits the fields, sums them over the copies and writes the node masses
μ_i = 2^k c_i − R_i + R_{i−1}: the same integers as adding 2^k − r_p to node i and r_p to
node i + 1, with half the atomics.
Integer addition is associative, so the masses are bitwise reproducible whatever the order of
the atomics.

Scalars (1/h, Δt, the noise scale, L) travel in a small tensor of the working dtype:
Triton would pass Python floats as float32, which costs float64 runs eight digits.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from ...core.backend import Backend
from ...core.errors import ParameterError
from .torch_kernels import FIXED_POINT_MAX_BITS

BLOCK = 256  # with NUM_WARPS: fastest measured on an H200 at 10^6 and 10^7 particles
NUM_WARPS = 8
HI_BITS = 20  # bits of f taken first; k ≤ 40 leaves at most 20 for the rest
UNPACK_NODES = 64  # nodes × copies of one load of the unpacking kernel
UNPACK_COPIES = 16


def triton_available() -> bool:
    """Whether Triton is installed (it ships with the Linux CUDA builds of torch)."""
    return importlib.util.find_spec("triton") is not None


def fused_available(backend: Backend) -> bool:
    """Whether the fused kernel can run on ``backend``: torch on CUDA, Triton installed."""
    return backend.name == "torch" and backend.kind == "cuda" and triton_available()


def _kernels() -> tuple[Any, Any, Any]:
    """The jitted step + deposit, normals and unpacking kernels (defined on first use, so
    importing this module needs no Triton)."""
    global _KERNELS
    if _KERNELS is not None:
        return _KERNELS
    from ...core.triton_setup import tl, triton

    @triton.jit
    def step_deposit(y_ptr, b0_ptr, db_ptr, mass_ptr, params_ptr, seed, n, n_cells, nx,
                     copies, count_one, hi_scale, lo_scale, lo_unit, MOVE: tl.constexpr,
                     BLOCK: tl.constexpr):
        program = tl.program_id(0)
        offs = program.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
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
            xi = tl.randn(seed, offs).to(y.dtype)
            y = y + drift * dt + noise * xi
            period = 2.0 * length
            folded = y - tl.floor(y / period) * period
            y = tl.maximum(tl.minimum(folded, period - folded), 0.0)
            tl.store(y_ptr + offs, y, mask=valid)
        s = y * inv_h
        i = tl.minimum(tl.maximum(s.to(tl.int32), 0), n_cells - 1)
        # r = ⌊f 2^k⌋ = hi 2^(k−j) + ⌊(f 2^j − hi) 2^(k−j)⌋ with int32 conversions only (f 2^j
        # and the rest are exact); a direct float → int64 conversion of f 2^40 lost particles
        # in float32 on an H100. f is clamped to [0, 1]: the compiler may contract y/h − i
        # into one fused multiply-add, so a particle on a node whose rounded y/h is i can
        # get f = −ε, and a negative r borrows a particle from the count field.
        scaled = tl.minimum(tl.maximum((s - i) * hi_scale, 0.0), hi_scale)
        hi = scaled.to(tl.int32)
        lo = ((scaled - hi) * lo_scale).to(tl.int32)
        right = hi.to(tl.int64) * lo_unit + lo
        slot = (program % copies) * nx + i
        tl.atomic_add(mass_ptr + slot, count_one + right, mask=valid, sem="relaxed")

    @triton.jit
    def normals(out_ptr, seed, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        xi = tl.randn(seed, offs)
        tl.store(out_ptr + offs, xi.to(out_ptr.dtype.element_ty), mask=offs < n)

    @triton.jit
    def unpack(packed_ptr, mu_ptr, copies, nx, shift, low_mask, unit,
               NODES: tl.constexpr, COPIES: tl.constexpr):
        level = tl.program_id(0).to(tl.int64)
        nodes = tl.program_id(1) * NODES + tl.arange(0, NODES)
        lanes = tl.arange(0, COPIES)[:, None]
        row = packed_ptr + level * copies * nx
        counts = tl.zeros((NODES,), dtype=tl.int64)
        rights = tl.zeros((NODES,), dtype=tl.int64)
        lefts = tl.zeros((NODES,), dtype=tl.int64)
        for first in range(0, copies, COPIES):
            slots = row + (first + lanes) * nx
            used = (first + lanes) < copies
            here = tl.load(slots + nodes[None, :], mask=used & (nodes < nx)[None, :], other=0)
            left = tl.load(slots + nodes[None, :] - 1,
                           mask=used & ((nodes >= 1) & (nodes < nx))[None, :], other=0)
            counts += tl.sum(here >> shift, axis=0)
            rights += tl.sum(here & low_mask, axis=0)
            lefts += tl.sum(left & low_mask, axis=0)
        tl.store(mu_ptr + level * nx + nodes, counts * unit - rights + lefts, mask=nodes < nx)

    _KERNELS = step_deposit, normals, unpack
    return _KERNELS


_KERNELS: Any = None

#: Weyl increment of :func:`step_seed` (the golden ratio in 63 bits)
_SEED_STRIDE = 0x4F1BBCDCBFA53E0B


def step_seed(seed: int, step: int) -> int:
    """The Philox key of time step ``step`` (0, 1, ...) of a solve seeded with ``seed``:
    distinct for the 2^63 steps of one seed."""
    return (int(seed) + (int(step) + 1) * _SEED_STRIDE) % 2**63


def packing_bits(n_particles: int, copies: int, block: int = BLOCK) -> tuple[int, int]:
    """(k, shift) of the packed deposit: 2^k units per particle and the count field's
    offset, such that no field overflows an int64 (see the module doc). A slot receives the
    particles of every ``copies``-th program of ``block`` particles."""
    programs = -(-int(n_particles) // int(block))
    per_slot = min(int(n_particles), -(-programs // int(copies)) * int(block))
    bits = per_slot.bit_length()
    k = min(FIXED_POINT_MAX_BITS, 62 - int(n_particles).bit_length(), 63 - 2 * bits)
    if k < 12:
        raise ParameterError(f"n_particles={n_particles} with deposit_copies={copies} leaves "
                             f"only {k} bits for the packed CIC weights (at least 12 needed): "
                             "use more deposit_copies, or fused=False")
    return k, k + bits


class FusedKernels:
    """Step + deposit of one grid, particle count, Δt and noise scale on one torch device.

    ``like``: a tensor of the working dtype and device; ``seed``: the key of the normals
    (:func:`step_seed`). Node masses accumulate in a packed int64 buffer of shape
    (levels, copies · nx) (:meth:`mass_buffer`), which :meth:`node_masses` turns into the
    node masses μ (levels, nx) in units of 2^k.
    """

    def __init__(self, nx: int, length: float, n_particles: int, dt: float, noise: float,
                 like: Any, copies: int = 1, seed: int = 0, block: int = BLOCK,
                 num_warps: int = NUM_WARPS) -> None:
        import torch

        self.torch = torch
        self.nx, self.n, self.copies, self.seed = nx, int(n_particles), int(copies), int(seed)
        self.k, self.shift = packing_bits(self.n, self.copies, block)
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
        """μ (levels, nx), int64 in units of 2^-k particles, from the packed buffer, in one
        pass: split the count and weight fields, sum over the copies, then
        μ_i = 2^k c_i − R_i + R_{i−1} (R_{−1} = 0)."""
        levels = masses.shape[0]
        mu = self.torch.empty((levels, self.nx), dtype=self.torch.int64, device=masses.device)
        _kernels()[2][(levels, -(-self.nx // UNPACK_NODES))](
            masses.contiguous(), mu, self.copies, self.nx, self.shift, (1 << self.shift) - 1,
            1 << self.k, NODES=UNPACK_NODES, COPIES=UNPACK_COPIES)
        return mu

    def node_masses(self, masses: Any) -> Any:
        """:meth:`integer_node_masses` in the working dtype."""
        return self.integer_node_masses(masses).to(self.dtype)

    def deposit(self, y: Any, out: Any) -> None:
        """Add the CIC masses of offsets y to the packed row ``out``."""
        self._launch(y, y, y, out, 0, move=False)

    def step_deposit(self, y: Any, b0: Any, db: Any, out: Any, step: int) -> None:
        """y ← fold(y + (b0_i + f db_i) Δt + noise ξ) in place, with the normals ξ of time
        step ``step``, then deposit into ``out``."""
        self._launch(y, b0, db, out, step_seed(self.seed, step), move=True)

    def normals(self, step: int, out: Any) -> Any:
        """``out`` (N values) filled with the normals ξ that :meth:`step_deposit` draws at
        time step ``step``."""
        _kernels()[1][(self.programs,)](out, step_seed(self.seed, step), self.n,
                                        BLOCK=self.block, num_warps=self.num_warps)
        return out

    def _launch(self, y: Any, b0: Any, db: Any, out: Any, seed: int, move: bool) -> None:
        _kernels()[0][(self.programs,)](
            y, b0, db, out, self.params, seed, self.n, self.nx - 1, self.nx, self.copies,
            1 << self.shift, 2.0**self.hi_bits, 2.0 ** (self.k - self.hi_bits),
            1 << (self.k - self.hi_bits), MOVE=move, BLOCK=self.block, num_warps=self.num_warps)
