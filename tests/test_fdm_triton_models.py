"""Every model on the fused Triton sweeps (the templates with the model's generated
``@triton.jit`` functions) against the compiled NumPy float64 loops of the same model.

On CUDA when there is one, else under Triton's CPU interpreter (TRITON_INTERPRET=1) at tiny
sizes when Triton is installed, else skipped.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import warnings
from dataclasses import dataclass

import numpy as np
import pytest
from helpers import Crowded, Current, tangent_planes, triton_device

import mfgwork as mw
from mfgwork.numerics.fdm import kernels, numba_kernels, sweeps, triton_sweeps, triton_tangent

torch = pytest.importorskip("torch")






@dataclass(frozen=True)
class Soft(mw.Hamiltonian):
    """A function Triton lacks here (tanh): the array-API sweeps run it."""

    def value(self, x, p, m, xp):
        return p * xp.tanh(p)


MODELS = [mw.Quadratic(), mw.Power(1.5), mw.Power(3.0), mw.Congestion(1.0, 0.5), Current(),
          Crowded()]
#: ½|p|² runs the fused sweeps in tests/test_fdm_triton*.py already
SWEPT = MODELS[1:]


@pytest.fixture
def device(monkeypatch) -> str:
    device = triton_device(monkeypatch)
    monkeypatch.setattr(triton_sweeps, "_LAUNCHED", set())
    return device


def _data(H: mw.Hamiltonian, nx: int = 12, nt: int = 4, B: int = 2) -> dict:
    grid = mw.Grid(-1.0, 2.0, nx, 0.6, nt)
    rng = np.random.default_rng(7)
    m0 = np.exp(-((grid.x - rng.uniform(-0.5, 1.5, (B, 1))) ** 2))
    return {"grid": grid, "nu": rng.uniform(0.05, 0.4, B), "F": 3 * rng.standard_normal(
        (B, nt, nx)), "U_T": np.sin(3 * grid.x) * rng.uniform(0.5, 2.0, (B, 1)),
        "mu0": m0 * grid.weights / (m0 @ grid.weights)[:, None],
        "density": rng.uniform(0.1, 2.0, (B, nt, nx)) if H.depends_on_m else None}


def _compiled(H: mw.Hamiltonian, d: dict) -> tuple[np.ndarray, np.ndarray]:
    """U and μ of each problem by the model's compiled NumPy float64 loops."""
    grid = d["grid"]
    module, prm = numba_kernels.compiled_model(H)
    inv_hw, inv_w = 1.0 / (grid.h * grid.weights), 1.0 / grid.weights
    Us, mus = [], []
    for b in range(d["nu"].size):
        rows = np.zeros((1, grid.nx)) if d["density"] is None else d["density"][b]
        U = np.empty((grid.nt + 1, grid.nx))
        U[-1] = d["U_T"][b]
        _, bad = module.hjb_sweep(U, d["F"][b], U, False, rows, grid.x, prm, d["nu"][b], grid.h,
                                  grid.dt, inv_hw, inv_w, 64 * np.finfo(float).eps, 50)
        assert bad == -1
        mu = np.empty_like(U)
        mu[0] = d["mu0"][b]
        module.fp_sweep(U, mu, rows, grid.x, prm, d["nu"][b], grid.h, grid.dt, inv_hw)
        Us.append(U)
        mus.append(mu)
    return np.stack(Us), np.stack(mus)


def _fused(H: mw.Hamiltonian, d: dict, device: str, dtype: str, layout: str) -> tuple:
    grid = d["grid"]

    def t(a):
        return None if a is None else torch.as_tensor(a, dtype=getattr(torch, dtype),
                                                      device=device)

    inv_hw, inv_w = t(1.0 / (grid.h * grid.weights)), t(1.0 / grid.weights)
    model = triton_sweeps.model_kernels(H)
    tol = 64 * float(np.finfo(dtype).eps)
    U, status = triton_sweeps.hjb_sweep(t(d["U_T"]), t(d["F"]), None, t(d["nu"]), grid.h,
                                        grid.dt, inv_hw, inv_w, tol, 50, layout=layout,
                                        model=model, x=t(grid.x), density=t(d["density"]))
    mu = triton_sweeps.fp_sweep(U, t(d["mu0"]), t(d["nu"]), grid.h, grid.dt, inv_hw,
                                layout=layout, model=model, x=t(grid.x),
                                density=t(d["density"]))
    return U.cpu().numpy(), mu.cpu().numpy(), status.cpu().numpy()


def _rel(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


@pytest.mark.parametrize("H", SWEPT, ids=repr)
def test_each_model_on_the_fused_sweeps_matches_its_compiled_loops(device, H):
    d = _data(H)
    U_ref, mu_ref = _compiled(H, d)
    U, mu, status = _fused(H, d, device, "float64", "program")
    assert (status[0] == -1).all() and (status[1] >= d["grid"].nt).all()
    assert _rel(U, U_ref) <= 1e-10 and _rel(mu, mu_ref) <= 1e-10
    assert _rel(U, _compiled(mw.Quadratic(), d)[0]) > 1e-3   # not the quadratic's sweeps


@pytest.mark.parametrize("H, dtype, layout, tol", [
    (mw.Congestion(1.0, 0.5), "float64", "thread", 1e-10),
    (Current(), "float32", "program", 1e-4)], ids=repr)
def test_the_thread_layout_and_float32_run_the_model_too(device, H, dtype, layout, tol):
    d = _data(H, nx=9, nt=3)
    U_ref, mu_ref = _compiled(H, d)
    U, mu, status = _fused(H, d, device, dtype, layout)
    assert (status[0] == -1).all()
    assert _rel(U, U_ref) <= tol and _rel(mu, mu_ref) <= tol


@pytest.mark.parametrize("H", MODELS[:-1], ids=repr)
def test_the_tangent_planes_of_each_model_match_the_torch_bands(device, H):
    """The one-launch planes (program layout) against the torch path's bands of the model:
    ∂p H in the Jacobian, the capped ∂pp H in the transport weights, H at the nodes and the
    frozen density."""
    nx, nt, B = 9, 3, 2
    d = _data(H, nx, nt, B)
    grid = d["grid"]
    rng = np.random.default_rng(3)
    U = rng.normal(size=(B, nt + 1, nx))
    U[:, :, 2:4] = 0.25                     # q = 0 on an edge
    mu = rng.uniform(0.1, 1.0, (B, nt + 1, nx))
    m = None if d["density"] is None else d["density"][0]

    def T(a, where=device):
        return None if a is None else torch.as_tensor(a, dtype=torch.float64, device=where)

    inv_hw = 1.0 / (grid.h * grid.weights)
    P, log_c = triton_tangent.chunking(nx)
    planes = triton_tangent.chunk_planes(T(U), T(mu), T(d["nu"]), grid.h, grid.dt, T(inv_hw),
                                         P, log_c, H, T(grid.x), T(m)).cpu().numpy()
    lower, diag, upper, c = (a.numpy() for a in torch.unbind(triton_tangent.tangent_bands(
        T(U, "cpu"), T(mu, "cpu"), T(d["nu"], "cpu"), grid.h, grid.dt, T(inv_hw, "cpu"), H,
        T(grid.x, "cpu"), T(m, "cpu")), 1))
    expected = tangent_planes(lower, diag, upper, c, P, log_c, nx)
    np.testing.assert_allclose(planes, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())


@pytest.mark.parametrize("H", [mw.Congestion(1.0, 0.5), Current()], ids=repr)
def test_a_batch_solve_runs_the_model_on_the_fused_sweeps(device, monkeypatch, H):
    """solve_batch through the fused sweeps (the nodes and, for H(m), the frozen densities
    passed down by the solver) against NumPy's compiled loops, Picard iterates alike."""
    if device == "cpu":   # torch on the CPU takes the fused sweeps, NumPy stays
        table = sweeps.fdm_kernels
        monkeypatch.setattr(sweeps, "fdm_kernels", lambda be, h=None: kernels.TRITON
                            if be.name == "torch" else table(be, h))
    problems = [mw.SantaFeBar(threshold=0.6, sigma=0.5, hamiltonian=H),
                mw.SantaFeBar(threshold=0.4, sigma=0.9, hamiltonian=H)]
    kw = {"nx": 9, "nt": 3, "max_iter": 2, "tol": 1e-300, "progress": False,
          "iteration": mw.Anderson(newton=False)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batch = mw.solve_batch(problems, backend="torch", device=device, dtype="float64", **kw)
        refs = [mw.solve(p, **kw) for p in problems]
    assert batch[0].extra["fdm_kernels"] == kernels.TRITON.name
    for res, ref in zip(batch, refs, strict=True):
        assert res.iterations == ref.iterations
        assert _rel(mw.to_numpy(res.U), ref.U) <= 1e-10
        assert _rel(mw.to_numpy(res.M), ref.M) <= 1e-10


def test_missing_nodes_or_densities_are_refused_by_name(device):
    H = Crowded()
    d = _data(H, nx=6, nt=2)
    model = triton_sweeps.model_kernels(H)

    def t(a):
        return torch.as_tensor(a, device=device)

    args = (t(d["U_T"]), t(d["F"]), None, t(d["nu"]), 0.1, 0.1, t(d["nu"]), t(d["nu"]), 1e-9, 5)
    x = t(d["grid"].x)
    with pytest.raises(ValueError, match="x=None"):
        triton_sweeps.hjb_sweep(*args, model=model, density=t(d["density"]))
    with pytest.raises(ValueError, match="density=None"):
        triton_sweeps.hjb_sweep(*args, model=model, x=x)
    with pytest.raises(ValueError, match=r"density of shape \(3, 6\)"):
        triton_sweeps.hjb_sweep(*args, model=model, x=x, density=t(np.ones((3, 6))))


def test_the_kernel_table_takes_every_printable_model_to_the_fused_sweeps(monkeypatch):
    cuda = mw.Backend(name="torch", device="cuda", dtype="float32")  # no device touched
    monkeypatch.setattr(kernels, "TRITON",
                        dataclasses.replace(kernels.TRITON, requires=lambda: True))
    monkeypatch.setitem(kernels.KERNELS, ("torch", "cuda"), (kernels.TRITON, kernels.ARRAY_API))
    if not kernels._triton_installed():
        pytest.skip("Triton is not installed")
    for H in MODELS:
        assert kernels.fdm_kernels(cuda, H) is kernels.TRITON, H
    assert kernels.fdm_kernels(cuda, Soft()) is kernels.ARRAY_API   # tanh: not printed
    assert triton_sweeps.model_kernels(Soft()) is None


def test_power_and_sign_helpers_match_numpy_on_every_branch(device, tmp_path, monkeypatch):
    """``_pow`` (uniform exponents: the common ones by square roots and products, the others
    by exp·log) and ``_pow_t`` (elementwise exponents) against NumPy, negative bases with
    integer exponents and 0⁰ included."""
    import importlib.util

    from mfgwork.problems import symbolic

    source = "import triton\nimport triton.language as tl\n" + symbolic.TRITON_HELPERS + '''
@triton.jit
def powers_kernel(b_ptr, e_ptr, out_ptr, s_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    b = tl.load(b_ptr + i)
    tl.store(out_ptr + i, _pow(b, tl.load(s_ptr)))
    tl.store(out_ptr + N + i, _pow_t(b, tl.load(e_ptr + i)))
'''
    path = tmp_path / "powers.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("powers", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "powers", module)
    spec.loader.exec_module(module)
    b = np.array([0.0, 0.3, 1.0, 2.5, 4.0, 7.0, 0.01, 3.0])
    e_t = np.array([0.0, 1.7, -2.0, 3.0, 0.5, -0.7, 2.2, 4.0])
    for e in (0.5, 1.5, -0.5, 1.0, 2.0, 3.0, -1.0, 0.7, 2.2):
        out = torch.empty(16, dtype=torch.float64, device=device)
        params = torch.tensor([e], dtype=torch.float64, device=device)
        module.powers_kernel[(1,)](torch.as_tensor(b, device=device),
                                   torch.as_tensor(e_t, device=device), out, params, N=8)
        got = out.cpu().numpy()
        with np.errstate(divide="ignore"):
            np.testing.assert_allclose(got[:8], b ** e, rtol=1e-14)
        np.testing.assert_allclose(got[8:], b ** e_t, rtol=1e-14)
    negative = torch.as_tensor(-b, device=device)
    module.powers_kernel[(1,)](negative, torch.as_tensor(e_t, device=device), out, params,
                               N=8)
    got = out.cpu().numpy()[8:]
    whole = e_t == np.round(e_t)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_allclose(got[whole], (-b[whole]) ** e_t[whole], rtol=1e-14)
    assert np.isnan(got[~whole & (b > 0)]).all()


#: the slope of ½|p|² built into a band, e.g. ``-nu * ihw - tl.maximum(ql, 0.0) * inv_h``
QUADRATIC_SLOPE = re.compile(r"tl\.(maximum|minimum)\(q\w*, 0\.0\)\s*[*/]\s*(inv_)?h\b")


def test_the_triton_templates_call_the_model_for_every_slope():
    """No band of the 1-D Triton templates has ½|p|²'s slope built in (the ½|p|² literal
    and the type gates are checked for the whole package in test_symbolic_models.py); the
    check recognises the old hand-written bands."""
    assert QUADRATIC_SLOPE.search("lo = -nu * ihw - tl.maximum(ql, 0.0) * inv_h")
    assert QUADRATIC_SLOPE.search("upper_l = -nu * w + tl.minimum(q_l, 0.0) / h")
    for path in triton_sweeps.TEMPLATES:
        text = path.read_text()
        assert not QUADRATIC_SLOPE.search(text), path.name
    calls = "".join(path.read_text() for path in triton_sweeps.TEMPLATES)
    assert "H_and_p(" in calls and "H_p(" in calls and "H_pp(" in calls


def test_one_module_per_structure_is_written_into_the_model_cache(tmp_path, monkeypatch):
    """Power(1.5) and Power(3) share one module (their fields are arguments), Congestion has
    its own; each is a file of the model cache holding the model's functions and the
    templates (so Triton's cache, keyed on that source, serves a later process)."""
    if not kernels._triton_installed():
        pytest.skip("Triton is not installed")
    monkeypatch.setenv("MFGWORK_MODEL_CACHE", str(tmp_path))
    monkeypatch.setattr(triton_sweeps, "_KERNELS", {})
    a, b = triton_sweeps.model_kernels(mw.Power(1.5)), triton_sweeps.model_kernels(mw.Power(3))
    c = triton_sweeps.model_kernels(mw.Congestion(1.0, 0.5))
    assert a.module is b.module and (a.fields, b.fields) == ((1.5,), (3.0,))
    assert c.module is not a.module and c.depends_on_m and not a.depends_on_m
    files = sorted(tmp_path.glob("mfgwork_triton_*.py"))
    assert len(files) == 2 and {a.module.__file__, c.module.__file__} == set(map(str, files))
    text = files[0].read_text()
    assert "def H_and_p(" in text and "def hjb_coop_kernel(" in text
