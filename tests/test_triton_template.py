"""The mechanism of the fused Triton sweeps (:func:`mfgwork.numerics.fdm.triton_sweeps.
model_kernels`, as the compiled CPU scheme does) in its smallest form: a template kernel whose
model calls are module-level names, joined in one module file with the model's generated
``@triton.jit`` functions, imported from that file. Under Triton's CPU interpreter when there
is no CUDA."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from helpers import triton_device

GENERATED = '''
import triton
import triton.language as tl


@triton.jit
def H_and_p(p, k0, k1):
    return 0.5 * k0 * tl.minimum(p, 0.0) * tl.minimum(p, 0.0) + 0.5 * k1 * tl.maximum(
        p, 0.0) * tl.maximum(p, 0.0), k0 * tl.minimum(p, 0.0) + k1 * tl.maximum(p, 0.0)
'''

TEMPLATE = '''

@triton.jit
def upwind_kernel(q_ptr, h_ptr, d_ptr, k0, k1, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    mask = i < n
    q = tl.load(q_ptr + i, mask=mask)
    h, d = H_and_p(tl.maximum(q, 0.0), k0, k1)
    tl.store(h_ptr + i, h, mask=mask)
    tl.store(d_ptr + i, d, mask=mask)
'''


def test_a_template_kernel_calls_the_generated_model_function(tmp_path, monkeypatch):
    device = triton_device(monkeypatch)
    import torch

    path = tmp_path / "generated_model.py"
    path.write_text(GENERATED + TEMPLATE)
    spec = importlib.util.spec_from_file_location("generated_model", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "generated_model", module)
    spec.loader.exec_module(module)
    q = torch.linspace(-2.0, 2.0, 9, dtype=torch.float64, device=device)
    h, d = torch.empty_like(q), torch.empty_like(q)
    module.upwind_kernel[(1,)](q, h, d, 2.0, 0.5, 9, BLOCK=16)
    a = np.maximum(q.cpu().numpy(), 0.0)   # Current(right=2, left=0.5) at (q)_+
    assert np.allclose(h.cpu().numpy(), 0.25 * a * a) and np.allclose(d.cpu().numpy(), 0.5 * a)
    with pytest.raises(AssertionError):   # the check can fail: not the quadratic's values
        assert np.allclose(h.cpu().numpy(), 0.5 * a * a)
