"""Timing helpers shared by the kernel benchmarks (imported by the scripts beside it)."""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any


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


def fastest_solve(problem: Any, repeats: int, **options: Any) -> tuple[float, Any]:
    """(the fastest wall time of ``repeats`` calls ``mw.solve(problem, **options)``, its
    result), ConvergenceWarnings silenced (a result says whether it converged)."""
    import mfgwork as mw

    best: tuple[float, Any] = (float("inf"), None)
    for _ in range(repeats):
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mw.ConvergenceWarning)
            res = mw.solve(problem, **options)
        best = min(best, (time.perf_counter() - started, res), key=lambda b: b[0])
    return best
