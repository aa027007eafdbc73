"""A Dask distributed client for the workflows that fan work out (sweeps, scans)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..core.errors import ParameterError


@contextlib.contextmanager
def dask_client(workers: int, scheduler: str | None) -> Iterator[tuple[Any, Any]]:
    """``(client, as_completed)``: the cluster at ``scheduler``, or a fresh ``LocalCluster``
    of ``workers`` single-threaded processes; closed on exit."""
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as exc:
        raise ParameterError("dask=True or scheduler=... needs dask.distributed: "
                             "pip install 'mfgwork[dask]'") from exc
    with contextlib.ExitStack() as stack:
        if scheduler is None:
            cluster = stack.enter_context(LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True,
                dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        else:
            try:
                client = stack.enter_context(Client(scheduler))
            except (ValueError, TypeError, OSError, TimeoutError) as exc:
                raise ParameterError(f"scheduler={scheduler!r} cannot be reached: "
                                     f"{type(exc).__name__}: {exc}; give the address of a "
                                     "running Dask scheduler, e.g. 'tcp://host:8786'") from None
        yield client, as_completed
