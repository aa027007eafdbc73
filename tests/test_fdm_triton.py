"""The fused batched Triton sweeps (CUDA) against the compiled NumPy float64 loops.

They run on CUDA when there is one, else under Triton's CPU interpreter (TRITON_INTERPRET=1)
at small sizes when Triton is installed (the test extra installs it on Linux), else skip.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from helpers import triton_device

import mfgwork as mw
from mfgwork.core.errors import SolverError
from mfgwork.numerics.fdm import kernels, numba_kernels, sweeps, triton_sweeps
from mfgwork.numerics.fdm.sweeps import FiniteDifferences

TOLERANCE = {"float64": 1e-10, "float32": 1e-4}
#: the same iterates on every backend (Newton's directions are solved differently on CUDA,
#: by a dense Cholesky, and on the CPU, by inexact conjugate gradients)
PICARD = mw.Anderson(newton=False)


def _mass_tolerance(dtype: str, nt: int) -> float:
    """Mass is conserved to round-off: a few ε per time step."""
    return 20 * nt * float(np.finfo(dtype).eps)


@pytest.fixture
def fused(monkeypatch) -> dict:
    """Where the fused kernels run here: CUDA, or the interpreter on CPU tensors (smaller)."""
    if triton_device(monkeypatch) == "cuda":
        return {"device": "cuda", "nx": 101, "nt": 40, "batch": 37, "picard": 4}
    table = sweeps.fdm_kernels  # torch on the CPU takes the fused sweeps, NumPy stays
    monkeypatch.setattr(sweeps, "fdm_kernels",
                        lambda be, H=None: kernels.TRITON if be.name == "torch" else table(be, H))
    return {"device": "cpu", "nx": 8, "nt": 3, "batch": 3, "picard": 2}


def _rel(a: object, ref: np.ndarray) -> float:
    a = np.asarray(mw.to_numpy(a), dtype=np.float64)
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


def _reference_sweeps(grid: mw.Grid, nu: float, U_T: np.ndarray, F: np.ndarray,
                      mu0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    inv_hw, inv_w = 1.0 / (grid.h * grid.weights), 1.0 / grid.weights
    U = np.empty((grid.nt + 1, grid.nx))
    U[-1] = U_T
    _, bad = numba_kernels.hjb_sweep(U, F, U, False, nu, grid.h, grid.dt, inv_hw, inv_w,
                                     64 * np.finfo(float).eps, 50)
    assert bad == -1
    mu = np.empty_like(U)
    mu[0] = mu0
    numba_kernels.fp_sweep(U, mu, nu, grid.h, grid.dt, inv_hw)
    return U, mu


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_sweeps_match_the_compiled_loops_for_each_member(fused, dtype):
    grid = mw.Grid(-1.0, 2.0, fused["nx"], 1.0, fused["nt"])
    rng = np.random.default_rng(4)
    B = fused["batch"]
    nu = rng.uniform(0.02, 0.5, B)
    F = 3 * rng.standard_normal((B, grid.nt, grid.nx))
    U_T = np.sin(3 * grid.x) * rng.uniform(0.5, 2.0, (B, 1))
    m0 = np.exp(-((grid.x - rng.uniform(-0.5, 1.5, (B, 1))) ** 2))
    mu0 = m0 * grid.weights / (m0 @ grid.weights)[:, None]
    be = mw.get_backend("torch", fused["device"], dtype)
    fd = FiniteDifferences(grid, nu[:, None], be, kernels=kernels.TRITON)
    U = fd.solve_hjb(be.asarray(U_T), be.asarray(F))
    M = fd.solve_fp(U, be.asarray(mu0 / grid.weights))
    fd.check_newton()
    assert fd.newton_iterations >= grid.nt
    for b in range(B):
        U_ref, mu_ref = _reference_sweeps(grid, nu[b], U_T[b], F[b], mu0[b])
        assert _rel(U[b], U_ref) <= TOLERANCE[dtype]
        assert _rel(M[b], mu_ref / grid.weights) <= TOLERANCE[dtype]
    masses = mw.to_numpy(M).astype(np.float64) @ grid.weights
    assert np.abs(masses - 1).max() <= _mass_tolerance(dtype, grid.nt)
    assert mw.to_numpy(M).min() >= 0


def _problems(generic: bool) -> list[mw.MFGProblem]:
    if generic:
        def make(c: float, s: float) -> mw.MFGProblem:
            return mw.MFGProblem(x_min=-1.0, x_max=1.0, T=0.5, sigma=s,
                                 m0=lambda x: 1.0 + 0.5 * x, g=lambda x: 0.3 * x**2,
                                 f=lambda t, x, m: c * m + x)
        return [make(1.0, 0.4), make(0.2, 0.9), make(2.0, 0.6)]
    return [mw.SantaFeBar(threshold=0.6, sigma=0.5),
            mw.SantaFeBar(threshold=0.4, sigma=0.9, good=6.0, bad=-3.0),
            mw.SantaFeBar(threshold=0.75, sigma=0.3, eps=0.1, T=10.0)]


@pytest.mark.parametrize("generic", [False, True], ids=["santa-fe", "generic"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_batch_solve_matches_numpy_for_every_member(fused, dtype, generic):
    problems = _problems(generic)
    kw = {"nx": fused["nx"], "nt": fused["nt"], "max_iter": fused["picard"], "tol": 1e-300,
          "progress": False, "iteration": PICARD}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batch = mw.solve_batch(problems, backend="torch", device=fused["device"], dtype=dtype,
                               **kw)
        refs = [mw.solve(p, **kw) for p in problems]
    assert batch[0].extra["fdm_kernels"] == kernels.TRITON.name
    for res, ref in zip(batch, refs, strict=True):
        assert res.iterations == ref.iterations == fused["picard"]
        assert _rel(res.U, ref.U) <= TOLERANCE[dtype]
        assert _rel(res.M, ref.M) <= TOLERANCE[dtype]
        if not generic:
            assert _rel(res.attendance, ref.attendance) <= TOLERANCE[dtype]
        assert res.mass_error <= _mass_tolerance(dtype, fused["nt"])


def test_a_single_solve_runs_the_fused_sweeps_as_a_batch_of_one(fused):
    kw = {"nx": fused["nx"], "nt": fused["nt"], "max_iter": fused["picard"], "tol": 1e-300,
          "progress": False, "iteration": PICARD}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = mw.solve(mw.SantaFeBar(sigma=0.7), backend="torch", device=fused["device"], **kw)
        ref = mw.solve(mw.SantaFeBar(sigma=0.7), **kw)
    assert res.extra["fdm_kernels"] == kernels.TRITON.name
    assert res.extra["newton_iterations"] >= fused["nt"] * fused["picard"]
    assert _rel(res.U, ref.U) <= 1e-10 and _rel(res.M, ref.M) <= 1e-10


def test_a_newton_step_that_does_not_converge_is_flagged_for_its_problem(fused, monkeypatch):
    monkeypatch.setattr(sweeps, "MAX_NEWTON", 2)
    grid = mw.Grid(-1.0, 1.0, 8, 1.0, 3)
    be = mw.get_backend("torch", fused["device"], "float64")
    fd = FiniteDifferences(grid, np.array([[0.3], [0.3]]), be, kernels=kernels.TRITON)
    F = np.zeros((2, grid.nt, grid.nx))
    F[1, 1, 3] = 50.0  # a kink that two Newton steps cannot resolve, in problem 1 only
    U = fd.solve_hjb(be.asarray(np.zeros((2, grid.nx))), be.asarray(F))
    with pytest.raises(SolverError, match=r"did not converge at time step n=1 .* for problem 1 "
                                          r"of the batch in 2 iterations"):
        fd.check_newton()
    assert np.isfinite(mw.to_numpy(U)).all()
    _, status = triton_sweeps.hjb_sweep(be.asarray(np.zeros((2, grid.nx))), be.asarray(F),
                                        None, be.asarray([0.3, 0.3]), grid.h, grid.dt,
                                        fd.inv_hw, fd.inv_w, fd.newton_tol, 2)
    bad, iterations = mw.to_numpy(status)
    assert list(bad) == [-1, 1]
    assert iterations[0] == grid.nt < iterations[1]  # zero data: one Newton step each


def test_the_kernel_table_names_one_entry_per_backend_and_device(monkeypatch):
    pytest.importorskip("torch")
    assert kernels.fdm_kernels(mw.get_backend("numpy")) is kernels.COMPILED_LOOPS
    assert kernels.fdm_kernels(mw.get_backend("torch", "cpu")) is kernels.COMPILED_LOOPS_TORCH
    assert kernels.fdm_kernels(mw.mps_emulation()) is kernels.ARRAY_API
    cuda = mw.Backend(name="torch", device="cuda", dtype="float32")  # no device touched
    monkeypatch.setattr(kernels, "TRITON",
                        dataclasses.replace(kernels.TRITON, requires=lambda: True))
    monkeypatch.setitem(kernels.KERNELS, ("torch", "cuda"), (kernels.TRITON, kernels.ARRAY_API))
    assert kernels.fdm_kernels(cuda).name == "fused Triton sweeps"
    power = mw.Power(3.0)   # the fused sweeps carry every model that Triton can print
    assert kernels.fdm_kernels(cuda, power) is kernels.TRITON
    without = dataclasses.replace(kernels.TRITON, requires=lambda: False)
    monkeypatch.setitem(kernels.KERNELS, ("torch", "cuda"), (without, kernels.ARRAY_API))
    assert kernels.fdm_kernels(cuda) is kernels.ARRAY_API
    # the compiled loops carry every traceable model, one's own too; others run the arrays
    assert kernels.fdm_kernels(mw.get_backend("numpy"), power) is kernels.COMPILED_LOOPS
    assert kernels.fdm_kernels(mw.get_backend("torch", "cpu"), power) is \
        kernels.COMPILED_LOOPS_TORCH

    class Own(mw.Quadratic):
        pass

    assert kernels.fdm_kernels(mw.get_backend("numpy"), Own()) is kernels.COMPILED_LOOPS

    class Opaque(mw.Quadratic):   # float() of its argument: its value cannot be traced
        def value(self, x, p, m, xp):
            return 0.5 * p * p if isinstance(p, np.ndarray) else float(p)

        def dp(self, x, p, m, xp):
            return p

        def dpp(self, x, p, m, xp):
            return 1.0 + 0.0 * p

    with pytest.warns(UserWarning, match="cannot be traced"):
        assert kernels.fdm_kernels(mw.get_backend("numpy"), Opaque()) is kernels.HOST_ARRAYS
    assert kernels.fdm_kernels(mw.get_backend("torch", "cpu"), Opaque()) is \
        kernels.HOST_ARRAYS_TORCH
