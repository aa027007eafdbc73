"""Backend selection, dtype policy, conversions, device info, and the doctor."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import mfgwork as mw
from mfgwork.core.errors import BackendError

torch = pytest.importorskip("torch")


def test_import_does_not_import_torch():
    code = "import sys, mfgwork; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_leaves_the_workflows_until_a_scan_or_sweep_is_asked_for():
    """``import mfgwork`` does not load the scans' and sweeps' modules (stores, Dask, specs);
    ``mw.scan`` and the others load them on first use, and are then found directly."""
    code = ("import sys, mfgwork as mw\n"
            "assert not [m for m in sys.modules if m.startswith('mfgwork.workflows.')]\n"
            "from mfgwork import scan\n"
            "from mfgwork.workflows import scan as module, sweeps\n"
            "assert scan is module.scan and mw.open_scan is module.open_scan\n"
            "assert mw.sweep is sweeps.sweep and mw.SweepIndex is sweeps.SweepIndex\n"
            "assert 'scan' in vars(mw) and set(mw.LAZY_NAMES) <= set(dir(mw))\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_import_leaves_scipy_s_solvers_until_a_solve_needs_them():
    """``import mfgwork`` loads neither ``scipy.linalg`` nor ``scipy.sparse`` (about 90 ms
    of the import): the solvers that use them import them on first use."""
    code = ("import sys, mfgwork\n"
            "loaded = [m for m in ('scipy.linalg', 'scipy.sparse') if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_numpy_backend_defaults():
    be = mw.get_backend()
    assert (be.name, be.device, be.dtype) == ("numpy", "cpu", "float64")
    x = be.linspace(0.0, 1.0, 5)
    assert isinstance(x, np.ndarray) and x.dtype == np.float64


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_numpy_rejects_accelerators_and_lists_available(device):
    pattern = r"device='.*' is not available.*Available here: numpy: cpu"
    with pytest.raises(BackendError, match=pattern):
        mw.get_backend("numpy", device)


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"backend": "jax"}, r"backend='jax' is unknown.*Available here"),
    ({"backend": "torch", "device": "tpu"}, r"device='tpu' is unknown.*Available here"),
    ({"backend": "torch", "device": "cpu", "dtype": "float16"}, r"dtype='float16'"),
    ({"backend": "torch", "device": 3}, r"device=3 is invalid"),
])
def test_bad_names_are_errors(kwargs, pattern):
    with pytest.raises(BackendError, match=pattern):
        mw.get_backend(**kwargs)


def test_unavailable_cuda_lists_available(mock_accelerators):
    mock_accelerators(cuda=0, mps=False)
    with pytest.raises(BackendError, match=r"device='cuda' is not available.*torch: cpu"):
        mw.get_backend("torch", "cuda")


@pytest.mark.parametrize(("cuda", "mps", "expected"), [
    (2, True, "cuda"), (1, False, "cuda"), (0, True, "mps"), (0, False, "cpu")])
def test_auto_prefers_cuda_then_mps_then_cpu(mock_accelerators, cuda, mps, expected):
    mock_accelerators(cuda=cuda, mps=mps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert mw.get_backend("torch", "auto").device == expected


def test_cuda_index_must_exist(mock_accelerators):
    mock_accelerators(cuda=2)
    assert mw.get_backend("torch", "cuda:1").device == "cuda:1"
    with pytest.raises(BackendError, match="cuda:2"):
        mw.get_backend("torch", "cuda:2")


def test_mps_uses_float32_and_warns_once(mock_accelerators):
    mock_accelerators(mps=True)
    with pytest.warns(UserWarning, match="MPS has no float64") as record:
        be = mw.get_backend("torch", "mps")
        be2 = mw.get_backend("torch", "mps")
    assert be.dtype == be2.dtype == "float32"
    assert len([w for w in record if "MPS" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mw.get_backend("torch", "mps", "float32").dtype == "float32"


def test_float64_on_mps_is_an_error_that_says_why(mock_accelerators):
    mock_accelerators(mps=True)
    with pytest.raises(BackendError, match="MPS backend has no float64"):
        mw.get_backend("torch", "mps", "float64")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_round_trip_keeps_values_dtype_device(dtype):
    a = np.random.default_rng(0).standard_normal((7, 5)).astype(dtype)
    t = mw.from_numpy(a, "torch", "cpu", dtype)
    assert isinstance(t, torch.Tensor) and t.dtype == getattr(torch, dtype)
    assert t.device.type == "cpu"
    back = mw.to_numpy(t)
    assert back.dtype == a.dtype and np.array_equal(back, a)
    assert mw.get_backend("torch", "cpu", dtype).asarray(t).data_ptr() == t.data_ptr()


@pytest.mark.parametrize("shape", [(1,), (3,), (7, 11, 13)])
@pytest.mark.parametrize("threads", [1, 4, 64])
def test_a_copy_in_threads_is_whole_and_contiguous(monkeypatch, shape, threads):
    """Every element once, in order, whatever the split (more threads than elements too),
    from a strided view as from a contiguous array."""
    from mfgwork.core import backend

    monkeypatch.setattr(backend, "HOST_COPY_THREADS", threads)
    a = np.random.default_rng(1).standard_normal(shape)
    for source in (a, a.T):
        out = backend.copy_in_threads(source)
        assert out.flags.c_contiguous and out.shape == source.shape
        assert np.array_equal(out, source) and not np.shares_memory(out, a)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_large_cuda_tensor_comes_to_the_host_whole(monkeypatch):
    """Through page-locked memory and threads: equal to ``.cpu()``, strided views too, and
    the array owns its memory (not the page-locked buffer, which goes back to torch); a
    transient one is the page-locked buffer itself, equal too."""
    from mfgwork.core import backend

    monkeypatch.setattr(backend, "STAGED_FROM", 1 << 10)
    t = torch.randn(5, 37, 41, dtype=torch.float64, device="cuda")
    for view in (t, t[:, 3:, ::2].transpose(0, 2)):
        out = mw.to_numpy(view)
        assert out.flags.owndata and np.array_equal(out, view.cpu().numpy())
        held = mw.to_numpy(view, transient=True)
        assert isinstance(held.base, torch.Tensor) and held.base.is_pinned()
        assert held.flags.c_contiguous and np.array_equal(held, view.cpu().numpy())


def test_mps_emulation_is_float32_without_host_round_trips(mps_emulation):
    assert mps_emulation.dtype == "float32" and mps_emulation.is_accelerator
    assert mps_emulation.zeros(3).dtype == torch.float32


def test_device_info_cpu_and_mocked_cuda(monkeypatch, mock_accelerators):
    info = mw.device_info("cpu")
    assert info["available"] and info["memory_total"] > 0
    mock_accelerators(cuda=1)

    class Props:
        name, total_memory = "Mock GPU", 80 * 2**30

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props)
    for fn, value in (("memory_allocated", 1), ("memory_reserved", 2), ("max_memory_allocated", 3)):
        monkeypatch.setattr(torch.cuda, fn, lambda i, v=value: v)
    info = mw.device_info("cuda")
    assert info["name"] == "Mock GPU" and info["count"] == 1
    assert (info["memory_allocated"], info["memory_reserved"], info["memory_peak"]) == (1, 2, 3)


def test_empty_cache_releases_device_memory_only_on_accelerators(monkeypatch, mock_accelerators):
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("cuda"))
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: calls.append("mps"))
    mw.get_backend("torch", "cpu").empty_cache()
    assert calls == []
    mock_accelerators(cuda=1, mps=True)
    mw.get_backend("torch", "cuda").empty_cache()
    mw.get_backend("torch", "mps", "float32").empty_cache()
    assert calls == ["cuda", "mps"]


@pytest.mark.slow
def test_doctor_json_parses_and_checks_pass():
    out = subprocess.run([sys.executable, "-m", "mfgwork", "doctor", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rep = json.loads(out.stdout)
    assert rep["versions"]["numpy"] == np.__version__
    names = {r["check"] for r in rep["checks"]}
    assert {"elementwise", "conversion", "tridiagonal", "fdm santa fe 52x52"} <= names
    assert {(r["backend"], r["dtype"]) for r in rep["checks"]} >= {
        ("numpy", "float64"), ("torch", "float64"), ("torch", "float32")}
    assert all(r["ok"] for r in rep["checks"])
    # no warning from its own calls (a cold kernel cache's one-time notice aside)
    said = [line for line in out.stderr.splitlines()
            if line.strip() and not line.startswith("mfgwork: compiling the ")]
    assert not said, out.stderr[-2000:]
    assert not [r for r in rep["checks"] if r.get("warnings")]
    assert all(r["first_s"] > 0 and r["time_s"] > 0 for r in rep["checks"])
    cpu = rep["devices"][0]
    assert cpu["kind"] == "cpu" and cpu["name"] and cpu["cores"] >= 1


def test_doctor_report_says_what_a_user_can_act_on():
    from mfgwork.apps.doctor import cpu_info, format_report

    rep = {"versions": {"python": "3.11", "numpy": "2.0", "dask": None, "zarr": None},
           "devices": [cpu_info()],
           "checks": [{"check": "fdm", "backend": "numpy", "device": "cpu", "dtype": "float64",
                       "tolerance": 1e-10, "max_abs_diff": 0.0, "first_s": 0.5,
                       "time_s": 0.01, "ok": True, "warnings": ["something odd"]}]}
    text = format_report(rep)
    assert "None" not in text and "count" not in text
    assert re.search(r"not installed +dask, zarr \(optional\)", text)
    cpu_line = next(line for line in text.splitlines() if line.strip().startswith("cpu "))
    assert f"{os.cpu_count()} cores" in cpu_line and cpu_info()["name"] in cpu_line
    assert "500.00ms" in text and "10.00ms" in text and "warning: something odd" in text


def test_stack_converts_once_and_keeps_values():
    """``Backend.stack``: arrays of one namespace, device and dtype stacked where they are and
    converted once; mixed ones converted one by one; the values the same either way."""
    host = [np.arange(6.0).reshape(2, 3) + k for k in range(3)]
    be = mw.get_backend("torch", "cpu", "float32")
    views = torch.stack([torch.as_tensor(a) for a in host]).to(torch.float64)
    for arrays in (host, list(views), [host[0], views[1], host[2].astype(np.float32)]):
        got = be.stack(arrays)
        assert got.dtype == torch.float32 and got.shape == (3, 2, 3)
        np.testing.assert_array_equal(got.numpy(), np.stack(host).astype(np.float32))
    stacked = mw.get_backend("numpy").stack(list(views))
    assert stacked.dtype == np.float64 and np.array_equal(stacked, np.stack(host))
    with pytest.raises(mw.ParameterError, match=r"arrays=\[\] is invalid"):
        be.stack([])
    with pytest.raises(mw.ParameterError, match=r"must share one shape"):
        be.stack([host[0], host[1][:1]])
