"""The fused norms of a relative change (one Triton pass over a and b) against NumPy float64,
on CUDA or under Triton's interpreter."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
from helpers import triton_device


@pytest.fixture
def norms(monkeypatch):
    """The module, imported for where its kernel runs here (CUDA or the interpreter)."""
    device = triton_device(monkeypatch)
    monkeypatch.delitem(sys.modules, "mfgwork.numerics.triton_norms", raising=False)
    return importlib.import_module("mfgwork.numerics.triton_norms"), device


@pytest.mark.parametrize("B, N", [(1, 3000), (3, 5000), (2, 1024)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_pair_norms_match_numpy_for_every_problem(norms, B, N, dtype):
    import torch

    module, device = norms
    rng = np.random.default_rng(B * N)
    a = rng.standard_normal((B, N)) * rng.uniform(0.1, 10.0, (B, 1))
    b = a + 1e-3 * rng.standard_normal((B, N))
    t = {"float64": torch.float64, "float32": torch.float32}[dtype]
    diff, size = module.pair_norms(torch.tensor(a, dtype=t, device=device),
                                   torch.tensor(b, dtype=t, device=device))
    a32, b32 = (np.asarray(v, dtype=dtype).astype(np.float64) for v in (a, b))
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(diff.cpu().double().numpy(),
                               np.linalg.norm(a32 - b32, axis=1), rtol=tol)
    np.testing.assert_allclose(size.cpu().double().numpy(), np.linalg.norm(a32, axis=1),
                               rtol=tol)


def test_a_non_finite_value_makes_its_problems_norms_non_finite(norms):
    import torch

    module, device = norms
    a = torch.ones((3, 2500), dtype=torch.float64, device=device)
    b = torch.zeros_like(a)
    a[1, 1234] = float("nan")
    b[2, 2499] = float("inf")
    diff, size = (v.cpu().numpy() for v in module.pair_norms(a, b))
    assert np.isfinite(diff[0]) and np.isfinite(size[0])
    assert np.isnan(diff[1]) and np.isnan(size[1])
    assert not np.isfinite(diff[2]) and np.isfinite(size[2])
