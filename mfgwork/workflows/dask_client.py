"""A Dask distributed client for the workflows that fan work out (sweeps, scans): the
cluster at a scheduler's address, a ``LocalCluster`` of CPU worker processes, or one worker
per visible GPU (:func:`gpu_worker_specs`), each pinned to its GPU by
``CUDA_VISIBLE_DEVICES``, so that a worker's ``"cuda"`` device is its own GPU."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

from ..core.errors import ParameterError


@contextlib.contextmanager
def dask_client(workers: int, scheduler: Any, gpus: Sequence[str] | None = None
                ) -> Iterator[tuple[Any, Any]]:
    """``(client, as_completed)``: the cluster at ``scheduler`` (an address, or a
    ``distributed.Client``, used as it is and left open), a fresh cluster of one worker per
    entry of ``gpus`` (:func:`gpu_worker_specs`), or a fresh ``LocalCluster`` of
    ``workers`` single-threaded processes; closed on exit (but a given client)."""
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as exc:
        raise ParameterError("dask=True or scheduler=... needs dask.distributed: "
                             "pip install 'mfgwork[dask]'") from exc
    with contextlib.ExitStack() as stack:
        if scheduler is None:
            cluster = stack.enter_context(
                LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                             dashboard_address=None) if gpus is None else gpu_cluster(gpus))
            client = stack.enter_context(Client(cluster))
        elif isinstance(scheduler, Client):
            client = scheduler
        else:
            try:
                client = stack.enter_context(Client(scheduler))
            except (ValueError, TypeError, OSError, TimeoutError) as exc:
                raise ParameterError(f"scheduler={scheduler!r} cannot be reached: "
                                     f"{type(exc).__name__}: {exc}; give the address of a "
                                     "running Dask scheduler, e.g. 'tcp://host:8786'") from None
        yield client, as_completed


def visible_gpus(workers: int | None = None) -> list[str]:
    """The CUDA GPUs this process sees, as entries for ``CUDA_VISIBLE_DEVICES``: that
    variable's own entries where it is set, else ``"0"`` … ``"n-1"``; the first ``workers``
    of them when given. Raises :class:`~mfgwork.ParameterError` (one line, naming what is
    missing) where none is visible, or fewer than ``workers``."""
    count = _cuda_device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not count:
        why = ("PyTorch is not installed (pip install 'mfgwork[torch]')" if count is None
               else "torch.cuda.device_count() is 0"
               + (f" with CUDA_VISIBLE_DEVICES={listed!r}" if listed is not None else ""))
        raise ParameterError(f"dask='gpus' needs CUDA GPUs, and none is visible: {why}; use "
                             "dask=True for CPU workers")
    entries = ([e.strip() for e in listed.split(",")] if listed else
               [str(i) for i in range(count)])[:count]
    if workers is not None and workers > len(entries):
        raise ParameterError(f"workers={workers} is invalid with dask='gpus': only "
                             f"{len(entries)} GPU(s) are visible ({', '.join(entries)})")
    return entries[:workers]


def _cuda_device_count() -> int | None:
    """CUDA devices torch sees (None without torch); counted without starting CUDA here."""
    try:
        import torch
    except ImportError:
        return None
    return int(torch.cuda.device_count())


def gpu_worker_specs(gpus: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Worker specs of a ``SpecCluster``: one single-threaded worker process (a ``Nanny``)
    per GPU, named ``gpu-<entry>`` and started with ``CUDA_VISIBLE_DEVICES=<entry>``, with
    an equal share of the host's memory (a Nanny's default, a share per core, would restart
    a worker holding a GPU-sized block of results)."""
    from distributed import Nanny

    return {f"gpu-{gpu}": {"cls": Nanny,
                           "options": {"nthreads": 1, "memory_limit": 1 / len(gpus),
                                       "env": {"CUDA_VISIBLE_DEVICES": gpu}}}
            for gpu in gpus}


def gpu_cluster(gpus: Sequence[str]) -> Any:
    """A local ``SpecCluster`` of :func:`gpu_worker_specs` (no dashboard)."""
    from distributed import Scheduler, SpecCluster

    return SpecCluster(workers=gpu_worker_specs(gpus),
                       scheduler={"cls": Scheduler, "options": {"dashboard_address": None}})
