"""Scans on Dask workers: a worker killed in the middle of a scan loses no point; one worker
per GPU, each pinned by CUDA_VISIBLE_DEVICES (specs checked with a mocked GPU count, and
refused with one line where no GPU is visible); progress as blocks finish."""

from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.workflows import dask_client
from mfgwork.workflows import scan as scan_module

xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")
distributed = pytest.importorskip("distributed")

GRID = {"threshold": [0.4, 0.6, 0.8], "sigma": [0.4, 0.7]}
SOLVE = {"nx": 31, "nt": 30, "tol": 1e-10, "max_iter": 400}
#: The point whose block kills its worker (the scan's last block, so others finish first).
KILL_AT = (0.8, 0.7)
#: Environment variable naming the marker file of the kill (inherited by spawned workers).
MARKER = "MFGWORK_TEST_KILL_MARKER"


def santa_fe_killing_its_worker_once(threshold: float, sigma: float, T: float = 5.0):
    """``mw.SantaFeBar``; building the point :data:`KILL_AT` on a Dask worker, the first
    time, makes that worker's process die (SIGKILL) in the middle of writing the block
    (:func:`_dying_write`); anywhere else (the scan's own process) it only builds the
    problem."""
    marker = os.environ.get(MARKER)
    if marker and (threshold, sigma) == KILL_AT and not os.path.exists(marker) \
            and _on_a_dask_worker():
        from mfgwork.workflows import scan_solve

        scan_solve.write_region = _dying_write
    return mw.SantaFeBar(threshold=threshold, sigma=sigma, T=T)


def _dying_write(path, region, arrays):
    """Write the block's ``M``, and garbage in place of its ``U``, record how many points
    of the store were finished, then kill this process before the block is done."""
    import zarr

    group = zarr.open_group(str(path), mode="r+", zarr_format=3)
    group["M"][region] = arrays["M"]
    group["U"][region] = np.full_like(arrays["U"], 123.0)
    Path(os.environ[MARKER]).write_text(str(_finished_points(Path(path))))
    os.kill(os.getpid(), signal.SIGKILL)


def _on_a_dask_worker() -> bool:
    try:
        distributed.get_worker()
    except ValueError:
        return False
    return True


def _finished_points(store: Path) -> int:
    import zarr

    return int(np.asarray(zarr.open_array(store / "done", mode="r")[...]).sum())


@pytest.fixture
def by_value():
    """This module's functions pickled by value (the workers cannot import a test module)."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.mark.slow
def test_a_worker_killed_mid_scan_loses_no_point(tmp_path, monkeypatch, by_value, capsys):
    """Two worker processes, a block a point; the worker that takes the last block is killed
    (SIGKILL) halfway through writing it, after other blocks are written: Dask solves that
    block again on a worker, whose write replaces the half-written one, and the store holds
    every point (its records verified), equal to an uninterrupted scan in one process; the
    progress bar counts every point across the workers."""
    marker = tmp_path / "killed"
    monkeypatch.setenv(MARKER, str(marker))
    kw = {"fixed": {"T": 5.0}, "device": "cpu", "progress": False, **SOLVE}
    ds = mw.scan(santa_fe_killing_its_worker_once, GRID, store=tmp_path / "scan.zarr",
                 chunk_size=1, dask=True, workers=2, **kw | {"progress": True}).load()
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("scan on 2 Dask workers: 100%") and "6/6" in last
    assert "converged=6, not_converged=0, failed=0" in last
    assert marker.exists(), "no worker was killed"
    assert int(marker.read_text()) >= 1, "the worker was killed before any block was written"
    reference = mw.scan(santa_fe_killing_its_worker_once, GRID, **kw)
    assert bool(ds["done"].all()) and set(ds["status"].values.ravel()) == {"converged"}
    xr.testing.assert_equal(ds.drop_vars("wall_time"), reference.drop_vars("wall_time"))
    mw.open_scan(tmp_path / "scan.zarr")  # (every block against its record)


def test_the_progress_bar_counts_solving_only(monkeypatch):
    """The bar opens once the workers are up and closes before they stop (its rate and
    remaining time are the solves'), labelled with the workers, and counts every point."""
    import contextlib

    from tqdm.std import tqdm

    from mfgwork.workflows.scan_solve import solve_block

    events, bars = [], []

    @contextlib.contextmanager
    def executor(*args):
        events.append("workers up")
        yield (lambda tasks: (solve_block(t) for t in tasks)), " on 2 Dask workers"
        events.append("workers stopped")

    class Bar(tqdm):
        def close(self):
            if not self.disable and "bar closed" not in events:
                events.append("bar closed")
            super().close()

    def bar(**options):
        events.append("bar opened")
        bars.append(Bar(**options | {"file": io.StringIO()}))
        return bars[-1]

    monkeypatch.setattr(scan_module, "_executor", executor)
    monkeypatch.setattr(scan_module, "progress_bar", bar)
    mw.scan(mw.SantaFeBar, {"threshold": [0.4, 0.6]}, device="cpu", chunk_size=1, **SOLVE)
    assert events == ["workers up", "bar opened", "bar closed", "workers stopped"]
    assert bars[0].desc == "scan on 2 Dask workers" and bars[0].n == bars[0].total == 2
    assert bars[0].postfix == "converged=2, not_converged=0, failed=0"


def test_a_client_given_as_dask_runs_the_scan_and_stays_open():
    """``dask=client``: the blocks run on that client's workers (threads here), the values
    are those of a scan in one process, and the client is left open for more work."""
    kw = {"fixed": {"T": 5.0}, "device": "cpu", "progress": False, "chunk_size": 2, **SOLVE}
    grid = {"threshold": [0.4, 0.8], "sigma": [0.4, 0.7]}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        ds = mw.scan(mw.SantaFeBar, grid, dask=client, **kw)
        assert client.status == "running" and client.submit(sum, [1, 2]).result() == 3
        # (blocks are shared among the client's workers, an address counts as one)
        assert scan_module._client_workers(client) == 2
        assert scan_module._client_workers("tcp://h:1") == 1
        with pytest.raises(mw.ParameterError, match=r"is a client and scheduler='tcp://h:1'"):
            mw.scan(mw.SantaFeBar, grid, dask=client, scheduler="tcp://h:1", **kw)
    with pytest.raises(mw.ParameterError, match=r"the Dask client .* is closed: give a run"):
        mw.scan(mw.SantaFeBar, grid, dask=client, **kw)
    reference = mw.scan(mw.SantaFeBar, grid, **kw)
    xr.testing.assert_equal(ds.drop_vars("wall_time"), reference.drop_vars("wall_time"))


# -- one worker per GPU --------------------------------------------------------------------------
def _gpus(monkeypatch, count: int | None, listed: str | None = None) -> None:
    """Mock the CUDA devices torch counts (None: no torch) and ``CUDA_VISIBLE_DEVICES``."""
    monkeypatch.setattr(dask_client, "_cuda_device_count", lambda: count)
    if listed is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)


@pytest.mark.parametrize(("count", "listed", "workers", "gpus"), [
    (4, None, None, ["0", "1", "2", "3"]),
    (4, None, 2, ["0", "1"]),
    (2, "3,5", None, ["3", "5"]),
    (2, "GPU-a1, GPU-b2", 1, ["GPU-a1"]),
])
def test_one_worker_per_visible_gpu_each_pinned_by_its_own_variable(
        monkeypatch, count, listed, workers, gpus):
    from distributed import Nanny

    _gpus(monkeypatch, count, listed)
    assert dask_client.visible_gpus(workers) == gpus
    specs = dask_client.gpu_worker_specs(dask_client.visible_gpus(workers))
    assert list(specs) == [f"gpu-{g}" for g in gpus]
    assert [s["options"]["env"] for s in specs.values()] == \
        [{"CUDA_VISIBLE_DEVICES": g} for g in gpus]
    assert all(s["cls"] is Nanny and s["options"]["nthreads"] == 1 for s in specs.values())
    assert [s["options"]["memory_limit"] for s in specs.values()] == [1 / len(gpus)] * len(gpus)


@pytest.mark.parametrize(("count", "listed", "workers", "words"), [
    (0, None, None, "torch.cuda.device_count() is 0"),
    (0, "", None, "CUDA_VISIBLE_DEVICES=''"),
    (None, None, None, "PyTorch is not installed"),
    (2, None, 3, "workers=3 is invalid with dask='gpus': only 2 GPU(s)"),
])
def test_gpu_workers_without_the_gpus_are_refused_in_one_line_before_anything(
        monkeypatch, tmp_path, count, listed, workers, words):
    _gpus(monkeypatch, count, listed)

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started")

    monkeypatch.setattr(dask_client, "gpu_cluster", no_cluster)
    with pytest.raises(mw.ParameterError) as info:
        mw.scan(mw.SantaFeBar, GRID, store=tmp_path / "scan.zarr", dask="gpus",
                workers=workers, progress=False, **SOLVE)
    assert words in str(info.value) and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", [{}, {"scheduler": "tcp://h:1"}])
def test_workers_without_a_cluster_to_size_are_refused(tmp_path, where):
    with pytest.raises(mw.ParameterError, match=r"workers=3 is invalid here.*leave workers out"):
        mw.scan(mw.SantaFeBar, GRID, store=tmp_path / "scan.zarr", workers=3, progress=False,
                **where, **SOLVE)
    assert list(tmp_path.iterdir()) == []


def test_a_cluster_to_start_and_a_scheduler_address_together_are_refused(tmp_path):
    with pytest.raises(mw.ParameterError, match=r"dask='gpus'.*scheduler='tcp://h:1'.*only one"):
        mw.scan(mw.SantaFeBar, GRID, dask="gpus", scheduler="tcp://h:1", progress=False)
    with pytest.raises(mw.ParameterError, match=r"dask=True starts a LocalCluster.*"
                       r"scheduler='tcp://h:1'.*only one"):
        mw.scan(mw.SantaFeBar, GRID, dask=True, scheduler="tcp://h:1", progress=False)
    with pytest.raises(mw.ParameterError,
                       match=r"dask='cpus' \(str\) is invalid: must be True .*'gpus'"):
        mw.scan(mw.SantaFeBar, GRID, dask="cpus", progress=False)


def test_a_block_fits_the_smallest_gpu_of_the_workers(monkeypatch):
    """``dask="gpus"`` sizes blocks by every worker's GPU: the smallest one decides."""
    from mfgwork.core.backend import Backend
    from mfgwork.workflows import scan_solve

    _gpus(monkeypatch, 3, None)
    memory = {"cuda:0": 80e9, "cuda:1": 20e9, "cuda:2": 80e9}
    monkeypatch.setattr(scan_solve, "device_info", lambda device: {
        "memory_total": memory[device], "memory_reserved": 0})
    monkeypatch.setattr(scan_solve, "_host_available", lambda: 10**15)
    be = Backend("torch", "cuda", "float32")
    on = scan_module._worker_backends(be, None, "gpus", None)
    assert [b.device for b in on] == ["cuda:0", "cuda:1", "cuda:2"]
    sizes = [scan_solve.points_per_block(b, 201, 201, 2, 10**6) for b in on]
    assert sizes[1] < sizes[0] == sizes[2]
    monkeypatch.setattr(scan_solve, "_host_available", lambda: 10**9)  # host memory decides
    assert scan_solve.points_per_block(on[0], 201, 201, 2, 10**6, workers=3) == \
        scan_solve.points_per_block(on[0], 201, 201, 2, 10**6) // 3
    assert scan_module._worker_backends(be, None, True, None) == [be]
    monkeypatch.setattr(scan_solve, "_host_available", lambda: 10**15)
    # several GPUs share a scan: at least BLOCKS_PER_WORKER blocks each; one GPU: memory
    # alone decides
    share = scan_solve.points_per_block(on[0], 201, 201, 2, 10**4, workers=3)
    assert share == -(-10**4 // (3 * scan_solve.BLOCKS_PER_WORKER))
    assert scan_solve.points_per_block(on[0], 201, 201, 2, 10**4) > share


@pytest.mark.slow
def test_gpu_workers_see_only_their_own_gpu():
    """The cluster of :func:`gpu_cluster` (on CPUs here: the variable is all a worker gets):
    each worker process runs with ``CUDA_VISIBLE_DEVICES`` set to its own entry."""
    with dask_client.dask_client(1, None, ["7", "9"]) as (client, _):
        client.wait_for_workers(2)
        seen = client.run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
        workers = client.scheduler_info()["workers"].values()
    assert sorted(seen.values()) == ["7", "9"]
    assert {w["name"] for w in workers} == {"gpu-7", "gpu-9"}
    from distributed.system import MEMORY_LIMIT

    assert all(abs(w["memory_limit"] - MEMORY_LIMIT / 2) <= 1 for w in workers)
