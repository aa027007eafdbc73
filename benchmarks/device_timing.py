"""Timing helpers shared by the kernel benchmarks (imported by the scripts beside it)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def sync(device: str) -> None:
    """Wait for the device's queued work (CUDA; nothing to wait for elsewhere)."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def median_time(fn: Callable[[], object], device: str, repeat: int) -> float:
    """Median seconds of ``fn()`` after one warm-up call (synchronised around each call)."""
    fn()
    times = []
    for _ in range(repeat):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_bandwidth(device: str) -> float:
    """Bytes read + written per second by a device-to-device copy of 1 GiB (64 MiB on the
    CPU): the roofline the kernels' traffic is compared with."""
    import torch

    x = torch.rand(2**28 if device == "cuda" else 2**24, device=device)
    y = torch.empty_like(x)
    return 2 * x.numel() * x.element_size() / median_time(lambda: y.copy_(x), device, 10)
