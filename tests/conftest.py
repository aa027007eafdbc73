"""Shared fixtures: backends to run the solvers on, and mocked accelerator availability."""

from __future__ import annotations

import pytest

import mfgwork as mw


@pytest.fixture
def mps_emulation() -> mw.Backend:
    """torch on the CPU in float32 with no host round trips in loops: the MPS code path."""
    pytest.importorskip("torch")
    return mw.mps_emulation()


@pytest.fixture
def mock_accelerators(monkeypatch):
    """Pretend CUDA and/or MPS are available: ``mock_accelerators(cuda=1, mps=True)``."""
    torch = pytest.importorskip("torch")

    def apply(cuda: int = 0, mps: bool = False) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        monkeypatch.setattr(mw.core.backend, "_warned_mps_float32", False)

    return apply


BACKENDS = [
    pytest.param(("numpy", "cpu", None), id="numpy"),
    pytest.param(("torch", "cpu", "float64"), id="torch-cpu-f64"),
    pytest.param("mps-emulation", id="mps-emulation"),
]


@pytest.fixture(params=BACKENDS)
def backend(request) -> mw.Backend:
    """Every backend the CPU can run: NumPy, torch CPU float64, MPS emulation."""
    if request.param == "mps-emulation":
        pytest.importorskip("torch")
        return mw.mps_emulation()
    name, device, dtype = request.param
    if name == "torch":
        pytest.importorskip("torch")
    return mw.get_backend(name, device, dtype)


@pytest.fixture
def op_recorder():
    """``(mode, seen)``: inside ``with mode:`` every torch op is recorded by name in
    ``seen["ops"]`` and the dtypes of the tensors it returns in ``seen["dtypes"]``."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict[str, set] = {"dtypes": set(), "ops": set()}

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            seen["ops"].add(str(func))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    seen["dtypes"].add(t.dtype)
            return out

    return Record(), seen


def tree_snapshot(folder) -> dict[str, object]:
    """Every entry under ``folder`` (links not followed): its content, link target or kind."""
    import os
    from pathlib import Path

    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = "dir"
            elif p.is_file():
                out[rel] = p.read_bytes()
            else:
                out[rel] = "special"
    return out


@pytest.fixture
def snapshot():
    """``snapshot(folder)``: every entry under it, to prove a folder untouched."""
    return tree_snapshot
