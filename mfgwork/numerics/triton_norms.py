"""The two norms of a relative change in one pass, as a Triton kernel (CUDA; imported on first
use: it needs Triton).

For arrays a, b of B problems (N values each): ‖a − b‖₂ and ‖a‖₂ per problem, reading a and b
once. The generic path (``a - b``, then a norm of the difference and one of a) reads and
writes five arrays' worth; on the U and M of a large batch, at every Picard iteration, that is
most of the stopping test's time. A program sums one chunk of a problem (its lanes a strided
part each, in the arrays' dtype), the chunks are added on the device.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ..core.triton_setup import tl, triton

BLOCK = 1024          # values a program reads per step (eight warps' lanes)
PROGRAMS_PER_SM = 4   # chunks enough to fill the card when the batch is small


@triton.jit(do_not_specialize=["N", "CHUNK"])
def pair_sums_kernel(a_ptr, b_ptr, out_ptr, N, CHUNK, BLOCK: tl.constexpr):
    """out[p, c] = (Σ (a − b)², Σ a²) over the values c·CHUNK … (c + 1)·CHUNK − 1 of
    problem p."""
    p = tl.program_id(0)
    c = tl.program_id(1)
    chunks = tl.num_programs(1)
    base = p.to(tl.int64) * N
    start = c * CHUNK
    end = tl.minimum(start + CHUNK, N)
    zero = tl.zeros([BLOCK], dtype=a_ptr.dtype.element_ty)
    diff = zero
    size = zero
    for off in range(start, end, BLOCK):
        i = off + tl.arange(0, BLOCK)
        inside = i < end
        x = tl.load(a_ptr + base + i, mask=inside, other=0.0)
        y = tl.load(b_ptr + base + i, mask=inside, other=0.0)
        d = x - y
        diff += d * d
        size += x * x
    out = out_ptr + (p * chunks + c) * 2
    tl.store(out, tl.sum(diff, axis=0))
    tl.store(out + 1, tl.sum(size, axis=0))


def pair_norms(a: Any, b: Any) -> tuple[Any, Any]:
    """(‖a − b‖₂, ‖a‖₂) per problem of two contiguous (B, N) tensors of one dtype and device;
    each shaped (B,)."""
    norms = pair_sums(a, b).sqrt()
    return norms[:, 0], norms[:, 1]


def pair_sums(a: Any, b: Any) -> Any:
    """(‖a − b‖₂², ‖a‖₂²) per problem of two contiguous (B, N) tensors of one dtype and
    device, shaped (B, 2)."""
    import torch

    B, N = a.shape
    # on the interpreter (CPU tensors): a few chunks per problem, so that a test sees several
    programs = _programs(a.device.index) if a.device.type == "cuda" else 4 * B
    chunks = max(1, min(-(-N // BLOCK), -(-programs // B)))
    chunk = -(-N // chunks)
    out = torch.empty((B, chunks, 2), dtype=a.dtype, device=a.device)
    pair_sums_kernel[(B, chunks)](a, b, out, N, chunk, BLOCK=BLOCK, num_warps=8)
    return out.sum(dim=1)


@cache
def _programs(device: int | None) -> int:
    import torch

    sms = torch.cuda.get_device_properties(device or 0).multi_processor_count
    return PROGRAMS_PER_SM * sms
